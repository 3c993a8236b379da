"""Dedup kernel benchmark: exact greedy insert against the baselines a user would write, and
against this machine's limits.

    python -m bench dedup --quick   # < 60 s: N=1e5, d=384, B ∈ {1, 64, 256} + the scan at N=1e6
    python -m bench dedup           # full grid N∈{1e3..1e6} × d∈{384,768} × B∈{1,16,64,256}

Baselines, each exact-checked against the kernel's decisions and timed in turns with it:
- NumPy: one GEMM against the bank (an N × B temporary), its column max, the batch's Gram and
  the same greedy walk; BLAS threads = cores, like ours.
- FAISS ``IndexFlatIP`` at its best: per batch size, the fastest of its BLAS threshold (the
  default 128,000 queries, or 1 so every batch takes BLAS) × OpenMP threads (1, all cores).
- the naive loop: one mat-vec per candidate against everything stored so far.
Limits, in the same run: square sgemm GFLOP/s; the best BLAS call of each batch shape over the
layouts tried (bank rows N × d in the kernel's tiles or whole, bank stored d × N whole or in
tiles); the read bandwidth (B=1). Peak extra memory of each path is measured in a child process
(``--peak-memory``): resident high-water mark during one call, less the resident size before it,
with glibc returning every block of ≥ 16 KiB to the system on free so reuse cannot hide a peak.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import (
    ROOT,
    best_time,
    module_command,
    read_result,
    replace_readme_block,
    write_result,
)
from bench.limits import read_bandwidth_gbs, sgemm_gflops
from rse_fast import kernels

TAU = 0.85
#: the quick mode's bank and the batch sizes the targets name
QUICK_N, QUICK_D, QUICK_BATCHES = 100_000, 384, (256, 64, 1)


def make_bank(n: int, d: int, seed: int = 0) -> np.ndarray:
    """(n, d) unit float32 rows, generated in chunks to bound temporary memory."""
    rng = np.random.default_rng(seed)
    out = np.empty((n, d), np.float32)
    step = 65536
    for s in range(0, n, step):
        x = rng.standard_normal((min(step, n - s), d), dtype=np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        out[s : s + x.shape[0]] = x
    return out


def make_batch(bank: np.ndarray, b: int, seed: int = 1) -> np.ndarray:
    """Realistic experience batches: near-duplicates of bank rows and of earlier candidates
    (similarities spread around τ) and fresh rows, so both rejection paths are exercised."""
    rng = np.random.default_rng(seed)
    n, d = bank.shape
    out = np.empty((b, d), np.float32)
    for j in range(b):
        kind = rng.random()
        if kind < 0.5 and n:
            base = bank[rng.integers(0, n)]
        elif kind < 0.75 and j:
            base = out[rng.integers(0, j)]
        else:
            base = rng.standard_normal(d).astype(np.float32) * 10
        v = base + rng.normal(0, rng.uniform(0.015, 0.04), d).astype(np.float32)
        out[j] = v / np.linalg.norm(v)
    return out


def naive_insert(rows: np.ndarray, n: int, batch: np.ndarray, tau: float) -> np.ndarray:
    """Baseline: one mat-vec per candidate against everything stored so far, appending."""
    accepted = np.zeros(batch.shape[0], bool)
    m = n
    for j, c in enumerate(batch):
        if m == 0 or (rows[:m] @ c).max() < tau:
            accepted[j] = True
            rows[m] = c
            m += 1
    return accepted


def numpy_insert(bank: np.ndarray, batch: np.ndarray, tau: float) -> np.ndarray:
    """The baseline a user writes first: one GEMM against the whole bank (an N × B temporary),
    its column max, the batch's Gram (one more GEMM) and the same greedy walk."""
    best = (bank @ batch.T).max(axis=0)
    return greedy_walk(best < tau, batch @ batch.T, tau)


class FaissAtBest:
    """FAISS ``IndexFlatIP`` over the bank with, per batch size, the fastest of its settings.

    faiss 1.x sends a search through BLAS only from ``distance_compute_blas_threshold`` queries
    up (128,000 by default); below that it loops over the bank without BLAS. Both paths are
    tried, each with OpenMP on one core and on all; BLAS threads are the cores, like ours.
    """

    def __init__(self, bank: np.ndarray) -> None:
        import faiss

        self.faiss = faiss
        self.default_threshold = int(faiss.cvar.distance_compute_blas_threshold)
        self.index = faiss.IndexFlatIP(bank.shape[1])
        self.index.add(bank)
        cores = kernels.available_cores()
        self.settings = [
            (threshold, omp)
            for threshold in (self.default_threshold, 1)
            for omp in sorted({1, cores})
        ]
        self.best: dict[int, tuple[int, int]] = {}

    def use(self, setting: tuple[int, int]) -> None:
        self.faiss.cvar.distance_compute_blas_threshold = setting[0]
        self.faiss.omp_set_num_threads(setting[1])

    def insert(self, batch: np.ndarray, tau: float) -> np.ndarray:
        """One batched search (k=1) then the same in-batch greedy walk as the kernel's."""
        sims, _ = self.index.search(batch, 1)
        return greedy_walk(sims[:, 0] < tau, batch @ batch.T, tau)

    def tune(self, batch: np.ndarray, tau: float) -> dict[str, float]:
        """Time every setting on this batch (best of 2 after a warm call, or the warm call
        alone when it took over 0.5 s), keep the fastest;
        returns ms per setting, named ``threshold/omp``."""
        times = {}
        for setting in self.settings:
            self.use(setting)
            t0 = time.perf_counter()
            self.insert(batch, tau)
            first = time.perf_counter() - t0
            # a slow setting shows itself in one call (its loop path at N=1e6 takes seconds)
            times[setting] = first if first > 0.5 else best_time(lambda: self.insert(batch, tau), 2)
        best = min(times, key=lambda k: times[k])
        self.best[batch.shape[0]] = best
        self.use(best)
        return {f"{t}/{o}": v * 1e3 for (t, o), v in times.items()}


def greedy_walk(fresh: np.ndarray, gram: np.ndarray, tau: float) -> np.ndarray:
    """Accept candidate j if it is new against the bank and against every earlier accepted
    candidate of its batch (vectorised per candidate)."""
    accepted = np.zeros(fresh.shape[0], bool)
    for j in np.flatnonzero(fresh):
        if not (gram[j, :j][accepted[:j]] >= tau).any():
            accepted[j] = True
    return accepted


def kernel_insert(rows: np.ndarray, n: int, batch: np.ndarray, tau: float) -> np.ndarray:
    none = np.full(batch.shape[0], -1, np.int64)
    dec = kernels.greedy_insert(rows, n, batch, tau, none, none)
    k = int(dec.accepted.sum())
    rows[n : n + k] = batch[dec.accepted]  # the append the index does
    return dec.accepted


def scan_against_bandwidth(big: np.ndarray, rounds: int = 4) -> tuple[dict[str, Any], float]:
    """The B=1 scan over ``big`` and the read bandwidth, measured in alternation (``rounds``
    times each, best kept): this machine's bandwidth drifts by more than 1.5× within seconds
    (neighbours, page management), so a limit measured at another moment than the scan
    could be beaten or flatter it."""
    n, d = big.shape
    batch = make_batch(big, 1)
    rows = np.empty((n + 1, d), np.float32)
    rows[:n] = big
    dec = kernel_insert(rows, n, batch, TAU)
    naive = naive_insert(rows, n, batch, TAU)
    t_kernel, bandwidth = float("inf"), 0.0
    for _ in range(rounds):
        bandwidth = max(bandwidth, read_bandwidth_gbs(big, repeat=3))
        t_kernel = min(t_kernel, best_time(lambda: kernel_insert(rows, n, batch, TAU), repeat=3))
    scan = {
        "N": n,
        "d": d,
        "B": 1,
        "accepted": int(dec.sum()),
        "exact_match": bool((dec == naive).all()),
        "naive_extrapolated": False,
        "kernel_ms": t_kernel * 1e3,
        "scan_gbs": n * d * 4 / t_kernel / 1e9,
        "rounds": rounds,
    }
    return scan, bandwidth


def shape_calls(bank: np.ndarray, bank_t: np.ndarray, batch: np.ndarray) -> dict[str, Any]:
    """One pass of the bank against the batch in each layout tried, as callables (the caller
    times them in turns with the kernel): the shape's BLAS limit is the fastest."""
    n, _ = bank.shape
    b = batch.shape[0]
    tile = kernels.tuning.plan_for(bank.shape[1], b, kernels.bank_max_tiled).tile_rows
    tile_out = np.empty((min(tile, n), b), np.float32)
    tile_out_t = np.empty((b, min(tile, n)), np.float32)
    whole_out = np.empty((n, b), np.float32)
    whole_out_t = np.empty((b, n), np.float32)
    batch_t = batch.T

    def rows_tiled() -> None:  # (T, B) tiles at the height this CPU's plan chose
        for s in range(0, n, tile):
            e = min(n, s + tile)
            np.matmul(bank[s:e], batch_t, out=tile_out[: e - s])

    def cols_tiled() -> None:  # bank stored d × N, tiles of columns
        for s in range(0, n, tile):
            e = min(n, s + tile)
            np.matmul(batch, bank_t[:, s:e], out=tile_out_t[:, : e - s])

    return {
        "rows_tiled": rows_tiled,
        "rows_whole": lambda: np.matmul(bank, batch_t, out=whole_out),
        "cols_tiled": cols_tiled,
        "cols_whole": lambda: np.matmul(batch, bank_t, out=whole_out_t),
    }


def run_config(
    bank: np.ndarray,
    b: int,
    faiss_index: FaissAtBest | None,
    sgemm: float,
    naive_limit: int | None = None,
    bank_t: np.ndarray | None = None,
) -> dict[str, Any]:
    n, d = bank.shape
    batch = make_batch(bank, b)
    rows = np.empty((n + b, d), np.float32)
    rows[:n] = bank
    kernel_dec = kernel_insert(rows, n, batch, TAU)
    numpy_dec = numpy_insert(bank, batch, TAU)
    faiss_times = None
    faiss_dec = None
    if faiss_index is not None:
        faiss_times = faiss_index.tune(batch, TAU)
        faiss_dec = faiss_index.insert(batch, TAU)
    calls = shape_calls(bank, bank_t, batch) if b >= 16 and bank_t is not None else {}
    shape_t = {name: float("inf") for name in calls}
    # Alternate sgemm, the shape's BLAS calls, kernel and baselines, the same number of times on
    # the same inputs, and keep the best of each: on a shared machine all see the same noise,
    # so ratios are stable even when absolute rates drift.
    t_kernel = t_faiss = t_numpy = float("inf")
    for _ in range(3):
        sgemm = max(sgemm, sgemm_gflops())
        for name, call in calls.items():
            shape_t[name] = min(shape_t[name], best_time(call, repeat=2))
        t_kernel = min(
            t_kernel, best_time(lambda: kernel_insert(rows, n, batch, TAU), repeat=3, min_time=0.1)
        )
        t_numpy = min(
            t_numpy, best_time(lambda: numpy_insert(bank, batch, TAU), repeat=3, min_time=0.1)
        )
        if faiss_index is not None:
            t_faiss = min(
                t_faiss,
                best_time(lambda: faiss_index.insert(batch, TAU), repeat=3, min_time=0.1),
            )

    nb_naive = b if naive_limit is None else min(b, naive_limit)
    naive_dec = naive_insert(rows, n, batch[:nb_naive], TAU)
    t_naive = best_time(lambda: naive_insert(rows, n, batch[:nb_naive], TAU), repeat=2)
    t_naive *= b / nb_naive  # per-candidate cost is flat (one full mat-vec each)

    result: dict[str, Any] = {
        "N": n,
        "d": d,
        "B": b,
        "accepted": int(kernel_dec.sum()),
        "exact_match": bool((kernel_dec[:nb_naive] == naive_dec).all()),
        "numpy_match": bool((numpy_dec == kernel_dec).all()),
        "naive_extrapolated": nb_naive < b,
        "kernel_ms": t_kernel * 1e3,
        "naive_ms": t_naive * 1e3,
        "speedup_vs_naive": t_naive / t_kernel,
        "numpy_ms": t_numpy * 1e3,
        "speedup_vs_numpy": t_numpy / t_kernel,
    }
    if faiss_index is not None and faiss_dec is not None:
        threshold, omp = faiss_index.best[b]
        result.update(
            faiss_best_ms=t_faiss * 1e3,
            speedup_vs_faiss_best=t_faiss / t_kernel,
            faiss_best_setting={"blas_threshold": threshold, "omp_threads": omp},
            faiss_ms_by_setting=faiss_times,
            faiss_match=bool((faiss_dec == kernel_dec).all()),
        )
    gflops = 2 * n * d * b / t_kernel / 1e9
    result.update(gflops=gflops, sgemm_gflops=sgemm, fraction_of_sgemm=gflops / sgemm)
    if shape_t:
        rates = {k: 2 * n * d * b / t / 1e9 for k, t in shape_t.items()}
        best_layout = max(rates, key=lambda k: rates[k])
        result.update(
            shape_gflops_by_layout=rates,
            shape_best_layout=best_layout,
            shape_best_gflops=rates[best_layout],
            fraction_of_shape_best=gflops / rates[best_layout],
        )
    if b == 1:
        result["scan_gbs"] = n * d * 4 / t_kernel / 1e9
    return result


def make_faiss(bank: np.ndarray) -> FaissAtBest | None:
    try:
        return FaissAtBest(bank)
    except ImportError:
        return None


# -- peak extra memory, measured in a child process ----------------------------------------------
PATHS = ("kernel", "numpy", "faiss_best")


def _resident_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _peak_of(fn: Any) -> float:
    """MiB resident at the peak of one call of ``fn`` above what was resident before it."""
    fn()  # warm: compiled code, thread pools, lazily built tables
    Path("/proc/self/clear_refs").write_text("5")  # reset the high-water mark
    before = _resident_kib("VmRSS")
    fn()
    return max(0, _resident_kib("VmHWM") - before) / 1024


def measure_peaks(path: str, faiss_settings: dict[int, tuple[int, int]]) -> dict[int, float]:
    """In this (child) process: peak extra MiB of ``path`` at each quick batch size."""
    kernels.set_threads()
    kernels.warmup()
    bank = make_bank(QUICK_N, QUICK_D)
    index = make_faiss(bank) if path == "faiss_best" else None
    out = {}
    for b in QUICK_BATCHES:
        out[b] = _peak_of(_one_call(path, bank, make_batch(bank, b), index, faiss_settings))
    return out


def _one_call(
    path: str, bank: np.ndarray, batch: np.ndarray, index: FaissAtBest | None,
    faiss_settings: dict[int, tuple[int, int]],
) -> Any:  # fmt: skip
    """One insert decision of ``batch`` along ``path``, as a callable."""
    b = batch.shape[0]
    none = np.full(b, -1, np.int64)
    if path == "kernel":  # the decision only: appending is the caller's (bank capacity)
        return lambda: kernels.greedy_insert(bank, bank.shape[0], batch, TAU, none, none)
    if path == "numpy":
        return lambda: numpy_insert(bank, batch, TAU)
    assert index is not None
    index.use(faiss_settings[b])
    return lambda: index.insert(batch, TAU)


#: Peaks below this are not told apart from zero by the resident high-water mark (the
#: allocator's own pages come and go by about this much between two calls).
PEAK_RESOLUTION_MB = 0.25


def memory_ratio(kernel_mb: float, baseline_mb: float) -> float | None:
    """Kernel's peak ÷ the baseline's; None when both are below the resolution, and a bound
    (the kernel's ÷ the resolution) when only the baseline's is."""
    if max(kernel_mb, baseline_mb) < PEAK_RESOLUTION_MB:
        return None
    return max(kernel_mb, PEAK_RESOLUTION_MB) / max(baseline_mb, PEAK_RESOLUTION_MB)


def _worst(ratios: Any) -> float | None:
    found = [r for r in ratios if r is not None]
    return max(found) if found else None


def peak_extra_mb(faiss_settings: dict[int, tuple[int, int]]) -> dict[str, dict[int, float]]:
    """Peak extra MiB per path and batch size, each path in its own fresh process."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "16384", "MALLOC_TRIM_THRESHOLD_": "0"}
    out: dict[str, dict[int, float]] = {}
    settings = json.dumps({str(b): list(s) for b, s in faiss_settings.items()})
    for path in PATHS:
        if path == "faiss_best" and not faiss_settings:
            continue
        cmd = module_command("bench.dedup", "--peak-memory", path, "--faiss-settings", settings)
        done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, check=True)
        row = json.loads(done.stdout.strip().splitlines()[-1])
        out[path] = {int(b): float(mb) for b, mb in row.items()}
    return out


def quick() -> dict[str, Any]:
    t0 = time.perf_counter()
    kernels.set_threads()
    kernels.warmup()
    # this CPU's tile plan per batch bucket, measured (or read from disk) before any timing
    plans = {b: asdict(p) for b, p in kernels.tune(QUICK_D, QUICK_BATCHES).items()}
    sgemm = sgemm_gflops()
    bank = make_bank(QUICK_N, QUICK_D)
    bank_t = np.ascontiguousarray(bank.T)
    faiss_index = make_faiss(bank)
    configs = {b: run_config(bank, b, faiss_index, sgemm, bank_t=bank_t) for b in QUICK_BATCHES}
    faiss_settings = dict(faiss_index.best) if faiss_index is not None else {}
    del faiss_index, bank_t, bank
    peaks = peak_extra_mb(faiss_settings)
    for b, c in configs.items():
        c["peak_extra_mb"] = {path: peaks[path][b] for path in peaks}
        for path in peaks:
            if path != "kernel":
                c[f"memory_ratio_vs_{path}"] = memory_ratio(peaks["kernel"][b], peaks[path][b])
    big = make_bank(1_000_000, QUICK_D, seed=2)
    scan, bandwidth = scan_against_bandwidth(big)
    main, b64, b1 = configs[256], configs[64], configs[1]
    ratios = list(configs.values())
    payload: dict[str, Any] = {
        "mode": "quick",
        "tau": TAU,
        "tile_plans_by_b": plans,
        "exact_match": all(
            c["exact_match"] and c["numpy_match"] and c.get("faiss_match", True) for c in ratios
        )
        and scan["exact_match"],
        "naive_extrapolated": main["naive_extrapolated"],
        "speedup_vs_naive": main["speedup_vs_naive"],
        # the least over B ∈ {1, 64, 256}: "never slower than either" is judged on the worst
        "speedup_vs_numpy": min(c["speedup_vs_numpy"] for c in ratios),
        "speedup_vs_numpy_by_b": {b: c["speedup_vs_numpy"] for b, c in configs.items()},
        "speedup_vs_faiss_best": min(c.get("speedup_vs_faiss_best", np.nan) for c in ratios),
        "speedup_vs_faiss_best_by_b": {
            b: c.get("speedup_vs_faiss_best") for b, c in configs.items()
        },
        "faiss_best_setting_by_b": {b: c.get("faiss_best_setting") for b, c in configs.items()},
        "fraction_of_sgemm": main["fraction_of_sgemm"],
        "fraction_of_sgemm_b64": b64["fraction_of_sgemm"],
        "fraction_of_shape_best_b64": b64["fraction_of_shape_best"],
        "fraction_of_shape_best_b256": main["fraction_of_shape_best"],
        "shape_best_layout_b64": b64["shape_best_layout"],
        "shape_best_fraction_of_sgemm_b64": b64["shape_best_gflops"] / b64["sgemm_gflops"],
        "peak_extra_mb": peaks,
        # the worst B where both peaks are above the measurement's resolution
        "memory_ratio_vs_numpy_max": _worst(c.get("memory_ratio_vs_numpy") for c in ratios),
        "memory_ratio_vs_faiss_best_max": _worst(
            c.get("memory_ratio_vs_faiss_best") for c in ratios
        ),
        "peak_resolution_mb": PEAK_RESOLUTION_MB,
        "b1_kernel_ms": b1["kernel_ms"],
        "sgemm_gflops": main["sgemm_gflops"],
        "read_bandwidth_gbs": bandwidth,
        "scan_N": scan["N"],
        "scan_gbs": scan["scan_gbs"],
        "scan_fraction_of_bandwidth": scan["scan_gbs"] / bandwidth,
        "scan_within_limit": scan["scan_gbs"] <= bandwidth,
        "configs": [main, b64, b1, scan],
        "wall_s": time.perf_counter() - t0,
    }
    return payload


def full() -> dict[str, Any]:
    kernels.set_threads()
    kernels.warmup()
    sgemm = sgemm_gflops()
    configs, scans = [], []
    bandwidth = None
    for d in (384, 768):
        for n in (1_000, 10_000, 100_000, 1_000_000):
            bank = make_bank(n, d)
            bank_t = np.ascontiguousarray(bank.T) if n <= 100_000 else None
            faiss_index = make_faiss(bank)
            if n == 1_000_000:  # the scan here is measured against the bandwidth, in turns
                scan, limit_here = scan_against_bandwidth(bank)
                bandwidth = max(bandwidth or 0.0, limit_here)
                scans.append({**scan, "scan_fraction_of_bandwidth": scan["scan_gbs"] / limit_here})
            for b in (1, 16, 64, 256):
                limit = 16 if n >= 1_000_000 else None
                res = run_config(bank, b, faiss_index, sgemm, naive_limit=limit, bank_t=bank_t)
                print(_row(res), flush=True)
                configs.append(res)
            del faiss_index, bank, bank_t
    for c in configs:
        if c["B"] == 1 and bandwidth:
            c["scan_fraction_of_bandwidth"] = c["scan_gbs"] / bandwidth
    return {
        "mode": "full",
        "tau": TAU,
        "sgemm_gflops": sgemm,
        "read_bandwidth_gbs": bandwidth,
        "exact_match": all(
            c["exact_match"] and c["numpy_match"] and c.get("faiss_match", True) for c in configs
        )
        and all(c["exact_match"] for c in scans),
        "configs": configs,
        "scans_against_bandwidth": scans,
    }


def _row(c: dict[str, Any]) -> str:
    faiss_ms = f"{c['faiss_best_ms']:.2f}" if "faiss_best_ms" in c else "-"
    vs_faiss = f"{c['speedup_vs_faiss_best']:.2f}×" if "speedup_vs_faiss_best" in c else "-"
    exact = c["exact_match"] and c["numpy_match"] and c.get("faiss_match", True)
    return (
        f"| {c['N']:,} | {c['d']} | {c['B']} | {c['kernel_ms']:.2f} | {c['numpy_ms']:.2f} | "
        f"{faiss_ms} | {c['naive_ms']:.1f} | {c['speedup_vs_numpy']:.2f}× | {vs_faiss} | "
        f"{c['speedup_vs_naive']:.1f}× | {c['fraction_of_sgemm']:.2f} | "
        f"{'yes' if exact else 'NO'} |"
    )


def table(payload: dict[str, Any]) -> str:
    """The full grid as bench/README.md shows it, from dedup.json alone."""
    m = payload["machine"]
    lines = [
        f"Dedup kernel, full grid (τ={payload['tau']}), on {m['cpu']}, {m['cores']} cores: "
        f"sgemm {payload['sgemm_gflops']:.0f} GFLOP/s, read bandwidth "
        f"{payload['read_bandwidth_gbs']:.1f} GB/s, measured in the same run.",
        "",
        "| N | d | B | kernel ms | NumPy ms | FAISS best ms | naive ms | vs NumPy | vs FAISS best "
        "| vs naive | of sgemm | exact |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        *(_row(c) for c in payload["configs"]),
        "",
        "Naive times at N=1e6 are extrapolated from the first 16 candidates (one full mat-vec "
        "each, so the cost per candidate is flat).",
    ]
    return "\n".join(lines)


#: Per CPU model, the quick run's ratios (the latest run on that CPU replaces its row): a claim
#: measured on one CPU says so, and the README shows every CPU's figures side by side.
BY_CPU = ("speedup_vs_numpy_by_b", "speedup_vs_faiss_best_by_b", "speedup_vs_naive",
          "fraction_of_sgemm", "fraction_of_shape_best_b64", "scan_fraction_of_bandwidth",
          "tile_plans_by_b")  # fmt: skip


#: Runs kept per CPU: a ratio near 1.0 lands on either side from run to run.
RUNS_PER_CPU = 5


def record_by_cpu(payload: dict[str, Any]) -> dict[str, Any]:
    """Add this run's ratios to ``dedup_by_cpu.json`` under its CPU (its latest runs kept);
    return the whole file."""
    known = read_result("dedup_by_cpu") or {}
    cpus: dict[str, Any] = dict(known.get("cpus") or {})
    m = payload["machine"]
    run = {
        "load_avg_1m": m.get("load_avg_1m"),
        "measured_at": payload["measured_at"],
        **{k: payload[k] for k in BY_CPU if k in payload},
    }
    runs = [*(cpus.get(m["cpu"]) or {}).get("runs", []), run][-RUNS_PER_CPU:]
    cpus[m["cpu"]] = {"cores": m["cores"], "runs": runs}
    write_result("dedup_by_cpu", {"cpus": cpus})
    return {"cpus": cpus}


def by_cpu_table(data: dict[str, Any]) -> str:
    """The kernel's quick ratios on every CPU it was measured on, side by side: the range
    over its kept runs (one run: that run)."""
    lines = [
        "| CPU | cores | runs | vs NumPy B=1 | B=64 | B=256 | vs FAISS best (worst B) "
        "| vs naive B=256 | tile plan B=64 / B=256 (latest) | latest (load) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]

    def span(values: list[float], unit: str = "×") -> str:
        lo, hi = min(values), max(values)
        return f"{lo:.2f}{unit}" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}{unit}"

    for cpu, entry in sorted(data["cpus"].items()):
        runs = entry["runs"]
        numpy = [{int(k): v for k, v in r["speedup_vs_numpy_by_b"].items()} for r in runs]
        faiss = [
            min(v for v in r.get("speedup_vs_faiss_best_by_b", {}).values() if v is not None)
            for r in runs
        ]
        last = runs[-1]
        plans = {int(k): v for k, v in (last.get("tile_plans_by_b") or {}).items()}

        def plan(b: int, plans: dict[int, Any] = plans) -> str:
            p = plans.get(b)
            return f"{p['layout']} {p['tile_rows']:,}" if p else "fixed 4,096"

        load = last.get("load_avg_1m")
        lines.append(
            f"| {cpu} | {entry['cores']} | {len(runs)} | {span([n[1] for n in numpy])} | "
            f"{span([n[64] for n in numpy])} | {span([n[256] for n in numpy])} | "
            f"{span(faiss)} | {span([r['speedup_vs_naive'] for r in runs])} | "
            f"{plan(64)} / {plan(256)} | {last['measured_at'][:10]} ({load:.2f}) |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one config plus the B=1 scan, < 60 s")
    parser.add_argument("--peak-memory", choices=PATHS, help=argparse.SUPPRESS)
    parser.add_argument("--faiss-settings", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peak_memory:  # the child process of peak_extra_mb
        raw = json.loads(args.faiss_settings).items()
        settings = {int(b): (int(t), int(o)) for b, (t, o) in raw}
        print(json.dumps(measure_peaks(args.peak_memory, settings)))
        return
    if args.quick:
        payload = quick()
        path = write_result("dedup_quick", payload)
        by_cpu = record_by_cpu(read_result("dedup_quick"))
        replace_readme_block("dedup_by_cpu", by_cpu_table(by_cpu), "## Dedup kernel by CPU")
        keys = (
            "exact_match",
            "speedup_vs_naive",
            "speedup_vs_numpy_by_b",
            "speedup_vs_faiss_best_by_b",
            "faiss_best_setting_by_b",
            "fraction_of_sgemm",
            "fraction_of_sgemm_b64",
            "fraction_of_shape_best_b64",
            "shape_best_layout_b64",
            "peak_extra_mb",
            "scan_fraction_of_bandwidth",
            "wall_s",
        )
        for k in keys:
            print(f"{k}: {payload[k]}")
    else:
        payload = full()
        path = write_result("dedup", payload)
        replace_readme_block("dedup", table(read_result("dedup")), "## Dedup kernel, full grid")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
