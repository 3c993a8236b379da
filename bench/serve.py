"""Service load test (loopback only, bounded): latency the service adds to pass-through requests.

    python bench/serve.py --quick   # 200 concurrent, < 60 s

The scripted upstream (fixed latency) and the service each run in their own process. The same
load (200 concurrent workers, a fixed number of requests each) goes once straight to the
upstream and once through the service, in the same run; added latency = service percentile −
direct percentile. Also: errors, and the service's peak RSS (VmHWM) and its growth.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from rse_fast.local.server import free_port

from common import write_result

BODY = {
    "model": "scripted",
    "messages": [{"role": "user", "content": "What is 6 * 7?"}],
    "max_tokens": 16,
}


def start(cmd: list[str], ready: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if ready not in line:
        proc.kill()
        raise RuntimeError(f"{cmd[:4]} did not start: {line!r}")
    return proc


def rss_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def load(url: str, concurrency: int, per_worker: int) -> tuple[list[float], int]:
    latencies: list[float] = []
    errors = 0
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            nonlocal errors
            for _ in range(per_worker):
                t0 = time.perf_counter()
                try:
                    async with session.post(url + "/chat/completions", json=BODY) as resp:
                        await resp.read()
                        ok = resp.status == 200
                except aiohttp.ClientError:
                    ok = False
                latencies.append(time.perf_counter() - t0)
                errors += not ok

        await asyncio.gather(*(worker() for _ in range(concurrency)))  # warm-up round
        latencies.clear()
        errors = 0
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, errors


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.array(xs) * 1e3, q))


async def run(quick: bool, latency: float, concurrency: int) -> dict[str, Any]:
    up_port, svc_port = free_port(), free_port()
    upstream = start(
        [
            sys.executable,
            "-m",
            "rse_fast.testing",
            "--port",
            str(up_port),
            "--latency",
            str(latency),
        ],
        "READY",
    )
    upstream_url = f"http://127.0.0.1:{up_port}/v1"
    service = start(
        [
            sys.executable,
            "-m",
            "rse_fast.cli",
            "serve",
            "--upstream",
            upstream_url,
            "--port",
            str(svc_port),
            "--per-key-concurrency",
            "100000",
        ],
        "rse-fast service",
    )
    service_url = f"http://127.0.0.1:{svc_port}/v1"
    per_worker = 3 if quick else 20
    try:
        rss_start = rss_mb(service.pid, "VmRSS")
        direct, direct_err = await load(upstream_url, concurrency, per_worker)
        through, through_err = await load(service_url, concurrency, per_worker)
        direct2, _ = await load(upstream_url, concurrency, per_worker)  # drift check
        peak = rss_mb(service.pid, "VmHWM")
    finally:
        for proc in (service, upstream):
            proc.terminate()
            proc.wait(10)
    direct_all = direct + direct2
    return {
        "mode": "quick" if quick else "full",
        "concurrency": concurrency,
        "upstream_latency_ms": latency * 1e3,
        "requests_per_phase": concurrency * per_worker,
        "p50_added_ms": pct(through, 50) - pct(direct_all, 50),
        "p99_added_ms": pct(through, 99) - pct(direct_all, 99),
        "direct_p50_ms": pct(direct_all, 50),
        "direct_p99_ms": pct(direct_all, 99),
        "service_p50_ms": pct(through, 50),
        "service_p99_ms": pct(through, 99),
        "direct_drift_p50_ms": pct(direct2, 50) - pct(direct, 50),
        "errors": through_err + direct_err,
        "peak_rss_mb": peak,
        "rss_at_start_mb": rss_start,
        "rss_growth_mb": peak - rss_start,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--latency",
        type=float,
        default=1.0,
        help="upstream latency in seconds (an LLM call takes seconds)",
    )
    parser.add_argument("--concurrency", type=int, default=200)
    args = parser.parse_args()
    t0 = time.perf_counter()
    payload = asyncio.run(run(args.quick, args.latency, args.concurrency))
    payload["wall_s"] = time.perf_counter() - t0
    path = write_result("serve", payload)
    for k in ("p50_added_ms", "p99_added_ms", "errors", "peak_rss_mb", "rss_growth_mb", "wall_s"):
        print(f"{k}: {payload[k]}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
