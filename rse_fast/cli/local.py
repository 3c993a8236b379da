"""``rse-fast local setup|serve``: the embedded llama.cpp server that ``solve`` and ``eval``
start when no server URL is configured."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from typing import Any

from rse_fast.cli.args import add_local_arguments


def add_parser(sub: Any) -> None:
    p = sub.add_parser("local", help="the embedded llama.cpp server")
    lsub = p.add_subparsers(dest="local_command", required=True)
    setup = lsub.add_parser(
        "setup", help="provide llama.cpp's server (prebuilt, or built) and a model (idempotent)"
    )
    add_local_arguments(setup)
    setup.add_argument(
        "--build",
        action="store_true",
        help="build llama-server from source instead of using the prebuilt wheel",
    )
    setup.add_argument("--model", dest="local_model", help="same as --local-model")
    serve = lsub.add_parser("serve", help="run the local server until Ctrl-C")
    add_local_arguments(serve)
    serve.add_argument("--model", dest="local_model", help="same as --local-model")
    serve.add_argument("--port", type=int)
    serve.add_argument("--parallel", type=int, default=4)


def run(args: argparse.Namespace) -> int:

    from rse_fast.local.models import fetch_model
    from rse_fast.local.server import LocalServer, serve_forever, setup, setup_server
    from rse_fast.registry import default_llm

    if args.local_command == "setup":
        t0 = time.perf_counter()
        if args.llama_server and args.gguf:
            print("nothing to set up: both --llama-server and --gguf were given")
        elif args.llama_server:
            print(f"model ready: {fetch_model(args.local_model or default_llm(), log=print)}")
        elif args.gguf:
            setup_server(args.build, log=print)
        else:
            setup(args.local_model, log=print, build=args.build)
        print(f"setup done in {time.perf_counter() - t0:.0f}s")
        return 0
    server = LocalServer(
        args.local_model,
        gguf=args.gguf,
        llama_server=args.llama_server,
        backend=args.local_backend,
        parallel=args.parallel,
        port=args.port,
    )
    with contextlib.suppress(KeyboardInterrupt):
        __import__("asyncio").run(serve_forever(server, on_ready=announce))
    return 0


def announce(server: Any) -> None:
    print(
        f"llama.cpp server ({server.backend}, {server.model_name}) at {server.base_url}; "
        "Ctrl-C stops it",
        file=sys.stderr,
        flush=True,
    )
