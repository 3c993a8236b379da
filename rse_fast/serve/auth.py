"""Who may call, and how much at once: Bearer-key auth, a concurrency bucket per key (per
client address without keys), and one global cap over every bucket, taken before the body is
read or parsed so a flood of large bodies cannot queue behind the cap. A caller over a limit
waits in a bounded first-come queue (a few seconds) before it is refused with 429 and
``Retry-After``, as clients of vLLM and LiteLLM expect: a burst just over the limit is served,
not bounced."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import os
import time
from collections import defaultdict, deque
from dataclasses import dataclass

from rse_fast.errors import ServiceError


def keys_from(env_var: str = "RSE_FAST_API_KEYS", path: str | None = None) -> list[str]:
    """API keys from a comma-separated environment variable and/or a file (one per line)."""
    keys = [k.strip() for k in os.environ.get(env_var, "").split(",") if k.strip()]
    if path:
        with open(path) as fh:
            keys += [line.strip() for line in fh if line.strip() and not line.startswith("#")]
    return keys


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    if host in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class QueueStats:
    """What the wait before the limits cost, for the metrics page."""

    queued: int = 0  # requests that waited (served or not)
    timed_out: int = 0  # of those, refused when the wait ran out or the queue was full
    wait_s: float = 0.0  # total seconds waited
    waiting: int = 0  # waiting now


class Gate:
    """Authentication and concurrency limits. After ``enter`` a request holds a slot of its
    bucket and of the global cap until ``leave``; over a limit it waits up to ``queue_s`` in
    arrival order (at most ``max_queued`` waiting), then is refused holding nothing."""

    def __init__(
        self,
        api_keys: list[str],
        per_key: int,
        total: int,
        queue_s: float = 5.0,
        max_queued: int = 1024,
        stats: QueueStats | None = None,
    ) -> None:
        self.api_keys = [k.encode("utf-8", "surrogateescape") for k in api_keys]
        self.per_key = per_key
        self.total = total
        self.queue_s = queue_s
        self.max_queued = max_queued
        self.in_use = 0
        self.stats = QueueStats() if stats is None else stats
        self._buckets: dict[str, int] = defaultdict(int)
        self._waiters: deque[tuple[str, asyncio.Future[None]]] = deque()

    def bucket(self, authorization: str, remote: str | None) -> str:
        """The caller's bucket; a missing or wrong key is a 401 (constant time per key)."""
        if not self.api_keys:
            return f"addr:{remote}"  # one bucket per client address
        scheme, _, token = authorization.partition(" ")
        given = token.strip().encode("utf-8", "surrogateescape")
        ok = False
        for key in self.api_keys:  # no early exit
            ok |= hmac.compare_digest(given, key)
        if scheme.lower() != "bearer" or not given or not ok:
            raise ServiceError(
                401, "invalid or missing API key (send Authorization: Bearer <key>)",
                "authentication_error", code="invalid_api_key",
            )  # fmt: skip
        return f"key:{hmac.new(b'rse', given, 'sha256').hexdigest()[:16]}"

    def _room(self, bucket: str) -> bool:
        return self.in_use < self.total and self._buckets.get(bucket, 0) < self.per_key

    def _take(self, bucket: str) -> None:
        self._buckets[bucket] += 1
        self.in_use += 1

    def _refusal(self, bucket: str, waited: bool) -> ServiceError:
        after = " after waiting in the queue" if waited else " and its queue is full"
        if self.in_use >= self.total:
            return ServiceError(
                429, "the service is at its concurrency limit" + after, "rate_limit_error",
                {"Retry-After": "1"}, code="service_busy",
            )  # fmt: skip
        return ServiceError(
            429, "too many concurrent requests for this API key" + after, "rate_limit_error",
            {"Retry-After": "1"}, code="concurrency_limit",
        )  # fmt: skip

    def _wake(self) -> None:
        """Hand freed slots to the earliest waiters that fit (a waiter whose own bucket is
        full does not hold back one of another bucket)."""
        for entry in list(self._waiters):
            bucket, fut = entry
            if fut.done():
                self._waiters.remove(entry)
            elif self._room(bucket):
                self._waiters.remove(entry)
                self._take(bucket)
                fut.set_result(None)
            elif self.in_use >= self.total:
                return

    async def enter(self, bucket: str) -> None:
        if not self._waiters and self._room(bucket):
            self._take(bucket)  # the common case: no await, no queue
            return
        if self.queue_s <= 0 or len(self._waiters) >= self.max_queued:
            self.stats.timed_out += 1
            raise self._refusal(bucket, waited=False)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((bucket, fut))
        self.stats.queued += 1
        self.stats.waiting += 1
        t0 = time.monotonic()
        try:
            self._wake()
            await asyncio.wait_for(asyncio.shield(fut), self.queue_s)
        except asyncio.TimeoutError:
            if not fut.done():
                fut.cancel()
                self.stats.timed_out += 1
                raise self._refusal(bucket, waited=True) from None
        except asyncio.CancelledError:  # the caller went away while waiting
            if fut.done() and not fut.cancelled():
                self.leave(bucket)  # the slot was handed over: give it back
            fut.cancel()
            raise
        finally:
            self.stats.waiting -= 1
            self.stats.wait_s += time.monotonic() - t0
            with contextlib.suppress(ValueError):
                self._waiters.remove((bucket, fut))

    def leave(self, bucket: str) -> None:
        self.in_use -= 1
        self._buckets[bucket] -= 1
        if self._buckets[bucket] <= 0:
            del self._buckets[bucket]
        if self._waiters:
            self._wake()
