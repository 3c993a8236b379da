"""The policy client of a command: the configured server, or the embedded llama-server."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any


def configured_base_url(args: argparse.Namespace) -> str | None:
    return args.base_url or os.environ.get("OPENAI_BASE_URL")


def api_key(args: argparse.Namespace) -> str | None:
    return args.api_key or os.environ.get("OPENAI_API_KEY")


async def connect(
    args: argparse.Namespace, stack: contextlib.AsyncExitStack, parallel: int, trace: Any = None
) -> Any:
    """A client for --base-url (or $OPENAI_BASE_URL), or for the embedded llama-server started
    here (and stopped with ``stack``) when no server is configured."""
    from rse_fast.llm.client import LLMClient

    base_url = configured_base_url(args)
    model = args.model or os.environ.get("OPENAI_MODEL") or "default"
    if not base_url:
        from rse_fast.local.server import LocalServer

        server = LocalServer(
            args.local_model,
            gguf=args.gguf,
            llama_server=args.llama_server,
            backend=args.local_backend,
            parallel=parallel,
        )
        if not args.quiet:
            print(
                f"starting local llama.cpp server ({server.backend}, {server.model_name})...",
                file=sys.stderr,
            )
        await stack.enter_async_context(server)
        base_url, model = server.base_url, server.model_name
    client = LLMClient(base_url, model, api_key=api_key(args), trace=trace)
    return await stack.enter_async_context(client)
