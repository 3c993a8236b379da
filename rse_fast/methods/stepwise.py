"""Step-wise search scored by the judge: beam search and particle filtering.

A step is one short paragraph asked for with ``next_step_messages`` (no assistant prefill, so any
server works); a path is finished when a step contains ``\\boxed{}``. Each level's cost is
measured, and search stops when another level would not fit the budget.
"""

from __future__ import annotations

import asyncio
import math
import random
from dataclasses import dataclass, field
from typing import Any

from rse_fast.answers import extract_boxed
from rse_fast.llm.client import LLMClient
from rse_fast.llm.ledger import Ledger
from rse_fast.methods.base import Candidate, Method, MethodResult, Problem, Spend, best_index
from rse_fast.methods.judge import LLMJudge
from rse_fast.prompts import next_step_messages


@dataclass
class Path:
    steps: list[str] = field(default_factory=list)
    score: float = float("-inf")
    cost: int = 0

    @property
    def finished(self) -> bool:
        return bool(self.steps) and extract_boxed(self.steps[-1]) is not None

    @property
    def text(self) -> str:
        return "\n\n".join(self.steps)


class _Stepwise(Method):
    def __init__(
        self,
        *,
        judge: Any = None,
        width: int = 2,
        expand: int = 2,
        max_depth: int = 8,
        step_tokens: int = 256,
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        self.judge = judge or LLMJudge()
        self.width, self.expand, self.max_depth, self.step_tokens = (
            width,
            expand,
            max_depth,
            step_tokens,
        )

    async def _extend(self, c: LLMClient, problem: Problem, path: Path, seed: int) -> Path:
        res = await c.chat(
            next_step_messages(problem.prompt, path.steps),
            role="explore",
            seed=seed,
            temperature=self.temperature,
            max_tokens=self.step_tokens,
        )
        new = Path([*path.steps, res.text.strip()], cost=path.cost + res.usage.total_tokens)
        before = c.ledger.total_tokens
        score = await self.judge.score(
            c, problem.prompt, new.text, partial=not new.finished, seed=seed
        )
        new.score = score if score is not None else float("-inf")
        new.cost += c.ledger.total_tokens - before
        return new

    def _paths(self) -> int:
        """How many paths one full-size search carries."""
        raise NotImplementedError

    def _affordable(self, spend: Spend, wanted: int, depth: int) -> int:
        """Extensions of the next level (0: stop) such that the paths they start can still be
        carried through the remaining levels (3 guessed in all) within the budget. Landing is
        precise to about half an extension's cost."""
        if self._per_ext is None:
            return wanted
        carried = spend.units_left(self._per_ext * max(1, 3 - depth))
        return min(wanted, max(carried, min(1, spend.units_left(self._per_ext))))

    def _fit(self, spend: Spend, per_path_level: float, depth: int, cap: int) -> int:
        """Paths to carry on so that the remaining levels (guessing 3 in all) fit the budget."""
        levels = max(1, 3 - depth)
        return max(1, min(cap, spend.units_left(per_path_level * levels)))

    async def _search(
        self, c: LLMClient, problem: Problem, spend: Spend, tree: int, n: int
    ) -> tuple[list[Path], list[Path], int]:
        raise NotImplementedError

    def _forget_costs(self) -> None:
        self._per_ext: float | None = None  # measured cost of one extension (step + judge)

    async def run(self, problem: Problem, budget: int, client: LLMClient) -> MethodResult:
        """Independent searches one after another while the budget lasts: when every path of a
        search finishes early, the rest of the budget widens the pool with a new search."""
        c = client.with_ledger(Ledger())
        spend = Spend(c.ledger, budget)
        self._forget_costs()
        finished: list[Path] = []
        frontier: list[Path] = []
        # Size the first search from a pessimistic guess (every step at its token cap, three
        # levels); later searches use what the previous one really cost per path.
        guess = 2 * (c.count_tokens(problem.prompt) + 80 + self.step_tokens) * 3
        depth, tree, n = 0, 0, max(1, min(self._paths(), spend.units_left(guess)))
        while n > 0:
            before = spend.spent
            done, frontier, d = await self._search(c, problem, spend, tree, n)
            finished += done
            depth = max(depth, d)
            tree += 1
            if frontier:  # stopped by the budget mid-search
                break
            per_path = (spend.spent - before) / n  # a smaller search fits what is left
            n = min(self._paths(), spend.units_left(per_path))
            if n == 0 and self._per_ext and spend.units_left(self._per_ext) >= 1:
                n = 1  # a last, partial search: its extensions are trimmed to the budget
        result = self._result(budget, finished, frontier, c.ledger, depth)
        result.meta["searches"] = tree
        return result

    def _result(
        self, budget: int, finished: list[Path], frontier: list[Path], ledger: Ledger, depth: int
    ) -> MethodResult:
        paths = finished or frontier
        pool = [
            Candidate.of(p.text, scores={"judge": p.score}, cost=p.cost, origin=self.name)
            for p in paths
        ]
        best = best_index([p.score for p in paths])
        return MethodResult(
            self.name,
            budget,
            pool[best] if best is not None else None,
            pool,
            ledger,
            {
                "depth": depth,
                "finished": len(finished),
                "judge_garbage": getattr(self.judge, "garbage", 0),
            },
        )


class BeamSearch(_Stepwise):
    """Keep the ``width`` best partial solutions; expand each ``expand`` ways per level."""

    name = "beam"

    def _paths(self) -> int:
        return self.width

    async def _search(
        self, c: LLMClient, problem: Problem, spend: Spend, tree: int, n: int
    ) -> tuple[list[Path], list[Path], int]:
        beams, finished = [Path()], []
        depth = 0
        while beams and depth < self.max_depth:
            pairs = [(b, e) for b in range(len(beams)) for e in range(self.expand)]
            pairs = pairs[: self._affordable(spend, len(pairs), depth)]
            if not pairs:
                break
            before = spend.spent
            children = await asyncio.gather(
                *(
                    self._extend(
                        c, problem, beams[b], self.seed + 100_000 * tree + 1000 * depth + 10 * b + e
                    )
                    for b, e in pairs
                )
            )
            self._per_ext = (spend.spent - before) / len(pairs)
            per_beam = self._per_ext * self.expand
            depth += 1
            finished += [p for p in children if p.finished]
            open_ = sorted((p for p in children if not p.finished), key=lambda p: -p.score)
            beams = open_[: self._fit(spend, per_beam, depth, cap=min(len(open_), n))]
        return finished, beams, depth


class ParticleFilter(_Stepwise):
    """``width`` particles extended one step at a time, resampled by softmax of judge scores."""

    name = "particle"

    def __init__(self, *, resample_temperature: float = 1.0, **kw: Any) -> None:
        super().__init__(**kw)
        self.resample_temperature = resample_temperature

    def _paths(self) -> int:
        return max(2, self.width * self.expand)

    async def _search(
        self, c: LLMClient, problem: Problem, spend: Spend, tree: int, n: int
    ) -> tuple[list[Path], list[Path], int]:
        rng = random.Random(self.seed + tree)
        particles, finished = [Path() for _ in range(n)], []
        depth = 0
        while particles and depth < self.max_depth:
            particles = particles[: self._affordable(spend, len(particles), depth)]
            if not particles:
                break
            before = spend.spent
            moved = await asyncio.gather(
                *(
                    self._extend(c, problem, p, self.seed + 100_000 * tree + 1000 * depth + k)
                    for k, p in enumerate(particles)
                )
            )
            per_particle = self._per_ext = (spend.spent - before) / len(particles)
            depth += 1
            finished += [p for p in moved if p.finished]
            alive = [p for p in moved if not p.finished]
            size = self._fit(spend, per_particle, depth, cap=2 * self._paths())
            particles = self._resample(alive, size, rng) if alive else []
        return finished, particles, depth

    def _resample(self, alive: list[Path], n: int, rng: random.Random) -> list[Path]:
        finite = [p.score for p in alive if p.score > float("-inf")]
        base = max(finite) if finite else 0.0
        weights = [
            math.exp((p.score - base) / self.resample_temperature)
            if p.score > float("-inf")
            else 0.0
            for p in alive
        ]
        if sum(weights) == 0:
            weights = [1.0] * len(alive)
        return rng.choices(alive, weights=weights, k=n)
