"""Server-sent events for the client's streaming calls: open a stream with retries before the
first byte, then parse ``data:`` lines into :class:`StreamEvent` objects."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import aiohttp

from rse_fast.chat_types import StreamEvent, Usage
from rse_fast.errors import (
    LLMConnectionError,
    LLMError,
    LLMResponseError,
    LLMTimeoutError,
    http_error,
)
from rse_fast.retry import parse_retry_after
from rse_fast.routing import EndpointState

if TYPE_CHECKING:
    from rse_fast.client import LLMClient


async def open_stream(
    client: LLMClient, body: dict[str, Any]
) -> AsyncIterator[tuple[EndpointState, aiohttp.ClientResponse]]:
    """Yield one open 200 response, retrying connection errors and retryable statuses."""
    attempt = 0
    while True:
        attempt += 1
        async with client.pool.slot() as st:
            try:
                async with client._get_session().post(
                    st.url + "/chat/completions",
                    data=json.dumps(body),
                    headers=client._headers(st),
                    timeout=client._stream_timeout,
                ) as resp:
                    if resp.status >= 400:
                        text = (await resp.read()).decode("utf-8", "replace")
                        raise http_error(
                            resp.status,
                            text,
                            st.url,
                            parse_retry_after(resp.headers.get("Retry-After")),
                        )
                    client.pool.record_success(st)
                    yield st, resp
                    return
            except (asyncio.TimeoutError, TimeoutError):
                error: LLMError = LLMTimeoutError("stream timed out", endpoint=st.url)
            except aiohttp.ClientError as exc:
                error = LLMConnectionError(f"connection failed ({exc!r})", endpoint=st.url)
            except LLMError as exc:
                error = exc
            if error.retryable:
                client.pool.record_failure(st)
        if not error.retryable or attempt >= client.retry.max_attempts:
            error.attempts = attempt
            raise error
        await asyncio.sleep(client.retry.delay(attempt, getattr(error, "retry_after", None)))


async def read_sse(resp: aiohttp.ClientResponse, url: str) -> AsyncIterator[StreamEvent]:
    try:
        async for event in _parse_sse(resp, url):
            yield event
    except (asyncio.TimeoutError, TimeoutError):
        raise LLMTimeoutError("stream went idle", endpoint=url) from None
    except aiohttp.ClientError as exc:
        raise LLMConnectionError(f"stream broke ({exc!r})", endpoint=url) from None


async def _parse_sse(resp: aiohttp.ClientResponse, url: str) -> AsyncIterator[StreamEvent]:
    async for raw_line in resp.content:
        line = raw_line.strip()
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            return
        try:
            data = json.loads(payload)
        except ValueError:
            raise LLMResponseError(
                "malformed stream chunk", endpoint=url, body=payload.decode("utf-8", "replace")
            ) from None
        usage = None
        if isinstance(data.get("usage"), dict):
            u = data["usage"]
            usage = Usage(int(u.get("prompt_tokens", 0)), int(u.get("completion_tokens", 0)))
        for c in data.get("choices") or []:
            delta = (c.get("delta") or {}).get("content") or ""
            yield StreamEvent(int(c.get("index", 0)), delta, c.get("finish_reason"), raw=data)
        if usage is not None:
            yield StreamEvent(usage=usage, raw=data)
