"""Endpoints: per-endpoint concurrency limit, least-outstanding-requests routing, cool-down."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Endpoint:
    """One OpenAI-compatible server. ``base_url`` ends in ``/v1`` (added when missing);
    ``versioned=False`` keeps the URL as given (another HTTP API: a reward model)."""

    base_url: str
    api_key: str | None = None
    max_concurrency: int = 64
    versioned: bool = True

    def __post_init__(self) -> None:
        url = self.base_url.rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"endpoint URL must start with http:// or https://, got {url!r}")
        if self.versioned and not url.endswith("/v1"):
            url += "/v1"
        object.__setattr__(self, "base_url", url)
        if self.max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {self.max_concurrency}")


@dataclass
class EndpointState:
    endpoint: Endpoint
    outstanding: int = 0
    consecutive_failures: int = 0
    cooldown_until: float = 0.0
    supports_n: bool | None = None  # learnt: does the server honour n > 1?
    supports_schema: bool | None = None  # learnt: does it take a JSON-schema response_format?
    supports_logprobs: bool | None = None  # learnt: does it answer logprobs (or refuse them)?
    semaphore: asyncio.Semaphore | None = field(default=None, repr=False)
    #: what every request to this endpoint sends (built once: aiohttp copies, never mutates)
    headers: dict[str, str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.headers = {"Content-Type": "application/json"}
        if self.endpoint.api_key:
            self.headers["Authorization"] = f"Bearer {self.endpoint.api_key}"

    @property
    def url(self) -> str:
        return self.endpoint.base_url

    async def take(self) -> None:
        """Hold one of this endpoint's concurrency slots; while waiting for it the request
        already counts as outstanding, so routing sees the queue."""
        if self.semaphore is None:
            self.semaphore = asyncio.Semaphore(self.endpoint.max_concurrency)
        self.outstanding += 1
        try:
            await self.semaphore.acquire()
        except BaseException:
            self.outstanding -= 1
            raise

    def give(self) -> None:
        """Release the slot ``take`` held."""
        assert self.semaphore is not None
        self.semaphore.release()
        self.outstanding -= 1


class Slot:
    """One concurrency slot of an endpoint, held for an ``async with`` block."""

    __slots__ = ("state",)

    def __init__(self, state: EndpointState) -> None:
        self.state = state

    async def __aenter__(self) -> EndpointState:
        await self.state.take()
        return self.state

    async def __aexit__(self, *exc: object) -> None:
        self.state.give()


class EndpointPool:
    """Routes each request to the healthy endpoint with the fewest outstanding requests.

    An endpoint that fails ``failure_threshold`` times in a row cools down for ``cooldown_s``
    and gets no traffic meanwhile, unless every endpoint is cooling down.
    """

    def __init__(
        self,
        endpoints: Sequence[Endpoint],
        *,
        failure_threshold: int = 3,
        cooldown_s: float = 5.0,
    ) -> None:
        if not endpoints:
            raise ValueError("at least one endpoint is required")
        self.states = [EndpointState(e) for e in endpoints]
        self.failure_threshold = failure_threshold
        self.cooldown_s = cooldown_s
        self._rr = itertools.count()

    def pick(self) -> EndpointState:
        if len(self.states) == 1:  # one endpoint: nothing to choose, even while cooling down
            return self.states[0]
        now = time.monotonic()
        healthy = [s for s in self.states if s.cooldown_until <= now]
        if not healthy:
            return min(self.states, key=lambda s: s.cooldown_until)
        if len(healthy) == 1:
            return healthy[0]
        least = min(s.outstanding for s in healthy)
        tied = [s for s in healthy if s.outstanding == least]
        return tied[next(self._rr) % len(tied)]

    def state_of(self, url: str | None) -> EndpointState | None:
        """The endpoint a request went to, by its URL (None: not one of the pool's)."""
        return next((s for s in self.states if s.url == url), None)

    def slot(self, state: EndpointState | None = None) -> Slot:
        """Hold one concurrency slot of an endpoint (picked now unless given):
        ``async with pool.slot() as state``."""
        return Slot(state or self.pick())

    def record_success(self, state: EndpointState) -> None:
        state.consecutive_failures = 0

    def record_failure(self, state: EndpointState) -> None:
        state.consecutive_failures += 1
        if state.consecutive_failures >= self.failure_threshold:
            state.cooldown_until = time.monotonic() + self.cooldown_s
            state.consecutive_failures = 0


def as_endpoints(
    endpoints: str | Endpoint | Sequence[str | Endpoint], api_key: str | None, limit: int
) -> list[Endpoint]:
    """Endpoints from URLs (each with ``api_key`` and ``limit`` calls at once) or as given."""
    items = [endpoints] if isinstance(endpoints, (str, Endpoint)) else list(endpoints)
    return [e if isinstance(e, Endpoint) else Endpoint(e, api_key, limit) for e in items]
