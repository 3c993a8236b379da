"""Answering a method request: one JSON completion, or (``stream: true``) progress chunks then
the answer as OpenAI chunks. Headers wait for the first progress event, so an early failure is
a plain HTTP error; after them, a method failure or the request's deadline ends the stream with
one SSE error event. A client that disconnects cancels the work behind it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from rse_fast.llm.client import LLMClient
from rse_fast.methods import METHODS
from rse_fast.serve.errors import error_event, failure, sse_event
from rse_fast.serve.metrics import Metrics
from rse_fast.serve.passthrough import SSE_HEADERS
from rse_fast.serve.requests import MethodRequest, Outcome, run_method
from rse_fast.util.deadline import timeout_at

log = logging.getLogger(__name__)


class MethodAnswers:
    def __init__(self, client: LLMClient, metrics: Metrics) -> None:
        self.client = client
        self.metrics = metrics
        self._encoder: Any = None
        self._encoder_lock = asyncio.Lock()

    async def encoder_for(self, spec: MethodRequest) -> Any:
        if not METHODS[spec.method].needs_encoder:
            return None
        async with self._encoder_lock:
            if self._encoder is None:
                from rse_fast.encoder import Encoder

                self._encoder = await asyncio.to_thread(Encoder)
        return self._encoder

    async def answer(
        self, request: web.Request, body: dict[str, Any], spec: MethodRequest, deadline: float
    ) -> web.StreamResponse:
        async with timeout_at(deadline):
            encoder = await self.encoder_for(spec)
        if not body.get("stream"):
            async with timeout_at(deadline):
                outcome = await run_method(self.client, spec, encoder, progress=None)
            self.metrics.add_outcome(outcome.tokens_by_role, outcome.report)
            return web.json_response(outcome.completion)
        return await self.stream(request, spec, encoder, deadline)

    async def stream(
        self, request: web.Request, spec: MethodRequest, encoder: Any, deadline: float
    ) -> web.StreamResponse:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        work = asyncio.ensure_future(
            run_method(self.client, spec, encoder, progress=queue.put_nowait)
        )
        created = int(time.time())
        resp: web.StreamResponse | None = None
        try:
            async with timeout_at(deadline):
                async for item in drain(queue, work):
                    if resp is None:
                        resp = web.StreamResponse(headers=SSE_HEADERS)
                        await resp.prepare(request)
                    await resp.write(sse_event(chunk(spec.model, created, progress=item)))
                outcome = work.result()
        except (ConnectionResetError, asyncio.CancelledError):
            work.cancel()
            raise
        except Exception as exc:
            if resp is None:
                raise
            if failure(exc).status >= 500 and not isinstance(exc, TimeoutError):
                log.info("method %s failed mid-stream: %r", spec.method, exc)
            self.metrics.error("stream_failed")
            with contextlib.suppress(ConnectionError):
                await resp.write(error_event(failure(exc)))
                await resp.write_eof()
            return resp
        finally:
            if not work.done():
                work.cancel()
        if resp is None:
            resp = web.StreamResponse(headers=SSE_HEADERS)
            await resp.prepare(request)
        self.metrics.add_outcome(outcome.tokens_by_role, outcome.report)
        for data in answer_chunks(spec, created, outcome):
            await resp.write(sse_event(data))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


def answer_chunks(spec: MethodRequest, created: int, outcome: Outcome) -> list[dict[str, Any]]:
    """The answer as chunks a streaming OpenAI client reads: role, reasoning (a thinking
    model's trace behind the chosen answer), content or tool calls,
    the finish reason, and the usage chunk when the caller asked for it."""
    choice = outcome.completion["choices"][0]
    message = choice["message"]
    chunks = [chunk(spec.model, created, delta={"role": "assistant", "content": ""})]
    if message.get("reasoning_content"):
        chunks.append(
            chunk(spec.model, created, delta={"reasoning_content": message["reasoning_content"]})
        )
    if message.get("content"):
        chunks.append(chunk(spec.model, created, delta={"content": message["content"]}))
    if message.get("tool_calls"):
        calls = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
        chunks.append(chunk(spec.model, created, delta={"tool_calls": calls}))
    chunks.append(chunk(spec.model, created, finish=choice["finish_reason"]))
    if spec.include_usage:
        chunks.append(chunk(spec.model, created, usage=outcome.completion["usage"]))
    return chunks


async def drain(
    queue: asyncio.Queue[dict[str, Any]], work: asyncio.Future[Any]
) -> AsyncIterator[dict[str, Any]]:
    """The progress items ``work`` puts on ``queue`` while it runs; then its exception, if any."""
    while not (work.done() and queue.empty()):
        getter = asyncio.ensure_future(queue.get())
        try:
            await asyncio.wait({getter, work}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not getter.done():
                getter.cancel()
        if getter.done() and not getter.cancelled():
            yield getter.result()
    exc = work.exception()
    if exc is not None:
        raise exc


def chunk(
    model: str,
    created: int,
    delta: dict[str, Any] | None = None,
    finish: str | None = None,
    progress: dict[str, Any] | None = None,
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": f"chatcmpl-rse-{created}",
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [] if usage is not None else [
            {"index": 0, "delta": delta or {}, "finish_reason": finish}
        ],
    }  # fmt: skip
    if progress is not None:
        data["rse_fast_progress"] = progress
    if usage is not None:
        data["usage"] = usage
    return data
