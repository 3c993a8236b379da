"""JSONL trace of every LLM call (request, reply or error, latency, endpoint)."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from typing import Any

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
