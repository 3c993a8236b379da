"""Dedup at scale: the half-precision bank against float32, NumPy and FAISS, and the limits.

    python -m bench dedup_scale --quick   # < 60 s: N=1e5, d=384, B ∈ {1, 64, 256}, a short
                                          # insert stream, the B=1 scan at N=1e6
    python -m bench dedup_scale           # adds N=1e6 and 5e6 and a longer stream

Per bank size and batch size, timed in turns (best of the same repeats): the kernel on a
float16 bank (binary16 rows in memory, exact float32 rows in a file on disk, as
``SimilarityIndex(precision="float16")`` keeps them), the kernel on the float32 bank, the
NumPy baseline (one GEMM, column max, the batch's Gram, the greedy walk) and, where it fits
in memory beside the rest, FAISS ``IndexFlatIP`` at its best setting. The float16 decisions,
matched rows and similarities are compared with float32's, the accepted flags with NumPy's
and FAISS's. Limits in the same run: the read bandwidth (B=1, counting the bytes the scan
reads: two per component for float16) and the CPU's sgemm (B ≥ 64). Peak extra memory of
one call of each path (in a child process, as ``bench.dedup`` measures it; FAISS's is in
``dedup_quick.json``), the tile the float16 bank keeps decoded, and each bank's bytes. The
stream inserts batches one after another into growing ``SimilarityIndex`` banks of each
precision (as RSE rounds do) and a NumPy baseline appending to a preallocated array.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
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
from bench.dedup import TAU, _peak_of, make_bank, make_batch, make_faiss, numpy_insert
from bench.limits import read_bandwidth_gbs, sgemm_gflops
from rse_fast import kernels
from rse_fast.rse.exact_rows import ExactRowFile
from rse_fast.rse.index import SimilarityIndex

D = 384
QUICK = {"sizes": (100_000,), "batches": (256, 64, 1), "scan_n": 1_000_000, "stream": (16, 40)}
FULL = {
    "sizes": (100_000, 1_000_000, 5_000_000),
    "batches": (256, 64, 1),
    "scan_n": 5_000_000,
    "stream": (64, 200),
}
#: FAISS copies the bank: beside the float32 bank, the float16 bank and NumPy's N × B scores
#: it fits in this machine's memory up to this many rows at d=384.
FAISS_MAX_N = 1_000_000


class HalfStore:
    """A float16 bank as the index keeps it: binary16 words in memory, exact rows on disk."""

    def __init__(self, bank: np.ndarray, directory: str | None = None) -> None:
        n = bank.shape[0]
        self.words = np.empty(bank.shape, np.uint16)
        self.file = ExactRowFile(bank.shape[1], directory)
        step = 65536
        for s in range(0, n, step):
            self.words[s : s + step] = kernels.half.encode(bank[s : s + step])
            self.file.write(s, bank[s : s + step])
        # on the disk before any timing: a write-back of gigabytes in the background takes
        # memory bandwidth and a core from whatever runs beside it
        self.file.flush()
        self.rows = kernels.HalfRows(self.words, n, self.file.read)


def fresh_unit(d: int, seed: int = 7) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((1, d)).astype(np.float32)
    return v / np.linalg.norm(v)


def _decide(rows: Any, n: int, batch: np.ndarray) -> kernels.GreedyDecisions:
    none = np.full(batch.shape[0], -1, np.int64)
    return kernels.greedy_insert(rows, n, batch, TAU, none, none)


def _same(a: kernels.GreedyDecisions, b: kernels.GreedyDecisions) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def run_config(
    bank: np.ndarray,
    store: HalfStore,
    b: int,
    faiss_index: Any,
    sgemm: float,
    bandwidth: float,
    repeat: int,
) -> dict[str, Any]:
    """One (N, B): every path's decision checked, then timed in turns."""
    n, d = bank.shape
    # B=1: a candidate new to the bank, so every path reads all of it (no early exit)
    batch = make_batch(bank, b) if b > 1 else fresh_unit(d)
    f32 = _decide(bank, n, batch)
    f16 = _decide(store.rows, n, batch)
    paths: dict[str, Any] = {
        "float16": lambda: _decide(store.rows, n, batch),
        "float32": lambda: _decide(bank, n, batch),
        "numpy": lambda: numpy_insert(bank, batch, TAU),
    }
    out: dict[str, Any] = {
        "N": n,
        "d": d,
        "B": b,
        "accepted": int(f16.accepted.sum()),
        "float16_equals_float32": _same(f16, f32),
        "numpy_match": bool((numpy_insert(bank, batch, TAU) == f16.accepted).all()),
    }
    if faiss_index is not None:
        faiss_index.tune(batch, TAU)
        out["faiss_match"] = bool((faiss_index.insert(batch, TAU) == f16.accepted).all())
        out["faiss_best_setting"] = list(faiss_index.best[b])
        paths["faiss_best"] = lambda: faiss_index.insert(batch, TAU)
    ms = {k: float("inf") for k in paths}
    for _ in range(repeat):
        for name, fn in paths.items():
            ms[name] = min(ms[name], best_time(fn, repeat=2, min_time=0.05) * 1e3)
    out["ms"] = ms
    out["float16_vs_numpy"] = ms["numpy"] / ms["float16"]
    out["float16_vs_float32"] = ms["float32"] / ms["float16"]
    out["float32_vs_numpy"] = ms["numpy"] / ms["float32"]
    if "faiss_best" in ms:
        out["float16_vs_faiss_best"] = ms["faiss_best"] / ms["float16"]
    if b == 1:
        out["float16_scan_gbs"] = store.words.nbytes / ms["float16"] / 1e6
        out["float32_scan_gbs"] = bank.nbytes / ms["float32"] / 1e6
        out["float16_fraction_of_bandwidth"] = out["float16_scan_gbs"] / bandwidth
        out["float32_fraction_of_bandwidth"] = out["float32_scan_gbs"] / bandwidth
    else:
        out["float16_fraction_of_sgemm"] = 2.0 * n * d * b / (ms["float16"] / 1e3) / 1e9 / sgemm
    plan = kernels.tuning.plan_for(d, b, kernels.bank_max_tiled) if b > 1 else None
    # the float16 bank keeps one decoded tile between calls: memory a peak would not show
    out["float16_decode_buffer_mb"] = plan.tile_rows * d * 4 / 2**20 if plan else 0.0
    return out


def measure_peaks(n: int, batches: tuple[int, ...]) -> dict[str, dict[int, float]]:
    """In this (child) process: peak extra MiB of one call of each path at each batch size."""
    kernels.set_threads()
    bank = make_bank(n, D)
    with tempfile.TemporaryDirectory(dir=".") as spill:
        store = HalfStore(bank, spill)
        out: dict[str, dict[int, float]] = {"float16": {}, "float32": {}, "numpy": {}}
        for b in batches:
            batch = make_batch(bank, b) if b > 1 else fresh_unit(D)
            calls = {
                "float16": lambda batch=batch: _decide(store.rows, n, batch),
                "float32": lambda batch=batch: _decide(bank, n, batch),
                "numpy": lambda batch=batch: numpy_insert(bank, batch, TAU),
            }
            for path, call in calls.items():
                out[path][b] = _peak_of(call)
    return out


def peaks_in_child(n: int, batches: tuple[int, ...]) -> dict[str, dict[int, float]]:
    """Peak extra MiB per path, measured in a fresh process whose allocator returns every
    block of 16 KiB or more on free (as ``bench.dedup`` measures): reuse hides no peak, and
    the timings, in this process, keep the allocator's defaults."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "16384", "MALLOC_TRIM_THRESHOLD_": "0"}
    cmd = module_command("bench.dedup_scale", "--peak-memory", str(n), *map(str, batches))
    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    row = json.loads(done.stdout.strip().splitlines()[-1])
    return {path: {int(b): float(mb) for b, mb in v.items()} for path, v in row.items()}


def scan_against_bandwidth(n: int, rounds: int = 4) -> dict[str, Any]:
    """The float16 B=1 scan of a bank of ``n`` rows (a miss: the whole bank read) and the read
    bandwidth, in alternation, best of ``rounds`` each (the bandwidth drifts within seconds)."""
    bank = make_bank(n, D, seed=2)
    store = HalfStore(bank)
    v = fresh_unit(D)
    dec = _decide(store.rows, n, v)
    t_scan, bandwidth = float("inf"), 0.0
    for _ in range(rounds):
        bandwidth = max(bandwidth, read_bandwidth_gbs(bank, repeat=3))
        t_scan = min(t_scan, best_time(lambda: _decide(store.rows, n, v), repeat=3))
    gbs = store.words.nbytes / t_scan / 1e9
    return {
        "N": n,
        "accepted": bool(dec.accepted[0]),
        "float16_scan_ms": t_scan * 1e3,
        "bytes_read": store.words.nbytes,
        "float16_scan_gbs": gbs,
        "read_bandwidth_gbs": bandwidth,
        "fraction_of_bandwidth": gbs / bandwidth,
    }


def stream(n0: int, b: int, batches: int) -> dict[str, Any]:
    """Batches of ``b`` inserted one after another into growing banks that start with ``n0``
    rows: the float16 and float32 indexes and NumPy appending to a preallocated array, each
    batch in turns. Decisions compared batch by batch."""
    bank = make_bank(n0, D, seed=3)
    half = SimilarityIndex(D, n0 + b * batches, precision="float16")
    full = SimilarityIndex(D, n0 + b * batches, precision="float32")
    for index in (half, full):
        index.extend(bank)
    rows = np.empty((n0 + b * batches, D), np.float32)
    rows[:n0] = bank
    n = n0
    seconds = {"float16": 0.0, "float32": 0.0, "numpy": 0.0}
    same, agree = True, True
    for k in range(batches):
        batch = make_batch(rows[:n], b, seed=100 + k)
        t0 = time.perf_counter()
        got = half.insert(batch, TAU)
        t1 = time.perf_counter()
        want = full.insert(batch, TAU)
        t2 = time.perf_counter()
        accepted = numpy_insert(rows[:n], batch, TAU)
        rows[n : n + int(accepted.sum())] = batch[accepted]
        n += int(accepted.sum())
        t3 = time.perf_counter()
        seconds["float16"] += t1 - t0
        seconds["float32"] += t2 - t1
        seconds["numpy"] += t3 - t2
        same &= all(
            np.array_equal(getattr(got, f), getattr(want, f))
            for f in ("accepted", "similarity", "match", "rows")
        )
        agree &= bool(np.array_equal(got.accepted, accepted))
    return {
        "N_start": n0,
        "N_end": len(half),
        "B": b,
        "batches": batches,
        "seconds": seconds,
        "float16_vs_numpy": seconds["numpy"] / seconds["float16"],
        "float16_vs_float32": seconds["float32"] / seconds["float16"],
        "float16_equals_float32": bool(same),
        "numpy_match": bool(agree),
        "bank_bytes": {"float16": half.memory_bytes, "float32": full.memory_bytes},
        "bank_memory_ratio": half.memory_bytes / full.memory_bytes,
    }


def run(plan: dict[str, Any], repeat: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    kernels.set_threads()
    kernels.warmup(D)
    kernels.warmup(D, "float16")
    kernels.tune(D, tuple(b for b in plan["batches"] if b > 1))
    sgemm = sgemm_gflops()
    configs = []
    bandwidth = 0.0
    with tempfile.TemporaryDirectory(dir=".") as spill:
        for n in plan["sizes"]:
            # first, while this process holds no bank: at N=5e6 both would not fit
            peaks = peaks_in_child(n, plan["batches"])
            bank = make_bank(n, D)
            store = HalfStore(bank, spill)
            bandwidth = max(bandwidth, read_bandwidth_gbs(bank, repeat=3))
            faiss_index = make_faiss(bank) if n <= FAISS_MAX_N else None
            for b in plan["batches"]:
                res = run_config(bank, store, b, faiss_index, sgemm, bandwidth, repeat)
                res["peak_extra_mb"] = {path: peaks[path][b] for path in peaks}
                res["bank_bytes"] = {"float16": store.words.nbytes, "float32": bank.nbytes}
                if faiss_index is None:
                    res["faiss_omitted"] = (
                        f"FAISS's copy of {n:,} rows does not fit beside the rest"
                    )
                print(_row(res), flush=True)
                configs.append(res)
            del bank, store, faiss_index
    scan = scan_against_bandwidth(plan["scan_n"])
    b, batches = plan["stream"]
    flow = stream(plan["sizes"][0], b, batches)
    first = [c for c in configs if c["N"] == plan["sizes"][0]]
    by_b = {c["B"]: c for c in first}
    return {
        "tau": TAU,
        "d": D,
        "sgemm_gflops": sgemm,
        "read_bandwidth_gbs": bandwidth,
        "decisions_identical": all(
            c["float16_equals_float32"] and c["numpy_match"] and c.get("faiss_match", True)
            for c in configs
        )
        and flow["float16_equals_float32"]
        and flow["numpy_match"],
        "float16_vs_numpy_by_b": {b: c["float16_vs_numpy"] for b, c in by_b.items()},
        "float32_vs_numpy_by_b": {b: c["float32_vs_numpy"] for b, c in by_b.items()},
        # the least over B: the targets are judged on the worst batch size
        "float16_vs_numpy_b64_b256": min(
            by_b[64]["float16_vs_numpy"], by_b[256]["float16_vs_numpy"]
        ),
        "float16_vs_numpy_b1": by_b[1]["float16_vs_numpy"],
        "float16_vs_numpy_largest_n": {
            c["B"]: c["float16_vs_numpy"] for c in configs if c["N"] == plan["sizes"][-1]
        },
        "largest_n": plan["sizes"][-1],
        "bank_memory_ratio": flow["bank_memory_ratio"],
        "scan_fraction_of_bandwidth": scan["fraction_of_bandwidth"],
        "stream_float16_vs_numpy": flow["float16_vs_numpy"],
        "stream_float16_vs_float32": flow["float16_vs_float32"],
        "scan": scan,
        "configs": configs,
        "stream": flow,
        "wall_s": time.perf_counter() - t0,
    }


def _row(c: dict[str, Any]) -> str:
    ms = c["ms"]
    faiss = f"{ms['faiss_best']:.1f}" if "faiss_best" in ms else "-"
    return (
        f"| {c['N']:,} | {c['B']} | {ms['float16']:.2f} | {ms['float32']:.2f} | "
        f"{ms['numpy']:.2f} | {faiss} | {c['float16_vs_numpy']:.2f}× | "
        f"{c['float16_vs_float32']:.2f}× | {c['peak_extra_mb']['float16']:.0f} / "
        f"{c['peak_extra_mb']['numpy']:.0f} | "
        f"{'yes' if c['float16_equals_float32'] and c['numpy_match'] else 'NO'} |"
    )


def table(payload: dict[str, Any]) -> str:
    """The full run as bench/README.md shows it, from dedup_scale.json alone."""
    m, scan, flow = payload["machine"], payload["scan"], payload["stream"]
    return "\n".join(
        [
            f"Dedup at scale (τ={payload['tau']}, d={payload['d']}), on {m['cpu']}, "
            f"{m['cores']} cores, {m['memory_gib']} GiB (load {m['load_avg_1m']} at the start): "
            f"sgemm {payload['sgemm_gflops']:.0f} GFLOP/s, read bandwidth "
            f"{payload['read_bandwidth_gbs']:.1f} GB/s, in the same run. Milliseconds per "
            "decision, best of the same repeats in turns; peak extra MiB of one call, in a "
            "child process.",
            "",
            "| N | B | float16 ms | float32 ms | NumPy ms | FAISS best ms | float16 vs NumPy "
            "| float16 vs float32 | peak MiB float16 / NumPy | same decisions |",
            "|---|---|---|---|---|---|---|---|---|---|",
            *(_row(c) for c in payload["configs"]),
            "",
            f"The float16 scan at N={scan['N']:,} (a miss: the whole bank read, "
            f"{scan['bytes_read'] / 1e9:.2f} GB) ran at {scan['float16_scan_gbs']:.1f} GB/s, "
            f"{scan['fraction_of_bandwidth']:.2f} of the read bandwidth measured in turns with "
            f"it ({scan['read_bandwidth_gbs']:.1f} GB/s). The stream: {flow['batches']} batches "
            f"of {flow['B']} into banks growing from {flow['N_start']:,} to {flow['N_end']:,} "
            f"rows took {flow['seconds']['float16']:.2f} s on the float16 index, "
            f"{flow['seconds']['float32']:.2f} s on the float32 index and "
            f"{flow['seconds']['numpy']:.2f} s with NumPy; the float16 index held "
            f"{flow['bank_memory_ratio']:.2f} of the float32 index's bytes. FAISS is left out "
            "where its copy of the bank does not fit beside the float32 bank, the float16 bank "
            "and NumPy's N × B scores in this machine's memory.",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N=1e5 and a short stream, < 60 s")
    parser.add_argument("--peak-memory", nargs="+", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peak_memory:  # the child process of peaks_in_child: N, then the batch sizes
        n, *batches = args.peak_memory
        print(json.dumps(measure_peaks(n, tuple(batches))))
        return
    payload = run(QUICK if args.quick else FULL, repeat=2 if args.quick else 3)
    payload["mode"] = "quick" if args.quick else "full"
    path = write_result("dedup_scale_quick" if args.quick else "dedup_scale", payload)
    if not args.quick:
        replace_readme_block("dedup_scale", table(payload | read_result("dedup_scale")),
                             "## Dedup at scale: a float16 bank (`dedup_scale.py`)")  # fmt: skip
    for key in ("decisions_identical", "float16_vs_numpy_by_b", "bank_memory_ratio", "wall_s"):
        print(f"{key}: {payload[key]}")
    print(f"scan: {payload['scan']['fraction_of_bandwidth']:.2f} of the read bandwidth")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
