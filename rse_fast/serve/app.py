"""OpenAI-compatible TTS service (aiohttp.web): any OpenAI client uses RSE or another TTS
method by changing only its base URL. The model name picks the method (``rse:<model>``,
``sc:…``, ``bon:…``, ``beam:…``, ``particle:…``, ``refine:…``, ``fusion:…``); a plain name passes
straight through to the upstream servers as bytes.

This module holds the routes and the order of work for a chat request: auth, a concurrency
slot (before the body is read), the body check, then pass-through or a method. The pieces
live beside it: ``errors`` (OpenAI-shaped errors), ``auth`` (keys and limits), ``body``,
``passthrough``, ``requests`` and ``method_stream`` (method requests), ``workers``.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from rse_fast.errors import BudgetError, LLMError, RoundFailedError, ServiceError
from rse_fast.llm.client import LLMClient
from rse_fast.llm.transport import Timeouts
from rse_fast.methods import METHODS
from rse_fast.serve.auth import Gate, keys_from
from rse_fast.serve.body import parse_body
from rse_fast.serve.errors import error_response, failure, timed_out
from rse_fast.serve.method_stream import MethodAnswers
from rse_fast.serve.metrics import Metrics
from rse_fast.serve.passthrough import PassThrough
from rse_fast.serve.requests import METHOD_PREFIXES, Caps, parse_method_request

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
BUCKET: Any = web.RequestKey("bucket", str) if hasattr(web, "RequestKey") else "bucket"


@dataclass
class ServeConfig:
    upstreams: list[str]
    api_keys: list[str] = field(default_factory=list)  # empty: no auth (loopback only)
    allow_no_auth: bool = False  # serve a non-loopback address without keys anyway
    max_body_bytes: int = 1 << 20
    per_key_concurrency: int = 16
    #: requests in flight over every bucket (each worker process holds its share)
    max_concurrency: int = 256
    #: seconds a request over a limit waits for a slot before its 429
    queue_timeout_s: float = 5.0
    #: requests waiting at most; past it a request over a limit is refused at once
    max_queued: int = 1024
    request_timeout_s: float = 600.0
    #: seconds of upstream silence within a stream before it is ended with an error event
    stream_idle_s: float = 60.0
    upstream_api_key: str | None = None
    upstream_concurrency: int = 256
    caps: Caps = field(default_factory=Caps)

    @classmethod
    def keys_from(cls, env_var: str = "RSE_FAST_API_KEYS", path: str | None = None) -> list[str]:
        """API keys from a comma-separated environment variable and/or a file."""
        return keys_from(env_var, path)


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
            timeouts=Timeouts(total_s=config.request_timeout_s, stream_idle_s=config.stream_idle_s),
        )
        self.gate = Gate(
            config.api_keys,
            config.per_key_concurrency,
            config.max_concurrency,
            queue_s=config.queue_timeout_s,
            max_queued=config.max_queued,
            stats=self.metrics.queue,
        )
        self.passthrough = PassThrough(self.client, self.metrics)
        self.methods = MethodAnswers(self.client, self.metrics)

    def app(self) -> web.Application:
        """Each route is wrapped in ``_guarded`` instead of a middleware: aiohttp runs any
        middleware through two extra coroutine layers on every request. A last catch-all
        route answers unknown paths and methods with the same JSON errors."""
        app = web.Application(client_max_size=self.config.max_body_bytes)
        routes: dict[str, dict[str, Handler]] = {
            "/v1/chat/completions": {"POST": self.chat},
            "/v1/models": {"GET": self.models},
            "/health": {"GET": self.health},
            "/metrics": {"GET": self.prometheus},
        }
        for path, methods in routes.items():
            for verb, handler in methods.items():
                app.router.add_route(verb, path, self._guarded(handler))
        app.router.add_route("*", "/{tail:.*}", self._guarded(no_route(routes)))
        app.on_startup.append(self._warm)
        app.on_cleanup.append(self._close)
        return app

    async def _warm(self, app: web.Application) -> None:
        """Before serving, off the event loop: each family's warm-up (answer checking, RSE's
        dedup kernels), and the counters families declare shown at zero. Then freeze the heap
        built so far, so the garbage collector never walks it again: a full collection over
        numba's and numpy's objects stalls the loop for tens of milliseconds, which is what a
        proxy's p99 would show."""
        for family in METHODS.values():
            await asyncio.to_thread(family.warmup)
            if family.run_counter is not None:
                self.metrics.declare(family.run_counter)
        gc.freeze()

    async def _close(self, app: web.Application) -> None:
        await self.client.close()

    def _guarded(self, handler: Handler) -> Handler:
        """``handler`` after auth; every error it raises becomes an OpenAI-shaped JSON error."""

        async def guarded(request: web.Request) -> web.StreamResponse:
            try:
                if request.path != "/health":
                    request[BUCKET] = self.gate.bucket(
                        request.headers.get("Authorization", ""), request.remote
                    )
                return await handler(request)
            except ServiceError as exc:
                self.metrics.error(exc.kind)
                if exc.status == 400:
                    log.info("400 on %s: %s", request.path, exc.message)
                return error_response(exc)
            except web.HTTPRequestEntityTooLarge:
                self.metrics.error("request_too_large")
                limit = self.config.max_body_bytes
                return error_response(ServiceError(413, f"request body over {limit} bytes"))
            except web.HTTPException as exc:
                if exc.status >= 400:
                    kind = "not_found_error" if exc.status == 404 else "invalid_request_error"
                    return error_response(ServiceError(exc.status, exc.reason, kind))
                raise
            except (asyncio.CancelledError, ConnectionResetError):
                raise
            except Exception:
                log.exception("unexpected error serving %s", request.path)
                self.metrics.error("internal_error")
                return error_response(ServiceError(500, "internal error", "server_error"))

        return guarded

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "in_flight": self.metrics.in_flight})

    async def prometheus(self, request: web.Request) -> web.Response:
        return web.Response(text=self.metrics.render(), content_type="text/plain")

    async def models(self, request: web.Request) -> web.Response:
        try:
            names = await self.client.models()
        except LLMError as exc:
            raise failure(exc) from None
        ids = names + [f"{p}:{n}" for n in names for p in METHOD_PREFIXES]
        return web.json_response(
            {
                "object": "list",
                "data": [{"id": i, "object": "model", "owned_by": "rse-fast"} for i in ids],
            }
        )

    async def chat(self, request: web.Request) -> web.StreamResponse:
        t0 = time.perf_counter()
        bucket = request.get(BUCKET, "")
        await self.gate.enter(bucket)  # before the body is read: a refused one costs nothing
        self.metrics.in_flight += 1
        label, status = "passthrough", 500
        deadline = asyncio.get_running_loop().time() + self.config.request_timeout_s
        try:
            raw = await request.read()
            body = parse_body(raw)
            spec = parse_method_request(body, self.config.caps)
            label = spec.method if spec else "passthrough"
            resp: web.StreamResponse
            if spec is not None:
                resp = await self.methods.answer(request, body, spec, deadline)
            elif body.get("stream"):
                resp = await self.passthrough.stream(request, raw, deadline)
            else:
                resp = await self.passthrough.forward(raw, deadline)  # the hot path
            status = resp.status
            return resp
        except (LLMError, BudgetError, RoundFailedError, TimeoutError) as exc:
            err = timed_out() if isinstance(exc, TimeoutError) else failure(exc)
            status = err.status
            raise err from None
        except ServiceError as exc:
            status = exc.status
            raise
        finally:
            self.gate.leave(bucket)
            self.metrics.in_flight -= 1
            self.metrics.observe(label, status, time.perf_counter() - t0)


def no_route(routes: dict[str, dict[str, Handler]]) -> Handler:
    """The catch-all handler: 405 (with Allow) for a known path, else 404."""

    async def answer(request: web.Request) -> web.StreamResponse:
        allowed = routes.get(request.path)
        if allowed is None:
            raise ServiceError(404, f"no route {request.path}", "not_found_error")
        raise ServiceError(
            405, f"{request.method} is not allowed on {request.path}",
            headers={"Allow": ", ".join(allowed)},
        )  # fmt: skip

    return answer
