"""The service's ``sc:`` on a problem whose answer is settled at once: wall time with the
statistical stop against without it (what ``sc:`` does today: it spends its whole budget), in
one run, requests alternating.

    python -m bench stopping --quick       # < 60 s -> results/stopping_quick.json

The scripted server answers like a small model on a 2-core machine would at realistic speed:
0.2 s to the first token and 60 tokens/s, every sample the same answer. Target: with
``stop_epsilon`` the request takes <= 60% of the wall time without. The skeptic's baseline
runs beside it through the library on the same server: SC with the exact stop it already had
(``early_stop``: stop once no vote left can change the winner), against the Beta stop.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import aiohttp
from aiohttp import web

from bench.common import write_result
from rse_fast.llm import LLMClient
from rse_fast.methods import Problem, make_method
from rse_fast.serve import ServeConfig, Service
from rse_fast.testing import ScriptedServer

REPLY = "Add the units, then the tens: seven plus five is twelve, so the sum is \\boxed{12}."
BODY = {"messages": [{"role": "user", "content": "What is 7 + 5?"}], "k": 4, "budget": 4000,
        "max_tokens": 64}  # fmt: skip


async def timed(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> dict:
    t0 = time.perf_counter()
    async with session.post(url, json=body) as r:
        data = await r.json()
    if r.status != 200:
        raise SystemExit(f"the service answered {r.status}: {data}")
    return {"wall_s": time.perf_counter() - t0, "usage": data["usage"]}


async def library(client: LLMClient, option: dict[str, Any]) -> dict[str, Any]:
    """The same request through the library: sc in cap mode with ``option``."""
    method = make_method("sc", parallel=BODY["k"], max_tokens=BODY["max_tokens"],
                         temperature=0.6, budget_mode="cap", **option)  # fmt: skip
    problem = Problem("p", BODY["messages"][0]["content"])
    t0 = time.perf_counter()
    res = await method.run(problem, BODY["budget"], client)
    return {"wall_s": time.perf_counter() - t0, "tokens": res.tokens}


async def run(repeats: int) -> dict[str, Any]:
    upstream = ScriptedServer(default_reply=REPLY, latency=0.2, stream_tokens_per_s=60)
    async with upstream as up:
        service = Service(ServeConfig([up.base_url]))
        runner = web.AppRunner(service.app())
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1/chat/completions"
        out: dict[str, list[dict]] = {"today": [], "stop": [], "exact": [], "beta": []}
        try:
            async with aiohttp.ClientSession() as session:
                await timed(session, url, {**BODY, "model": "sc:m"})  # warm-up
                async with LLMClient(up.base_url, "m") as client:
                    for _ in range(repeats):
                        out["today"].append(await timed(session, url, {**BODY, "model": "sc:m"}))
                        stopping = {**BODY, "model": "sc:m", "stop_epsilon": 0.05}
                        out["stop"].append(await timed(session, url, stopping))
                        for arm, option in (("exact", {"early_stop": True}),
                                            ("beta", {"stop_epsilon": 0.05})):  # fmt: skip
                            out.setdefault(arm, []).append(await library(client, option))
        finally:
            await runner.cleanup()
    exact = statistics.median(x["wall_s"] for x in out["exact"])
    beta = statistics.median(x["wall_s"] for x in out["beta"])
    today = statistics.median(x["wall_s"] for x in out["today"])
    stop = statistics.median(x["wall_s"] for x in out["stop"])
    return {
        "repeats": repeats,
        "upstream": {"first_token_s": 0.2, "tokens_per_s": 60},
        "body": BODY,
        "today_wall_s": today,
        "stop_wall_s": stop,
        "wall_ratio": stop / today,
        "library_exact_stop_wall_s": exact,
        "library_beta_stop_wall_s": beta,
        "wall_ratio_vs_exact_stop": beta / exact,
        "exact_stop_tokens": statistics.median(x["tokens"] for x in out["exact"]),
        "today_tokens": statistics.median(x["usage"]["total_tokens"] for x in out["today"]),
        "stop_tokens": statistics.median(x["usage"]["total_tokens"] for x in out["stop"]),
        "stop_budget_unspent": statistics.median(x["usage"]["budget_unspent"] for x in out["stop"]),
        "samples": out,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    t0 = time.perf_counter()
    payload = asyncio.run(run(3 if args.quick else 10))
    payload["wall_s"] = time.perf_counter() - t0
    path = write_result("stopping_quick" if args.quick else "stopping", payload)
    for k in ("today_wall_s", "stop_wall_s", "wall_ratio", "today_tokens", "stop_tokens",
              "wall_ratio_vs_exact_stop", "exact_stop_tokens"):  # fmt: skip
        print(f"{k}: {payload[k]}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
