"""Cost priors that outlive the process: what a method's calls cost on one server and model.

A method sizes its first wave from priors (completion lengths, how far its token estimates
were off, how many samples were distinct); without them a fresh process sizes it from the
completion cap, so its first problem takes an extra wave or two. A :class:`PriorStore` keeps
the priors per (endpoints, model, method, completion cap) in one small JSON file, so every
``rse-fast solve`` — each a first problem — plans like a warm process.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import math
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

#: Entries kept (the least recently written go first); each is a few floats.
MAX_ENTRIES = 512


class PriorStore:
    """Priors keyed by ``identity|method|max_tokens``: in a JSON file shared by processes, or
    (``path=None``) in this process's memory only, for a long-lived service.

    Reads never fail a run: a missing, unreadable or malformed file is an empty store (logged
    once). Writes go through a temporary file and ``os.replace`` under an advisory lock, so
    two processes never leave it torn.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path).expanduser() if path is not None else None
        self._memory: dict[str, object] = {}
        self._warned = False

    @staticmethod
    def key(identity: str, method: str, max_tokens: int) -> str:
        return f"{identity}|{method}|max_tokens={max_tokens}"

    def load(self, key: str) -> dict[str, float]:
        entry = self._read().get(key)
        values = entry.get("priors") if isinstance(entry, dict) else None
        if not isinstance(values, dict):
            return {}
        return {k: float(v) for k, v in values.items() if _usable(v)}

    def save(self, key: str, priors: dict[str, float]) -> None:
        usable = {k: float(v) for k, v in priors.items() if _usable(v)}
        if not usable:
            return
        if self.path is None:
            self._memory[key] = {"priors": usable, "written": time.time()}
            return
        try:
            with self._locked():
                data = self._read()
                data[key] = {"priors": usable, "written": time.time()}
                if len(data) > MAX_ENTRIES:
                    oldest = sorted(data, key=lambda k: _written(data[k]))
                    for stale in oldest[: len(data) - MAX_ENTRIES]:
                        del data[stale]
                self._write(data)
        except OSError as exc:  # a read-only cache costs a cold start, never the run
            self._warn(f"cannot write cost priors to {self.path}: {exc}")

    def _read(self) -> dict[str, object]:
        if self.path is None:
            return self._memory
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            self._warn(f"ignoring unreadable cost priors in {self.path}: {exc}")
            return {}
        return data if isinstance(data, dict) else {}

    def _write(self, data: dict[str, object]) -> None:
        assert self.path is not None
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".priors-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f)
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        assert self.path is not None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _warn(self, message: str) -> None:
        if not self._warned:
            log.warning(message)
            self._warned = True


def _usable(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def _written(entry: object) -> float:
    stamp = entry.get("written") if isinstance(entry, dict) else None
    return float(stamp) if isinstance(stamp, int | float) else 0.0
