"""Numba kernels for exact greedy deduplication.

Compiled lazily on first call (``cache=True`` keeps the machine code on disk), never at import.
Similarities are approximate dot products of L2-normalised rows (float32 BLAS, or decoded
half-precision rows); every value the error bound cannot settle is recomputed as a float64 dot
in index order, so decisions follow one exact rule whatever the storage or summation order.
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


@nb.njit(cache=True, nogil=True, inline="always")
def _offer(
    v: float,
    row: int,
    j: int,
    window: float,
    best: np.ndarray,
    near_row: np.ndarray,
    near_score: np.ndarray,
    near_n: np.ndarray,
) -> None:
    """Keep ``row`` among candidate j's near-maximum rows if its score is within ``window`` of
    the running maximum; a new maximum drops the rows it leaves behind. More than K rows
    within the window marks the candidate overflowed (``near_n = K + 1``): it is re-scanned."""
    k_cap = near_row.shape[1]
    if v > best[j]:
        best[j] = v
        count = near_n[j]
        if count <= k_cap:
            keep = 0
            for e in range(count):
                if near_score[j, e] >= v - window:
                    near_row[j, keep] = near_row[j, e]
                    near_score[j, keep] = near_score[j, e]
                    keep += 1
            near_n[j] = keep
    count = near_n[j]
    if count < k_cap:
        near_row[j, count] = row
        near_score[j, count] = v
        near_n[j] = count + 1
    else:
        near_n[j] = k_cap + 1


@nb.njit(cache=True, nogil=True)
def fold_near_rows(
    scores: np.ndarray,
    row_offset: int,
    window: float,
    best: np.ndarray,
    near_row: np.ndarray,
    near_score: np.ndarray,
    near_n: np.ndarray,
) -> None:
    """Fold one (T, B) tile of approximate scores into each candidate's running maximum and
    the rows within ``window`` of it."""
    t, b = scores.shape
    for i in range(t):
        for j in range(b):
            v = scores[i, j]
            if v >= best[j] - window:
                _offer(v, row_offset + i, j, window, best, near_row, near_score, near_n)


@nb.njit(cache=True, nogil=True)
def fold_near_cols(
    scores: np.ndarray,
    row_offset: int,
    window: float,
    best: np.ndarray,
    near_row: np.ndarray,
    near_score: np.ndarray,
    near_n: np.ndarray,
) -> None:
    """As :func:`fold_near_rows` for a (B, T) tile, whose candidate rows are contiguous."""
    b, t = scores.shape
    for j in range(b):
        floor = best[j] - window
        for i in range(t):
            v = scores[j, i]
            if v >= floor:
                _offer(v, row_offset + i, j, window, best, near_row, near_score, near_n)
                floor = best[j] - window


@nb.njit(cache=True, nogil=True)
def settle_pairs(
    rows: np.ndarray,
    pair_cand: np.ndarray,
    pair_row: np.ndarray,
    batch: np.ndarray,
    best: np.ndarray,
    best_row: np.ndarray,
) -> None:
    """Exact maximum per candidate over its (row id, exact row) pairs: the highest
    ``exact_dot``, the lowest row id among equals. ``best`` starts at -inf, ``best_row`` at -1."""
    for p in range(pair_cand.shape[0]):
        j = pair_cand[p]
        s = exact_dot(rows[p], batch[j])
        r = pair_row[p]
        if s > best[j] or (s == best[j] and r < best_row[j]):
            best[j] = s
            best_row[j] = r


@nb.njit(cache=True, nogil=True, fastmath=True)
def _chunk_max(sims: np.ndarray) -> float:
    top = np.float32(-np.inf)
    for i in range(sims.shape[0]):
        top = max(top, sims[i])
    return float(top)


@nb.njit(cache=True, nogil=True)
def chunk_summary(
    sims: np.ndarray, floor: float, window: float, near: np.ndarray
) -> tuple[float, int, int]:
    """One chunk of a B=1 scan: (its maximum, the first index whose score is >= ``floor`` or
    -1, how many scores are within ``window`` of the maximum), the indices of the latter in
    ``near`` (as many as fit; the count says whether all did). The maximum is a vectorised
    pass; the other two look only where the maximum says there is something to find."""
    top = _chunk_max(sims)
    first = -1
    if top >= floor:
        for i in range(sims.shape[0]):
            if sims[i] >= floor:
                first = i
                break
    count = 0
    low = top - window
    for i in range(sims.shape[0]):
        if sims[i] >= low:
            if count < near.shape[0]:
                near[count] = i
            count += 1
    return top, first, count


@nb.njit(cache=True, nogil=True, fastmath=True)
def small_matmul_nt(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out = a @ b.T`` on this thread, for products too small to be worth waking BLAS's
    threads (their wake-up waited for a core behind the encoder's spinning threads)."""
    for i in range(a.shape[0]):
        for j in range(b.shape[0]):
            s = np.float32(0.0)
            for k in range(a.shape[1]):
                s += a[i, k] * b[j, k]
            out[i, j] = s


@nb.njit(cache=True, nogil=True)
def first_at_least(rows: np.ndarray, v: np.ndarray, tau: float) -> tuple[int, float]:
    """First of ``rows`` whose exact similarity to ``v`` is >= τ, as (index, sim); (-1, nan)."""
    for i in range(rows.shape[0]):
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
