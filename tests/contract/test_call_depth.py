"""How deep a request goes: from the service's handler to a rollout's budget reservation, the
logical await chain (the handler task's coroutines, then the rollout task's frames) stays
short. The chain is read at the reservation by walking each task's ``cr_await`` links."""

from __future__ import annotations

import asyncio
import traceback

import aiohttp
from conftest import running_service

from rse_fast.llm import booking
from rse_fast.testing import ScriptedServer

from fakes.scripted_model import PROBLEM, reply

#: issue 60's target for one problem through one RSE round
MOST_FRAMES = 25


def await_chain(task: asyncio.Task) -> list[str]:
    """The project's coroutine frames a suspended task is awaiting through, outermost first."""
    names, coro = [], task.get_coro()
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None)
        if frame is not None and "/rse_fast/" in frame.f_code.co_filename:
            where = frame.f_code.co_filename.split("/rse_fast/")[1]
            names.append(f"{where}:{frame.f_code.co_name}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None)
    return names


async def test_a_rollout_reserves_its_budget_within_a_short_chain_from_the_handler(monkeypatch):
    seen: list[list[str]] = []
    reserve = booking.CallBooking.reserve

    def spy(self, body, n):
        if not seen:
            handler = next(c for t in asyncio.all_tasks() if (c := await_chain(t))
                           and c[0].startswith("serve/"))  # fmt: skip
            here = [
                f"{f.filename.split('/rse_fast/')[1]}:{f.name}"
                for f in traceback.extract_stack()
                if "/rse_fast/" in f.filename
            ]
            seen.append([*handler, *here, "llm/booking.py:reserve"])
        return reserve(self, body, n)

    monkeypatch.setattr(booking.CallBooking, "reserve", spy)
    async with ScriptedServer(default_reply=reply) as up, running_service(up) as (_, url):
        body = {"model": "rse:scripted", "messages": [{"role": "user", "content": PROBLEM}],
                "rounds": 1, "k": 1, "budget": 4000}  # fmt: skip
        async with aiohttp.ClientSession() as s:
            async with s.post(url + "/v1/chat/completions", json=body) as resp:
                assert resp.status == 200
    chain = seen[0]
    assert chain[0].startswith("serve/app.py") and "rse/round.py:_rollout_and_distill" in chain
    assert len(chain) <= MOST_FRAMES, " > ".join(chain)
