"""RSE orchestration overhead against the scripted server, on two workloads.

    python -m bench overhead --quick   # K=32, R=3, both workloads, < 60 s

*stress*: every call answers after exactly L = 200 ms with its whole reply, so all K
distillations of a round return together and nothing can hide the work that follows them.
*realistic*: a prefill delay drawn from [100, 300] ms, then the reply generated at ~60 tokens/s
per sequence with lengths varied by ±50%, as a real server serves K sequences at once;
distillation replies stream and each statement is embedded as its item closes (the default).
*realistic_whole_distill*: the same with each distillation asked in one plain call.

The server runs in a child process (its CPU is not ours) and records the latency it injected in
every call. The critical path is read back from those records: per round, the longest
rollout + distillation chain (``critical_path``); overhead = wall − Σ rounds of it. The tail of
a round is the time from the last distillation's return to the bank being updated and the next
prompt rendered; the part of it spent waiting for the encoder is reported separately.
On *stress*, ``overhead_fraction_floor`` is the least overhead this machine allows: the bare
loop's, plus the float32 floor of embedding the round's distinct statements (nothing can
overlap it there), their weight-GEMM work at the sgemm rate measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from bench.common import module_command, start_ready, write_result
from rse_fast.encoder import Encoder
from rse_fast.llm.client import LLMClient
from rse_fast.prompts import is_distillation
from rse_fast.rse.config import RSEConfig
from rse_fast.rse.engine import RSE

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
    if is_distillation(body["messages"]):
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
    # lengths vary by ±50% around ~120 tokens (words), so generation times spread
    words = 60 + (i * 7919 + r * 104729) % 120
    filler = " ".join(["step"] * words)
    return (
        f"{filler} 360 = 2^3 * 3^2 * 5, so the count is 4 * 3 * 2. \\boxed{{{24 if i % 4 else 23}}}"
    )


WORKLOADS: dict[str, dict[str, Any]] = {
    "stress": {"prefill_s": (0.2, 0.2), "tokens_per_s": None, "stream_distill": True},
    "realistic": {"prefill_s": (0.1, 0.3), "tokens_per_s": 60.0, "stream_distill": True},
    # the same, with distillation asked in one plain call (embedding starts at its return)
    "realistic_whole_distill": {
        "prefill_s": (0.1, 0.3),
        "tokens_per_s": 60.0,
        "stream_distill": False,
    },
}


def serve(workload: str) -> None:
    import random

    from rse_fast.testing import ScriptedServer

    spec = WORKLOADS[workload]
    lo, hi = spec["prefill_s"]

    async def main() -> None:
        lat = (lambda rng: rng.uniform(lo, hi)) if hi > lo else lo
        srv = ScriptedServer(
            default_reply=reply,
            latency=lat,
            stream_tokens_per_s=spec["tokens_per_s"],
            seed=random.randrange(1 << 30),
        )
        await srv.start()
        print(f"READY {srv.base_url}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


def start_server(workload: str) -> tuple[subprocess.Popen[str], str]:
    proc, line = start_ready(module_command("bench.overhead", "--serve", workload), "READY ")
    return proc, line.split()[1]


async def critical_path(url: str, k: int) -> float:
    """Σ over rounds of the longest (rollout + its distillation) injected server latency.
    A rollout and its distillation share a seed; rollout i of round r has seed k(r−1) + i
    (seeds run over the problem's samples, as self-consistency's do)."""
    import aiohttp

    debug = url.removesuffix("/v1") + "/debug/requests"
    async with aiohttp.ClientSession() as session, session.get(debug) as resp:
        rows = await resp.json()
    chains: dict[tuple[int, int], float] = {}
    for row in rows:
        if row["seed"] is None:  # the warm-up call
            continue
        key = divmod(int(row["seed"]), k)
        chains[key] = chains.get(key, 0.0) + row["delay_s"]
    per_round: dict[int, float] = {}
    for (r, _), total in chains.items():
        per_round[r] = max(per_round.get(r, 0.0), total)
    return sum(per_round.values())


async def idle_loop(url: str, k: int, rounds: int, stream_distill: bool) -> float:
    """Baseline: the same call pattern (K chains of rollout → distillation, R rounds; the
    distillation streamed when RSE streams it) from a bare aiohttp loop doing nothing else.
    Its wall time is the server latencies plus the server's own processing and loopback
    transport: everything RSE cannot be faster than."""
    import aiohttp

    from rse_fast.prompts import distill_messages, solve_messages

    solve_body = {"model": "m", "messages": solve_messages(PROBLEM), "max_tokens": 2048}
    distill_body = {"model": "m", "messages": distill_messages(PROBLEM, "x" * 400, 5, 40)}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def post(body: dict[str, Any]) -> None:
            async with session.post(url + "/chat/completions", json=body) as resp:
                if body.get("stream"):
                    async for _ in resp.content:  # every event, as a streaming client reads
                        pass
                else:
                    await resp.read()

        async def chain(r: int, i: int) -> None:
            await post({**solve_body, "seed": 1000 * r + i})
            await post({**distill_body, "seed": 1000 * r + i, "stream": stream_distill})

        await post({**solve_body, "max_tokens": 1})
        t0 = time.perf_counter()
        for r in range(1, rounds + 1):
            await asyncio.gather(*(chain(r, i) for i in range(k)))
        return time.perf_counter() - t0


class CountingEncoder(Encoder):
    """The encoder, counting the tokens of each distinct text it is asked to embed (repeats
    come from its cache), so the benchmark knows the least GEMM work a round needs."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()
        self.tokens = 0

    def clear_cache(self) -> None:
        super().clear_cache()
        self.seen.clear()

    async def aencode(self, texts: Sequence[str]) -> np.ndarray:
        new = [t for t in dict.fromkeys(texts) if t not in self.seen]
        self.seen.update(new)
        self.tokens += self.count_tokens(new)
        return await super().aencode(texts)


def encoder_floor_s(tokens: int, sgemm_gflops: float) -> float:
    """The least time any float32 encoder needs for ``tokens`` on this CPU: the weight GEMMs'
    work at the BLAS sgemm rate measured in this run (everything else taken as free)."""
    from bench.encoder import gemm_flops_per_token

    return tokens * gemm_flops_per_token() / (sgemm_gflops * 1e9)


async def measure(
    url: str, encoder: CountingEncoder, k: int, rounds: int, workload: str, sgemm: float
) -> dict[str, Any]:
    cfg = RSEConfig(rounds=rounds, k=k, stream_distill=WORKLOADS[workload]["stream_distill"])
    async with LLMClient(url, "scripted", max_concurrency=256) as client:
        rse = RSE(client, encoder, cfg)
        await client.chat([{"role": "user", "content": "warm up"}], max_tokens=1)
        passes_before, tokens_before = encoder.encoder_passes, encoder.tokens
        t0 = time.perf_counter()
        result = await rse.solve(PROBLEM, gold="24")
        wall = time.perf_counter() - t0
    critical = await critical_path(url, k)
    idle = await idle_loop(url, k, rounds, cfg.stream_distill)
    tail = [r.tail_ms for r in result.rounds]
    enc = [r.tail_encoder_ms for r in result.rounds]
    overhead = wall - critical
    lat = [r.latency_s for r in client.ledger.records if r.task]
    tokens = encoder.tokens - tokens_before
    encode_floor = encoder_floor_s(tokens, sgemm)
    # stress only (fixed latency: the bare loop meets the same critical path; random prefills
    # give it another): the least overhead this machine allows, the bare loop's (server and
    # transport on the same cores) plus the encoder's float32 floor, which nothing overlaps
    floor_overhead = (
        max(0.0, idle - critical) + encode_floor
        if WORKLOADS[workload]["tokens_per_s"] is None
        else None
    )
    return {
        "workload": workload,
        **WORKLOADS[workload],
        "k": k,
        "rounds": rounds,
        "wall_s": wall,
        "critical_path_s": critical,
        "critical_path_source": "latencies injected by the server, read back per call",
        "overhead_fraction": overhead / wall,
        "overhead_fraction_excluding_encoder": max(0.0, overhead - sum(enc) / 1e3) / wall,
        "idle_loop_wall_s": idle,
        "overhead_fraction_vs_idle_loop": (wall - idle) / wall,
        "tail_ms": tail,
        "tail_encoder_ms": enc,
        "tail_ms_excluding_encoder": max(t - e for t, e in zip(tail, enc, strict=True)),
        "encoder_passes": encoder.encoder_passes - passes_before,
        "encoded_tokens": tokens,
        "encoder_floor_ms_per_round": encode_floor / rounds * 1e3,
        "overhead_fraction_floor": (
            floor_overhead / (critical + floor_overhead) if floor_overhead is not None else None
        ),
        "bank_sizes": result.bank_sizes,
        "calls": len(lat),
        "mean_call_latency_s": sum(lat) / len(lat),
    }


async def run(quick: bool) -> dict[str, Any]:
    from bench.dedup import sgemm_gflops

    encoder = CountingEncoder()
    encoder.warmup()
    sgemm = max(sgemm_gflops() for _ in range(3))
    k, rounds = 32, 3
    out: dict[str, Any] = {"mode": "quick" if quick else "full"}
    for workload in WORKLOADS:
        proc, url = start_server(workload)
        try:
            encoder.clear_cache()
            res = await measure(url, encoder, k, rounds, workload, sgemm)
        finally:
            proc.terminate()
            proc.wait(5)
        out[workload] = res
        print(json.dumps({k2: v for k2, v in res.items() if k2 != "bank_sizes"}), flush=True)
    out["encoder_provider"] = encoder.provider
    out["sgemm_gflops"] = sgemm
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--serve", choices=sorted(WORKLOADS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    t0 = time.perf_counter()
    payload = asyncio.run(run(args.quick))
    payload["wall_s"] = time.perf_counter() - t0
    path = write_result("overhead_quick" if args.quick else "overhead", payload)
    for workload in WORKLOADS:
        res = payload[workload]
        print(
            f"{workload}: overhead_fraction {res['overhead_fraction']:.3f}, "
            f"tail_ms_excluding_encoder {res['tail_ms_excluding_encoder']:.1f}, "
            f"encoder in tails {max(res['tail_encoder_ms']):.0f} ms"
            + (
                f", least overhead_fraction here {res['overhead_fraction_floor']:.3f}"
                if res["overhead_fraction_floor"] is not None
                else ""
            )
        )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
