"""``rse-fast serve``: the OpenAI-compatible service in front of upstream servers."""

from __future__ import annotations

import argparse
import os
from typing import Any

from rse_fast.cli.args import price_model


def add_parser(sub: Any) -> None:
    p = sub.add_parser("serve", help="OpenAI-compatible service in front of upstream servers")
    p.add_argument(
        "--upstream",
        action="append",
        required=True,
        metavar="URL",
        help="upstream OpenAI-compatible server (repeat for several)",
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1); a non-loopback address needs API keys "
        "or --allow-no-auth",
    )
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-keys-file", help="accepted keys, one per line (also $RSE_FAST_API_KEYS)")
    p.add_argument(
        "--allow-no-auth",
        action="store_true",
        help="serve a non-loopback address without API keys (anyone who reaches it can use it)",
    )
    p.add_argument("--upstream-api-key", help="key sent to the upstreams (default: none)")
    p.add_argument(
        "--upstream-api-key-env",
        metavar="NAME",
        help="read the upstream key from this environment variable (e.g. OPENAI_API_KEY)",
    )
    p.add_argument("--max-body-bytes", type=int, default=1 << 20)
    p.add_argument("--per-key-concurrency", type=int, default=16)
    p.add_argument(
        "--max-concurrency",
        type=int,
        default=256,
        help="requests in flight over all keys and addresses (workers split it)",
    )
    p.add_argument(
        "--queue-timeout",
        type=float,
        default=5.0,
        help="seconds a request over a concurrency limit waits for a slot before its 429 "
        "(0: refuse at once)",
    )
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    p.add_argument(
        "--stream-idle-timeout",
        type=float,
        default=60.0,
        help="seconds of upstream silence before a stream is ended with an error event",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes serving the port (SO_REUSEPORT; needs a fixed --port)",
    )
    caps = p.add_argument_group("caps on every method request")
    caps.add_argument("--max-rounds", type=int, default=16)
    caps.add_argument("--max-k", type=int, default=64)
    caps.add_argument("--max-tokens", type=int, default=32_768, help="per generation call")
    caps.add_argument(
        "--max-budget-tokens",
        type=int,
        default=1_000_000,
        help="per request: a request asking more is refused (a 400 naming 'budget')",
    )
    caps.add_argument(
        "--default-budget-tokens",
        type=int,
        default=8_000,
        help="the budget of a request that names none (default 8,000 tokens)",
    )
    caps.add_argument(
        "--price",
        type=price_model,
        default=None,
        metavar="input=…,cached=…,output=…",
        help="$ per million tokens: requests may then set a budget in dollars "
        '("budget_unit": "price"), capped at that price',
    )


def run(args: argparse.Namespace) -> int:
    from rse_fast.serve.app import ServeConfig
    from rse_fast.serve.requests import Caps
    from rse_fast.serve.workers import check_exposure, serve_workers

    upstream_key = args.upstream_api_key
    if args.upstream_api_key_env:
        upstream_key = os.environ.get(args.upstream_api_key_env)
        if not upstream_key:
            raise ValueError(f"--upstream-api-key-env: ${args.upstream_api_key_env} is not set")
    config = ServeConfig(
        upstreams=args.upstream,
        api_keys=ServeConfig.keys_from(path=args.api_keys_file),
        max_body_bytes=args.max_body_bytes,
        per_key_concurrency=args.per_key_concurrency,
        max_concurrency=args.max_concurrency,
        queue_timeout_s=args.queue_timeout,
        request_timeout_s=args.timeout,
        stream_idle_s=args.stream_idle_timeout,
        upstream_api_key=upstream_key,
        allow_no_auth=args.allow_no_auth,
        caps=Caps(
            args.max_rounds,
            args.max_k,
            args.max_tokens,
            args.max_budget_tokens,
            default_budget_tokens=min(args.default_budget_tokens, args.max_budget_tokens),
            price=args.price,
        ),
    )
    check_exposure(config, args.host)  # before any worker starts

    def ready(url: str, workers: int) -> None:
        plural = f" ({workers} workers)" if workers > 1 else ""
        print(f"rse-fast service on {url} -> {', '.join(config.upstreams)}{plural}", flush=True)
        if args.upstream_api_key_env:
            print(f"upstream key from ${args.upstream_api_key_env}", flush=True)
        if not config.api_keys:
            print("no API keys: any client that reaches this address can use it", flush=True)

    serve_workers(config, args.host, args.port, args.workers, ready)
    return 0
