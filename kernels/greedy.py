"""Exact incremental greedy deduplication of a batch against a bank.

Phase 1 folds tiled BLAS GEMMs of the used bank rows against the batch into a running
max/argmax, so no B×N matrix is ever materialised. Phase 2 takes the B×B Gram of the batch and
walks candidates in order in Numba. B=1 takes chunked BLAS mat-vecs with early exit instead
(faster than a Numba scan where it was measured: docs/decisions.md).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import tuning
from ._jit import (
    first_exact_hit,
    greedy_walk,
    is_hit,
    update_running_max,
    update_running_max_cols,
)
from .tuning import TilePlan

#: The fewest rows per chunk of the B=1 scan.
MIN_TILE_ROWS = 4096
#: Bytes of bank rows per mat-vec of the B=1 scan: large enough that BLAS's thread wake-ups
#: are paid rarely, small enough that an early exit saves most of a scan. The scan reads the
#: bank once at the memory's bandwidth, as one whole mat-vec does (docs/decisions.md has the
#: chunk sizes measured).
SCAN_BYTES = 1 << 26


class GreedyDecisions(NamedTuple):
    """Per candidate: accepted flag, similarity to ``match`` and the row id it refers to.

    Row ids below the bank size are bank rows; ``n_bank + r`` is the r-th accepted candidate of
    this batch. ``match`` is -1 (and similarity -inf) when there was nothing to compare with.
    """

    accepted: np.ndarray
    similarity: np.ndarray
    match: np.ndarray


def tie_band(dim: int) -> float:
    """Half-width around τ inside which float32 dot products are recomputed in float64.

    Bounds the float32 rounding error of a d-term dot of unit vectors (≤ d·2⁻²⁴) with room.
    """
    return max(1e-4, 4.0 * dim * 2.0**-24)


def bank_max_tiled(
    rows: np.ndarray, n: int, batch: np.ndarray, plan: TilePlan | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Max similarity and its row for each candidate against ``rows[:n]``, tile by tile, in
    the layout and tile height ``plan`` says (default: this CPU's, see ``tuning``)."""
    b, d = batch.shape
    best = np.full(b, -np.inf, np.float32)
    best_row = np.full(b, -1, np.int64)
    if n == 0:
        return best, best_row
    if plan is None:
        plan = tuning.plan_for(d, b, bank_max_tiled) if b > 1 else tuning.DEFAULT
    tile = min(plan.tile_rows, n)
    flat = np.empty(tile * b, np.float32)  # each tile's scores, contiguous
    for start in range(0, n, tile):
        stop = min(n, start + tile)
        if plan.layout == "rows":
            scores = flat[: (stop - start) * b].reshape(stop - start, b)
            np.matmul(rows[start:stop], batch.T, out=scores)
            update_running_max(scores, start, best, best_row)
        else:
            scores = flat[: (stop - start) * b].reshape(b, stop - start)
            np.matmul(batch, rows[start:stop].T, out=scores)
            update_running_max_cols(scores, start, best, best_row)
    return best, best_row


def scan_one(
    rows: np.ndarray, n: int, v: np.ndarray, tau: float, band: float
) -> tuple[int, float, float, int]:
    """B=1: (hit_row, hit_sim, max_sim, max_row) over ``rows[:n]``, chunk by chunk.

    The hit is the lowest row whose exact similarity is >= τ; the scan stops at the end of the
    chunk that holds it. Without a hit, ``max_sim``/``max_row`` are the first maximum.
    """
    chunk = max(MIN_TILE_ROWS, SCAN_BYTES // (4 * v.shape[0]))
    buf = np.empty(min(chunk, n), np.float32)
    max_sim, max_row = -np.inf, -1
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        sims = buf[: stop - start]
        np.matmul(rows[start:stop], v, out=sims)
        top_at = int(sims.argmax())
        top = float(sims[top_at])
        if top >= tau - band:
            for k in np.flatnonzero(sims >= tau - band):
                s = float(sims[k])
                if is_hit(s, rows[start + k], v, tau, band):
                    return start + int(k), s, max_sim, max_row
        if top > max_sim:
            max_sim, max_row = top, start + top_at
    return -1, float("nan"), max_sim, max_row


def greedy_insert(
    rows: np.ndarray,
    n: int,
    batch: np.ndarray,
    tau: float,
    bank_dup_row: np.ndarray,
    dup_of: np.ndarray,
    plan: TilePlan | None = None,
) -> GreedyDecisions:
    """Decide which rows of ``batch`` join the bank ``rows[:n]`` under the greedy rule.

    ``batch`` must be L2-normalised float32 (validated by the caller). ``bank_dup_row[j]`` is the
    bank row that candidate j duplicates exactly (or -1); ``dup_of[j]`` the earlier candidate of
    the batch it duplicates (or -1). Nothing is written to ``rows``: the caller appends.
    ``plan``: how the bank GEMM is tiled (default: this CPU's measured plan).
    """
    b, dim = batch.shape
    band = tie_band(dim)
    accepted = np.zeros(b, np.bool_)
    sim = np.full(b, -np.inf, np.float32)
    match = np.full(b, -1, np.int64)
    if b == 0:
        return GreedyDecisions(accepted, sim, match)
    if b == 1 and dup_of[0] < 0 and bank_dup_row[0] < 0:
        hit_row, hit_sim, max_sim, max_row = scan_one(rows, n, batch[0], tau, band)
        if hit_row >= 0:
            sim[0], match[0] = hit_sim, hit_row
        else:
            accepted[0] = True
            sim[0], match[0] = max_sim, max_row
        return GreedyDecisions(accepted, sim, match)

    bank_max, bank_max_row = bank_max_tiled(rows, n, batch, plan)
    bank_hit_row = np.full(b, -1, np.int64)
    for j in range(b):
        if bank_dup_row[j] >= 0:
            bank_hit_row[j] = bank_dup_row[j]
            bank_max[j] = 1.0
        elif bank_max[j] >= tau + band:
            bank_hit_row[j] = bank_max_row[j]
        elif bank_max[j] >= tau - band:  # inside the tie band: settle it exactly
            row, exact = first_exact_hit(rows, n, batch[j], tau, band)
            if row >= 0:
                bank_hit_row[j] = row
                bank_max[j] = exact
                bank_max_row[j] = row
    gram = batch @ batch.T
    greedy_walk(
        batch,
        gram,
        bank_hit_row,
        bank_max,
        bank_max_row,
        dup_of,
        tau,
        band,
        n,
        accepted,
        sim,
        match,
    )
    return GreedyDecisions(accepted, sim, match)
