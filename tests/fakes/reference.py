"""Naive one-at-a-time reference for the greedy dedup rule, in float64 (tests only)."""

from __future__ import annotations

import numpy as np

from rse_fast.rse.index import normalize_rows


def sequential_dot(a: np.ndarray, b: np.ndarray) -> float:
    """float64 dot summed strictly left to right (np.cumsum is sequential): the rule's definition
    of similarity, which matters only for values within float64 rounding of τ."""
    return float(np.cumsum(a.astype(np.float64) * b.astype(np.float64))[-1])


def reference_decisions(bank: np.ndarray, candidates: np.ndarray, tau: float) -> list[bool]:
    """Visit candidates in order; reject an exact duplicate (same float32 bytes) of a stored row,
    or one whose similarity to any stored row is >= tau; else store it."""
    bank = normalize_rows(bank, bank.shape[1])  # the rule is defined on the stored unit rows
    candidates = normalize_rows(candidates, candidates.shape[1])
    stored = list(bank)
    keys = {r.tobytes() for r in bank}
    out = []
    for c in candidates:
        key = c.tobytes()
        if key in keys or any(sequential_dot(c, s) >= tau for s in stored):
            out.append(False)
            continue
        out.append(True)
        stored.append(c)
        keys.add(key)
    return out
