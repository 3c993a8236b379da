"""Async OpenAI-compatible chat client (aiohttp): pooling, retries, n > 1, usage, endpoints.

Every LLM call of the project goes through :class:`LLMClient`, and every call ends in a
:class:`~rse_fast.chat_types.ChatResult` or a typed :class:`~rse_fast.errors.LLMError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from rse_fast.chat_types import ChatResult, Choice, Message, StreamEvent, Usage
from rse_fast.errors import (
    LLMBadRequestError,
    LLMConnectionError,
    LLMError,
    LLMResponseError,
    LLMTimeoutError,
    http_error,
)
from rse_fast.ledger import Ledger, TokenCounter, approx_token_count, count_prompt_tokens
from rse_fast.retry import RetryPolicy, parse_retry_after
from rse_fast.routing import Endpoint, EndpointPool, EndpointState
from rse_fast.sse import open_stream, read_sse

TraceHook = Callable[[dict[str, Any]], None]
_SOURCE_RANK = {"reported": 0, "estimated": 1, "corrected": 2}


@dataclass(frozen=True)
class Timeouts:
    connect_s: float = 10.0
    total_s: float = 600.0
    stream_idle_s: float = 120.0


def _as_endpoints(
    endpoints: str | Endpoint | Sequence[str | Endpoint], api_key: str | None, limit: int
) -> list[Endpoint]:
    items = [endpoints] if isinstance(endpoints, (str, Endpoint)) else list(endpoints)
    return [e if isinstance(e, Endpoint) else Endpoint(e, api_key, limit) for e in items]


def _parse_choices(data: Any, endpoint: str) -> tuple[Choice, ...]:
    try:
        choices = tuple(
            Choice(
                int(c.get("index", i)),
                (c.get("message") or {}).get("content") or "",
                c.get("finish_reason"),
                c.get("logprobs"),
            )
            for i, c in enumerate(data["choices"])
        )
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise LLMResponseError(
            f"not a chat completion ({exc!r})", endpoint=endpoint, body=json.dumps(data)[:500]
        ) from None
    return tuple(sorted(choices, key=lambda c: c.index))


async def _gather_or_cancel(aws: Sequence[Awaitable[ChatResult]]) -> list[ChatResult]:
    """Like gather, but the first failure cancels the rest: nothing keeps running unobserved."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for t in tasks:
            if not t.done():
                t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class _SharedSession:
    """The aiohttp session of a client and its views, created lazily in the running loop."""

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


class LLMClient:
    """One aiohttp session per client; least-outstanding routing across ``endpoints``.

    ``token_counter`` (text → tokens) estimates usage a server omits or under-reports; without
    one, ~4 characters per token is assumed and the figure is marked estimated.
    """

    def __init__(
        self,
        endpoints: str | Endpoint | Sequence[str | Endpoint],
        model: str,
        *,
        api_key: str | None = None,
        timeouts: Timeouts | None = None,
        retry: RetryPolicy | None = None,
        max_concurrency: int = 64,
        failure_threshold: int = 3,
        cooldown_s: float = 5.0,
        ledger: Ledger | None = None,
        token_counter: TokenCounter | None = None,
        trace: TraceHook | None = None,
    ) -> None:
        self.model = model
        self.pool = EndpointPool(
            _as_endpoints(endpoints, api_key, max_concurrency),
            failure_threshold=failure_threshold,
            cooldown_s=cooldown_s,
        )
        timeouts = timeouts or Timeouts()
        self.timeouts = timeouts
        self.retry = retry or RetryPolicy()
        self.ledger = ledger if ledger is not None else Ledger()
        self.count_tokens: TokenCounter = token_counter or approx_token_count
        self.trace = trace
        self._shared = _SharedSession()
        self._timeout = aiohttp.ClientTimeout(
            total=timeouts.total_s, connect=timeouts.connect_s, sock_connect=timeouts.connect_s
        )
        self._stream_timeout = aiohttp.ClientTimeout(
            total=timeouts.total_s, connect=timeouts.connect_s, sock_read=timeouts.stream_idle_s
        )

    # -- lifecycle -------------------------------------------------------------------------
    def _get_session(self) -> aiohttp.ClientSession:
        return self._shared.get()

    @property
    def _session(self) -> aiohttp.ClientSession | None:
        return self._shared.session

    def with_ledger(self, ledger: Ledger) -> LLMClient:
        """A view of this client (same endpoints, routing state and connections) that records
        into another ledger: how each method run gets its own token count."""
        view = copy.copy(self)
        view.ledger = ledger
        return view

    async def close(self) -> None:
        """Close the connections (shared with every ``with_ledger`` view)."""
        await self._shared.close()

    async def __aenter__(self) -> LLMClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- public API ------------------------------------------------------------------------
    def build_body(self, messages: Sequence[Message], **params: Any) -> dict[str, Any]:
        """The request body: model, messages, and every sampling field that is not None."""
        if not messages or not all(isinstance(m, dict) and "role" in m for m in messages):
            raise ValueError("messages must be a non-empty list of {'role': ..., 'content': ...}")
        extra = params.pop("extra", None) or {}
        body: dict[str, Any] = {
            "model": params.pop("model", None) or self.model,
            "messages": list(messages),
        }
        body.update({k: v for k, v in params.items() if v is not None})
        body.update(extra)
        return body

    async def chat(
        self,
        messages: Sequence[Message],
        *,
        n: int = 1,
        role: str = "explore",
        task: str | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
        stop: str | list[str] | None = None,
        response_format: dict[str, Any] | None = None,
        logprobs: bool | None = None,
        top_logprobs: int | None = None,
        model: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> ChatResult:
        """One chat completion with ``n`` choices, recorded in the ledger under ``role``."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        body = self.build_body(
            messages,
            model=model,
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            max_tokens=max_tokens,
            seed=seed,
            stop=stop,
            response_format=response_format,
            logprobs=logprobs,
            top_logprobs=top_logprobs,
            extra=extra,
        )
        t0 = time.perf_counter()
        try:
            result = await self._chat_n(body, n)
        except LLMError as exc:
            self.ledger.record_error(role, exc, time.perf_counter() - t0, exc.endpoint or "", task)
            raise
        self.ledger.record_usage(role, result.usage, result.latency_s, result.endpoint, n, task)
        return result

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        role: str = "explore",
        task: str | None = None,
        include_usage: bool = True,
        **params: Any,
    ) -> AsyncIterator[StreamEvent]:
        """Stream one choice as :class:`StreamEvent` deltas; the last event has ``done=True``.

        Retries happen only before the first byte of the body; a stream that breaks midway
        raises :class:`LLMConnectionError` or :class:`LLMTimeoutError` (idle timeout).
        """
        body = self.build_body(messages, **params)
        body["stream"] = True
        if include_usage:
            body["stream_options"] = {"include_usage": True}
        t0 = time.perf_counter()
        parts: list[str] = []
        usage: Usage | None = None
        endpoint = ""
        try:
            async with contextlib.aclosing(open_stream(self, body)) as opened:
                async for state, resp in opened:
                    endpoint = state.url
                    async for event in read_sse(resp, state.url):
                        if event.usage is not None:
                            usage = event.usage
                        if event.delta:
                            parts.append(event.delta)
                        if event.delta or event.finish_reason:
                            yield event
        except LLMError as exc:
            self.ledger.record_error(role, exc, time.perf_counter() - t0, exc.endpoint or "", task)
            raise
        if usage is None:
            usage = Usage(
                count_prompt_tokens(body["messages"], self.count_tokens),
                self.count_tokens("".join(parts)),
                "estimated",
            )
        latency = time.perf_counter() - t0
        self.ledger.record_usage(role, usage, latency, endpoint, 1, task)
        yield StreamEvent(done=True, usage=usage)

    # -- n > 1 -----------------------------------------------------------------------------
    async def _chat_n(self, body: dict[str, Any], n: int) -> ChatResult:
        if n == 1:
            return await self._request(body)
        state = self.pool.pick()
        if state.supports_n is False:
            return await self._fan_out(body, n, 0)
        try:
            first = await self._request({**body, "n": n}, state)
        except LLMBadRequestError as exc:
            if exc.status not in (400, 422):
                raise
            state.supports_n = False  # rejected n > 1: fall back to single requests
            return await self._fan_out(body, n, 0)
        if len(first.choices) >= n:
            state.supports_n = True
            return first
        state.supports_n = False  # ignored n: fetch the missing choices one by one
        rest = await self._fan_out(body, n - len(first.choices), len(first.choices))
        return self._merge([first, rest])

    async def _fan_out(self, body: dict[str, Any], count: int, offset: int) -> ChatResult:
        base = body.get("seed")
        seeds = [
            (base + offset + i) if base is not None else random.randrange(2**31)
            for i in range(count)
        ]
        parts = await _gather_or_cancel([self._request({**body, "seed": s}) for s in seeds])
        return self._merge(parts)

    @staticmethod
    def _merge(parts: Sequence[ChatResult]) -> ChatResult:
        choices = [c for p in parts for c in p.choices]
        source = max((p.usage.source for p in parts), key=_SOURCE_RANK.__getitem__)
        usage = Usage(
            sum(p.usage.prompt_tokens for p in parts),
            sum(p.usage.completion_tokens for p in parts),
            source,
        )
        return ChatResult(
            tuple(Choice(i, c.text, c.finish_reason, c.logprobs) for i, c in enumerate(choices)),
            usage,
            max(p.latency_s for p in parts),
            parts[0].endpoint,
            parts[0].model,
            sum(p.requests for p in parts),
            parts[0].raw,
        )

    def _usage(
        self, data: dict[str, Any], body: dict[str, Any], choices: Sequence[Choice]
    ) -> Usage:
        raw = data.get("usage")
        counted = [self.count_tokens(c.text) for c in choices]
        try:
            prompt = int(raw["prompt_tokens"])
            completion = int(raw["completion_tokens"])
        except (TypeError, KeyError, ValueError):
            prompt = count_prompt_tokens(body["messages"], self.count_tokens)
            return Usage(prompt, sum(counted), "estimated")
        if len(choices) > 1 and completion < 0.75 * sum(counted):
            # The server counted one choice only (llama.cpp with n > 1): add the others.
            k = min(range(len(counted)), key=lambda i: abs(counted[i] - completion))
            return Usage(prompt, completion + sum(counted) - counted[k], "corrected")
        return Usage(prompt, completion, "reported")

    # -- one request with retries ----------------------------------------------------------
    async def _request(
        self, body: dict[str, Any], first: EndpointState | None = None
    ) -> ChatResult:
        attempt = 0
        state: EndpointState | None = first
        while True:
            attempt += 1
            t0 = time.perf_counter()
            async with self.pool.slot(state) as st:
                try:
                    data = await self._post(st, body)
                    choices = _parse_choices(data, st.url)
                except LLMError as exc:
                    if exc.retryable:
                        self.pool.record_failure(st)
                    error = exc
                else:
                    self.pool.record_success(st)
                    latency = time.perf_counter() - t0
                    result = ChatResult(
                        choices,
                        self._usage(data, body, choices),
                        latency,
                        st.url,
                        str(data.get("model") or body["model"]),
                        1,
                        data,
                    )
                    self._emit_trace(body, result, None)
                    return result
            self._emit_trace(body, None, error)
            if not error.retryable or attempt >= self.retry.max_attempts:
                error.attempts = attempt
                raise error
            state = None  # re-route the retry
            await asyncio.sleep(self.retry.delay(attempt, getattr(error, "retry_after", None)))

    async def _post(self, state: EndpointState, body: dict[str, Any]) -> dict[str, Any]:
        url = state.url
        try:
            async with self._get_session().post(
                url + "/chat/completions",
                data=json.dumps(body),
                headers=self._headers(state),
                timeout=self._timeout,
            ) as resp:
                raw = await resp.read()
                status = resp.status
                retry_after = parse_retry_after(resp.headers.get("Retry-After"))
        except (asyncio.TimeoutError, TimeoutError):
            raise LLMTimeoutError("request timed out", endpoint=url) from None
        except aiohttp.ClientPayloadError as exc:
            raise LLMResponseError(f"truncated response body ({exc})", endpoint=url) from None
        except aiohttp.ClientError as exc:
            raise LLMConnectionError(f"connection failed ({exc!r})", endpoint=url) from None
        text = raw.decode("utf-8", "replace")
        if status >= 400:
            raise http_error(status, text, url, retry_after)
        try:
            data = json.loads(text)
        except ValueError:
            raise LLMResponseError(
                "response is not valid JSON", endpoint=url, status=status, body=text
            ) from None
        if not isinstance(data, dict):
            raise LLMResponseError("response is not a JSON object", endpoint=url, body=text)
        return data

    def _headers(self, state: EndpointState) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if state.endpoint.api_key:
            headers["Authorization"] = f"Bearer {state.endpoint.api_key}"
        return headers

    def _emit_trace(
        self, body: dict[str, Any], result: ChatResult | None, error: LLMError | None
    ) -> None:
        if self.trace is None:
            return
        rec: dict[str, Any] = {"time": time.time(), "request": body}
        if result is not None:
            rec.update(
                endpoint=result.endpoint,
                latency_s=result.latency_s,
                texts=result.texts,
                usage=result.usage.__dict__,
            )
        if error is not None:
            rec.update(endpoint=error.endpoint, error=f"{type(error).__name__}: {error}")
        self.trace(rec)
