"""Metrics that separate exploration (the best candidate in the pool) from exploitation (the
output chosen): oracle pool quality with a bias correction for noisy scores, recovered headroom,
the verifier's rank correlation with true quality, and candidate diversity."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def oracle(qualities: Sequence[float]) -> float:
    """Quality of the best candidate in the pool (exact when quality is verified)."""
    return max(qualities) if qualities else 0.0


def oracle_bias_corrected(first: Sequence[float], second: Sequence[float]) -> float:
    """Oracle when true quality is itself a noisy judge score: pick the best by one
    independent scoring, report the other scoring of that pick. The max of noisy scores is
    biased upward (winner's curse); the held-out score of the argmax is not."""
    if not first:
        return 0.0
    best = max(range(len(first)), key=lambda i: (first[i], -i))
    return float(second[best])


def recovered_headroom(final: float, single: float, oracle_q: float) -> float | None:
    """(final − single sample) ÷ (oracle − single sample); None when there is no headroom."""
    gap = oracle_q - single
    if gap <= 1e-12:
        return None
    return (final - single) / gap


def _ranks(x: Sequence[float]) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    order = np.argsort(a, kind="mergesort")
    ranks = np.empty(len(a))
    ranks[order] = np.arange(len(a), dtype=np.float64)
    for v in np.unique(a):  # average ranks for ties
        idx = np.flatnonzero(a == v)
        ranks[idx] = ranks[idx].mean()
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's ρ with average ranks for ties; None if either side is constant or n < 2."""
    pairs = [(a, b) for a, b in zip(x, y, strict=True) if not (math.isnan(a) or math.isnan(b))]
    if len(pairs) < 2:
        return None
    rx, ry = _ranks([p[0] for p in pairs]), _ranks([p[1] for p in pairs])
    if rx.std() == 0 or ry.std() == 0:
        return None
    return float(np.corrcoef(rx, ry)[0, 1])


def mean_pairwise_cosine(vectors: np.ndarray) -> float | None:
    """Mean cosine over distinct pairs of unit vectors (higher = less diverse)."""
    n = len(vectors)
    if n < 2:
        return None
    g = vectors @ vectors.T
    return float((g.sum() - np.trace(g)) / (n * (n - 1)))


def mean(xs: Sequence[float | None]) -> float | None:
    vals = [x for x in xs if x is not None and not math.isnan(x)]
    return sum(vals) / len(vals) if vals else None


def bootstrap_mean_ci(
    values: Sequence[float], *, resamples: int = 10_000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean (NaN values dropped)."""
    x = np.asarray([v for v in values if v == v], dtype=np.float64)
    if x.size == 0:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return (float(lo), float(hi))


def paired_difference(
    a: Sequence[float],
    b: Sequence[float],
    *,
    resamples: int = 10_000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, tuple[float, float]]:
    """Mean of ``a - b`` over paired items (same problems) and its bootstrap interval:
    resampling problems, not samples, so per-problem difficulty cancels."""
    if len(a) != len(b):
        raise ValueError(f"paired samples differ in length: {len(a)} vs {len(b)}")
    diffs = [x - y for x, y in zip(a, b, strict=True) if x == x and y == y]
    if not diffs:
        return (math.nan, (math.nan, math.nan))
    return (
        float(np.mean(diffs)),
        bootstrap_mean_ci(diffs, resamples=resamples, level=level, seed=seed),
    )
