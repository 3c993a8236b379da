"""Pass-through: a plain model name goes upstream as bytes and comes back as bytes.

The caller's body goes upstream as it came, and the upstream's reply comes back as it was
sent: the whole body, or each server-sent event as it arrives. No field is dropped and no JSON
is re-encoded; token accounting keeps counters only. A streamed reply holds its headers until
the upstream's first event (an early failure is a plain HTTP error); after that, every way a
stream can fail (a reset, a close before ``[DONE]``, a stall past the read timeout, the
request's deadline) ends the caller's stream with one SSE error event, at once.
"""

from __future__ import annotations

import contextlib
import re

import aiohttp
from aiohttp import web

from rse_fast.errors import LLMError, LLMResponseError, ServiceError
from rse_fast.llm.client import LLMClient
from rse_fast.llm.routing import EndpointState
from rse_fast.llm.sse import EventTail
from rse_fast.llm.transport import stream_lines
from rse_fast.serve.errors import error_event, timed_out, upstream_error
from rse_fast.serve.metrics import Metrics
from rse_fast.util.deadline import timeout_at

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
_TOTAL_TOKENS = re.compile(rb'"total_tokens"\s*:\s*(\d+)')


def usage_tokens(data: bytes) -> int | None:
    """Total tokens of a completion or usage chunk (bytes), None when it carries no usage.
    Read from the bytes (the last ``total_tokens``: usage is the body's final field) so the
    pass-through never parses a reply it only forwards."""
    at = data.rfind(b'"usage"')
    if at < 0:
        return None
    found = _TOTAL_TOKENS.search(data, at)
    return int(found.group(1)) or None if found else None


async def status_and_body(state: EndpointState, resp: aiohttp.ClientResponse) -> tuple[int, bytes]:
    return resp.status, await resp.read()


class PassThrough:
    def __init__(self, client: LLMClient, metrics: Metrics) -> None:
        self.client = client
        self.metrics = metrics

    async def forward(self, raw: bytes, deadline: float) -> web.Response:
        """A non-streamed pass-through: the caller's bytes up, the upstream's bytes back.
        ``deadline`` rides on the upstream call's own timeout (no timer per request)."""
        status, data = await self.client.transport.post_bytes(
            "/chat/completions", raw, status_and_body, deadline=deadline
        )
        self.metrics.add_passthrough(usage_tokens(data))
        return web.Response(body=data, status=status, content_type="application/json")

    async def stream(self, request: web.Request, raw: bytes, deadline: float) -> web.StreamResponse:
        """A streamed pass-through. Until the first event, failures raise (an HTTP error);
        after it, they end the stream with an error event."""

        async def first_event(
            state: EndpointState, resp: aiohttp.ClientResponse
        ) -> tuple[aiohttp.ClientResponse, bytes, str]:
            head = bytearray()
            async for line in stream_lines(resp, state.url):
                head += line
                if line.strip():
                    return resp, bytes(head), state.url
            raise LLMResponseError("upstream closed the stream before its first event")

        async with contextlib.AsyncExitStack() as keep:
            upstream, head, url = await self.client.transport.post_bytes(
                "/chat/completions", raw, first_event, keep=keep, deadline=deadline
            )
            resp = web.StreamResponse(headers=SSE_HEADERS)
            await resp.prepare(request)
            await resp.write(head)
            tail = EventTail()  # the SSE framing: how the stream ended, and its usage
            tail.feed(head)
            try:
                async with timeout_at(deadline):
                    async for chunk in stream_lines(upstream, url, whole_chunks=True):
                        await resp.write(chunk)
                        tail.feed(chunk)
                if not tail.done:
                    raise LLMResponseError("upstream closed the stream before [DONE]")
            except LLMError as exc:
                await self._end_with(resp, upstream_error(exc))
            except TimeoutError:
                await self._end_with(resp, timed_out())
            usage = tail.last_usage
            self.metrics.add_passthrough(usage_tokens(usage) if usage is not None else None)
            with contextlib.suppress(ConnectionError):
                await resp.write_eof()
            return resp

    async def _end_with(self, resp: web.StreamResponse, err: ServiceError) -> None:
        self.metrics.error("upstream_stream_broken")
        with contextlib.suppress(ConnectionError):
            await resp.write(error_event(err))
