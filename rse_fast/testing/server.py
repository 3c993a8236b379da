"""Scripted OpenAI-compatible server: a deterministic test fixture, never a product model.

It behaves like the real servers (vLLM, SGLang, llama.cpp) where a client can tell: a reply may
carry a thinking model's trace in a separate ``reasoning_content`` (or ``reasoning``) field,
tool calls (``content`` null, finish_reason ``tool_calls``) and a finish reason; streams start
with a role-only chunk, send reasoning, content and tool-call deltas at a configurable token
rate, end with the usage chunk only when ``stream_options.include_usage`` asks, then ``[DONE]``;
errors are ``{"error": {"message", "type", "param", "code"}}`` (400 for a non-integer seed,
401 without the configured key). Replies come from rules (regex over the prompt, or a
predicate) mapping to text, a :class:`Reply` or a callable, and stop at the request's
``max_tokens`` (finish_reason ``length``); usage counts words (plus ``template_tokens`` of
prompt a chat template adds, which the client cannot see); latency (the
"prefill" before the first byte) is fixed or drawn from a seeded distribution; faults are
injected per request (HTTP errors with Retry-After, slow replies, truncated bodies, malformed
JSON, JSON nested past a parser's stack, connection resets, a stream dropped midway, ignoring
``n``, omitting usage).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

from rse_fast.testing.script import (
    DEEP_NESTING,
    Fault,
    FaultPlan,
    Reply,
    ReplyFn,
    Rule,
    error_body,
    prompt_text,
    word_count,
)
from rse_fast.testing.stream import ReplyStream


@dataclass
class ScriptedServer:
    rules: Sequence[Rule] = ()
    default_reply: str | Reply | ReplyFn = "The answer is \\boxed{42}."
    latency: float | Callable[[random.Random], float] = 0.0
    # generation speed per sequence: streams send a token every 1/rate s, whole replies
    # arrive after tokens/rate s (on top of ``latency``, the prefill); None: instantly
    stream_tokens_per_s: float | None = None
    api_key: str | None = None  # when set, requests need "Authorization: Bearer <key>"
    known_models: Sequence[str] | None = None  # when set, other model names get a 404
    faults: Sequence[Fault | None] | FaultPlan = ()
    ignore_n: bool = False
    usage_first_choice_only: bool = False  # llama.cpp's quirk with n > 1
    close_after_stream: bool = False  # llama.cpp closes the connection after a stream
    #: prompt tokens the chat template adds to every request: the special tokens around each
    #: turn, and a default system turn (Qwen2.5's is ~25 tokens) where the request has none
    template_tokens: int = 0
    #: the tokenizer endpoints beside ``/v1``: llama.cpp's (``/apply-template`` renders the
    #: chat, ``/tokenize`` counts ``content`` and answers no tokens for anything else), vLLM's
    #: (``/tokenize`` counts ``messages`` or a ``prompt``), or none (a gateway, a hosted API)
    tokenizer_api: Literal["llama.cpp", "vllm"] | None = None
    tokenizer_delay_s: float = 0.0
    #: a prefix cache, as the servers report it: a prompt's longest shared prefix with any
    #: earlier prompt is "cached". ``vllm``: ``usage.prompt_tokens_details.cached_tokens`` in
    #: whole blocks of ``cache_block`` tokens; ``llama.cpp``: the same field, token exact, and
    #: ``timings`` (``cache_n``, ``prompt_n``, ``prompt_ms``, ``predicted_ms``) from the rates
    #: below, top-level in a reply and in a stream's usage chunk
    prefix_cache: Literal["vllm", "llama.cpp"] | None = None
    #: False: ``logprobs`` is accepted and ignored (a gateway or server without them)
    logprobs_supported: bool = True
    #: a server that refuses logprobs past a limit with a 400 (vLLM's ``--max-logprobs``; 0:
    #: none at all), its message naming them and its ``param`` null; None: no limit
    max_logprobs: int | None = None
    cache_block: int = 16
    prefill_ms_per_token: float = 11.0  # measured on qwen2.5-coder-0.5b, 2 cores
    decode_ms_per_token: float = 49.0
    model: str = "scripted"
    seed: int = 0
    host: str = "127.0.0.1"
    port: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)
    #: (path, body) of every request to a tokenizer endpoint, answered or not
    tokenizer_requests: list[tuple[str, Any]] = field(default_factory=list)
    delays: list[float] = field(default_factory=list)  # injected latency, per request
    #: the ``usage`` object of every reply sent (a stream's usage chunk included)
    usages: list[dict[str, Any]] = field(default_factory=list)
    held: list[float] = field(default_factory=list)  # seconds each request was in the handler
    #: tokens the server worked through for each chat request (its prompt and what it
    #: generated), whether or not the reply reached the caller: a whole reply is generated
    #: to its end even when the caller left (as a server that does not watch the connection
    #: does); a stream stops at the first write that finds the caller gone
    served: list[int] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._runner: web.AppRunner | None = None
        self._seen_prompts: list[list[str]] = []
        self._last_timings: dict[str, Any] = {}

    # -- lifecycle -------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    async def start(self) -> ScriptedServer:
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/debug/requests", self._debug_requests)
        app.router.add_post("/tokenize", self._tokenize)
        app.router.add_post("/apply-template", self._apply_template)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> ScriptedServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- replies ---------------------------------------------------------------------------
    def reply_for(self, body: dict[str, Any], index: int) -> Reply:
        prompt = prompt_text(body)
        chosen: str | Reply | ReplyFn = self.default_reply
        for rule in self.rules:
            if rule.matches(body, prompt):
                chosen = rule.reply
                break
        out = chosen if isinstance(chosen, (str, Reply)) else chosen(body, index)
        return Reply(content=out) if isinstance(out, str) else out

    @staticmethod
    def _invalid(body: Any) -> tuple[str, str] | None:
        """(message, param) of the first field a real server would reject, as vLLM does."""
        if not isinstance(body, dict):
            return "request body must be a JSON object", "body"
        seed, n = body.get("seed"), body.get("n")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            return "seed must be an integer", "seed"
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 128):
            return "n must be an integer between 1 and 128", "n"
        fmt = body.get("response_format")
        if fmt is not None and not (
            isinstance(fmt, dict) and fmt.get("type") in ("text", "json_object", "json_schema")
        ):
            return "response_format must be text, json_object or json_schema", "response_format"
        return None

    def _past_logprobs_limit(self, body: dict[str, Any]) -> tuple[str, None] | None:
        """(message, no param) when ``body`` asks for more logprobs than ``max_logprobs``."""
        if self.max_logprobs is None or not body.get("logprobs"):
            return None
        asked = int(body.get("top_logprobs") or 0)
        if self.max_logprobs > 0 and asked <= self.max_logprobs:
            return None
        return f"asked for {asked} top logprobs; this server allows {self.max_logprobs}", None

    def _fault(self, i: int, body: dict[str, Any]) -> Fault | None:
        if callable(self.faults):
            return self.faults(i, body)
        return self.faults[i] if i < len(self.faults) else None

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _debug_requests(self, request: web.Request) -> web.Response:
        """Seed, ``user``, injected latency and time in the handler of every request so far
        (benchmarks read it back: a proxy's overhead is a caller's latency less ``held_s``)."""
        rows = [
            {
                "seed": b.get("seed"),
                "user": b.get("user"),
                "system": (b.get("messages") or [{}])[0].get("content"),
                "delay_s": d,
                "held_s": h,
            }
            for b, d, h in zip(self.requests, self.delays, self.held, strict=False)
        ]
        return web.json_response(rows)

    def prompt_tokens(self, body: dict[str, Any]) -> int:
        """What a chat request's prompt counts: its words plus what the template adds."""
        return word_count(prompt_text(body)) + self.template_tokens

    def _cached(self, body: dict[str, Any], replies: Sequence[Reply] = ()) -> int:
        """Prompt tokens the prefix cache serves for ``body``, remembering it for later with
        each reply written after it (a server's cache keeps the tokens it generated too: a
        next turn that quotes the reply finds it cached)."""
        words = [
            w
            for m in body.get("messages") or []
            if isinstance(m, dict)
            for w in [f"<{m.get('role')}>", *str(m.get("content") or "").split()]
        ]
        best = 0
        for earlier in self._seen_prompts:
            k = 0
            for a, b in zip(earlier, words, strict=False):
                if a != b:
                    break
                k += 1
            best = max(best, k)
        self._seen_prompts.append(words)
        self._seen_prompts.extend([*words, "<assistant>", *r.content.split()] for r in replies)
        best = min(best, self.prompt_tokens(body) - 1)  # the last token is always evaluated
        if self.prefix_cache == "vllm":
            best -= best % self.cache_block
        return max(0, best)

    def _unauthorised(self, request: web.Request) -> bool:
        wanted = f"Bearer {self.api_key}"
        return self.api_key is not None and request.headers.get("Authorization") != wanted

    async def _tokenizer_body(self, request: web.Request) -> Any:
        if self._unauthorised(request):
            raise web.HTTPUnauthorized()
        body = await request.json()
        self.tokenizer_requests.append((request.path, body))
        if self.tokenizer_delay_s:
            await asyncio.sleep(self.tokenizer_delay_s)
        return body

    async def _tokenize(self, request: web.Request) -> web.Response:
        body = await self._tokenizer_body(request)
        if self.tokenizer_api is None:
            raise web.HTTPNotFound()
        if self.tokenizer_api == "llama.cpp":
            content = body.get("content")
            count = word_count(content) if isinstance(content, str) else 0
            return web.json_response({"tokens": list(range(count))})
        if isinstance(body.get("messages"), list):
            count = self.prompt_tokens(body)
        elif isinstance(body.get("prompt"), str):
            count = word_count(body["prompt"])
        else:
            return web.json_response(error_body(400, "prompt or messages required"), status=400)
        return web.json_response({"count": count, "max_model_len": 32768, "tokens": [0] * count})

    async def _apply_template(self, request: web.Request) -> web.Response:
        body = await self._tokenizer_body(request)
        if self.tokenizer_api != "llama.cpp":
            raise web.HTTPNotFound()
        rendered = " ".join(["<|turn|>"] * self.template_tokens + [prompt_text(body)])
        return web.json_response({"prompt": rendered})

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "test"}]}
        )

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        t0 = time.perf_counter()
        if self._unauthorised(request):
            return web.json_response(error_body(401, "invalid API key"), status=401)
        body = await request.json()
        problem = self._invalid(body) or self._past_logprobs_limit(body)
        if problem is not None:
            return web.json_response(error_body(400, *problem), status=400)
        if self.known_models is not None and body.get("model") not in self.known_models:
            message = f"The model `{body.get('model')}` does not exist."
            return web.json_response(error_body(404, message, "model"), status=404)
        i = len(self.requests)
        self.requests.append(body)
        self.held.append(0.0)
        self.served.append(0)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await self._answer(request, body, self._fault(i, body), i)
        finally:
            self.in_flight -= 1
            self.held[i] = time.perf_counter() - t0

    async def _answer(
        self, request: web.Request, body: dict[str, Any], fault: Fault | None, i: int
    ) -> web.StreamResponse:
        delay = self.latency(self._rng) if callable(self.latency) else self.latency
        if fault is not None and fault.kind == "slow":
            delay += fault.delay_s
        self.delays.append(delay)
        slot = len(self.delays) - 1
        if delay > 0:
            await asyncio.sleep(delay)
        if fault is not None and fault.kind == "status":
            headers = {}
            if fault.retry_after is not None:
                headers["Retry-After"] = f"{fault.retry_after:g}"
            message = fault.message or f"injected {fault.status}"
            return web.json_response(
                error_body(fault.status, message, fault.param), status=fault.status, headers=headers
            )
        if fault is not None and fault.kind == "reset":
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=200)
        if fault is not None and fault.kind == "deep_json":
            return await self._deep_json(request, bool(body.get("stream")))
        n = int(body.get("n") or 1)
        if self.ignore_n or (fault is not None and fault.kind == "ignore_n"):
            n = 1
        limit = body.get("max_tokens") or body.get("max_completion_tokens")
        limit = limit if isinstance(limit, int) and not isinstance(limit, bool) else None
        replies = [self.reply_for(body, k).cut(limit) for k in range(n)]
        if body.get("stream") and not (fault is not None and fault.kind == "json_for_stream"):
            if self.stream_tokens_per_s:  # what the stream's pacing will add, for benchmarks
                self.delays[slot] += replies[0].tokens / self.stream_tokens_per_s
            self.served[i] = self.prompt_tokens(body)  # then each piece as it is written
            return await ReplyStream(self, request, body, replies[0], fault, i).run()
        counts = [r.tokens for r in replies]
        self.served[i] = self.prompt_tokens(body) + sum(counts)
        top = max(1, int(body.get("top_logprobs") or 1))
        if self.stream_tokens_per_s:  # a whole reply arrives when its generation ends
            decode = max(counts) / self.stream_tokens_per_s
            self.delays[slot] += decode
            await asyncio.sleep(decode)
        payload: dict[str, Any] = {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "choices": [
                {
                    "index": k,
                    "message": r.message(k),
                    "finish_reason": r.finish,
                    **(
                        {"logprobs": r.logprobs(top)}
                        if body.get("logprobs") and self.logprobs_supported
                        else {}
                    ),
                }
                for k, r in enumerate(replies)
            ],
        }
        if fault is None or fault.kind != "no_usage":
            completion = counts[0] if self.usage_first_choice_only else sum(counts)
            payload["usage"] = self.usage_payload(body, completion, replies)
        raw = json.dumps(self.with_timings(payload)).encode()
        if fault is not None and fault.kind == "malformed":
            return web.Response(body=raw[: len(raw) // 2], content_type="application/json")
        if fault is not None and fault.kind == "truncate":
            resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
            resp.content_length = len(raw)
            await resp.prepare(request)
            await resp.write(raw[: len(raw) // 2])
            if request.transport is not None:
                request.transport.abort()
            return resp
        return web.Response(body=raw, content_type="application/json")

    @staticmethod
    async def _deep_json(request: web.Request, stream: bool) -> web.StreamResponse:
        deep = b'{"choices": ' + b"[" * DEEP_NESTING + b"]" * DEEP_NESTING + b"}"
        if not stream:
            return web.Response(body=deep, content_type="application/json")
        resp = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b"data: " + deep + b"\n\n" + b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    def usage_payload(
        self, body: dict[str, Any], completion: int, replies: Sequence[Reply]
    ) -> dict[str, Any]:
        prompt = self.prompt_tokens(body)
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        thinking = [word_count(r.reasoning) for r in replies if r.reasoning]
        if thinking:
            usage["completion_tokens_details"] = {"reasoning_tokens": sum(thinking)}
        if self.prefix_cache is not None:
            cached = self._cached(body, replies)
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
            self._last_timings = {
                "cache_n": cached,
                "prompt_n": prompt - cached,
                "prompt_ms": (prompt - cached) * self.prefill_ms_per_token,
                "predicted_n": completion,
                "predicted_ms": completion * self.decode_ms_per_token,
            }
        self.usages.append(usage)
        return usage

    def with_timings(self, payload: dict[str, Any]) -> dict[str, Any]:
        """llama.cpp sends ``timings`` beside ``usage``: top-level in the body or chunk."""
        if self.prefix_cache == "llama.cpp" and "usage" in payload:
            payload["timings"] = self._last_timings
        return payload


async def _serve_forever(port: int, latency: float, tokens_per_s: float | None) -> None:
    server = ScriptedServer(latency=latency, port=port, stream_tokens_per_s=tokens_per_s)
    await server.start()
    print(f"READY {server.base_url}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    """``python -m rse_fast.testing.server --port 0 --latency 0``: serve until killed."""
    import argparse

    parser = argparse.ArgumentParser(description="scripted OpenAI-compatible test server")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before the reply")
    parser.add_argument("--tokens-per-s", type=float, help="streaming rate (default: at once)")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve_forever(args.port, args.latency, args.tokens_per_s))


if __name__ == "__main__":
    main()
