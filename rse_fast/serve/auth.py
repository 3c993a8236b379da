"""Who may call, and how much at once: Bearer-key auth, a concurrency bucket per key (per
client address without keys), and one global cap over every bucket, taken before the body is
read or parsed so a flood of large bodies cannot queue behind the cap."""

from __future__ import annotations

import hmac
import ipaddress
import os
from collections import defaultdict

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


class Gate:
    """Authentication and concurrency limits. ``enter`` returns the bucket a request holds
    until ``leave``; a refused request holds nothing."""

    def __init__(self, api_keys: list[str], per_key: int, total: int) -> None:
        self.api_keys = [k.encode("utf-8", "surrogateescape") for k in api_keys]
        self.per_key = per_key
        self.total = total
        self.in_use = 0
        self._buckets: dict[str, int] = defaultdict(int)

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

    def enter(self, bucket: str) -> None:
        if self.in_use >= self.total:
            raise ServiceError(
                429, "the service is at its concurrency limit", "rate_limit_error",
                {"Retry-After": "1"}, code="service_busy",
            )  # fmt: skip
        if self._buckets[bucket] >= self.per_key:
            raise ServiceError(
                429, "too many concurrent requests for this API key", "rate_limit_error",
                {"Retry-After": "1"}, code="concurrency_limit",
            )  # fmt: skip
        self._buckets[bucket] += 1
        self.in_use += 1

    def leave(self, bucket: str) -> None:
        self.in_use -= 1
        self._buckets[bucket] -= 1
        if self._buckets[bucket] <= 0:
            del self._buckets[bucket]
