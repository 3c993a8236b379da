"""OpenAI-compatible RSE service (aiohttp.web): any OpenAI client uses RSE or another TTS method
by changing only its base URL. The model name picks the method (``rse:<model>``, ``sc:…``,
``bon:…``, ``beam:…``, ``particle:…``, ``refine:…``, ``fusion:…``); a plain name passes
straight through to the upstream servers."""

from __future__ import annotations

import asyncio
import hmac
import json
import os
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from rse_fast.errors import (
    LLMBadRequestError,
    LLMConnectionError,
    LLMError,
    LLMRateLimitError,
    LLMTimeoutError,
    RoundFailedError,
    ServiceError,
)
from rse_fast.llm.client import LLMClient
from rse_fast.serve.metrics import Metrics
from rse_fast.serve.requests import MethodRequest, parse_method_request, run_method

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
API_KEY: Any = web.RequestKey("api_key", str) if hasattr(web, "RequestKey") else "api_key"


@dataclass
class ServeConfig:
    upstreams: list[str]
    api_keys: list[str] = field(default_factory=list)  # empty: no auth
    max_body_bytes: int = 1 << 20
    per_key_concurrency: int = 16
    request_timeout_s: float = 600.0
    upstream_api_key: str | None = None
    upstream_concurrency: int = 256

    @classmethod
    def keys_from(cls, env_var: str = "RSE_FAST_API_KEYS", path: str | None = None) -> list[str]:
        """API keys from a comma-separated environment variable and/or a file (one per line)."""
        keys = [k.strip() for k in os.environ.get(env_var, "").split(",") if k.strip()]
        if path:
            with open(path) as fh:
                keys += [line.strip() for line in fh if line.strip() and not line.startswith("#")]
        return keys


def error_response(
    status: int, message: str, kind: str, headers: dict[str, str] | None = None
) -> web.Response:
    body = {"error": {"message": message, "type": kind, "code": status}}
    return web.json_response(body, status=status, headers=headers)


def upstream_error(exc: LLMError) -> ServiceError:
    """Upstream faults as typed OpenAI-style errors."""
    if isinstance(exc, LLMRateLimitError):
        return ServiceError(
            429,
            f"upstream rate limited: {exc}",
            "rate_limit_error",
            {"Retry-After": str(int(exc.retry_after or 1))},
        )
    if isinstance(exc, LLMTimeoutError):
        return ServiceError(504, f"upstream timed out: {exc}", "upstream_timeout")
    if isinstance(exc, LLMBadRequestError) and exc.status is not None:
        return ServiceError(
            exc.status, f"upstream rejected the request: {exc.body or exc}", "invalid_request_error"
        )
    if isinstance(exc, LLMConnectionError):
        return ServiceError(502, f"upstream unreachable: {exc}", "upstream_error")
    return ServiceError(502, f"upstream error: {exc}", "upstream_error")


class Service:
    def __init__(self, config: ServeConfig) -> None:
        if not config.upstreams:
            raise ValueError("at least one --upstream URL is required")
        self.config = config
        self.metrics = Metrics()
        self.client = LLMClient(
            config.upstreams,
            "default",
            api_key=config.upstream_api_key,
            max_concurrency=config.upstream_concurrency,
        )
        self._per_key: dict[str, int] = defaultdict(int)
        self._encoder: Any = None

    # -- app -------------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(
            client_max_size=self.config.max_body_bytes, middlewares=[self._errors, self._auth]
        )
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.prometheus)
        app.on_cleanup.append(self._close)
        return app

    async def _close(self, app: web.Application) -> None:
        await self.client.close()

    @web.middleware
    async def _errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except ServiceError as exc:
            self.metrics.error(exc.kind)
            return error_response(exc.status, exc.message, exc.kind, exc.headers)
        except web.HTTPRequestEntityTooLarge:
            self.metrics.error("request_too_large")
            return error_response(
                413,
                f"request body over {self.config.max_body_bytes} bytes",
                "invalid_request_error",
            )
        except web.HTTPException as exc:
            if exc.status >= 400:
                return error_response(exc.status, exc.reason, "invalid_request_error")
            raise

    @web.middleware
    async def _auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if not self.config.api_keys or request.path == "/health":
            return await handler(request)
        given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        ok = False
        for key in self.config.api_keys:  # constant time per key, no early exit
            ok |= hmac.compare_digest(given.encode(), key.encode())
        if not ok:
            raise ServiceError(401, "invalid or missing API key", "authentication_error")
        request[API_KEY] = given
        return await handler(request)

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "in_flight": self.metrics.in_flight})

    async def prometheus(self, request: web.Request) -> web.Response:
        return web.Response(text=self.metrics.render(), content_type="text/plain")

    async def models(self, request: web.Request) -> web.Response:
        try:
            names = await self.client.models()
        except LLMError:
            names = []
        prefixes = ["rse", "sc", "bon", "beam", "particle", "refine", "fusion"]
        ids = names + [f"{p}:{n}" for n in names for p in prefixes]
        return web.json_response(
            {
                "object": "list",
                "data": [{"id": i, "object": "model", "owned_by": "rse-fast"} for i in ids],
            }
        )

    # -- chat ------------------------------------------------------------------------------
    async def chat(self, request: web.Request) -> web.StreamResponse:
        t0 = time.perf_counter()
        body = await self._body(request)
        key = request.get(API_KEY, "")
        if self._per_key[key] >= self.config.per_key_concurrency:
            raise ServiceError(
                429,
                "too many concurrent requests for this API key",
                "rate_limit_error",
                {"Retry-After": "1"},
            )
        self._per_key[key] += 1
        self.metrics.in_flight += 1
        label, status = "passthrough", 500
        try:
            spec = parse_method_request(body)
            label = spec.method if spec else "passthrough"
            work = (
                self._passthrough(request, body)
                if spec is None
                else self._method(request, body, spec)
            )
            resp = await asyncio.wait_for(work, self.config.request_timeout_s)
            status = resp.status
            return resp
        except asyncio.TimeoutError:
            status = 504
            raise ServiceError(504, "request timed out", "timeout") from None
        except (LLMError, RoundFailedError) as exc:
            cause = exc.cause if isinstance(exc, RoundFailedError) else exc
            err = (
                upstream_error(cause)
                if isinstance(cause, LLMError)
                else ServiceError(502, str(exc), "upstream_error")
            )
            status = err.status
            raise err from None
        except ServiceError as exc:
            status = exc.status
            raise
        finally:
            self._per_key[key] -= 1
            self.metrics.in_flight -= 1
            self.metrics.observe(label, status, time.perf_counter() - t0)

    async def _body(self, request: web.Request) -> dict[str, Any]:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise ServiceError(400, "request body is not valid JSON") from None
        if not isinstance(body, dict):
            raise ServiceError(400, "request body must be a JSON object")
        messages = body.get("messages")
        if (
            not isinstance(messages, list)
            or not messages
            or not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages)
        ):
            raise ServiceError(
                400, "'messages' must be a non-empty list of {role, content} objects"
            )
        if not isinstance(body.get("model"), str) or not body["model"]:
            raise ServiceError(400, "'model' must be a non-empty string")
        return body

    async def _passthrough(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        if body.get("stream"):
            return await self._stream_passthrough(request, body)
        fields = {k: v for k, v in body.items() if k not in ("messages", "model", "n")}
        result = await self.client.chat(
            body["messages"],
            model=body["model"],
            n=_int(body, "n", 1, 1, 128),
            role="passthrough",
            extra=fields,
        )
        self.metrics.add_tokens({"passthrough": result.usage.total_tokens})
        return web.json_response(
            result.raw
            if result.requests == 1
            else _completion(
                body["model"],
                result.texts,
                result.usage.prompt_tokens,
                result.usage.completion_tokens,
            )
        )

    async def _stream_passthrough(
        self, request: web.Request, body: dict[str, Any]
    ) -> web.StreamResponse:
        fields = {k: v for k, v in body.items() if k not in ("messages", "model", "stream")}
        events = self.client.stream(
            body["messages"],
            model=body["model"],
            role="passthrough",
            include_usage=False,
            extra=fields,
        )
        resp = await _sse_start(request)
        async for event in events:
            if event.raw is not None:
                await resp.write(f"data: {json.dumps(event.raw)}\n\n".encode())
            elif event.done and event.usage:
                self.metrics.add_tokens({"passthrough": event.usage.total_tokens})
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _method(
        self, request: web.Request, body: dict[str, Any], spec: MethodRequest
    ) -> web.StreamResponse:
        if spec.method == "rse" and self._encoder is None:
            from rse_fast.encoder import Encoder

            self._encoder = await asyncio.to_thread(Encoder)
        if not body.get("stream"):
            outcome = await run_method(self.client, spec, self._encoder, progress=None)
            self.metrics.add_tokens(outcome.tokens_by_role)
            return web.json_response(outcome.completion)
        return await self._stream_method(request, spec)

    async def _stream_method(self, request: web.Request, spec: MethodRequest) -> web.StreamResponse:
        """Progress events, then the answer, as OpenAI chunks; a client that disconnects
        cancels the work behind it."""
        resp = await _sse_start(request)
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        work = asyncio.ensure_future(
            run_method(self.client, spec, self._encoder, progress=queue.put_nowait)
        )
        try:
            async for chunk in _drain(queue, work):
                await resp.write(
                    f"data: {json.dumps(_chunk(spec.model, progress=chunk))}\n\n".encode()
                )
            outcome = work.result()
            self.metrics.add_tokens(outcome.tokens_by_role)
            text = outcome.completion["choices"][0]["message"]["content"]
            for data in (
                _chunk(spec.model, delta={"role": "assistant", "content": text}),
                _chunk(spec.model, finish="stop", usage=outcome.completion["usage"]),
            ):
                await resp.write(f"data: {json.dumps(data)}\n\n".encode())
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            work.cancel()
            raise
        finally:
            if not work.done():
                work.cancel()
        return resp


async def _drain(
    queue: asyncio.Queue[dict[str, Any]], work: asyncio.Future[Any]
) -> AsyncIterator[dict[str, Any]]:
    while not (work.done() and queue.empty()):
        getter = asyncio.ensure_future(queue.get())
        await asyncio.wait({getter, work}, return_when=asyncio.FIRST_COMPLETED)
        if getter.done():
            yield getter.result()
        else:
            getter.cancel()
    if work.exception() is not None:
        raise work.exception()  # type: ignore[misc]


async def _sse_start(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await resp.prepare(request)
    return resp


def _chunk(
    model: str,
    delta: dict[str, Any] | None = None,
    finish: str | None = None,
    progress: dict[str, Any] | None = None,
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": "chatcmpl-rse",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}],
    }
    if progress is not None:
        data["rse_fast_progress"] = progress
    if usage is not None:
        data["usage"] = usage
    return data


def _completion(model: str, texts: list[str], prompt: int, completion: int) -> dict[str, Any]:
    return {
        "id": "chatcmpl-rse",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": i, "message": {"role": "assistant", "content": t}, "finish_reason": "stop"}
            for i, t in enumerate(texts)
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


def _int(body: dict[str, Any], name: str, default: int, lo: int, hi: int) -> int:
    value = body.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ServiceError(400, f"'{name}' must be an integer in [{lo}, {hi}]")
    return value


async def serve(
    config: ServeConfig, host: str = "127.0.0.1", port: int = 8000, shutdown_timeout_s: float = 30.0
) -> None:
    """Run until cancelled (Ctrl-C); in-flight requests get ``shutdown_timeout_s`` to drain."""
    runner = web.AppRunner(
        Service(config).app(),
        handler_cancellation=True,
        access_log=None,
        shutdown_timeout=shutdown_timeout_s,
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    print(
        f"rse-fast service on http://{host}:{port}/v1 -> {', '.join(config.upstreams)}", flush=True
    )
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
