"""Exact incremental greedy deduplication of a batch against a bank.

Phase 1 folds tiled GEMMs of the bank's rows against the batch into each candidate's running
maximum and the rows within twice the score error of it, so no B×N matrix is ever
materialised; those few rows are re-scored exactly, which gives the exact maximum and its
first row whatever the store (float32 or half) or the BLAS summation order. Phase 2 takes the
B×B Gram of the batch and walks candidates in order in Numba. B=1 takes chunked scans with
early exit instead (docs/decisions.md).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import tuning
from ._jit import (
    chunk_summary,
    first_at_least,
    fold_near_cols,
    fold_near_rows,
    greedy_walk,
    settle_pairs,
)
from .banks import BankRows, DeviceRows, as_bank, matmul_nt, tie_band
from .tuning import TilePlan

#: The fewest rows per chunk of the B=1 scan.
MIN_TILE_ROWS = 4096
#: Bytes of bank rows per chunk of the B=1 scan: large enough that BLAS's thread wake-ups
#: are paid rarely, small enough that an early exit saves most of a scan.
SCAN_BYTES = 1 << 26
#: Rows kept per candidate within the window of its running maximum before it is re-scanned.
NEAR_ROWS = 16
#: Possible hits of the B=1 scan re-scored exactly per read of the exact rows.
HIT_GROUP = 64


class GreedyDecisions(NamedTuple):
    """Per candidate: accepted flag, similarity to ``match`` and the row id it refers to.

    Row ids below the bank size are bank rows; ``n_bank + r`` is the r-th accepted candidate of
    this batch. ``match`` is -1 (and similarity -inf) when there was nothing to compare with.
    """

    accepted: np.ndarray
    similarity: np.ndarray
    match: np.ndarray


def settle_rows(
    bank: BankRows | DeviceRows, batch: np.ndarray, cands: np.ndarray, rows: np.ndarray, b: int
) -> tuple[np.ndarray, np.ndarray]:
    """Exact maximum (float64) and its lowest row per candidate over the (cand, row) pairs."""
    best = np.full(b, -np.inf)
    best_row = np.full(b, -1, np.int64)
    if rows.size:
        settle_pairs(bank.exact_rows(rows), cands, rows, batch, best, best_row)
    return best, best_row


def _near_of_scores(scores: np.ndarray, start: int, window: float) -> np.ndarray:
    return start + np.flatnonzero(scores >= scores.max() - window)


def _rescan_near(bank: BankRows, query_row: np.ndarray, window: float) -> np.ndarray:
    """Every row within ``window`` of the maximum, from a whole scan (an overflowed candidate)."""
    scores = np.empty(bank.n, np.float32)
    bank.scan(0, bank.n, query_row, scores)
    return _near_of_scores(scores, 0, window)


def _settle_lists(
    bank: BankRows | DeviceRows, batch: np.ndarray, near: list[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    cands = [np.full(ids.shape[0], j, np.int64) for j, ids in enumerate(near)]
    return settle_rows(bank, batch, np.concatenate(cands), np.concatenate(near), len(near))


def bank_max_exact(
    rows: np.ndarray | BankRows | DeviceRows,
    n: int,
    batch: np.ndarray,
    plan: TilePlan | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact maximum similarity (float64) and its first row for each candidate against the
    bank's rows ``[0, n)``, tile by tile in the layout and height ``plan`` says (default: this
    CPU's, see ``tuning``), or on the bank's device."""
    bank = as_bank(rows, n)
    b = batch.shape[0]
    if n == 0 or b == 0:
        return np.full(b, -np.inf), np.full(b, -1, np.int64)
    if isinstance(bank, DeviceRows):
        return _settle_lists(bank, batch, bank.candidates(batch, None))
    if plan is None:
        plan = tuning.plan_for(bank.dim, b, bank_max_tiled) if b > 1 else tuning.DEFAULT
    window = 2.0 * bank.error
    query = bank.query(batch)
    best = np.full(b, -np.inf, np.float32)
    near_row = np.empty((b, NEAR_ROWS), np.int64)
    near_score = np.empty((b, NEAR_ROWS), np.float32)
    near_n = np.zeros(b, np.int64)
    tile = min(plan.tile_rows, n)
    flat = np.empty(tile * b, np.float32)  # each tile's scores, contiguous
    cols = plan.layout == "cols"
    fold = fold_near_cols if cols else fold_near_rows
    for start in range(0, n, tile):
        stop = min(n, start + tile)
        shape = (b, stop - start) if cols else (stop - start, b)
        scores = flat[: (stop - start) * b].reshape(shape)
        bank.tile(start, stop, query, scores, cols)
        fold(scores, start, window, best, near_row, near_score, near_n)
    near = [
        near_row[j, : near_n[j]] if near_n[j] <= NEAR_ROWS else _rescan_near(bank, query[j], window)
        for j in range(b)
    ]
    return _settle_lists(bank, batch, near)


def bank_max_tiled(
    rows: np.ndarray | BankRows | DeviceRows,
    n: int,
    batch: np.ndarray,
    plan: TilePlan | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`bank_max_exact` with the maxima as float32 (how the index reports them)."""
    best, best_row = bank_max_exact(rows, n, batch, plan)
    return best.astype(np.float32), best_row


def scan_one(
    bank: BankRows | DeviceRows, v: np.ndarray, tau: float
) -> tuple[int, float, float, int]:
    """B=1: (hit_row, hit_sim, max_sim, max_row) over the bank, chunk by chunk.

    The hit is the lowest row whose exact similarity is >= τ; the scan stops at the end of the
    chunk that holds it. Without a hit, ``max_sim``/``max_row`` are the exact maximum and its
    first row. Similarities are exact (float64).
    """
    n, error = bank.n, bank.error
    if isinstance(bank, DeviceRows):
        return _device_scan_one(bank, v, tau)
    window = 2.0 * error
    query = bank.query(v[None, :])[0]
    chunk = max(MIN_TILE_ROWS, SCAN_BYTES // bank.row_bytes)
    buf = np.empty(min(chunk, n), np.float32)
    near_buf = np.empty(NEAR_ROWS, np.int64)
    top = -np.inf
    near_ids = np.empty(0, np.int64)
    near_scores = np.empty(0, np.float32)
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        sims = buf[: stop - start]
        bank.scan(start, stop, query, sims)
        chunk_top, first, count = chunk_summary(sims, tau - error, window, near_buf)
        if first >= 0:
            maybe = start + first + np.flatnonzero(sims[first:] >= tau - error)
            hit_row, hit_sim = _first_hit(bank, v, maybe, tau)
            if hit_row >= 0:
                return hit_row, hit_sim, np.nan, -1
        if chunk_top >= top - window:
            top = max(top, chunk_top)
            if count <= near_buf.shape[0]:
                ids = start + near_buf[:count]
            else:
                ids = _near_of_scores(sims, start, window)
            near_ids = np.concatenate([near_ids, ids])
            near_scores = np.concatenate([near_scores, sims[ids - start]])
            keep = near_scores >= top - window
            near_ids, near_scores = near_ids[keep], near_scores[keep]
    if near_ids.size == 0:
        return -1, float("nan"), -np.inf, -1
    best, best_row = settle_rows(bank, v[None, :], np.zeros(near_ids.size, np.int64), near_ids, 1)
    return -1, float("nan"), float(best[0]), int(best_row[0])


def _device_scan_one(bank: DeviceRows, v: np.ndarray, tau: float) -> tuple[int, float, float, int]:
    """:func:`scan_one` from the device's candidate rows: rows that may reach τ and the rows
    near the maximum (none of which can reach τ unless it is also a possible hit)."""
    ids = bank.candidates(v[None, :], np.array([tau - bank.error]))[0]
    hit_row, hit_sim = _first_hit(bank, v, ids, tau)
    if hit_row >= 0:
        return hit_row, hit_sim, np.nan, -1
    best, best_row = _settle_lists(bank, v[None, :], [ids])
    return -1, float("nan"), float(best[0]), int(best_row[0])


def _first_hit(
    bank: BankRows | DeviceRows, v: np.ndarray, rows: np.ndarray, tau: float
) -> tuple[int, float]:
    """The first of ``rows`` (ascending) whose exact similarity is >= τ, read a group at a time
    so a low τ (every row a maybe) stops at its first hit."""
    for g in range(0, rows.size, HIT_GROUP):
        group = rows[g : g + HIT_GROUP]
        at, sim = first_at_least(bank.exact_rows(group), v, tau)
        if at >= 0:
            return int(group[at]), float(sim)
    return -1, float("nan")


def greedy_insert(
    rows: np.ndarray | BankRows | DeviceRows,
    n: int,
    batch: np.ndarray,
    tau: float,
    bank_dup_row: np.ndarray,
    dup_of: np.ndarray,
    plan: TilePlan | None = None,
) -> GreedyDecisions:
    """Decide which rows of ``batch`` join the bank's rows ``[0, n)`` under the greedy rule.

    ``rows`` is a float32 matrix, a :class:`~kernels.banks.BankRows` (half-precision rows) or
    a :class:`~kernels.banks.DeviceRows` (a GPU's mirror).
    ``batch`` must be L2-normalised float32 (validated by the caller). ``bank_dup_row[j]`` is the
    bank row that candidate j duplicates exactly (or -1); ``dup_of[j]`` the earlier candidate of
    the batch it duplicates (or -1). Nothing is written to the bank: the caller appends.
    ``plan``: how the bank GEMM is tiled (default: this CPU's measured plan).
    """
    bank = as_bank(rows, n)
    b, dim = batch.shape
    band = tie_band(dim)
    accepted = np.zeros(b, np.bool_)
    sim = np.full(b, -np.inf, np.float32)
    match = np.full(b, -1, np.int64)
    if b == 0:
        return GreedyDecisions(accepted, sim, match)
    if b == 1 and dup_of[0] < 0 and bank_dup_row[0] < 0:
        hit_row, hit_sim, max_sim, max_row = scan_one(bank, batch[0], tau)
        if hit_row >= 0:
            sim[0], match[0] = hit_sim, hit_row
        else:
            accepted[0] = True
            sim[0], match[0] = max_sim, max_row
        return GreedyDecisions(accepted, sim, match)

    exact_max, bank_max_row = bank_max_exact(bank, n, batch, plan)
    bank_max = exact_max.astype(np.float32)
    bank_hit_row = np.full(b, -1, np.int64)
    for j in range(b):
        if bank_dup_row[j] >= 0:
            bank_hit_row[j] = bank_dup_row[j]
            bank_max[j] = 1.0
        elif exact_max[j] >= tau:
            bank_hit_row[j] = bank_max_row[j]
    gram = np.empty((b, b), np.float32)
    matmul_nt(batch, batch, gram)
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
