"""The one HTTP transport every LLM call goes through: pooling, timeouts, routing, retries.

A request is routed to an endpoint, holds one of its concurrency slots, is POSTed, and its
response is handed to a *reader* while still open. Connection errors, timeouts, retryable
statuses and reader failures (truncated or malformed bodies) are retried with backoff on a
freshly routed endpoint. A streamed call passes ``keep``: on success the slot and the open
response move into it, so the caller reads the stream and closing ``keep`` releases both —
retries therefore happen only before the first byte of a stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp

from rse_fast.errors import (
    LLMConnectionError,
    LLMDeadlineError,
    LLMError,
    LLMResponseError,
    LLMTimeoutError,
)
from rse_fast.llm.retry import RetryPolicy, http_error, parse_retry_after
from rse_fast.llm.routing import EndpointPool, EndpointState

T = TypeVar("T")
#: asyncio may run a timer up to its clock resolution early: a timeout this close to the
#: deadline is the deadline's
TIMER_SLACK_S = 0.001
Reader = Callable[[EndpointState, aiohttp.ClientResponse], Awaitable[T]]
FailureHook = Callable[[dict[str, Any], LLMError], None]


@dataclass(frozen=True)
class Timeouts:
    """Seconds: to connect, for a whole non-streamed call, and of silence within a stream."""

    connect_s: float = 10.0
    total_s: float = 600.0
    stream_idle_s: float = 120.0


class SharedSession:
    """The aiohttp session of a transport, created lazily in the running loop (a client made
    in one loop and used in another gets a fresh session instead of a broken one)."""

    def __init__(self) -> None:
        self.session: aiohttp.ClientSession | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def get(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self.session is None or self.session.closed or self.loop is not loop:
            connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
            self.session = aiohttp.ClientSession(connector=connector)
            self.loop = loop
        return self.session

    async def close(self) -> None:
        if self.session is not None and not self.session.closed:
            await self.session.close()
        self.session = None


async def read_json(state: EndpointState, resp: aiohttp.ClientResponse) -> dict[str, Any]:
    """A reader: the response body as a JSON object, or a (retryable) LLMResponseError."""
    text = (await resp.read()).decode("utf-8", "replace")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's stack
        raise LLMResponseError(
            "response is not valid JSON", endpoint=state.url, status=resp.status, body=text
        ) from None
    if not isinstance(data, dict):
        raise LLMResponseError("response is not a JSON object", endpoint=state.url, body=text)
    return data


async def open_response(
    state: EndpointState, resp: aiohttp.ClientResponse
) -> tuple[EndpointState, aiohttp.ClientResponse]:
    """A reader for streams: the open response itself (with ``keep``, it stays open)."""
    return state, resp


class Transport:
    """Endpoints, one session, one retry loop. Shared by a client and its ledger views."""

    def __init__(
        self,
        pool: EndpointPool,
        timeouts: Timeouts | None = None,
        retry: RetryPolicy | None = None,
        on_failure: FailureHook | None = None,
    ) -> None:
        self.pool = pool
        self.timeouts = timeouts or Timeouts()
        self.retry = retry or RetryPolicy()
        self.on_failure = on_failure
        self._session = SharedSession()
        t = self.timeouts
        self._call_timeout = aiohttp.ClientTimeout(
            total=t.total_s, connect=t.connect_s, sock_connect=t.connect_s
        )
        self._stream_timeout = aiohttp.ClientTimeout(
            total=t.total_s, connect=t.connect_s, sock_read=t.stream_idle_s
        )

    def session(self) -> aiohttp.ClientSession:
        return self._session.get()

    async def close(self) -> None:
        await self._session.close()

    async def post(
        self,
        path: str,
        body: dict[str, Any],
        read: Reader[T],
        *,
        state: EndpointState | None = None,
        keep: contextlib.AsyncExitStack | None = None,
    ) -> T:
        """POST ``body`` (JSON-encoded once) to ``path`` and return ``read``'s result."""
        return await self._send("POST", path, json.dumps(body).encode(), body, read, state, keep)

    def post_bytes(
        self,
        path: str,
        data: bytes,
        read: Reader[T],
        *,
        keep: contextlib.AsyncExitStack | None = None,
        deadline: float | None = None,
    ) -> Coroutine[Any, Any, T]:
        """POST a body that is already encoded (a proxy forwarding its caller's bytes); await
        the result. A plain function returning ``_send``'s coroutine: on a proxy's hot path
        each coroutine layer is resumed at every event of every request.

        ``deadline`` (event-loop time) bounds the attempts and the waits between them: it
        rides on each attempt's own timeout, so a proxied request needs no timer of its own;
        past it the call ends in an LLMDeadlineError."""
        return self._send("POST", path, data, None, read, None, keep, deadline)

    async def get(self, path: str, read: Reader[T]) -> T:
        """GET ``path`` with the same routing, auth and retries."""
        return await self._send("GET", path, None, None, read, None, None)

    async def _send(
        self,
        verb: str,
        path: str,
        data: bytes | None,
        body: dict[str, Any] | None,
        read: Reader[T],
        state: EndpointState | None,
        keep: contextlib.AsyncExitStack | None,
        deadline: float | None = None,
    ) -> T:
        base = self._stream_timeout if keep is not None else self._call_timeout
        timeout = base
        loop = asyncio.get_running_loop()
        attempt = 0
        while True:
            attempt += 1
            if deadline is not None:
                left = deadline - loop.time()
                if left <= 0:
                    raise LLMDeadlineError("the deadline passed before the request was sent")
                timeout = _within_deadline(base, left)
            if keep is None:  # the common case: no exit stack, no slot object
                st = state or self.pool.pick()
                await st.take()
                try:
                    outcome = await self._attempt(verb, st, path, data, read, timeout, None)
                finally:
                    st.give()
            else:
                async with contextlib.AsyncExitStack() as scope:
                    st = await scope.enter_async_context(self.pool.slot(state))
                    outcome = await self._attempt(verb, st, path, data, read, timeout, scope)
                    if not isinstance(outcome, LLMError):
                        keep.push_async_exit(scope.pop_all())
            if not isinstance(outcome, LLMError):
                self.pool.record_success(st)
                return outcome
            if (
                isinstance(outcome, LLMTimeoutError)
                and deadline is not None
                and loop.time() >= deadline - TIMER_SLACK_S
            ):  # the total cut to the deadline fired, not a connect or read timeout
                raise LLMDeadlineError("the deadline passed", endpoint=st.url, attempts=attempt)
            error = outcome
            if error.retryable:
                self.pool.record_failure(st)
            if self.on_failure is not None and body is not None:
                self.on_failure(body, error)
            delay = self.retry.delay(attempt, error.retry_after)
            out_of_time = deadline is not None and loop.time() + delay >= deadline
            if not error.retryable or attempt >= self.retry.max_attempts or out_of_time:
                error.attempts = attempt
                raise error
            state = None  # re-route the retry
            await asyncio.sleep(delay)

    async def _attempt(
        self,
        verb: str,
        st: EndpointState,
        path: str,
        data: bytes | None,
        read: Reader[T],
        timeout: aiohttp.ClientTimeout,
        scope: contextlib.AsyncExitStack | None,
    ) -> T | LLMError:
        """One request to ``st``: ``read``'s result, or the typed error it ended in. With
        ``scope`` the response stays open (a stream read later); without, it is released."""
        try:
            request = self.session().request(
                verb, st.url + path, data=data, headers=st.headers, timeout=timeout
            )
            if scope is not None:
                return await _checked_read(st, await scope.enter_async_context(request), read)
            async with request as resp:
                return await _checked_read(st, resp, read)
        except (asyncio.TimeoutError, TimeoutError):
            return LLMTimeoutError("request timed out", endpoint=st.url)
        except aiohttp.ClientPayloadError as exc:
            return LLMResponseError(f"truncated response body ({exc})", endpoint=st.url)
        except aiohttp.ClientError as exc:
            return LLMConnectionError(f"connection failed ({exc!r})", endpoint=st.url)
        except LLMError as exc:
            return exc


def _within_deadline(timeout: aiohttp.ClientTimeout, left: float) -> aiohttp.ClientTimeout:
    """``timeout`` with its total cut to the ``left`` seconds before a deadline."""
    if timeout.total is not None and timeout.total <= left:
        return timeout
    return aiohttp.ClientTimeout(
        total=left,
        connect=min(timeout.connect or left, left),
        sock_read=timeout.sock_read,
        sock_connect=timeout.sock_connect,
    )


async def _checked_read(st: EndpointState, resp: aiohttp.ClientResponse, read: Reader[T]) -> T:
    """``read(resp)``, or the typed error an HTTP error status maps to."""
    if resp.status >= 400:
        text = (await resp.read()).decode("utf-8", "replace")
        retry_after = parse_retry_after(resp.headers.get("Retry-After"))
        raise http_error(resp.status, text, st.url, retry_after)
    return await read(st, resp)


async def stream_lines(
    resp: aiohttp.ClientResponse, url: str, *, whole_chunks: bool = False
) -> AsyncIterator[bytes]:
    """The lines (or, with ``whole_chunks``, the network chunks as they arrive: what a proxy
    forwards) of an open streamed response; a broken or idle stream raises a typed error."""
    parts = resp.content.iter_any() if whole_chunks else resp.content
    try:
        async for line in parts:
            yield line
    except (asyncio.TimeoutError, TimeoutError):
        raise LLMTimeoutError("stream went idle", endpoint=url) from None
    except aiohttp.ClientError as exc:
        raise LLMConnectionError(f"stream broke ({exc!r})", endpoint=url) from None
