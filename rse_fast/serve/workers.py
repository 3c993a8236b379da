"""Running the service: one process, or several sharing one port (SO_REUSEPORT), each with
its share of the global concurrency cap; workers die with their parent."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from aiohttp import web

from rse_fast.errors import InsecureServiceError
from rse_fast.serve.auth import is_loopback

if TYPE_CHECKING:
    from rse_fast.serve.app import ServeConfig

log = logging.getLogger(__name__)


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
    """Run until cancelled (Ctrl-C); in-flight requests get ``shutdown_timeout_s`` to drain."""
    from rse_fast.serve.app import Service

    check_exposure(config, host)
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


def check_exposure(config: ServeConfig, host: str) -> None:
    """Refuse to serve a non-loopback address without API keys (an open relay that spends
    the operator's upstream key), unless the operator says so."""
    if config.api_keys or config.allow_no_auth or is_loopback(host):
        return
    raise InsecureServiceError(
        f"refusing to serve {host} without API keys: anyone who reaches it could use the "
        "upstreams; set $RSE_FAST_API_KEYS or --api-keys-file, bind 127.0.0.1, or pass "
        "--allow-no-auth"
    )


def die_with_parent() -> None:
    """Linux: SIGTERM this process when its parent dies, so no worker outlives the service."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def worker_main(config: ServeConfig, host: str, port: int) -> None:
    die_with_parent()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM: shut down cleanly
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(config, host, port))


def worker_share(config: ServeConfig, workers: int) -> ServeConfig:
    """Each worker's config: its share of the global concurrency cap (at least 1)."""
    return replace(config, max_concurrency=max(1, config.max_concurrency // max(1, workers)))


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
    share = worker_share(config, workers)
    procs = [ctx.Process(target=worker_main, args=(share, host, port)) for _ in range(workers)]
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
