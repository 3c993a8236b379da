"""The server's own count of a chat prompt, asked once before a client's first capped call.

A capped call reserves its prompt as the client estimates it, widened by a margin learnt from
the server's counts. Until the first reply that margin is a guess, and a chat template the
client cannot see (Qwen2.5 adds a default system turn: a 7-token question is 36 tokens to
llama.cpp) overruns a tight budget by that much on every call of the first wave. Servers that
expose their tokenizer count the real prompt without generating anything: vLLM with
``POST /tokenize`` given the ``messages``, llama.cpp with ``POST /apply-template`` and then
``POST /tokenize`` of the rendered prompt. One probe per client, shared by the calls that wait
for it, bounded by ``PROBE_TIMEOUT_S``; a server with neither endpoint (a gateway, a hosted
API) is simply not asked again. The probe never fails a call: it is not an LLM call, costs no
tokens, and is not booked in the ledger.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from rse_fast.llm.meter import PromptMargin
from rse_fast.llm.routing import EndpointState
from rse_fast.llm.transport import Transport

#: the whole probe (up to two requests) gives up after this long; the call then goes ahead
#: on the default margin
PROBE_TIMEOUT_S = 5.0
#: the request fields that change how a chat template renders
_CHAT_FIELDS = ("model", "messages", "tools", "chat_template_kwargs")


class PromptCounter:
    """One probe per client (its views share this object): the first capped call starts it,
    concurrent ones wait for the same probe, later ones find it done."""

    def __init__(self) -> None:
        self._probe: asyncio.Task[None] | None = None

    def pending(self, margin: PromptMargin) -> bool:
        """Whether a call should wait for the probe: ``margin`` has seen no server's count and
        the server has not been asked yet (a cheap test, so later calls skip ``seed``)."""
        return not margin.observed and not (self._probe is not None and self._probe.done())

    async def seed(
        self, transport: Transport, margin: PromptMargin, body: dict[str, Any], estimate: int
    ) -> None:
        """Widen ``margin`` to the server's count of ``body``'s prompt (``estimate`` is the
        client's): the probe started now, or the one already under way."""
        loop = asyncio.get_running_loop()
        if self._probe is None or self._probe.get_loop() is not loop:
            self._probe = loop.create_task(_seed(transport, margin, body, estimate))
        # shielded: a caller cancelled while waiting does not cancel the others' probe
        await asyncio.shield(self._probe)


async def _seed(
    transport: Transport, margin: PromptMargin, body: dict[str, Any], estimate: int
) -> None:
    try:
        count = await asyncio.wait_for(server_prompt_tokens(transport, body), PROBE_TIMEOUT_S)
    except (asyncio.TimeoutError, TimeoutError):
        return
    if count is not None:
        margin.learn(estimate, count)


async def server_prompt_tokens(transport: Transport, body: dict[str, Any]) -> int | None:
    """The prompt tokens the server would count for this chat request (template included),
    or None when it has no tokenizer endpoint or its answer is not a count."""
    ids = await server_prompt_ids(transport, body)
    return len(ids) if ids else None


async def server_prompt_ids(transport: Transport, body: dict[str, Any]) -> list[int] | None:
    """The token ids the server would prefill for this chat request (template included), or
    None when it has no tokenizer endpoint or its answer is not a list of ids. Two prompts'
    common leading ids are what a prefix cache can share between them."""
    state = transport.pool.pick()
    if not state.endpoint.versioned:
        return None
    chat = {k: body[k] for k in _CHAT_FIELDS if k in body}
    vllm = await _post(transport, state, "/tokenize", {**chat, "add_generation_prompt": True})
    ids = _token_ids(vllm.get("tokens")) if vllm else None
    if ids:  # llama.cpp answers this request with no tokens (it reads only "content")
        return ids
    rendered = await _post(transport, state, "/apply-template", chat)
    prompt = rendered.get("prompt") if rendered else None
    if not isinstance(prompt, str) or not prompt:
        return None
    tokens = await _post(transport, state, "/tokenize", {"content": prompt, "add_special": True})
    return _token_ids(tokens.get("tokens")) if tokens else None


def _token_ids(value: Any) -> list[int] | None:
    """A non-empty list of integer ids (``with_pieces`` answers dicts with an ``id``)."""
    if not isinstance(value, list) or not value:
        return None
    ids = [t.get("id") if isinstance(t, dict) else t for t in value]
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        return None
    return ids  # type: ignore[return-value]


async def _post(
    transport: Transport, state: EndpointState, path: str, body: dict[str, Any]
) -> dict[str, Any] | None:
    """POST to the server's root (these endpoints live beside ``/v1``, not in it): the JSON
    object it answered, or None for an error status, a failure or anything else."""
    url = state.url.removesuffix("/v1") + path
    try:
        async with transport.session().post(
            url, data=json.dumps(body).encode(), headers=state.headers
        ) as resp:
            if resp.status != 200:
                return None
            data = json.loads(await resp.read())
    except (aiohttp.ClientError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None
