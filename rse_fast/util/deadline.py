"""``timeout_at(when)``: a block that raises TimeoutError at event-loop time ``when``, one timer
for the whole block (``asyncio.timeout_at`` on 3.11+, aiohttp's ``async_timeout`` before)."""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    from asyncio import timeout_at
else:  # aiohttp depends on async-timeout below 3.11
    from async_timeout import timeout_at

__all__ = ["timeout_at"]
