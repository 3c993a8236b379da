"""Server-sent events, parsing only: lines in, decoded ``data:`` payloads out.

An event's ``data:`` lines are joined with newlines and end at a blank line (as the SSE spec
says; OpenAI-compatible servers send one line per event). ``data: [DONE]`` ends the stream.
A payload that is an ``{"error": ...}`` object (what vLLM and SGLang send when generation
fails mid-stream) raises, so a failure is never mistaken for a short answer; so does a stream
that ends before ``[DONE]`` (a clean close midway) or with no event at all.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

from rse_fast.errors import LLMConnectionError, LLMResponseError, LLMServerError

DONE = b"[DONE]"


def _decode(payload: bytes, url: str) -> dict[str, Any]:
    try:
        data = json.loads(payload)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's stack
        data = None
    if not isinstance(data, dict):
        raise LLMResponseError(
            "malformed stream chunk", endpoint=url, body=payload.decode("utf-8", "replace")
        )
    if "error" in data and not data.get("choices"):
        raise LLMServerError(
            "error event in stream", endpoint=url, body=payload.decode("utf-8", "replace")
        )
    return data


async def sse_payloads(lines: AsyncIterable[bytes], url: str) -> AsyncIterator[dict[str, Any]]:
    """Each event's JSON payload, until ``[DONE]`` or the end of the lines."""
    buffered: list[bytes] = []
    events = 0
    async for raw_line in lines:
        line = raw_line.rstrip(b"\r\n")
        if line.startswith(b"data:"):
            buffered.append(line[5:].lstrip(b" "))
            # One-line events are the norm: decode at once unless more data lines may follow.
            if buffered[0] == DONE:
                return
            continue
        if line or not buffered:
            continue  # comments (":"), event/id fields, or stray blank lines
        payload, buffered = b"\n".join(buffered), []
        events += 1
        yield _decode(payload, url)
    if buffered and buffered[0] != DONE:
        events += 1
        yield _decode(b"\n".join(buffered), url)
    if not events:
        raise LLMResponseError("the stream ended with no event", endpoint=url)
    raise LLMConnectionError("the stream ended before [DONE]", endpoint=url)


class EventTail:
    """Follows the SSE framing of raw chunks as a proxy forwards them, keeping only what
    decides how the stream ended: whether its last event is ``[DONE]``, and the last payload
    that carries usage. A model that writes ``data: [DONE]`` in its text does not end the
    stream: that text sits inside a JSON string of a ``data:`` line, never at a line's start."""

    def __init__(self) -> None:
        self._partial = b""  # the line not yet ended by a newline
        self._data: list[bytes] = []  # the data lines of the event not yet ended
        self.last_event: bytes | None = None
        self.last_usage: bytes | None = None

    def feed(self, chunk: bytes) -> None:
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        for raw in lines:
            line = raw.rstrip(b"\r")
            if line.startswith(b"data:"):
                self._data.append(line[5:].lstrip(b" "))
            elif not line and self._data:
                self._end_event()

    def _end_event(self) -> None:
        payload, self._data = b"\n".join(self._data), []
        self.last_event = payload
        if b'"usage"' in payload:
            self.last_usage = payload

    @property
    def done(self) -> bool:
        """Whether the stream so far ends with a whole ``[DONE]`` event (its blank line may
        be missing: some servers close right after the data line)."""
        if self._partial.strip():
            return False
        if self._data:
            return self._data == [DONE]
        return self.last_event == DONE
