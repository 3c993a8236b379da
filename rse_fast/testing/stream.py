"""The scripted server's streamed reply, as real servers stream one: a role chunk, the
reasoning and the content a word per chunk at a steady token rate, tool calls in pieces, the
finish, the usage chunk when asked for, and ``[DONE]``; or a scripted fault mid-stream."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from aiohttp import web

from rse_fast.testing.script import Fault, Reply

if TYPE_CHECKING:
    from rse_fast.testing.server import ScriptedServer

#: faults that break a stream after some chunks
BREAKS = ("drop_stream", "rst_stream", "close_stream", "stall_stream")


def pieces(text: str) -> list[str]:
    """A text a word per chunk (each after the first with its leading space)."""
    words = text.split(" ")
    return [w if k == 0 else " " + w for k, w in enumerate(words)]


class ReplyStream:
    """One streamed reply of ``server`` to ``body`` (the i-th request)."""

    def __init__(
        self,
        server: ScriptedServer,
        request: web.Request,
        body: dict[str, Any],
        reply: Reply,
        fault: Fault | None,
        i: int,
    ) -> None:
        self.server, self.request, self.body, self.reply = server, request, body, reply
        self.fault, self.i = fault, i
        self.model = body.get("model") or server.model
        self.created = int(time.time())
        rate = server.stream_tokens_per_s
        self.gap = 1.0 / rate if rate else 0.0
        self.sent = self.paced = 0
        top = max(1, int(body.get("top_logprobs") or 1))
        self.content_logprobs = iter(reply.logprobs(top)["content"]) if reply.content else iter(())
        self.with_logprobs = bool(body.get("logprobs")) and server.logprobs_supported
        self.resp = web.StreamResponse(
            status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )

    def deltas(self) -> Iterator[tuple[dict[str, Any], str | None]]:
        """The chunks' deltas in order, each with its finish reason (None but the last)."""
        reply = self.reply
        yield {"role": "assistant", "content": ""}, None
        for piece in pieces(reply.reasoning or "") if reply.reasoning else []:
            yield {reply.reasoning_field: piece}, None
        for piece in pieces(reply.content) if reply.content else []:
            yield {"content": piece}, None
        for k, call in enumerate(reply.message(0).get("tool_calls") or []):
            fn = call["function"]
            head = {"index": k, "id": call["id"], "type": "function"}
            yield {"tool_calls": [{**head, "function": {"name": fn["name"]}}]}, None
            args = fn["arguments"]
            for a in range(0, len(args), 8):
                yield (
                    {"tool_calls": [{"index": k, "function": {"arguments": args[a : a + 8]}}]},
                    None,
                )
        yield {}, reply.finish

    def _chunk(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": "chatcmpl-stream",
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }

    async def send(self, delta: dict[str, Any], finish: str | None, start: float) -> None:
        """Write one chunk; a generated piece is followed by a wait until its slot on the
        steady token clock (start + pieces × gap), so the stream keeps its rate however long
        each write and wake-up took (sleeping ``gap`` after each drifts)."""
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
        if self.with_logprobs and delta.get("content"):
            choice["logprobs"] = {"content": [next(self.content_logprobs)]}
        fault = self.fault
        if fault is not None and fault.kind in BREAKS and self.sent >= fault.after_chunks:
            await break_stream(self.request, self.resp, fault)
            raise ConnectionResetError(f"scripted {fault.kind} mid-stream")
        await self.resp.write(f"data: {json.dumps(self._chunk([choice]))}\n\n".encode())
        self.sent += 1
        if delta.get("content") or delta.get(self.reply.reasoning_field):
            self.server.served[self.i] += 1  # a generated piece is one token here
        if self.gap and "role" not in delta and finish is None:
            self.paced += 1
            loop = asyncio.get_running_loop()
            wait = start + self.paced * self.gap - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)

    async def run(self) -> web.StreamResponse:
        resp, server = self.resp, self.server
        try:
            await resp.prepare(self.request)
        except ConnectionResetError:  # the caller left during the prefill: nothing to send
            return resp
        start = asyncio.get_running_loop().time()
        try:
            for delta, finish in self.deltas():
                await self.send(delta, finish, start)
        except ConnectionResetError:
            return resp
        if (self.body.get("stream_options") or {}).get("include_usage"):
            data = self._chunk([])
            data["usage"] = server.usage_payload(self.body, self.reply.tokens, [self.reply])
            await resp.write(f"data: {json.dumps(server.with_timings(data))}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        if server.close_after_stream and self.request.transport is not None:
            self.request.transport.close()
        return resp


async def break_stream(request: web.Request, resp: web.StreamResponse, fault: Fault) -> None:
    """End a stream the way ``fault`` says (the caller then stops writing)."""
    transport = request.transport
    if fault.kind == "close_stream":
        await resp.write_eof()  # a clean end of the HTTP response, without [DONE]
    elif fault.kind == "stall_stream":
        await asyncio.sleep(fault.stall_s)
    elif fault.kind == "rst_stream" and transport is not None:
        sock = transport.get_extra_info("socket")
        if sock is not None:  # SO_LINGER with a zero timeout: close() sends RST, not FIN
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
    elif transport is not None:
        transport.abort()
