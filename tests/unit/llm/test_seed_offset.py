"""A client view with a seed offset moves every seed it sends (a helper metered on the run
keeps it), and leaves calls without a seed alone."""

from __future__ import annotations

from rse_fast.llm import LLMClient
from rse_fast.testing import ScriptedServer

MESSAGES = [{"role": "user", "content": "hi"}]


async def test_a_seed_offset_moves_every_seed_sent():
    async with ScriptedServer(default_reply="ok") as srv, LLMClient(srv.base_url, "m") as c:
        moved = c.with_options(seed_offset=2**31 - 1)
        await c.chat(MESSAGES, seed=5)
        await moved.chat(MESSAGES, seed=5)
        await moved.chat(MESSAGES)
        await c.with_options(seed_offset=0).metered_like(moved).chat(MESSAGES, seed=7)
    sent = [b.get("seed") for b in srv.requests]
    assert sent == [5, 4, None, 6]  # wrapped into the 31-bit range servers accept
