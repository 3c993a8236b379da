"""The one prepared run for a machine with a GPU: the encoder on the CUDA provider, the dedup
kernel at N=1e6 on the CPU, and the GPU kernel (``kernels.cuda``) at N=1e6 against CuPy's
matmul + max, each against its baselines in the same run.

    python -m bench device            # writes bench/results/device.json
    python -m bench device --quick    # N=1e5 and fewer texts: checks the script on any machine

Encoder: the same mixed-length texts through the CUDA provider (at several batch-token
budgets: a GPU wants far larger batches than the CPU's 512) and through the CPU provider with
this machine's cores, best of the same number of runs; the CUDA vectors are checked against the
stored reference vectors (cosine ≥ 0.999). Where onnxruntime has no working CUDA provider (the
CPU build, missing CUDA libraries, no GPU) the JSON says so and which providers it has, and the
CPU numbers stand alone: nothing is estimated. Kernel: ``dedup.run_config`` at N=1e6, d=384,
B ∈ {1, 64, 256} on this machine's cores (naive loop on the first 16 candidates, extrapolated
and labelled), with the NumPy baseline, FAISS at its best and sgemm in the same run, and the
B=1 scan against the read bandwidth measured in turns with it.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import best_time, write_result
from bench.dedup import make_bank, make_batch, make_faiss, run_config, scan_against_bandwidth
from bench.encoder import make_texts, rate
from bench.limits import sgemm_gflops
from rse_fast import kernels
from rse_fast.encoder import CPU, CUDA, Encoder

REFERENCE = Path(__file__).parent.parent / "tests" / "data" / "encoder_reference.json"
#: batch-token budgets tried on the GPU (the CPU's best is the encoder's default, 512)
GPU_BATCH_TOKENS = (512, 4096, 16384, 65536)


def reference_agreement(encoder: Encoder) -> float:
    """Least cosine between ``encoder``'s vectors and the stored reference vectors."""
    ref = json.loads(REFERENCE.read_text())
    got = encoder.encode(ref["texts"])
    want = np.array(ref["vectors"], np.float32)
    return float((np.einsum("ij,ij->i", got, want) / np.linalg.norm(want, axis=1)).min())


def encoder_part(n_texts: int, repeat: int) -> dict[str, Any]:
    import onnxruntime as ort

    texts = make_texts(n_texts, 3, 120, 3)
    cpu = Encoder(providers=[CPU], cache_size=0, threads=kernels.available_cores())
    tokens = cpu.count_tokens(texts)
    out: dict[str, Any] = {
        "texts": n_texts,
        "tokens": tokens,
        "onnxruntime": ort.__version__,
        "available_providers": ort.get_available_providers(),
        "cpu": rate(cpu.encode, texts, tokens, repeat),
    }
    gpu, why = None, "this onnxruntime build has no CUDA provider (onnxruntime-gpu has)"
    if CUDA in out["available_providers"]:
        try:
            gpu = Encoder(providers=[CUDA, CPU], cache_size=0)
        except Exception as exc:  # CUDA libraries missing or broken
            why = f"{type(exc).__name__}: {exc}"
        else:
            why = None if gpu.provider == CUDA else f"the session fell back to {gpu.provider}"
    if gpu is None or why is not None:
        out["cuda"] = None
        out["cuda_unavailable"] = why
        return out
    runs = {}
    for budget in GPU_BATCH_TOKENS:
        gpu.batch_tokens = max(budget, gpu.max_length)
        runs[str(budget)] = rate(gpu.encode, texts, tokens, repeat)
    best = max(runs, key=lambda k: runs[k]["tok_per_s"])
    out["cuda"] = {
        "by_batch_tokens": runs,
        "best_batch_tokens": int(best),
        **runs[best],
        "min_cosine_vs_reference": reference_agreement(gpu),
        "speedup_vs_cpu_provider": runs[best]["tok_per_s"] / out["cpu"]["tok_per_s"],
    }
    return out


def kernel_part(n: int) -> dict[str, Any]:
    kernels.set_threads()
    kernels.warmup()
    sgemm = sgemm_gflops()
    bank = make_bank(n, 384)
    faiss_index = make_faiss(bank)
    configs = [run_config(bank, b, faiss_index, sgemm, naive_limit=16) for b in (256, 64, 1)]
    del faiss_index
    scan, bandwidth = scan_against_bandwidth(bank)
    by_b = {c["B"]: c for c in configs}
    return {
        "N": n,
        "d": 384,
        "cores": kernels.available_cores(),
        "exact_match": all(
            c["exact_match"] and c["numpy_match"] and c.get("faiss_match", True) for c in configs
        )
        and scan["exact_match"],
        "speedup_vs_numpy_by_b": {b: c["speedup_vs_numpy"] for b, c in by_b.items()},
        "speedup_vs_faiss_best_by_b": {b: c.get("speedup_vs_faiss_best") for b, c in by_b.items()},
        "speedup_vs_naive": by_b[256]["speedup_vs_naive"],
        "naive_extrapolated": by_b[256]["naive_extrapolated"],
        "fraction_of_sgemm": by_b[256]["fraction_of_sgemm"],
        "fraction_of_sgemm_b64": by_b[64]["fraction_of_sgemm"],
        "sgemm_gflops": max(c["sgemm_gflops"] for c in configs),
        "read_bandwidth_gbs": bandwidth,
        "scan_fraction_of_bandwidth": scan["scan_gbs"] / bandwidth,
        "configs": [*configs, scan],
    }


def gpu_kernel_part(n: int, repeat: int = 5) -> dict[str, Any]:
    """The greedy kernel's bank pass on the GPU (``kernels.cuda``, a float32 mirror of the
    bank) against CuPy's matmul + max on the same device, B ∈ {1, 64, 256}, decisions checked
    against the CPU kernel's; where no GPU answers (or CuPy is missing) the JSON says why."""
    import os

    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return {"unavailable": "NUMBA_ENABLE_CUDASIM=1: the simulator is for tests, not timings"}
    try:
        from rse_fast.kernels import cuda as gpu
    except ImportError as exc:
        return {"unavailable": f"numba-cuda is not installed ({exc})"}
    if not gpu.available():
        return {"unavailable": "numba-cuda finds no CUDA device"}
    from numba import cuda

    bank = make_bank(n, 384)
    mirror = gpu.CudaRows(384, n)
    mirror.append(bank)
    out: dict[str, Any] = {"N": n, "d": 384, "device": cuda.get_current_device().name.decode()}
    try:
        import cupy as cp
    except ImportError as exc:
        cp, out["cupy_unavailable"] = None, str(exc)
    if cp is not None:
        bank_cp = cp.asarray(bank)
    for b in (256, 64, 1):
        batch = make_batch(bank, b)
        none = np.full(b, -1, np.int64)
        bound = mirror.bind(n, lambda ids: bank[ids])
        got = kernels.greedy_insert(bound, n, batch, 0.85, none, none)
        want = kernels.greedy_insert(bank, n, batch, 0.85, none, none)
        row: dict[str, Any] = {
            "B": b,
            "equals_cpu_kernel": all(np.array_equal(x, y) for x, y in zip(got, want, strict=True)),
        }

        def ours(bound: Any = bound, batch: np.ndarray = batch, none: np.ndarray = none) -> None:
            kernels.greedy_insert(bound, n, batch, 0.85, none, none)
            cuda.synchronize()

        row["kernel_ms"] = best_time(ours, repeat=repeat) * 1e3
        if cp is not None:
            batch_cp = cp.asarray(batch)

            def cupy_max(batch_cp: Any = batch_cp) -> None:
                cp.matmul(bank_cp, batch_cp.T).max(axis=0).get()

            row["cupy_matmul_max_ms"] = best_time(cupy_max, repeat=repeat) * 1e3
            row["speedup_vs_cupy"] = row["cupy_matmul_max_ms"] / row["kernel_ms"]
        out[str(b)] = row
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N=1e5, 64 texts")
    args = parser.parse_args()
    t0 = time.perf_counter()
    payload: dict[str, Any] = {"mode": "quick" if args.quick else "full"}
    payload["encoder"] = encoder_part(64 if args.quick else 2000, 3)
    print(json.dumps(payload["encoder"], default=str)[:2000], flush=True)
    payload["kernel"] = kernel_part(100_000 if args.quick else 1_000_000)
    payload["gpu_kernel"] = gpu_kernel_part(100_000 if args.quick else 1_000_000)
    print(json.dumps(payload["gpu_kernel"], default=str)[:2000], flush=True)
    payload["wall_s"] = time.perf_counter() - t0
    path = write_result("device_quick" if args.quick else "device", payload)
    enc, ker = payload["encoder"], payload["kernel"]
    cuda = enc["cuda"]
    print(
        "encoder: "
        + (
            f"CUDA {cuda['tok_per_s']:,.0f} tok/s ({cuda['speedup_vs_cpu_provider']:.1f}x the "
            f"CPU provider), min cosine {cuda['min_cosine_vs_reference']:.5f}"
            if cuda
            else f"no CUDA provider ({enc['cuda_unavailable']}); "
            f"CPU {enc['cpu']['tok_per_s']:,.0f} tok/s"
        )
    )
    faiss = ker["speedup_vs_faiss_best_by_b"][256]
    print(
        f"kernel N={ker['N']:,}: "
        + (f"{faiss:.2f}x FAISS at its best, " if faiss is not None else "no FAISS installed, ")
        + f"{ker['fraction_of_sgemm']:.2f} of sgemm (B=64: {ker['fraction_of_sgemm_b64']:.2f}), "
        f"scan {ker['scan_fraction_of_bandwidth']:.2f} of bandwidth, exact {ker['exact_match']}"
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
