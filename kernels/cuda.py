"""The greedy kernel's bank pass on a GPU, through Numba's CUDA target (``numba-cuda``).

The device keeps a float32 copy of the bank and, per batch, computes every score in shared-
memory tiles, each candidate's maximum, and the few rows that can still matter: those within
twice the score error of the maximum and, for a single candidate, those within the error of
τ. Only those row ids come back; the host re-scores them exactly from its own rows, so the
decisions, rows and similarities are the CPU kernel's (``greedy.greedy_insert`` with this bank).
Imported only when a GPU is used (or under ``NUMBA_ENABLE_CUDASIM=1``, where the tests run it).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import cuda, float32

from .banks import DeviceRows, tie_band

#: Side of the square tiles of the score kernel (threads per block: TILE²).
TILE = 16
#: Threads per block of the reduction and collection kernels.
THREADS = 256
#: Rows kept per candidate by the collection kernel before its scores are copied back whole.
CAP = 64
#: Device bytes of scores per pass: a larger bank is scored in chunks of rows.
SCORE_BYTES = 1 << 30


def available() -> bool:
    """Whether a CUDA device (or the simulator) can run these kernels."""
    try:
        return bool(cuda.is_available())
    except Exception:  # a driver that fails to initialise is no GPU
        return False


@cuda.jit
def _scores(bank: Any, queries: Any, start: int, stop: int, out: Any) -> None:
    """out[j, i - start] = bank[i] · queries[j] for i in [start, stop), in TILE² tiles."""
    tile_q = cuda.shared.array((TILE, TILE), float32)
    tile_b = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    first = start + cuda.blockIdx.x * TILE
    j = cuda.blockIdx.y * TILE + ty
    b, d = queries.shape[0], queries.shape[1]
    acc = float32(0.0)
    for k0 in range(0, d, TILE):
        k = k0 + tx
        tile_q[ty, tx] = queries[j, k] if j < b and k < d else float32(0.0)
        r = first + ty
        tile_b[ty, tx] = bank[r, k] if r < stop and k < d else float32(0.0)
        cuda.syncthreads()
        for kk in range(TILE):
            acc += tile_q[ty, kk] * tile_b[tx, kk]
        cuda.syncthreads()
    i = first + tx
    if i < stop and j < b:
        out[j, i - start] = acc


@cuda.jit
def _block_max(scores: Any, width: int, block_max: Any) -> None:
    """block_max[j, blk]: the maximum of scores[j, blk*THREADS : (blk+1)*THREADS]."""
    shared = cuda.shared.array(THREADS, float32)
    t = cuda.threadIdx.x
    blk, j = cuda.blockIdx.x, cuda.blockIdx.y
    i = blk * THREADS + t
    shared[t] = scores[j, i] if i < width else float32(-math.inf)
    cuda.syncthreads()
    step = THREADS // 2
    while step > 0:
        if t < step and shared[t + step] > shared[t]:
            shared[t] = shared[t + step]
        cuda.syncthreads()
        step //= 2
    if t == 0:
        block_max[j, blk] = shared[0]


@cuda.jit
def _collect(scores: Any, width: int, offset: int, floor: Any, rows: Any, count: Any) -> None:
    """Append (unordered) every row whose score is >= floor[j] to rows[j], counting all."""
    i = cuda.blockIdx.x * THREADS + cuda.threadIdx.x
    j = cuda.blockIdx.y
    if i < width and scores[j, i] >= floor[j]:
        at = cuda.atomic.add(count, j, 1)
        if at < rows.shape[1]:
            rows[j, at] = offset + i


def _floor32(x: np.ndarray) -> np.ndarray:
    """float32 values no greater than ``x`` (so a comparison on the device loses no row)."""
    f = x.astype(np.float32)
    return np.where(f > x, np.nextafter(f, np.float32(-np.inf)), f)


class BoundCudaRows(DeviceRows):
    """The device mirror's first ``n`` rows, with the host's exact rows to re-score from."""

    def __init__(self, mirror: CudaRows, n: int, exact_rows: Any) -> None:
        self.mirror, self.n, self.dim, self.error = mirror, n, mirror.dim, mirror.error
        self._exact = exact_rows

    def candidates(self, batch: np.ndarray, floor: np.ndarray | None) -> list[np.ndarray]:
        return self.mirror.candidates(batch, floor, self.n)

    def exact_rows(self, ids: np.ndarray) -> np.ndarray:
        return np.asarray(self._exact(ids))


class CudaRows:
    """A float32 mirror of a bank on the device, appended as the host bank grows."""

    def __init__(self, dim: int, capacity: int = 1024) -> None:
        self.dim = dim
        self.n = 0
        self.error = tie_band(dim)
        self._rows = cuda.device_array((max(1, capacity), dim), np.float32)

    def append(self, rows: np.ndarray) -> None:
        k = rows.shape[0]
        if k == 0:
            return
        if self.n + k > self._rows.shape[0]:
            cap = self._rows.shape[0]
            while cap < self.n + k:
                cap *= 2
            grown = cuda.device_array((cap, self.dim), np.float32)
            if self.n:
                grown[: self.n].copy_to_device(self._rows[: self.n])
            self._rows = grown
        self._rows[self.n : self.n + k].copy_to_device(np.ascontiguousarray(rows, np.float32))
        self.n += k

    def reset(self, rows: np.ndarray) -> None:
        """Mirror ``rows`` afresh (after a row is replaced or removed on the host)."""
        self.n = 0
        self.append(rows)

    def bind(self, n: int, exact_rows: Any) -> BoundCudaRows:
        return BoundCudaRows(self, n, exact_rows)

    def candidates(self, batch: np.ndarray, floor: np.ndarray | None, n: int) -> list[np.ndarray]:
        """Per candidate, the ascending ids of rows ``[0, n)`` whose score is within twice the
        error of its maximum or (where ``floor`` is given) at least ``floor[j]``."""
        b = batch.shape[0]
        window = 2.0 * self.error
        queries = cuda.to_device(np.ascontiguousarray(batch, np.float32))
        chunk = max(TILE, min(n, SCORE_BYTES // (4 * max(1, b))))
        scores = cuda.device_array((b, chunk), np.float32)
        parts: list[list[np.ndarray]] = [[] for _ in range(b)]
        for start in range(0, n, chunk):
            stop = min(n, start + chunk)
            width = stop - start
            grid = (math.ceil(width / TILE), math.ceil(b / TILE))
            _scores[grid, (TILE, TILE)](self._rows, queries, start, stop, scores)
            blocks = math.ceil(width / THREADS)
            block_max = cuda.device_array((b, blocks), np.float32)
            _block_max[(blocks, b), THREADS](scores, width, block_max)
            chunk_top = block_max.copy_to_host().max(axis=1).astype(np.float64)
            lows = chunk_top - window if floor is None else np.minimum(chunk_top - window, floor)
            for j, ids in enumerate(self._rows_at_least(scores, width, start, lows, b)):
                parts[j].append(ids)
        return [np.unique(np.concatenate(p)) if p else np.empty(0, np.int64) for p in parts]

    def _rows_at_least(
        self, scores: Any, width: int, start: int, lows: np.ndarray, b: int
    ) -> list[np.ndarray]:
        rows = cuda.device_array((b, CAP), np.int64)
        count = cuda.to_device(np.zeros(b, np.int64))
        floor = cuda.to_device(_floor32(lows))
        blocks = math.ceil(width / THREADS)
        _collect[(blocks, b), THREADS](scores, width, start, floor, rows, count)
        counts, got = count.copy_to_host(), rows.copy_to_host()
        out = []
        for j in range(b):
            if counts[j] <= CAP:
                out.append(got[j, : counts[j]])
            else:  # crowded: this candidate's scores come back whole
                row = scores[j, :width].copy_to_host()
                out.append(start + np.flatnonzero(row >= _floor32(lows[j : j + 1])[0]))
        return out
