"""JSONL trace of every LLM call (request, reply or error, latency, endpoint)."""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from rse_fast.errors import LLMError
from rse_fast.llm.types import Usage

TraceHook = Callable[[dict[str, Any]], None]


class JsonlTrace:
    """A client ``trace`` hook appending one JSON object per call, flushed line by line."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()
        self._lock = threading.Lock()

    def __call__(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False, default=str)
        with self._lock:
            self._fh.write(line + "\n")
            self._fh.flush()

    def close(self) -> None:
        self._fh.close()


def reply_record(
    body: dict[str, Any],
    endpoint: str,
    latency_s: float,
    texts: list[str],
    reasoning: list[str | None],
    usage: Usage,
) -> dict[str, Any]:
    """The trace record of a call that returned (streamed or not)."""
    return {
        "time": time.time(),
        "request": body,
        "endpoint": endpoint,
        "latency_s": latency_s,
        "texts": texts,
        "reasoning": reasoning,
        "usage": dataclasses.asdict(usage),
    }


def failure_record(body: dict[str, Any], error: LLMError) -> dict[str, Any]:
    """The trace record of a call that ended in an error."""
    return {
        "time": time.time(),
        "request": body,
        "endpoint": error.endpoint,
        "error": f"{type(error).__name__}: {error}",
    }
