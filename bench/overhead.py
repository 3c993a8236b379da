"""RSE orchestration overhead against the scripted server at a fixed latency.

    python bench/overhead.py --quick   # K=32, R=3, L=200 ms, < 60 s

The server runs in a child process (so its CPU is not ours) and answers every call after exactly
L. The critical path of server latencies is then 2·L per round (rollout, then its distillation),
so overhead = wall − R·2·L. The tail of a round is the time from the last distillation's return
to the bank being updated and the next prompt rendered; the part of it spent waiting for the
encoder is reported separately. A second run with latencies spread uniformly over [L/2, 3L/2]
shows how much of the encoder work overlaps calls in flight when replies do not all arrive at
once, as with real servers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from rse_fast.encoder import Encoder
from rse_fast.llm.client import LLMClient
from rse_fast.prompts import DISTILL_SYSTEM
from rse_fast.rse.config import RSEConfig
from rse_fast.rse.engine import RSE

from common import write_result

PROBLEM = "How many positive divisors does 360 have?"
TOPICS = [
    "prime factorisation",
    "divisor counting",
    "exponents",
    "the number 360",
    "multiplying counts",
    "checking small cases",
    "arithmetic slips",
    "final answers",
]


def reply(body: dict[str, Any], index: int) -> str:
    """Distinct experiences per rollout and round (so the encoder cache never helps), plus one
    statement every rollout repeats (so dedup has work to do)."""
    seed = int(body.get("seed") or 0)
    r, i = divmod(seed, 1000)
    if body["messages"][0]["content"] == DISTILL_SYSTEM:
        topic = TOPICS[(i + r) % len(TOPICS)]
        return json.dumps(
            {
                "positive": [
                    f"In round {r}, attempt {i} found a fact about {topic}: case {i * 37 + r}.",
                    "360 factors as 2^3 * 3^2 * 5, so it has (3+1)(2+1)(1+1) = 24 divisors.",
                ],
                "negative": [
                    f"Attempt {i} of round {r} miscounted {topic} when it skipped case {i}."
                ],
            }
        )
    return f"360 = 2^3 * 3^2 * 5, so the count is 4 * 3 * 2. \\boxed{{{24 if i % 4 else 23}}}"


def serve(latency: float, spread: bool) -> None:
    import random

    from rse_fast.testing import ScriptedServer

    async def main() -> None:
        lat = (lambda rng: rng.uniform(latency / 2, 1.5 * latency)) if spread else latency
        srv = ScriptedServer(default_reply=reply, latency=lat, seed=random.randrange(1 << 30))
        await srv.start()
        print(f"READY {srv.base_url}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


def start_server(latency: float, spread: bool) -> tuple[subprocess.Popen[str], str]:
    args = [sys.executable, __file__, "--serve", "--latency", str(latency)]
    proc = subprocess.Popen(
        args + (["--spread"] if spread else []), stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("READY "):
        proc.kill()
        raise RuntimeError(f"server did not start: {line!r}")
    return proc, line.split()[1]


async def critical_path(url: str) -> float:
    """Σ over rounds of the longest (rollout + its distillation) injected server latency."""
    import aiohttp

    debug = url.removesuffix("/v1") + "/debug/requests"
    async with aiohttp.ClientSession() as session, session.get(debug) as resp:
        rows = await resp.json()
    chains: dict[tuple[int, int], float] = {}
    for row in rows:
        if row["seed"] is None:  # the warm-up call
            continue
        key = divmod(int(row["seed"]), 1000)
        chains[key] = chains.get(key, 0.0) + row["delay_s"]
    per_round: dict[int, float] = {}
    for (r, _), total in chains.items():
        per_round[r] = max(per_round.get(r, 0.0), total)
    return sum(per_round.values())


async def idle_loop(url: str, k: int, rounds: int) -> float:
    """Baseline: the same call pattern (K chains of rollout → distillation, R rounds) from a bare
    aiohttp loop doing nothing else. Its wall time is the server latencies plus the server's
    own processing and loopback transport: everything RSE cannot be faster than."""
    import aiohttp

    from rse_fast.prompts import distill_messages, solve_messages

    solve_body = {"model": "m", "messages": solve_messages(PROBLEM), "max_tokens": 2048}
    distill_body = {"model": "m", "messages": distill_messages(PROBLEM, "x" * 400, 5, 40)}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def post(body: dict[str, Any]) -> None:
            async with session.post(url + "/chat/completions", json=body) as resp:
                await resp.read()

        async def chain(r: int, i: int) -> None:
            await post({**solve_body, "seed": 1000 * r + i})
            await post({**distill_body, "seed": 1000 * r + i})

        await post({**solve_body, "max_tokens": 1})
        t0 = time.perf_counter()
        for r in range(1, rounds + 1):
            await asyncio.gather(*(chain(r, i) for i in range(k)))
        return time.perf_counter() - t0


async def measure(
    url: str, encoder: Encoder, k: int, rounds: int, latency: float, spread: bool
) -> dict[str, Any]:
    cfg = RSEConfig(rounds=rounds, k=k)
    async with LLMClient(url, "scripted", max_concurrency=256) as client:
        rse = RSE(client, encoder, cfg)
        await client.chat([{"role": "user", "content": "warm up"}], max_tokens=1)
        t0 = time.perf_counter()
        result = await rse.solve(PROBLEM, gold="24")
        wall = time.perf_counter() - t0
    lat = [r.latency_s for r in client.ledger.records if r.task]
    if spread:  # critical path: per round, the longest rollout+distill chain
        by_task: dict[str, list[float]] = {}
        for rec in client.ledger.records:
            if rec.task:
                by_task.setdefault(rec.task, []).append(rec.latency_s)
        critical = sum(
            result.rounds[i].wall_s - result.rounds[i].tail_ms / 1e3 for i in range(rounds)
        )  # measured: round start → last return
    else:
        critical = rounds * 2 * latency
    idle = await idle_loop(url, k, rounds)
    tail = [r.tail_ms for r in result.rounds]
    enc = [r.tail_encoder_ms for r in result.rounds]
    overhead = wall - critical
    return {
        "k": k,
        "rounds": rounds,
        "latency_s": latency,
        "spread": spread,
        "wall_s": wall,
        "critical_path_s": critical,
        "overhead_fraction": overhead / wall,
        "overhead_fraction_excluding_encoder": max(0.0, overhead - sum(enc) / 1e3) / wall,
        "idle_loop_wall_s": idle,
        "overhead_fraction_vs_idle_loop": (wall - idle) / wall,
        "overhead_fraction_vs_idle_loop_excluding_encoder": max(0.0, wall - idle - sum(enc) / 1e3)
        / wall,
        "tail_ms": tail,
        "tail_encoder_ms": enc,
        "tail_ms_excluding_encoder": max(t - e for t, e in zip(tail, enc, strict=True)),
        "bank_sizes": result.bank_sizes,
        "calls": len(lat),
        "mean_call_latency_s": sum(lat) / len(lat),
    }


async def run(quick: bool) -> dict[str, Any]:
    encoder = Encoder()
    encoder.warmup()
    k, rounds, latency = 32, 3, 0.2
    out: dict[str, Any] = {"mode": "quick" if quick else "full"}
    for spread in (False, True):
        proc, url = start_server(latency, spread)
        try:
            encoder._cache.clear()
            res = await measure(url, encoder, k, rounds, latency, spread)
        finally:
            proc.terminate()
            proc.wait(5)
        out["spread" if spread else "fixed"] = res
        print(json.dumps({k2: v for k2, v in res.items() if k2 != "bank_sizes"}), flush=True)
    fixed = out["fixed"]
    out.update(
        overhead_fraction=fixed["overhead_fraction"],
        overhead_fraction_excluding_encoder=fixed["overhead_fraction_excluding_encoder"],
        tail_ms_excluding_encoder=fixed["tail_ms_excluding_encoder"],
        tail_encoder_ms=max(fixed["tail_encoder_ms"]),
        encoder_provider=encoder.provider,
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--latency", type=float, default=0.2, help=argparse.SUPPRESS)
    parser.add_argument("--spread", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.latency, args.spread)
        return
    t0 = time.perf_counter()
    payload = asyncio.run(run(args.quick))
    payload["wall_s"] = time.perf_counter() - t0
    path = write_result("overhead_quick" if args.quick else "overhead", payload)
    for key in (
        "overhead_fraction",
        "overhead_fraction_excluding_encoder",
        "tail_ms_excluding_encoder",
        "tail_encoder_ms",
        "wall_s",
    ):
        print(f"{key}: {payload[key]}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
