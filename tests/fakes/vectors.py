"""Unit vectors built to sit on, near or across a similarity threshold: the dedup tests' and
the kernel tuning tests' adversarial inputs."""

from __future__ import annotations

import numpy as np

from rse_fast.rse.index import normalize_rows


def unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    x = rng.standard_normal((n, dim))
    return normalize_rows(x, dim)


def at_similarity(e: np.ndarray, s: float, rng: np.random.Generator) -> np.ndarray:
    """A unit vector whose cosine with unit ``e`` is ``s`` (up to float rounding)."""
    u = rng.standard_normal(e.shape[0])
    u -= (u @ e) * e
    u /= np.linalg.norm(u)
    return s * e + np.sqrt(max(0.0, 1 - s * s)) * u


def adversarial(
    seed: int, n_bank: int, b: int, dim: int, tau: float
) -> tuple[np.ndarray, np.ndarray]:
    """Bank and candidates mixing random rows, exact and near duplicates, chains a≈b≈c with a, c
    apart, and similarities within 1e-6 of τ to bank rows or earlier candidates."""
    rng = np.random.default_rng(seed)
    bank = unit(rng, n_bank, dim)
    cands: list[np.ndarray] = []
    for _ in range(b):
        pool = [*bank, *cands]
        kind = rng.integers(0, 6) if pool else 0
        if kind == 0:
            v = rng.standard_normal(dim)
        else:
            e = pool[rng.integers(0, len(pool))].astype(np.float64)
            if kind == 1:
                v = e.copy()  # exact duplicate
            elif kind == 2:
                v = e + rng.normal(0, 0.05, dim)  # near duplicate
            elif kind == 3:
                v = at_similarity(e, tau + rng.uniform(-1e-6, 1e-6), rng)  # tie zone
            elif kind == 4:
                v = at_similarity(e, min(1.0, max(-1.0, tau)), rng)  # on τ
            else:  # chain: b halfway between e and a far vector
                far = at_similarity(e, 2 * tau * tau - 1, rng)
                v = at_similarity(e, tau, rng) if rng.random() < 0.5 else far
        cands.append(normalize_rows(v[None, :], dim)[0])
    c = np.array(cands, np.float32).reshape(b, dim)
    return bank, c
