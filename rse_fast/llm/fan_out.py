"""A call for ``n`` choices on servers that honour ``n``, ignore it or refuse it."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from rse_fast.errors import LLMBadRequestError
from rse_fast.llm.booking import Reservation
from rse_fast.llm.replies import merge_results
from rse_fast.llm.types import ChatResult, Usage
from rse_fast.util.tasks import gather_or_cancel

if TYPE_CHECKING:
    from rse_fast.llm.client import LLMClient


async def chat_n(client: LLMClient, body: dict[str, Any], n: int, held: Reservation) -> ChatResult:
    """``n`` choices: one request asking for ``n`` where the server honours it; where it
    ignores or rejects ``n`` (remembered per endpoint), the missing choices as single
    requests with distinct seeds."""
    if n == 1:
        return await client.request(body)
    state = client.pool.pick()
    if state.supports_n is False:
        return await fan_out(client, body, n, 0, held, reserved=1)
    try:
        first = await client.request({**body, "n": n}, state)
    except LLMBadRequestError as exc:
        if not exc.concerns("n"):
            raise  # the request itself is at fault (context too long, bad field, ...)
        state.supports_n = False  # rejected n > 1 by name: fall back to single requests
        return await fan_out(client, body, n, 0, held, reserved=1)
    if len(first.choices) >= n:
        state.supports_n = True
        return first
    state.supports_n = False  # ignored n: fetch the missing choices one by one
    rest = await fan_out(client, body, n - len(first.choices), len(first.choices), held)
    return merge_results([first, rest]) if rest.choices else first


async def fan_out(
    client: LLMClient,
    body: dict[str, Any],
    count: int,
    offset: int,
    held: Reservation,
    reserved: int = 0,
) -> ChatResult:
    """``count`` single requests, ``reserved`` of which the grant holds prompts for; on a
    cap, the others' prompts are reserved first, and the requests that do not fit are
    not sent (the call returns fewer choices)."""
    if count > reserved:
        count = reserved + client.booking.add_requests(held, count - reserved)
    base = body.get("seed")
    seeds = [
        (base + offset + i) if isinstance(base, int) else random.randrange(2**31)
        for i in range(count)
    ]
    if not seeds:
        return ChatResult(
            choices=(), usage=Usage(0, 0), latency_s=0.0, endpoint="", model=body["model"],
            requests=0,
        )  # fmt: skip
    parts = await gather_or_cancel([client.request({**body, "seed": s}) for s in seeds])
    return merge_results(parts)
