"""Compiled similarity kernels (Numba + BLAS). Imports only numpy and numba; nothing compiles
at import time: call :func:`warmup` once to pay compilation (or the disk-cache load) up front.
"""

from __future__ import annotations

import numpy as np

from . import half, tuning
from ._jit import exact_dot, row_digests
from .banks import BankRows, DeviceRows, Float32Rows, HalfRows, tie_band
from .greedy import GreedyDecisions, bank_max_exact, bank_max_tiled, greedy_insert
from .threads import available_cores, set_threads
from .tuning import TilePlan

__all__ = [
    "BankRows",
    "DeviceRows",
    "Float32Rows",
    "GreedyDecisions",
    "HalfRows",
    "TilePlan",
    "available_cores",
    "bank_max_exact",
    "bank_max_tiled",
    "exact_dot",
    "greedy_insert",
    "half",
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


_WARMED: set[str] = set()


def warmup(dim: int = 384, precision: str = "float32") -> None:
    """Compile (or load from the on-disk cache) every kernel specialisation a bank of this
    ``precision`` uses at run time (the half-precision kernels only when asked: a float32
    bank never pays for them). Idempotent per precision."""
    if precision in _WARMED:
        return
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((8, dim)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    row_digests(rows)
    store: np.ndarray | BankRows = rows
    if precision == "float16":
        store = HalfRows(half.encode(rows), 8, lambda ids: rows[ids])
    for b in (1, 3):
        batch = np.ascontiguousarray(rows[:b])
        none = np.full(b, -1, np.int64)
        for plan in (tuning.DEFAULT, TilePlan("cols", tuning.DEFAULT.tile_rows)):
            greedy_insert(store, 8, batch, 0.5, none, none, plan)  # compiles, no tuning
        greedy_insert(store, 0, batch, 0.5, none, none, tuning.DEFAULT)
    _WARMED.add(precision)
