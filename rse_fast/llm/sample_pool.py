"""Shared sample pools (common random numbers): a request already answered is answered again
from the store, at the usage and timings the server reported for it.

Several TTS families begin with the same independent samples: self-consistency, best-of-N,
fusion's candidates, a first round or a first draft whose request equals theirs. Which calls
are shared is decided by the request body alone (model, messages, sampling fields, seed): two
families that send the same body get the same reply, and each is charged what the server
reported for it, so a ledger reads as if the family had sampled itself while the model time is
paid once and the comparison between families becomes paired. Only whole replies are pooled
(a streamed call, whose caller may stop it, goes to the server)."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def body_key(body: dict[str, Any]) -> str:
    """The identity of a request: its body, as canonical JSON, hashed."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class PooledReply:
    """A server's reply as it came (its JSON, with usage and timings), and how long it took."""

    raw: dict[str, Any]
    latency_s: float
    endpoint: str

    @property
    def completion_tokens(self) -> int:
        """What the server reported generating for it (0 where it reported no usage)."""
        return int((self.raw.get("usage") or {}).get("completion_tokens") or 0)


class SamplePool:
    """Replies by request body, kept in memory and (with ``path``) appended to a JSONL file,
    so an interrupted evaluation finds what it had sampled. ``hits`` and ``misses`` count the
    calls served from the pool and those sent to the server."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._replies: dict[str, PooledReply] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        #: what the answered calls had cost the server when they were first made
        self.saved_completion_tokens = 0
        self.saved_server_s = 0.0
        if self.path is not None and self.path.exists():
            self._load(self.path)

    def _load(self, path: Path) -> None:
        lines = path.read_text(encoding="utf-8").splitlines()
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                reply = PooledReply(dict(row["raw"]), float(row["latency_s"]), str(row["endpoint"]))
                self._replies[str(row["key"])] = reply
            except (ValueError, KeyError, TypeError):
                if n == len(lines):
                    continue  # a torn last line: the run that wrote it was cut mid-write
                raise ValueError(f"{path}:{n}: not a pooled reply") from None

    def generated(self) -> tuple[int, float]:
        """Completion tokens and server seconds of the replies held: what generating them
        once cost."""
        with self._lock:
            replies = list(self._replies.values())
        return sum(r.completion_tokens for r in replies), sum(r.latency_s for r in replies)

    def __len__(self) -> int:
        return len(self._replies)

    def get(self, body: dict[str, Any]) -> PooledReply | None:
        with self._lock:
            found = self._replies.get(body_key(body))
            if found is None:
                self.misses += 1
            else:
                self.hits += 1
                self.saved_completion_tokens += found.completion_tokens
                self.saved_server_s += found.latency_s
            return found

    def tally(self) -> dict[str, float]:
        """The counters as they stand (a run takes two and subtracts: what one record saved)."""
        return {"hits": self.hits, "misses": self.misses,
                "saved_completion_tokens": self.saved_completion_tokens,
                "saved_server_s": self.saved_server_s}  # fmt: skip

    def put(self, body: dict[str, Any], reply: PooledReply) -> None:
        key = body_key(body)
        with self._lock:
            if key in self._replies:
                return
            self._replies[key] = reply
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                row = {"key": key, "raw": reply.raw, "latency_s": reply.latency_s,
                       "endpoint": reply.endpoint}  # fmt: skip
                with open(self.path, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(row, ensure_ascii=False) + "\n")

    @property
    def saved_share(self) -> float | None:
        """The share of pooled-eligible calls the pool answered (the model time not paid)."""
        total = self.hits + self.misses
        return self.hits / total if total else None
