"""What a chat reply is made of, beyond the parse: usage read or estimated, the replies of a
fanned-out call merged into one, and the events of a streamed reply."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Sequence
from typing import Any

import aiohttp

from rse_fast.llm.ledger import TokenCounter, count_prompt_tokens
from rse_fast.llm.parse import completion_events, parse_chunk, parse_usage
from rse_fast.llm.routing import EndpointState
from rse_fast.llm.sse import sse_payloads
from rse_fast.llm.transport import read_json, stream_lines
from rse_fast.llm.types import ChatResult, Choice, ServerTimings, StreamEvent, Usage

_SOURCE_RANK = {"reported": 0, "estimated": 1, "corrected": 2}


def sum_timings(parts: Sequence[ServerTimings | None]) -> ServerTimings:
    """The server time of requests that made one call (a fan-out): their milliseconds added."""
    known = [t for t in parts if t is not None]
    return ServerTimings(
        sum(t.prompt_ms for t in known),
        sum(t.predicted_ms for t in known),
        None if any(t.cache_n is None for t in known) else sum(t.cache_n or 0 for t in known),
        None if any(t.prompt_n is None for t in known) else sum(t.prompt_n or 0 for t in known),
    )


def merge_results(parts: Sequence[ChatResult]) -> ChatResult:
    """The replies of a fanned-out call as one: choices renumbered, usage and time added."""
    choices = [c for p in parts for c in p.choices]
    source = max((p.usage.source for p in parts), key=_SOURCE_RANK.__getitem__)
    reasoning = [p.usage.reasoning_tokens for p in parts]
    cached = [p.usage.cached_tokens for p in parts]
    timed = [p.usage.timings for p in parts]
    usage = Usage(
        sum(p.usage.prompt_tokens for p in parts),
        sum(p.usage.completion_tokens for p in parts),
        source,
        reasoning_tokens=None if None in reasoning else sum(r or 0 for r in reasoning),
        cached_tokens=None if None in cached else sum(c or 0 for c in cached),
        timings=None if any(t is None for t in timed) else sum_timings(timed),
    )
    return ChatResult(
        choices=tuple(dataclasses.replace(c, index=i) for i, c in enumerate(choices)),
        usage=usage,
        latency_s=max(p.latency_s for p in parts),
        endpoint=parts[0].endpoint,
        model=parts[0].model,
        requests=sum(p.requests for p in parts),
        raw=parts[0].raw,
    )


def usage_of(
    data: dict[str, Any], body: dict[str, Any], choices: Sequence[Choice], count: TokenCounter
) -> Usage:
    """A reply's usage: as reported (completed where llama.cpp counted one choice of n),
    else estimated by ``count``."""
    reported = parse_usage(data.get("usage"), data.get("timings"))
    counted = [count(c.text + (c.reasoning or "")) for c in choices]
    if reported is None:
        prompt = count_prompt_tokens(body["messages"], count)
        return Usage(prompt, sum(counted), "estimated")
    completion = reported.completion_tokens
    if len(choices) > 1 and completion < 0.75 * sum(counted):
        # The server counted one choice only (llama.cpp with n > 1): add the others.
        k = min(range(len(counted)), key=lambda i: abs(counted[i] - completion))
        return dataclasses.replace(
            reported,
            completion_tokens=completion + sum(counted) - counted[k],
            source="corrected",
        )
    return reported


async def reply_events(
    state: EndpointState, resp: aiohttp.ClientResponse
) -> AsyncIterator[StreamEvent]:
    """The events of a streamed reply: SSE chunks, or, when the server ignored ``stream`` and
    sent one JSON body (some gateways do), that whole completion."""
    if resp.content_type == "application/json":
        for event in completion_events(await read_json(state, resp), state.url):
            yield event
        return
    async for data in sse_payloads(stream_lines(resp, state.url), state.url):
        for event in parse_chunk(data, state.url):
            yield event
