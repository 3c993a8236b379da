from __future__ import annotations

import os

# The GPU kernel's tests run in Numba's CUDA simulator on every machine (read when numba is
# first imported, so before anything below imports it); NUMBA_ENABLE_CUDASIM=0 runs them on
# a real GPU instead.
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

from rse_fast.testing import ScriptedServer

# The kernel's per-CPU tile plan is measured once per machine (seconds, per dimension): the
# suite uses the default plan, and test_kernel_tuning tests the measurement and every plan.
os.environ.setdefault("RSE_FAST_KERNEL_TUNE", "0")


@contextlib.contextmanager
def threaded_server(**kwargs) -> Iterator[ScriptedServer]:
    """A ScriptedServer on its own event loop thread, for testing sync code paths."""
    loop = asyncio.new_event_loop()
    server = ScriptedServer(**kwargs)
    loop.run_until_complete(server.start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


@contextlib.asynccontextmanager
async def running_service(upstream: ScriptedServer, **cfg) -> AsyncIterator[tuple[Any, str]]:
    """The service in front of ``upstream`` on a free loopback port: (service, base URL
    without ``/v1``)."""
    from rse_fast.serve import ServeConfig, Service

    svc = Service(ServeConfig([upstream.base_url], **cfg))
    async with serving(svc.app(), handler_cancellation=True) as base:
        yield svc, base


@contextlib.asynccontextmanager
async def serving(app: Any, **runner_options: Any) -> AsyncIterator[str]:
    """An aiohttp application on a free loopback port: its base URL (no path)."""
    import aiohttp.web

    runner = aiohttp.web.AppRunner(app, **runner_options)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


def pytest_collection_modifyitems(config, items) -> None:
    """Every test under ``tests/integration`` talks to something real outside Python (the
    llama-server, bubblewrap, Chromium): marked ``integration``, so ``-m "not integration"``
    leaves them out while a model run owns the cores."""
    import pytest

    for item in items:
        if "integration" in item.path.parts:
            item.add_marker(pytest.mark.integration)
