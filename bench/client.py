"""Client benchmark: rse_fast's LLMClient vs the official openai SDK on the same loopback server.

    python -m bench client --quick   # < 60 s

The scripted server runs in its own process with zero latency, so the numbers measure client
overhead: requests/s and client CPU µs per request at concurrency 1, 64 and 256, both clients in
the same run. A fault mix (5xx, 429, resets, truncated and malformed bodies, slow replies)
then checks that every call ends in a result or a typed error (``lost_calls`` = 0).
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench.common import module_command, start_ready, write_result
from rse_fast.errors import LLMError
from rse_fast.llm.client import LLMClient, Timeouts
from rse_fast.llm.retry import RetryPolicy
from rse_fast.testing import Fault, ScriptedServer, fault_mix

MESSAGES = [{"role": "user", "content": "What is 6 * 7? Put the answer in \\boxed{}."}]


def start_server() -> tuple[subprocess.Popen[str], str]:
    proc, line = start_ready(module_command("rse_fast.testing", "--port", "0"), "READY ")
    return proc, line.split()[1]


async def drive(
    call: Callable[[], Awaitable[Any]], concurrency: int, total: int
) -> dict[str, float]:
    """Run ``total`` calls with ``concurrency`` workers; wall time and process CPU time."""
    remaining = total

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await call()

    for _ in range(min(concurrency, 8)):  # warm connections and code paths
        await call()
    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return {"rps": total / wall, "cpu_us_per_request": cpu / total * 1e6, "wall_s": wall}


async def bench_ours(url: str, concurrency: int, total: int) -> dict[str, float]:
    async with LLMClient(url, "scripted", max_concurrency=1024) as client:
        return await drive(lambda: client.chat(MESSAGES, max_tokens=16), concurrency, total)


async def bench_openai(url: str, concurrency: int, total: int) -> dict[str, float]:
    import openai

    client = openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=0)
    try:
        return await drive(
            lambda: client.chat.completions.create(
                model="scripted",
                messages=MESSAGES,
                max_tokens=16,  # type: ignore[arg-type]
            ),
            concurrency,
            total,
        )
    finally:
        await client.close()


async def fault_run(calls: int) -> dict[str, Any]:
    """Every call against a faulty server must end in a result or a typed LLMError."""
    plan = fault_mix(
        {
            Fault("status", status=500): 0.08,
            Fault("status", status=503, retry_after=0.01): 0.04,
            Fault("status", status=429, retry_after=0.01): 0.05,
            Fault("status", status=400): 0.02,
            Fault("reset"): 0.04,
            Fault("truncate"): 0.04,
            Fault("malformed"): 0.04,
            Fault("slow", delay_s=1.0): 0.02,
            Fault("no_usage"): 0.03,
        },
        seed=1,
    )
    ok = typed = lost = 0
    async with ScriptedServer(faults=plan, latency=0.001) as srv:
        retry = RetryPolicy(max_attempts=3, base_delay_s=0.005, max_delay_s=0.02)
        timeouts = Timeouts(connect_s=2, total_s=0.5)
        async with LLMClient(srv.base_url, "m", retry=retry, timeouts=timeouts) as client:

            async def one() -> str:
                try:
                    await asyncio.wait_for(client.chat(MESSAGES), timeout=30)
                    return "ok"
                except LLMError:
                    return "typed"
                except BaseException:
                    return "lost"

            for outcome in await asyncio.gather(*(one() for _ in range(calls))):
                ok += outcome == "ok"
                typed += outcome == "typed"
                lost += outcome == "lost"
    return {"calls": calls, "results": ok, "typed_errors": typed, "lost_calls": lost}


async def run(quick: bool) -> dict[str, Any]:
    proc, url = start_server()
    try:
        levels = {1: 300, 64: 3000, 256: 3000} if quick else {1: 1000, 64: 10000, 256: 10000}
        rows = []
        for conc, total in levels.items():
            ours = await bench_ours(url, conc, total)
            sdk = await bench_openai(url, conc, total)
            rows.append(
                {
                    "concurrency": conc,
                    "rse_fast": ours,
                    "openai_sdk": sdk,
                    "speedup_rps": ours["rps"] / sdk["rps"],
                    "cpu_ratio": sdk["cpu_us_per_request"] / ours["cpu_us_per_request"],
                }
            )
            print(
                f"c={conc}: ours {ours['rps']:.0f} rps {ours['cpu_us_per_request']:.0f} µs/req"
                f" | openai {sdk['rps']:.0f} rps {sdk['cpu_us_per_request']:.0f} µs/req",
                flush=True,
            )
    finally:
        proc.terminate()
        proc.wait(5)
    faults = await fault_run(300 if quick else 2000)
    at64 = next(r for r in rows if r["concurrency"] == 64)
    return {
        "mode": "quick" if quick else "full",
        "speedup_vs_openai_sdk": at64["speedup_rps"],
        "cpu_ratio_vs_openai_sdk": at64["cpu_ratio"],
        "us_per_request": at64["rse_fast"]["cpu_us_per_request"],
        "lost_calls": faults["lost_calls"],
        "fault_mix": faults,
        "levels": rows,
        "note": "server in a separate process; both clients share the machine's other core",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    t0 = time.perf_counter()
    payload = asyncio.run(run(args.quick))
    payload["wall_s"] = time.perf_counter() - t0
    path = write_result("client_quick" if args.quick else "client", payload)
    for k in (
        "speedup_vs_openai_sdk",
        "cpu_ratio_vs_openai_sdk",
        "us_per_request",
        "lost_calls",
        "wall_s",
    ):
        print(f"{k}: {payload[k]}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
