"""OpenAI-compatible RSE service (aiohttp.web): any OpenAI client uses RSE or another TTS method
by changing only its base URL. The model name picks the method (``rse:<model>``, ``sc:…``,
``bon:…``, ``beam:…``, ``particle:…``, ``refine:…``, ``fusion:…``); a plain name passes
straight through to the upstream servers.

**Pass-through forwards bytes.** The caller's body goes upstream as it came, and the upstream's
reply comes back as it was sent: the whole body, or each server-sent event as it arrives. No
field is dropped and no JSON is re-encoded on the hot path; token accounting keeps counters
only (memory stays flat however many requests pass).

**Errors are OpenAI-shaped.** Every failure is ``{"error": {"message", "type", "param",
"code"}}`` JSON with a fitting status, never text/plain, and never names an upstream URL or key.
A streamed request holds its headers until the upstream's first event, so an upstream that
fails early gives a proper HTTP error; after the headers, a failure is sent as one SSE error
event and the stream ends at once. An upstream 401/403 is a 502 (the caller is not at fault).

**Auth and limits.** Only ``Authorization: Bearer <key>`` (scheme case-insensitive); each key,
or without keys each client address, has its own concurrency bucket. Method requests are
bounded by the server's caps (``--max-rounds``, ``--max-k``, ``--max-tokens``,
``--max-budget-tokens``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hmac
import json
import logging
import os
import re
import signal
import socket
import sys
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from rse_fast.errors import (
    LLMBadRequestError,
    LLMConnectionError,
    LLMDeadlineError,
    LLMError,
    LLMRateLimitError,
    LLMResponseError,
    LLMTimeoutError,
    RoundFailedError,
    ServiceError,
)
from rse_fast.llm.client import LLMClient
from rse_fast.llm.routing import EndpointState
from rse_fast.llm.transport import stream_lines
from rse_fast.serve.metrics import Metrics
from rse_fast.serve.requests import Caps, MethodRequest, parse_method_request, run_method

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
API_KEY: Any = web.RequestKey("api_key", str) if hasattr(web, "RequestKey") else "api_key"
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
METHOD_NAMES = ("rse", "sc", "bon", "beam", "particle", "refine", "fusion")


@dataclass
class ServeConfig:
    upstreams: list[str]
    api_keys: list[str] = field(default_factory=list)  # empty: no auth
    max_body_bytes: int = 1 << 20
    per_key_concurrency: int = 16
    request_timeout_s: float = 600.0
    upstream_api_key: str | None = None
    upstream_concurrency: int = 256
    caps: Caps = field(default_factory=Caps)

    @classmethod
    def keys_from(cls, env_var: str = "RSE_FAST_API_KEYS", path: str | None = None) -> list[str]:
        """API keys from a comma-separated environment variable and/or a file (one per line)."""
        keys = [k.strip() for k in os.environ.get(env_var, "").split(",") if k.strip()]
        if path:
            with open(path) as fh:
                keys += [line.strip() for line in fh if line.strip() and not line.startswith("#")]
        return keys


def error_body(
    message: str, kind: str, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_response(exc: ServiceError) -> web.Response:
    body = error_body(exc.message, exc.kind, exc.code or str(exc.status), exc.param)
    return web.json_response(body, status=exc.status, headers=exc.headers)


def upstream_error(exc: LLMError) -> ServiceError:
    """An upstream failure as the service answers it: status, type and a message that names
    what went wrong but no upstream URL or key."""
    if isinstance(exc, LLMRateLimitError):
        headers = {"Retry-After": str(max(1, int(exc.retry_after or 1)))}
        return ServiceError(429, "upstream rate limited", "rate_limit_error", headers)
    if isinstance(exc, LLMTimeoutError):
        return ServiceError(504, "upstream timed out", "upstream_timeout", code="upstream_timeout")
    if isinstance(exc, LLMBadRequestError) and exc.status in (401, 403):
        return ServiceError(
            502, "the upstream refused the service's credentials", "upstream_error",
            code="upstream_auth",
        )  # fmt: skip
    if isinstance(exc, LLMBadRequestError) and exc.status is not None:
        detail = _upstream_message(exc.response_body)
        return ServiceError(
            exc.status, f"upstream rejected the request: {detail}", "invalid_request_error",
            code=str(exc.status), param=_upstream_param(exc.response_body),
        )  # fmt: skip
    if isinstance(exc, LLMConnectionError):
        return ServiceError(
            502, "upstream unreachable", "upstream_error", code="upstream_unreachable"
        )
    if isinstance(exc, LLMResponseError):
        return ServiceError(
            502, "upstream sent a malformed reply", "upstream_error", code="bad_upstream_reply"
        )
    status = f" (status {exc.status})" if exc.status else ""
    return ServiceError(502, f"upstream error{status}", "upstream_error", code="upstream_error")


def _upstream_error_object(body: str | None) -> dict[str, Any]:
    try:
        err = json.loads(body or "").get("error")
    except (ValueError, AttributeError):
        return {}
    return err if isinstance(err, dict) else {}


def _upstream_message(body: str | None) -> str:
    message = _upstream_error_object(body).get("message")
    return str(message) if message else (body or "").strip()[:300] or "no detail"


def _upstream_param(body: str | None) -> str | None:
    param = _upstream_error_object(body).get("param")
    return param if isinstance(param, str) else None


def sse_event(data: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(data)}\n\n".encode()


_TOTAL_TOKENS = re.compile(rb'"total_tokens"\s*:\s*(\d+)')


def _usage_tokens(data: bytes) -> int | None:
    """Total tokens of a completion or usage chunk (bytes), None when it carries no usage.
    Read from the bytes (the last ``total_tokens``: usage is the body's final field) so the
    pass-through never parses a reply it only forwards."""
    at = data.rfind(b'"usage"')
    if at < 0:
        return None
    found = _TOTAL_TOKENS.search(data, at)
    return int(found.group(1)) or None if found else None


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
        self._encoder_lock = asyncio.Lock()

    # -- app -------------------------------------------------------------------------------
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
        app.router.add_route("*", "/{tail:.*}", self._guarded(_no_route(routes)))
        app.on_startup.append(self._warm)
        app.on_cleanup.append(self._close)
        return app

    async def _warm(self, app: web.Application) -> None:
        """Before serving, off the event loop: compile (or load) the dedup kernels and load
        answer checking. Then freeze the heap built so far, so the garbage collector never
        walks it again: a full collection over numba's and numpy's objects stalls the loop
        for tens of milliseconds, which is what a proxy's p99 would show."""
        await asyncio.to_thread(_load_once)
        gc.freeze()

    async def _close(self, app: web.Application) -> None:
        await self.client.close()

    def _guarded(self, handler: Handler) -> Handler:
        """``handler`` after auth; every error it raises becomes an OpenAI-shaped JSON error."""

        async def guarded(request: web.Request) -> web.StreamResponse:
            try:
                self._authenticate(request)
                return await handler(request)
            except ServiceError as exc:
                self.metrics.error(exc.kind)
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

    def _authenticate(self, request: web.Request) -> None:
        if request.path == "/health":
            return
        if not self.config.api_keys:
            request[API_KEY] = f"addr:{request.remote}"  # one bucket per client address
            return
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        given = token.strip().encode("utf-8", "surrogateescape")
        ok = False
        for key in self.config.api_keys:  # constant time per key, no early exit
            ok |= hmac.compare_digest(given, key.encode("utf-8", "surrogateescape"))
        if scheme.lower() != "bearer" or not given or not ok:
            raise ServiceError(
                401, "invalid or missing API key (send Authorization: Bearer <key>)",
                "authentication_error", code="invalid_api_key",
            )  # fmt: skip
        request[API_KEY] = f"key:{hmac.new(b'rse', given, 'sha256').hexdigest()[:16]}"

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "in_flight": self.metrics.in_flight})

    async def prometheus(self, request: web.Request) -> web.Response:
        return web.Response(text=self.metrics.render(), content_type="text/plain")

    async def models(self, request: web.Request) -> web.Response:
        try:
            names = await self.client.models()
        except LLMError as exc:
            raise upstream_error(exc) from None
        ids = names + [f"{p}:{n}" for n in names for p in METHOD_NAMES]
        return web.json_response(
            {
                "object": "list",
                "data": [{"id": i, "object": "model", "owned_by": "rse-fast"} for i in ids],
            }
        )

    # -- chat ------------------------------------------------------------------------------
    async def chat(self, request: web.Request) -> web.StreamResponse:
        t0 = time.perf_counter()
        raw = await request.read()
        body = self._parse(raw)
        key = request.get(API_KEY, "")
        if self._per_key[key] >= self.config.per_key_concurrency:
            raise ServiceError(
                429, "too many concurrent requests for this API key", "rate_limit_error",
                {"Retry-After": "1"}, code="concurrency_limit",
            )  # fmt: skip
        self._per_key[key] += 1
        self.metrics.in_flight += 1
        label, status = "passthrough", 500
        resp: web.StreamResponse
        try:
            spec = parse_method_request(body, self.config.caps)
            label = spec.method if spec else "passthrough"
            if spec is None and not body.get("stream"):
                deadline = asyncio.get_running_loop().time() + self.config.request_timeout_s
                resp = await self._forward(raw, deadline)  # the hot path: no timer of its own
            else:
                work = (
                    self._stream_passthrough(request, raw)
                    if spec is None
                    else self._method(request, body, spec)
                )
                resp = await _within(work, self.config.request_timeout_s)
            status = resp.status
            return resp
        except asyncio.TimeoutError:
            status = 504
            raise _timed_out() from None
        except (LLMError, RoundFailedError) as exc:
            if isinstance(exc, LLMDeadlineError):
                status = 504
                raise _timed_out() from None
            cause = exc.cause if isinstance(exc, RoundFailedError) else exc
            err = (
                upstream_error(cause)
                if isinstance(cause, LLMError)
                else ServiceError(502, "every call of a round failed", "upstream_error")
            )
            status = err.status
            raise err from None
        except ServiceError as exc:
            status = exc.status
            raise
        finally:
            self._per_key[key] -= 1
            if self._per_key[key] <= 0:
                del self._per_key[key]
            self.metrics.in_flight -= 1
            self.metrics.observe(label, status, time.perf_counter() - t0)

    @staticmethod
    def _parse(raw: bytes) -> dict[str, Any]:
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
                400, "'messages' must be a non-empty list of {role, content} objects",
                param="messages",
            )  # fmt: skip
        if not isinstance(body.get("model"), str) or not body["model"]:
            raise ServiceError(400, "'model' must be a non-empty string", param="model")
        return body

    # -- pass-through: bytes in, bytes out -------------------------------------------------
    async def _forward(self, raw: bytes, deadline: float) -> web.Response:
        """A non-streamed pass-through: the caller's bytes up, the upstream's bytes back."""
        status, data = await self.client.transport.post_bytes(
            "/chat/completions", raw, _status_and_body, deadline=deadline
        )
        self.metrics.add_passthrough(_usage_tokens(data))
        return web.Response(body=data, status=status, content_type="application/json")

    async def _stream_passthrough(self, request: web.Request, raw: bytes) -> web.StreamResponse:
        async def first_event(
            state: EndpointState, resp: aiohttp.ClientResponse
        ) -> tuple[aiohttp.ClientResponse, bytes, str]:
            head = bytearray()
            async for line in stream_lines(resp, state.url):
                head += line
                if line.strip():
                    return resp, bytes(head), state.url
            raise LLMResponseError("upstream closed the stream before its first event")

        async with contextlib.AsyncExitStack() as keep:
            upstream, head, url = await self.client.transport.post_bytes(
                "/chat/completions", raw, first_event, keep=keep
            )
            resp = web.StreamResponse(headers=SSE_HEADERS)
            await resp.prepare(request)
            await resp.write(head)
            tail = b""  # the last bytes: where the usage chunk is, when the caller asked for it
            try:
                async for chunk in stream_lines(upstream, url, whole_chunks=True):
                    await resp.write(chunk)
                    tail = (tail + chunk)[-4096:]
            except LLMError as exc:
                err = upstream_error(exc)
                self.metrics.error("upstream_stream_broken")
                await resp.write(
                    sse_event(error_body(err.message, err.kind, "upstream_stream_broken"))
                )
            usage_lines = [x for x in tail.split(b"\n") if b'"usage"' in x]
            self.metrics.add_passthrough(_usage_tokens(usage_lines[-1]) if usage_lines else None)
            await resp.write_eof()
            return resp

    # -- methods ---------------------------------------------------------------------------
    async def _encoder_for(self, spec: MethodRequest) -> Any:
        if spec.method != "rse":
            return None
        async with self._encoder_lock:
            if self._encoder is None:
                from rse_fast.encoder import Encoder

                self._encoder = await asyncio.to_thread(Encoder)
        return self._encoder

    async def _method(
        self, request: web.Request, body: dict[str, Any], spec: MethodRequest
    ) -> web.StreamResponse:
        encoder = await self._encoder_for(spec)
        if not body.get("stream"):
            outcome = await run_method(self.client, spec, encoder, progress=None)
            self.metrics.add_tokens(outcome.tokens_by_role)
            return web.json_response(outcome.completion)
        return await self._stream_method(request, spec, encoder)

    async def _stream_method(
        self, request: web.Request, spec: MethodRequest, encoder: Any
    ) -> web.StreamResponse:
        """Progress events, then the answer, as OpenAI chunks. Headers wait for the first
        progress event (an early upstream failure is a plain HTTP error); a client that
        disconnects cancels the work behind it."""
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        work = asyncio.ensure_future(
            run_method(self.client, spec, encoder, progress=queue.put_nowait)
        )
        created = int(time.time())
        resp: web.StreamResponse | None = None
        try:
            async for item in _drain(queue, work):
                if resp is None:
                    resp = web.StreamResponse(headers=SSE_HEADERS)
                    await resp.prepare(request)
                await resp.write(sse_event(_chunk(spec.model, created, progress=item)))
            outcome = work.result()
        except (LLMError, RoundFailedError) as exc:
            if resp is None:
                raise
            cause = exc.cause if isinstance(exc, RoundFailedError) else exc
            err = (
                upstream_error(cause)
                if isinstance(cause, LLMError)
                else ServiceError(502, str(exc))
            )
            await resp.write(sse_event(error_body(err.message, err.kind, err.code)))
            await resp.write_eof()
            return resp
        except (ConnectionResetError, asyncio.CancelledError):
            work.cancel()
            raise
        finally:
            if not work.done():
                work.cancel()
        if resp is None:
            resp = web.StreamResponse(headers=SSE_HEADERS)
            await resp.prepare(request)
        self.metrics.add_tokens(outcome.tokens_by_role)
        choice = outcome.completion["choices"][0]
        message = choice["message"]
        chunks = [_chunk(spec.model, created, delta={"role": "assistant", "content": ""})]
        if message.get("content"):
            chunks.append(_chunk(spec.model, created, delta={"content": message["content"]}))
        if message.get("tool_calls"):
            calls = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
            chunks.append(_chunk(spec.model, created, delta={"tool_calls": calls}))
        chunks.append(_chunk(spec.model, created, finish=choice["finish_reason"]))
        if spec.include_usage:
            chunks.append(_chunk(spec.model, created, usage=outcome.completion["usage"]))
        for data in chunks:
            await resp.write(sse_event(data))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


def _no_route(routes: dict[str, dict[str, Handler]]) -> Handler:
    """The catch-all handler: 405 (with Allow) for a known path, else 404."""

    async def no_route(request: web.Request) -> web.StreamResponse:
        allowed = routes.get(request.path)
        if allowed is None:
            raise ServiceError(404, f"no route {request.path}", "not_found_error")
        raise ServiceError(
            405, f"{request.method} is not allowed on {request.path}",
            headers={"Allow": ", ".join(allowed)},
        )  # fmt: skip

    return no_route


def _load_once() -> None:
    from rse_fast import kernels
    from rse_fast.answers import answers_equivalent

    kernels.warmup()
    answers_equivalent("1", "1.0")


async def _status_and_body(state: EndpointState, resp: aiohttp.ClientResponse) -> tuple[int, bytes]:
    return resp.status, await resp.read()


def _timed_out() -> ServiceError:
    return ServiceError(504, "request timed out", "timeout", code="timeout")


async def _within(work: Awaitable[web.StreamResponse], seconds: float) -> web.StreamResponse:
    """``await work`` with a deadline; on 3.11+ without the extra task ``wait_for`` makes."""
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(seconds):
            return await work
    return await asyncio.wait_for(work, seconds)


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
    exc = work.exception()
    if exc is not None:
        raise exc


def _chunk(
    model: str,
    created: int,
    delta: dict[str, Any] | None = None,
    finish: str | None = None,
    progress: dict[str, Any] | None = None,
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": f"chatcmpl-rse-{created}",
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [] if usage is not None else [
            {"index": 0, "delta": delta or {}, "finish_reason": finish}
        ],
    }  # fmt: skip
    if progress is not None:
        data["rse_fast_progress"] = progress
    if usage is not None:
        data["usage"] = usage
    return data


def reuse_port_socket(host: str, port: int) -> socket.socket:
    """A listening socket with SO_REUSEPORT, so several worker processes share one port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


async def serve(
    config: ServeConfig,
    host: str = "127.0.0.1",
    port: int = 8000,
    shutdown_timeout_s: float = 30.0,
    *,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Run until cancelled (Ctrl-C); in-flight requests get ``shutdown_timeout_s`` to drain.
    The socket has SO_REUSEPORT, so ``rse-fast serve --workers N`` runs N of these on one
    port and the kernel spreads connections across them."""
    runner = web.AppRunner(
        Service(config).app(),
        handler_cancellation=True,
        access_log=None,
        shutdown_timeout=shutdown_timeout_s,
    )
    await runner.setup()
    site = web.SockSite(runner, reuse_port_socket(host, port))
    await site.start()
    url = f"http://{host}:{port}/v1"
    log.info("serving %s -> %s", url, ", ".join(config.upstreams))
    if on_ready is not None:
        on_ready(url)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def _die_with_parent() -> None:
    """Linux: SIGTERM this process when its parent dies, so no worker outlives the service."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _worker_main(config: ServeConfig, host: str, port: int) -> None:
    _die_with_parent()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM: shut down cleanly
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(config, host, port))


def serve_workers(
    config: ServeConfig,
    host: str,
    port: int,
    workers: int,
    on_ready: Callable[[str, int], None] | None = None,
) -> None:
    """``workers`` processes serving one port (SO_REUSEPORT); returns when they stop.
    ``on_ready(url, workers)`` is called once the port accepts connections."""
    if workers <= 1:
        single = (lambda url: on_ready(url, 1)) if on_ready is not None else None
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(serve(config, host, port, on_ready=single))
        return
    import multiprocessing

    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops the workers too
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_worker_main, args=(config, host, port)) for _ in range(workers)]
    for proc in procs:
        proc.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
                break
            time.sleep(0.1)
        if on_ready is not None:
            on_ready(f"http://{host}:{port}/v1", workers)
        for proc in procs:
            proc.join()
    except KeyboardInterrupt:
        pass
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        for proc in procs:
            proc.join(10)
