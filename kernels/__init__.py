"""Compiled similarity kernels (Numba + BLAS). Imports only numpy and numba; nothing compiles
at import time: call :func:`warmup` once to pay compilation (or the disk-cache load) up front.
"""

from __future__ import annotations

import numpy as np

from ._jit import exact_dot, row_digests
from .greedy import GreedyDecisions, bank_max_tiled, greedy_insert, tie_band
from .threads import available_cores, set_threads

__all__ = [
    "GreedyDecisions",
    "available_cores",
    "bank_max_tiled",
    "exact_dot",
    "greedy_insert",
    "row_digests",
    "set_threads",
    "tie_band",
    "warmup",
]


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
        greedy_insert(rows, 8, batch, 0.5, none, none)
        greedy_insert(rows, 0, batch, 0.5, none, none)
    # tie-band path
    v = np.ascontiguousarray(rows[:2])
    sim = float(rows[0] @ rows[5])
    none = np.full(2, -1, np.int64)
    greedy_insert(rows[5:6].copy(), 1, v, sim, none, none)
    _WARMED.add(dim)
