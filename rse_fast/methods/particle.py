"""Particle filtering: particles extended a step at a time, weighted by their judge scores
and resampled when their effective number falls (the step-wise machinery is ``stepwise``)."""

from __future__ import annotations

import math
import random
from typing import Any

from rse_fast.llm.budget import RunBudget
from rse_fast.methods.stepwise import SearchPath, SearchRun, Stepwise
from rse_fast.methods.types import MethodResult, Problem
from rse_fast.util.tasks import gather_or_cancel


def systematic_resample(weights: list[float], n: int, rng: random.Random) -> list[int]:
    """Indices drawn by systematic resampling: one uniform offset, n evenly spaced pointers
    through the cumulative weights (lower variance than n independent draws)."""
    total = sum(weights)
    if total <= 0:
        weights, total = [1.0] * len(weights), float(len(weights))
    step = total / n
    u = rng.random() * step
    out, cumulative, i = [], weights[0], 0
    for k in range(n):
        pointer = u + k * step
        while pointer > cumulative and i < len(weights) - 1:
            i += 1
            cumulative += weights[i]
        out.append(i)
    return out


def copy_path(path: SearchPath) -> SearchPath:
    return SearchPath(list(path.steps), path.score, path.cost)


def effective_sample_size(weights: list[float]) -> float:
    """1 / Σ w̃² of the normalised weights: n when uniform, 1 when one particle has it all."""
    total = sum(weights)
    if total <= 0:
        return 0.0
    return 1.0 / sum((w / total) ** 2 for w in weights)


class ParticleFilter(Stepwise):
    """``width × expand`` particles extended one step at a time and weighted by a softmax of
    their judge scores; resampled systematically when the effective sample size falls below
    ``ess_threshold`` × particles (1.0: every step). Finished particles leave the filter and
    are kept in the pool."""

    name = "particle"

    def __init__(
        self, *, resample_temperature: float = 1.0, ess_threshold: float = 0.5, **kw: Any
    ) -> None:
        super().__init__(**kw)
        if not 0.0 <= ess_threshold <= 1.0:
            raise ValueError(f"ess_threshold must be in [0, 1], got {ess_threshold}")
        self.resample_temperature, self.ess_threshold = resample_temperature, ess_threshold
        self.resamples = 0  # ESS-triggered resamplings in the current run

    def _paths(self) -> int:
        return max(2, self.width * self.expand)

    async def _search(
        self, run: SearchRun, tree: int, n: int
    ) -> tuple[list[SearchPath], list[SearchPath], int]:
        spend = run.spend
        rng = random.Random(self.seed + tree)
        particles, finished = [SearchPath() for _ in range(n)], []
        depth = 0
        while particles and depth < self.max_depth:
            affordable = particles[: self._affordable(spend, len(particles), depth)]
            if not affordable:
                break  # the open particles go back to be finished
            particles = affordable
            before = spend.spent
            moved = await gather_or_cancel(
                self._grow(run, p, self.seed + 100_000 * tree + 1000 * depth + k)
                for k, p in enumerate(particles)
            )
            per_particle = self._per_ext = (spend.spent - before) / len(particles)
            depth += 1
            finished += [p for p in moved if p.finished]
            alive = [p for p in moved if not p.finished]
            size = self._fit(spend, per_particle, depth, cap=2 * self._paths())
            particles = self._next_generation(alive, size, rng) if alive else []
        return finished, particles, depth

    def weights(self, alive: list[SearchPath]) -> list[float]:
        finite = [p.score for p in alive if p.score > float("-inf")]
        base = max(finite) if finite else 0.0
        return [
            math.exp((p.score - base) / self.resample_temperature)
            if p.score > float("-inf")
            else 0.0
            for p in alive
        ]

    def _next_generation(
        self, alive: list[SearchPath], n: int, rng: random.Random
    ) -> list[SearchPath]:
        """Resample ``n`` particles systematically when the effective sample size is below
        the threshold; otherwise keep them, trimmed to the ``n`` heaviest or topped up by
        systematic draws when the budget changes how many fit."""
        w = self.weights(alive)
        if effective_sample_size(w) < self.ess_threshold * len(alive):
            self.resamples += 1
            return [copy_path(alive[i]) for i in systematic_resample(w, n, rng)]
        if n <= len(alive):
            heaviest = sorted(range(len(alive)), key=lambda i: -w[i])[:n]
            return [alive[i] for i in sorted(heaviest)]
        return alive + [copy_path(alive[i]) for i in systematic_resample(w, n - len(alive), rng)]

    async def _run(self, problem: Problem, run_budget: RunBudget) -> MethodResult:
        self.resamples = 0
        result = await super()._run(problem, run_budget)
        result.meta["resamples"] = self.resamples
        return result
