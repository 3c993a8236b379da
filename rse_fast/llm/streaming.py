"""A streamed chat call, booked: the worst case reserved before the request, every event
passed on as it arrives, and the call settled however it ends (answered, failed with a bound
on what a broken stream may have cost, or cut short when its reader stops)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

from rse_fast.errors import LLMError, LLMHTTPError
from rse_fast.llm.ledger import count_prompt_tokens
from rse_fast.llm.replies import reply_events
from rse_fast.llm.trace import reply_record
from rse_fast.llm.transport import open_response
from rse_fast.llm.types import StreamEvent, Usage

if TYPE_CHECKING:
    from rse_fast.llm.client import LLMClient


async def stream_once(
    client: LLMClient, body: dict[str, Any], role: str, task: str | None, include_usage: bool
) -> AsyncGenerator[StreamEvent, None]:
    """One streamed call, booked: reserved first, settled as answered, as failed (with a
    bound on what a broken stream may have cost) or as cut short when its reader stops."""
    body["stream"] = True
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    await client.calibrate_capped(body)
    booking = client.booking
    held = booking.reserve(body, 1)
    t0 = time.perf_counter()
    content: list[str] = []
    reasoning: list[str] = []
    usage: Usage | None = None
    endpoint = ""
    try:
        async with contextlib.AsyncExitStack() as keep:
            state, resp = await client.transport.post(
                "/chat/completions", body, open_response, keep=keep
            )
            endpoint = state.url
            async for event in reply_events(state, resp):
                if event.usage is not None:
                    usage = event.usage
                content.append(event.delta)
                reasoning.append(event.reasoning)
                yield event
    except LLMError as exc:
        # an error status before any event: the server generated nothing; a stream that
        # broke, timed out or was cut: what it may have cost, as a bound
        answered = isinstance(exc, LLMHTTPError) and not (content or reasoning)
        bound = None if answered else booking.streamed_bound(body, content, reasoning)
        booking.failed(held, role, exc, time.perf_counter() - t0, exc.endpoint or "", task, bound)
        if endpoint:  # broke mid-stream (failures before the first byte are traced already)
            client.trace_failure(body, exc)
        raise
    except BaseException:  # cancelled or closed mid-stream: sent, so paid for, as a bound
        bound = booking.streamed_bound(body, content, reasoning)
        booking.cut_short(held, role, bound, time.perf_counter() - t0, endpoint, task)
        raise
    text, thought = "".join(content), "".join(reasoning)
    if usage is None:
        usage = Usage(
            count_prompt_tokens(body["messages"], client.count_tokens),
            client.count_tokens(text + thought),
            "estimated",
        )
    latency = time.perf_counter() - t0
    booking.answered(held, role, usage, latency, endpoint, task=task)
    client.traced(reply_record(body, endpoint, latency, [text], [thought or None], usage))
    yield StreamEvent(done=True, usage=usage)
