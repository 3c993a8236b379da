"""Compiled similarity kernels (Numba + BLAS). Imports only numpy and numba; nothing compiles
at import time: call :func:`warmup` once to pay compilation (or the disk-cache load) up front.
"""

from __future__ import annotations

import numpy as np

from . import tuning
from ._jit import exact_dot, row_digests, update_running_max_cols
from .greedy import GreedyDecisions, bank_max_tiled, greedy_insert, tie_band
from .threads import available_cores, set_threads
from .tuning import TilePlan

__all__ = [
    "GreedyDecisions",
    "TilePlan",
    "available_cores",
    "bank_max_tiled",
    "exact_dot",
    "greedy_insert",
    "row_digests",
    "set_threads",
    "tie_band",
    "tune",
    "warmup",
]


def tune(dim: int = 384, batches: tuple[int, ...] = (16, 64, 256)) -> dict[int, TilePlan]:
    """Choose this CPU's tile plan for each batch bucket now (measured once per machine and
    kept on disk; see ``tuning``), so no insert on the critical path pays for it."""
    return tuning.tune(dim, batches, bank_max_tiled)


_WARMED: set[int] = set()


def warmup(dim: int = 384) -> None:
    """Compile (or load from the on-disk cache) every kernel specialisation used at run time.
    Idempotent: later calls (any dim; the specialisations do not depend on it) return at once."""
    if _WARMED:
        return
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((8, dim)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    row_digests(rows)
    for b in (1, 3):
        batch = np.ascontiguousarray(rows[:b])
        none = np.full(b, -1, np.int64)
        greedy_insert(rows, 8, batch, 0.5, none, none, tuning.DEFAULT)  # compiles, no tuning
        greedy_insert(rows, 0, batch, 0.5, none, none, tuning.DEFAULT)
    update_running_max_cols(
        np.zeros((2, 3), np.float32), 0, np.zeros(2, np.float32), np.zeros(2, np.int64)
    )
    # tie-band path
    v = np.ascontiguousarray(rows[:2])
    sim = float(rows[0] @ rows[5])
    none = np.full(2, -1, np.int64)
    greedy_insert(rows[5:6].copy(), 1, v, sim, none, none, tuning.DEFAULT)
    _WARMED.add(dim)
