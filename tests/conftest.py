from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

from rse_fast.testing import ScriptedServer


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
