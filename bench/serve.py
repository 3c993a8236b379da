"""Service load test (loopback only, bounded): latency the service adds to pass-through requests,
against the floor a minimal proxy sets, in the same run.

    python -m bench serve --quick            # 200 concurrent, 1 s upstream, < 60 s
    python -m bench serve --soak             # also 20,000 requests: RSS must stay flat
    python -m bench serve --workers 2        # the service with two processes on one port

The scripted upstream (fixed latency), our service and the *floor* (a minimal raw-bytes aiohttp
proxy written here: read the body, POST it upstream, return the bytes, nothing else) each run in
their own process; the proxies get cores of their own, the load generator and upstream the
first core (``--no-pin`` to share).

The same load (``--concurrency`` workers, a fixed number of requests each, their starts spread
over one upstream latency so arrivals are not in lockstep) goes straight to the upstream,
through our service and through the floor, in turns, ``--rounds`` times. A request's
*overhead* is its latency less its time in the upstream's handler (read back from the upstream
by the request's ``user`` tag), so the upstream's own timer jitter is not counted; each path's
percentile is the median over its phases. Added = overhead percentile through a proxy − the
direct path's. ``p99_added_vs_floor`` (ours ÷ the floor's added p99) is the median of a
two-level bootstrap (rounds, then requests) and always comes with its 5-95% interval; the
target is judged on that median. Every request's overhead and latency is kept in
``results/serve_samples.json``; ``--from-samples`` recomputes every figure from it.

Streamed: time to the first content byte, direct vs through the service, with the upstream
streaming at 60 tokens/s after its latency. Soak: ``--soak-requests`` pass-through requests at
the same concurrency; the service's RSS after a warm-up tenth and at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from bench.common import RESULTS, module_command, start_ready, write_result
from rse_fast.local.server import free_port

BODY = {
    "model": "scripted",
    "messages": [{"role": "user", "content": "What is 6 * 7?"}],
    "max_tokens": 16,
}
STREAM_BODY = {**BODY, "stream": True}
#: every request's overhead, latency and time to first token, beside serve.json
SAMPLES = RESULTS / "serve_samples.json"
JSON_HEADERS = {"Content-Type": "application/json"}


# -- the floor: the least a proxy can do -------------------------------------------------------
def floor_proxy(port: int, upstream: str) -> None:
    from aiohttp import web

    async def main() -> None:
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

        async def chat(request: web.Request) -> web.StreamResponse:
            data = await request.read()
            headers = {"Content-Type": "application/json"}
            async with session.post(
                upstream + "/chat/completions", data=data, headers=headers
            ) as r:
                if r.content_type != "text/event-stream":
                    return web.Response(body=await r.read(), status=r.status,
                                        content_type="application/json")  # fmt: skip
                resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
                await resp.prepare(request)
                async for chunk in r.content.iter_any():
                    await resp.write(chunk)
                await resp.write_eof()
                return resp

        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        print("FLOOR READY", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


# -- processes and load ------------------------------------------------------------------------
def start(cmd: list[str], ready: str, cores: set[int] | None = None) -> subprocess.Popen[str]:
    return start_ready(cmd, ready, cores)[0]


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def service_rss(proc: subprocess.Popen[str]) -> float:
    """RSS of the service: its process and, with --workers, the worker processes."""
    pids = [proc.pid]
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    if children.exists():
        pids += [int(p) for p in children.read_text().split()]
    return sum(rss_mb(p) for p in pids)


async def load(
    url: str, concurrency: int, per_worker: int, body: dict[str, Any], spread_s: float, tag: str
) -> tuple[list[tuple[str, float]], int]:
    """(``user`` tag, latency) of each request (streamed: time to the first content byte), and
    the errors. Each request carries its own ``user`` tag, so its time in the upstream's
    handler can be read back from the upstream (``held``) and taken off its latency.

    Worker i starts i/concurrency of ``spread_s`` (the upstream latency) after the first, so
    the requests in flight stay spread over the cycle as a real service's arrivals are. All
    starting together would keep them in lockstep: every request would then wait behind the
    burst of 200 replies landing in the same instant, and the percentiles would measure the
    load generator's own serial work on that burst rather than the path under test."""
    latencies: list[tuple[str, float]] = []
    errors = 0
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker(i: int, n: int, prefix: str) -> None:
            nonlocal errors
            await asyncio.sleep(spread_s * i / concurrency)
            for j in range(n):
                user = f"{prefix}-{i}-{j}"
                data = json.dumps({**body, "user": user}).encode()
                t0 = time.perf_counter()
                first = None
                try:
                    async with session.post(
                        url + "/chat/completions", data=data, headers=JSON_HEADERS
                    ) as resp:
                        if body.get("stream"):
                            async for line in resp.content:
                                if first is None and b'"content": "' in line and b'""' not in line:
                                    first = time.perf_counter()
                        else:
                            await resp.read()
                        ok = resp.status == 200
                except aiohttp.ClientError:
                    ok = False
                latencies.append((user, (first or time.perf_counter()) - t0))
                errors += not ok

        await asyncio.gather(*(worker(i, 1, tag + "w") for i in range(concurrency)))  # warm-up
        latencies.clear()
        errors = 0
        await asyncio.gather(*(worker(i, per_worker, tag) for i in range(concurrency)))
    return latencies, errors


async def held_in_upstream(upstream_url: str) -> dict[str, float]:
    """Seconds each tagged request spent in the upstream's handler (its LLM time)."""
    debug = upstream_url.removesuffix("/v1") + "/debug/requests"
    async with aiohttp.ClientSession() as session, session.get(debug) as r:
        rows = await r.json()
    return {row["user"]: row["held_s"] for row in rows if row.get("user")}


def added_ratio(ours: float, floor: float) -> float:
    """Ours ÷ the floor, p99 added ms, with nothing left out: an added time at or below 0 is
    no added time, so a floor that added none against ours that did is +∞, and both none 1."""
    ours, floor = max(ours, 0.0), max(floor, 0.0)
    if floor > 0:
        return ours / floor
    return math.inf if ours > 0 else 1.0


def bootstrap_added(
    overheads: dict[str, list[list[float]]], reps: int = 300, seed: int = 0
) -> dict[str, list[float]]:
    """Draws of ours − the floor and of ours ÷ the floor (p99 added ms) under a two-level
    bootstrap: rounds drawn with replacement (the three paths of a round together, as they ran
    side by side), then requests within each drawn phase. It carries both the drift between
    rounds and the sampling error of a p99, which a single figure hides. Every draw is kept."""
    rng = np.random.default_rng(seed)
    arrays = {n: [np.asarray(ph) * 1e3 for ph in phases] for n, phases in overheads.items()}
    rounds = len(arrays["direct"])
    diffs, ratios = [], []
    for _ in range(reps):
        picked = rng.integers(0, rounds, rounds)
        p99 = {
            n: np.percentile(np.concatenate([rng.choice(phs[i], len(phs[i])) for i in picked]), 99)
            for n, phs in arrays.items()
        }
        ours, floor = p99["service"] - p99["direct"], p99["floor"] - p99["direct"]
        diffs.append(float(ours - floor))
        ratios.append(added_ratio(float(ours), float(floor)))
    return {"minus": diffs, "ratio": ratios}


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.array(xs) * 1e3, q))


def split_cores(pin: bool) -> tuple[set[int] | None, set[int] | None]:
    """(load generator and upstream, proxy under test) cores: the first core for the load
    side, the rest for the proxy, so neither path's percentiles carry the other side's CPU
    work. None, None when not pinning or on a single core."""
    cores = sorted(os.sched_getaffinity(0))
    if not pin or len(cores) < 2:
        return None, None
    return {cores[0]}, set(cores[1:])


async def run(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    up_port, svc_port, floor_port = free_port(), free_port(), free_port()
    load_cores, proxy_cores = split_cores(args.pin)
    all_cores = os.sched_getaffinity(0)
    if load_cores:  # this process is the load generator
        os.sched_setaffinity(0, load_cores)
    upstream = start(
        [sys.executable, "-m", "rse_fast.testing", "--port", str(up_port),
         "--latency", str(args.latency), "--tokens-per-s", "60"],
        "READY", load_cores,
    )  # fmt: skip
    upstream_url = f"http://127.0.0.1:{up_port}/v1"
    service = start(
        [sys.executable, "-m", "rse_fast.cli", "serve", "--upstream", upstream_url,
         "--port", str(svc_port), "--per-key-concurrency", "100000",
         "--workers", str(args.workers)],
        "rse-fast service", proxy_cores,
    )  # fmt: skip
    floor = start(
        module_command("bench.serve", "--floor-proxy", str(floor_port), "--upstream", upstream_url),
        "FLOOR READY",
        proxy_cores,
    )
    service_url = f"http://127.0.0.1:{svc_port}/v1"
    floor_url = f"http://127.0.0.1:{floor_port}/v1"
    per_worker = 3 if args.quick else 20
    c = args.concurrency
    out: dict[str, Any] = {}
    try:
        rss_start = service_rss(service)
        # direct, service and floor in turns, `rounds` times: p99s drift between phases on a
        # shared 2-core machine, so each path's percentile is the median over its phases
        paths = (("direct", upstream_url), ("service", service_url), ("floor", floor_url))
        runs: dict[str, list[list[tuple[str, float]]]] = {name: [] for name, _ in paths}
        errors = 0
        for r in range(args.rounds):
            for name, url in paths:
                lat, err = await load(url, c, per_worker, BODY, args.latency, f"{name}{r}")
                runs[name].append(lat)
                errors += err
        held = await held_in_upstream(upstream_url)
        sc = max(10, c // 4)  # streamed: time to first token, at a lighter load
        streamed = {}
        for name, url in paths:
            lat, err = await load(url, sc, per_worker, STREAM_BODY, args.latency, "s" + name)
            streamed[name] = [t for _, t in lat]
            errors += err
        if args.soak:
            out.update(await soak(service, service_url, args.soak_requests, c))
        peak = service_rss(service)
    finally:
        for proc in (service, floor, upstream):
            proc.terminate()
            proc.wait(10)
        os.sched_setaffinity(0, all_cores)  # the result records the machine's cores

    # a request's overhead: its latency less its time in the upstream's handler (the LLM's
    # time, with whatever lateness the upstream's timers had on the loaded core)
    samples = {
        "overhead_s": {
            n: [[round(t - held[u], 7) for u, t in ph] for ph in phases]
            for n, phases in runs.items()
        },
        "latency_s": {
            n: [[round(t, 7) for _, t in ph] for ph in phases] for n, phases in runs.items()
        },
        "ttft_s": {n: [round(t, 7) for t in xs] for n, xs in streamed.items()},
    }
    meta = {
        "mode": "quick" if args.quick else "full",
        "workers": args.workers,
        "concurrency": c,
        "upstream_latency_ms": args.latency * 1e3,
        "requests_per_phase": c * per_worker,
        "rounds": args.rounds,
        "load_cores": sorted(load_cores) if load_cores else None,
        "proxy_cores": sorted(proxy_cores) if proxy_cores else None,
        "arrivals": "staggered over the upstream latency",
        "added_of": "overhead percentiles (latency less the upstream handler's time)",
        "stream_concurrency": sc,
        "errors": errors,
        "peak_rss_mb": peak,
        "rss_at_start_mb": rss_start,
    }
    return {**meta, **summarize(samples), **out}, samples


def summarize(samples: dict[str, Any]) -> dict[str, Any]:
    """Every figure of serve.json that comes from the requests, from the raw samples alone."""
    overheads: dict[str, list[list[float]]] = samples["overhead_s"]
    latencies: dict[str, list[list[float]]] = samples["latency_s"]
    streamed: dict[str, list[float]] = samples["ttft_s"]

    def p(name: str, q: float, of: dict[str, list[list[float]]] = overheads) -> float:
        return float(np.median([pct(xs, q) for xs in of[name]]))

    def per_phase(name: str) -> list[float]:
        """p99 added in each round: the proxy's phase against the direct phase before it."""
        pairs = zip(overheads[name], overheads["direct"], strict=True)
        return [pct(mine, 99) - pct(direct, 99) for mine, direct in pairs]

    added = p("service", 99) - p("direct", 99)
    floor_added = p("floor", 99) - p("direct", 99)
    draws = bootstrap_added(overheads)
    minus = np.percentile(draws["minus"], [5, 50, 95])
    # np.percentile interpolates; with +inf draws an interpolated quantile can be nan, so
    # the ratio's quantiles are order statistics of the sorted draws
    ratios = sorted(draws["ratio"])

    def quantile(q: float) -> float | str:
        value = ratios[min(len(ratios) - 1, int(q * len(ratios)))]
        return value if math.isfinite(value) else "inf"  # JSON has no infinity

    return {
        "p50_added_ms": p("service", 50) - p("direct", 50),
        "p99_added_ms": added,
        "floor_p50_added_ms": p("floor", 50) - p("direct", 50),
        "floor_p99_added_ms": floor_added,
        # the headline: ours − the floor in ms, with its bootstrap interval
        "p99_added_minus_floor_ms": added - floor_added,
        "p99_added_minus_floor_ms_median": float(minus[1]),
        "p99_added_minus_floor_ms_ci90": [float(minus[0]), float(minus[2])],
        # the ratio over every draw (+inf kept: a floor that added nothing against ours)
        "p99_added_vs_floor": quantile(0.5),
        "p99_added_vs_floor_ci90": [quantile(0.05), quantile(0.95)],
        "p99_added_vs_floor_infinite_share": float(np.mean(np.isinf(ratios))),
        "p99_added_vs_floor_point": added_ratio(added, floor_added),  # finite: both > 0 here
        # how far the direct path's own p99 moves between its phases
        "direct_p99_spread_ms": float(np.ptp([pct(xs, 99) for xs in overheads["direct"]])),
        "direct_overhead_p50_ms": p("direct", 50),
        "direct_overhead_p99_ms": p("direct", 99),
        "per_phase_p99_added_ms": per_phase("service"),
        "per_phase_floor_p99_added_ms": per_phase("floor"),
        "latency_p99_added_ms": p("service", 99, latencies) - p("direct", 99, latencies),
        "latency_floor_p99_added_ms": p("floor", 99, latencies) - p("direct", 99, latencies),
        "direct_p50_ms": p("direct", 50, latencies),
        "direct_p99_ms": p("direct", 99, latencies),
        "service_p99_ms": p("service", 99, latencies),
        "floor_p99_ms": p("floor", 99, latencies),
        "ttft_direct_p50_ms": pct(streamed["direct"], 50),
        "ttft_added_p50_ms": pct(streamed["service"], 50) - pct(streamed["direct"], 50),
        "ttft_floor_added_p50_ms": pct(streamed["floor"], 50) - pct(streamed["direct"], 50),
        "ttft_added_p99_ms": pct(streamed["service"], 99) - pct(streamed["direct"], 99),
    }


async def soak(
    service: subprocess.Popen[str], service_url: str, total: int, concurrency: int
) -> dict[str, Any]:
    """``total`` pass-through requests at ``concurrency``: the service's RSS after the first
    tenth (warm-up) and at the end."""
    from aiohttp import ClientSession, TCPConnector

    done, errors = 0, 0
    warm_rss = None
    async with ClientSession(connector=TCPConnector(limit=0)) as session:

        async def worker(n: int) -> None:
            nonlocal done, errors, warm_rss
            for _ in range(n):
                async with session.post(service_url + "/chat/completions", json=BODY) as r:
                    await r.read()
                    errors += r.status != 200
                done += 1
                if warm_rss is None and done >= total // 10:
                    warm_rss = service_rss(service)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker(total // concurrency) for _ in range(concurrency)))
    end = service_rss(service)
    return {
        "soak_requests": done,
        "soak_errors": errors,
        "soak_rss_after_warmup_mb": warm_rss,
        "soak_rss_end_mb": end,
        "soak_rss_growth_mb": end - (warm_rss or end),
        "soak_s": time.perf_counter() - t0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--soak", action="store_true", help="also the 20,000-request soak")
    parser.add_argument("--soak-requests", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=1, help="service processes")
    parser.add_argument(
        "--latency", type=float, default=1.0, help="upstream latency in seconds (LLM-like)"
    )
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument(
        "--rounds", type=int, help="phases per path, in turns (default 5; 2 with --quick)"
    )
    parser.add_argument(
        "--no-pin",
        dest="pin",
        action="store_false",
        help="do not give the proxy under test its own cores (load generator and upstream on "
        "the first core, proxies on the rest)",
    )
    parser.add_argument("--floor-proxy", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--upstream", help=argparse.SUPPRESS)
    parser.add_argument(
        "--from-samples",
        action="store_true",
        help="recompute serve.json's request figures from results/serve_samples.json",
    )
    args = parser.parse_args()
    if args.floor_proxy:
        floor_proxy(args.floor_proxy, args.upstream)
        return
    if args.from_samples:
        print(json.dumps(summarize(json.loads(SAMPLES.read_text())), indent=2))
        return
    if args.rounds is None:
        args.rounds = 2 if args.quick else 5
    t0 = time.perf_counter()
    payload, samples = asyncio.run(run(args))
    payload["wall_s"] = time.perf_counter() - t0
    # a quick run is a check, not the committed full run: it never overwrites serve.json
    path = write_result("serve_quick" if args.quick else "serve", payload)
    if not args.quick:
        SAMPLES.write_text(json.dumps(samples, separators=(",", ":")) + "\n")
    keys = ("p99_added_ms", "floor_p99_added_ms", "p99_added_vs_floor", "p99_added_vs_floor_ci90",
            "ttft_added_p50_ms",
            "errors", "soak_requests", "soak_rss_growth_mb", "wall_s")  # fmt: skip
    for k in keys:
        print(f"{k}: {payload.get(k)}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
