"""This machine's limits, which no kernel in a run can beat: the streaming read bandwidth (the
best of four read kernels on all cores) and the dense matrix multiply's rate (sgemm). A speed
figure is reported against them, measured in the same run."""

from __future__ import annotations

import numba as nb
import numpy as np

from bench.common import best_time
from rse_fast import kernels


@nb.njit(parallel=True, fastmath=True, cache=True)
def _row_sums(a: np.ndarray) -> np.ndarray:
    n, d = a.shape
    out = np.zeros(n, np.float32)
    for i in nb.prange(n):
        s = np.float32(0.0)
        for k in range(d):
            s += a[i, k]
        out[i] = s
    return out


@nb.njit(parallel=True, fastmath=True, cache=True)
def _chunk_sums(flat: np.ndarray, chunks: int) -> np.ndarray:
    """Sum of each of ``chunks`` contiguous slices, eight independent accumulators each (no
    dependency chain: the loop runs at the memory's pace, not the adder's latency)."""
    size = flat.shape[0] // chunks
    out = np.zeros(chunks, np.float32)
    for c in nb.prange(chunks):
        acc = np.zeros(8, np.float32)
        base = c * size
        for i in range(0, size - 7, 8):
            for k in range(8):
                acc[k] += flat[base + i + k]
        out[c] = acc.sum()
    return out


@nb.njit(parallel=True, fastmath=True, cache=True)
def _row_dots(a: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Every row dotted with one vector: the access pattern of a B=1 scan, as a plain read."""
    n, d = a.shape
    out = np.empty(n, np.float32)
    for i in nb.prange(n):
        s = np.float32(0.0)
        for k in range(d):
            s += a[i, k] * v[k]
        out[i] = s
    return out


def read_bandwidth_gbs(a: np.ndarray, repeat: int = 5) -> float:
    """This machine's streaming read bandwidth over ``a`` (far larger than the caches): the best
    of four streaming-read kernels on all cores — a Numba row sum, a Numba chunked sum with
    independent accumulators, a Numba row-times-vector pass (the scan's own access pattern) and
    a BLAS sgemv — so the limit is as high as anything in the run can read."""
    flat = a.reshape(-1)
    chunks = 64 * kernels.available_cores()
    _row_sums(a[:16])
    _chunk_sums(flat[: 1 << 16], 4)
    ones = np.ones(a.shape[1], np.float32)
    _row_dots(a[:16], ones)
    t = min(
        best_time(lambda: _row_sums(a), repeat=repeat),
        best_time(lambda: _row_dots(a, ones), repeat=repeat),
        best_time(lambda: _chunk_sums(flat, chunks), repeat=repeat),
        best_time(lambda: a @ ones, repeat=repeat),
    )
    return a.nbytes / t / 1e9


def sgemm_gflops(size: int = 1536) -> float:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    out = np.empty_like(a)
    np.matmul(a, b, out=out)
    return 2 * size**3 / best_time(lambda: np.matmul(a, b, out=out), repeat=3) / 1e9
