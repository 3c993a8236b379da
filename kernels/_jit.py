"""Numba kernels for exact greedy deduplication.

Compiled lazily on first call (``cache=True`` keeps the machine code on disk), never at import.
Similarities are float32 dot products of L2-normalised rows; any value within ``band`` of τ is
recomputed as a float64 dot in index order, so decisions follow one exact rule whatever the
summation order of BLAS or SIMD code was.
"""

from __future__ import annotations

import numba as nb
import numpy as np

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


@nb.njit(cache=True, nogil=True)
def exact_dot(a: np.ndarray, b: np.ndarray) -> float:
    """Reference float64 dot product in index order: the tie-breaking definition of similarity."""
    s = 0.0
    for k in range(a.shape[0]):
        s += np.float64(a[k]) * np.float64(b[k])
    return s


@nb.njit(cache=True, nogil=True, fastmath=True)
def fast_dot(a: np.ndarray, b: np.ndarray) -> float:
    """SIMD float32 dot product (reassociated; only trusted outside the tie band), returned
    widened to float64 (exact), as every caller compares it with a float64 τ."""
    s = np.float32(0.0)
    for k in range(a.shape[0]):
        s += a[k] * b[k]
    return float(s)


@nb.njit(cache=True, nogil=True)
def is_hit(s32: float, a: np.ndarray, b: np.ndarray, tau: float, band: float) -> bool:
    """Decide ``sim(a, b) >= tau`` exactly, recomputing in float64 only inside the tie band."""
    if s32 < tau - band:
        return False
    if s32 >= tau + band:
        return True
    return exact_dot(a, b) >= tau


@nb.njit(cache=True, nogil=True)
def row_digests(rows: np.ndarray) -> np.ndarray:
    """FNV-1a over the raw 32-bit words of each row: the exact-duplicate shortcut's key."""
    n, d = rows.shape
    words = rows.view(np.uint32)
    out = np.empty(n, np.uint64)
    for i in range(n):
        h = _FNV_OFFSET
        for k in range(d):
            h = (h ^ np.uint64(words[i, k])) * _FNV_PRIME
        out[i] = h
    return out


@nb.njit(cache=True, nogil=True)
def update_running_max(
    scores: np.ndarray, row_offset: int, best: np.ndarray, best_row: np.ndarray
) -> None:
    """Fold one (T, B) tile of similarities into the per-candidate running max/argmax."""
    t, b = scores.shape
    for i in range(t):
        for j in range(b):
            v = scores[i, j]
            if v > best[j]:
                best[j] = v
                best_row[j] = row_offset + i


@nb.njit(cache=True, nogil=True)
def update_running_max_cols(
    scores: np.ndarray, row_offset: int, best: np.ndarray, best_row: np.ndarray
) -> None:
    """Fold one (B, T) tile into the running max/argmax: each candidate's row of the tile is
    contiguous. The first maximum in row order wins, as in the (T, B) layout."""
    b, t = scores.shape
    for j in range(b):
        top = best[j]
        at = best_row[j]
        for i in range(t):
            v = scores[j, i]
            if v > top:
                top = v
                at = row_offset + i
        best[j] = top
        best_row[j] = at


@nb.njit(cache=True, nogil=True)
def first_exact_hit(
    rows: np.ndarray, n: int, v: np.ndarray, tau: float, band: float
) -> tuple[int, float]:
    """First used row whose exact similarity to ``v`` is >= τ, as (row, sim); (-1, nan) if none.

    Only called for candidates whose float32 maximum fell inside the tie band (rare).
    """
    for i in range(n):
        s = fast_dot(rows[i], v)
        if s >= tau - band:
            e = exact_dot(rows[i], v)
            if e >= tau:
                return i, e
    return -1, np.nan


@nb.njit(cache=True, nogil=True)
def greedy_walk(
    batch: np.ndarray,
    gram: np.ndarray,
    bank_hit_row: np.ndarray,
    bank_max: np.ndarray,
    bank_max_row: np.ndarray,
    dup_of: np.ndarray,
    tau: float,
    band: float,
    n_bank: int,
    accepted: np.ndarray,
    sim_out: np.ndarray,
    match_out: np.ndarray,
) -> None:
    """Walk candidates in order: reject on a bank hit, else on a hit against an earlier accepted
    candidate, else accept. ``match_out`` holds the row id (bank row, or ``n_bank + rank`` for an
    accepted batch candidate) of the most similar row, which caused the rejection if any.
    """
    b = batch.shape[0]
    accepted_pos = np.empty(b, np.int64)
    accepted_row = np.full(b, -1, np.int64)
    n_acc = 0
    for j in range(b):
        d = dup_of[j]
        if d >= 0:  # exact duplicate of an earlier candidate in this batch
            accepted[j] = False
            if accepted[d]:
                sim_out[j] = 1.0
                match_out[j] = accepted_row[d]
            else:
                sim_out[j] = sim_out[d]
                match_out[j] = match_out[d]
            continue
        if bank_hit_row[j] >= 0:
            accepted[j] = False
            sim_out[j] = bank_max[j]
            match_out[j] = bank_hit_row[j]
            continue
        best_s = bank_max[j]
        best_r = bank_max_row[j]
        hit_s = -np.inf
        hit_r = -1
        for a in range(n_acc):
            k = accepted_pos[a]
            s = gram[j, k]
            if s > best_s:
                best_s = s
                best_r = n_bank + a
            if s >= tau - band and s > hit_s and is_hit(s, batch[j], batch[k], tau, band):
                hit_s = s
                hit_r = n_bank + a
        if hit_r >= 0:
            accepted[j] = False
            sim_out[j] = hit_s
            match_out[j] = hit_r
        else:
            accepted[j] = True
            sim_out[j] = best_s
            match_out[j] = best_r
            accepted_pos[n_acc] = j
            accepted_row[j] = n_bank + n_acc
            n_acc += 1
