"""Metrics as the TTS-in-the-wild study defines them, separating exploration (the best candidate
in the pool) from exploitation (the output chosen).

Notation (docs/evaluation.md): Q*(T) the quality of the best candidate in the pool at budget
T, μ the quality of an independent single sample, headroom Q* − μ, net exploitation Q − Q*, capture
h = (Q − μ)/(Q* − μ), ρ_v the rank correlation of the verifier's scores with a *distinct*
grader's. Every aggregate skips NaN (judge garbage) and says how many values it skipped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def finite(xs: Sequence[float | None]) -> list[float]:
    """The values that are numbers (None and NaN dropped)."""
    return [float(x) for x in xs if x is not None and not math.isnan(x)]


def oracle(qualities: Sequence[float]) -> float:
    """Quality of the best candidate in the pool, NaN-safe (NaN never wins, whatever its
    position); NaN when no candidate has a quality, 0 for an empty pool."""
    if not qualities:
        return 0.0
    vals = finite(qualities)
    return max(vals) if vals else math.nan


@dataclass(frozen=True, kw_only=True)
class NoisyOracle:
    """The closed-form bias-corrected oracle of one pool and the quantities it rests on."""

    observed_max: float  # max over candidates of the mean of the two readings
    corrected: float  # E[max true quality] under the i.i.d. model
    reliability: float  # true variance ÷ observed variance of a candidate's mean reading
    noise_var: float  # variance of one reading's error (from the two readings' spread)


def oracle_bias_corrected(first: Sequence[float], second: Sequence[float]) -> NoisyOracle | None:
    """Bias-corrected oracle from two independent gradings of every candidate.

    Model (i.i.d. candidates): reading = q + e with q ~ N(m, τ²) and e ~ N(0, σ²) independent.
    The max of the mean readings then expects m + sqrt(τ² + σ²/2)·e_n, while the best true
    quality expects m + τ·e_n (e_n the expected max of n standard normals), so

        Q*_corrected = m̂ + (max s̄ − m̂) · sqrt(τ̂² / (τ̂² + σ̂²/2)),

    with σ̂² = mean((s₁ − s₂)²)/2 and τ̂² = var(s̄) − σ̂²/2 (floored at 0). A pool whose readings
    agree exactly is noiseless and keeps its plain max. None if fewer than two candidates
    have both readings.
    """
    pairs = [(a, b) for a, b in zip(first, second, strict=True) if a == a and b == b]
    if len(pairs) < 2:
        return None
    s1, s2 = np.array(pairs, dtype=np.float64).T
    mean_reading = (s1 + s2) / 2
    noise_var = float(np.mean((s1 - s2) ** 2) / 2)
    observed_var = float(np.var(mean_reading, ddof=1))
    true_var = max(0.0, observed_var - noise_var / 2)
    reliability = 1.0 if observed_var <= 1e-15 else min(1.0, true_var / observed_var)
    m, top = float(mean_reading.mean()), float(mean_reading.max())
    return NoisyOracle(
        observed_max=top,
        corrected=m + (top - m) * math.sqrt(reliability),
        reliability=reliability,
        noise_var=noise_var,
    )


#: Headroom (Q* − μ) below which capture h is not reported: a ratio over a tiny gap explodes
#: and means nothing.
MIN_HEADROOM = 0.05


def capture(
    final: float, single: float, oracle_q: float, min_headroom: float = MIN_HEADROOM
) -> float:
    """Headroom capture h = (Q − μ)/(Q* − μ); NaN when the headroom is below
    ``min_headroom`` (see ``capture_reason``)."""
    gap = oracle_q - single
    if gap < min_headroom:
        return math.nan
    return (final - single) / gap


def capture_ci(
    finals: Sequence[float],
    singles: Sequence[float],
    oracles: Sequence[float],
    *,
    resamples: int = 2_000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of h, resampling problems (each keeps its Q, μ and Q*
    together); NaN when under half the resamples leave headroom enough to define h."""
    rows = [(f, s, o) for f, s, o in zip(finals, singles, oracles, strict=True)
            if f == f and s == s and o == o]  # fmt: skip
    if not rows:
        return (math.nan, math.nan)
    x = np.asarray(rows, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(resamples, len(x)))].mean(axis=1)
    hs = np.array([capture(f, s, o) for f, s, o in means])
    hs = hs[np.isfinite(hs)]
    if hs.size < resamples / 2:
        return (math.nan, math.nan)
    lo, hi = np.quantile(hs, [(1 - level) / 2, (1 + level) / 2])
    return (float(lo), float(hi))


def capture_reason(single: float, oracle_q: float, min_headroom: float = MIN_HEADROOM) -> str:
    """Why capture is NaN, or "" when it is a number."""
    gap = oracle_q - single
    return f"headroom {gap:.3f} below {min_headroom}" if gap < min_headroom else ""


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


def mean_pairwise_cosine_distance(vectors: np.ndarray) -> float | None:
    """Diversity as the study measures it: mean of 1 − cos over distinct pairs of unit vectors
    (0 for identical candidates, higher is more diverse)."""
    n = len(vectors)
    if n < 2:
        return None
    g = vectors @ vectors.T
    return max(0.0, float(1.0 - (g.sum() - np.trace(g)) / (n * (n - 1))))  # float32 rounding


def mean(xs: Sequence[float | None]) -> float | None:
    vals = finite(xs)
    return sum(vals) / len(vals) if vals else None


def bootstrap_mean_ci(
    values: Sequence[float], *, resamples: int = 10_000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean (NaN values dropped)."""
    x = np.asarray(finite(values), dtype=np.float64)
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


@dataclass(frozen=True, kw_only=True)
class Fit:
    """Least-squares line y = intercept + slope·x and its R²."""

    slope: float
    intercept: float
    r2: float
    points: int


def linear_fit(x: Sequence[float | None], y: Sequence[float | None]) -> Fit | None:
    """Ordinary least squares over the pairs where both are numbers (the study's h-vs-ρ_v
    regression); None with fewer than 3 pairs or constant x."""
    pairs = [
        (float(a), float(b))
        for a, b in zip(x, y, strict=True)
        if a is not None and b is not None and a == a and b == b
    ]
    if len(pairs) < 3:
        return None
    xs, ys = np.array(pairs).T
    if np.ptp(xs) == 0:
        return None
    slope, intercept = np.polyfit(xs, ys, 1)
    resid = ys - (intercept + slope * xs)
    total = float(((ys - ys.mean()) ** 2).sum())
    r2 = 1.0 - float((resid**2).sum()) / total if total > 0 else 1.0
    return Fit(slope=float(slope), intercept=float(intercept), r2=r2, points=len(pairs))
