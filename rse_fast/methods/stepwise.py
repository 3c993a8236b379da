"""Step-wise search scored by the judge, shared by beam search (``beam``) and particle
filtering (``particle``).

A step is one short paragraph asked for with ``next_step_messages`` (no assistant prefill, so any
server works); a path is finished when a step carries the final answer in ``\\boxed{}`` (an
open-ended response: the END_MARK line). Each level's cost is measured, and search stops when
another level would not fit the budget less what finishing needs: paths still open when the
search stops are carried to their end by one ``finish_messages`` call each, so the pool never
holds unfinished work. Each distinct path is judged once per run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rse_fast.answers import extract_boxed
from rse_fast.errors import BudgetExhaustedError
from rse_fast.llm.budget import RunBudget
from rse_fast.llm.client import LLMClient
from rse_fast.llm.ledger import Ledger
from rse_fast.methods.base import Method, prompt_cost
from rse_fast.methods.judge import DistinctScorer, LLMJudge, Verifier
from rse_fast.methods.types import Candidate, MethodResult, Problem
from rse_fast.methods.voting import best_index
from rse_fast.prompts import END_MARK, finish_messages, next_step_messages
from rse_fast.util.tasks import gather_or_cancel


@dataclass
class SearchPath:
    steps: list[str] = field(default_factory=list)
    score: float = float("-inf")
    cost: int = 0
    finished: bool = False

    @property
    def text(self) -> str:
        return "\n\n".join(self.steps)


@dataclass
class SearchRun:
    """What every call of one search run shares: its client view, scorer, task and budget."""

    c: LLMClient
    scorer: DistinctScorer
    problem: Problem
    spend: RunBudget


def is_final(step: str, open_ended: bool) -> bool:
    return END_MARK in step if open_ended else extract_boxed(step) is not None


def strip_mark(step: str) -> str:
    return step.replace(END_MARK, "").rstrip()


class Stepwise(Method):
    needs_judge = True

    def __init__(
        self,
        *,
        judge: Verifier | None = None,
        width: int = 2,
        expand: int = 2,
        max_depth: int = 8,
        step_tokens: int = 256,
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        self.judge: Verifier = judge or LLMJudge()
        self.width, self.expand, self.max_depth, self.step_tokens = (
            width,
            expand,
            max_depth,
            step_tokens,
        )

    async def _grow(
        self, run: SearchRun, path: SearchPath, seed: int, *, finish: bool = False
    ) -> SearchPath:
        """One call that adds the next step to ``path`` or (``finish``) writes the rest of it
        to its end; the new path is judged (each distinct path once per run)."""
        c, problem = run.c, run.problem
        build = finish_messages if finish else next_step_messages
        try:
            res = await c.chat(
                build(problem.transcript, path.steps, problem.open_ended),
                role="explore",
                seed=seed,
                temperature=self.temperature,
                max_tokens=self.max_tokens if finish else self.step_tokens,
            )
        except BudgetExhaustedError:  # a cap-mode budget is spent: the path stays as it is
            return path
        text = res.text.strip()
        new = SearchPath(
            [*path.steps, strip_mark(text) if problem.open_ended else text],
            cost=path.cost + res.usage.total_tokens,
            finished=finish or is_final(text, problem.open_ended),
        )
        before = c.ledger.total_tokens
        score = await run.scorer.score(new.text, partial=not new.finished, seed=seed)
        new.score = score if score == score else float("-inf")
        new.cost += c.ledger.total_tokens - before
        return new

    def _paths(self) -> int:
        """How many paths one full-size search carries."""
        raise NotImplementedError

    def _affordable(self, spend: RunBudget, wanted: int, depth: int) -> int:
        """Extensions of the next level (0: stop) such that the paths they start can still be
        carried through the remaining levels (3 guessed in all) within the budget. Landing is
        precise to about half an extension's cost."""
        if self._per_ext is None:
            return wanted
        carried = spend.units_left(self._per_ext * max(1, 3 - depth))
        return min(wanted, max(carried, min(1, spend.units_left(self._per_ext))))

    def _fit(self, spend: RunBudget, per_path_level: float, depth: int, cap: int) -> int:
        """Paths to carry on so that the remaining levels (guessing 3 in all) fit the budget."""
        levels = max(1, 3 - depth)
        return max(1, min(cap, spend.units_left(per_path_level * levels)))

    async def _search(
        self, run: SearchRun, tree: int, n: int
    ) -> tuple[list[SearchPath], list[SearchPath], int]:
        raise NotImplementedError

    def _forget_costs(self) -> None:
        self._per_ext: float | None = None  # measured cost of one extension (step + judge)

    def _finish_reserve(self) -> float:
        """What finishing one open path is expected to cost: about one extension (the path so
        far is read once more and its continuation is written in one call)."""
        return self._per_ext or 0.0

    async def _run(self, problem: Problem, run_budget: RunBudget) -> MethodResult:
        """Independent searches one after another while the budget lasts: when every path of a
        search finishes early, the rest of the budget widens the pool with a new search. Until
        a path has finished, the expected cost of finishing one is held back."""
        c, budget = run_budget.client, run_budget.budget
        scorer = DistinctScorer(self.judge, c, problem.transcript, problem.open_ended)
        prompt = prompt_cost(c, problem.messages())
        finished: list[SearchPath] = []
        # finishing is held back only until some path has finished on its own
        spend = run_budget.holding(lambda: 0.0 if finished else self._finish_reserve())
        self._forget_costs()
        state = SearchRun(c, scorer, problem, spend)
        frontier: list[SearchPath] = []
        # Size the first search from a pessimistic guess (every step at its token cap, three
        # levels); later searches use what the previous one really cost per path.
        guess = 2 * (prompt + 80 + self.step_tokens) * 3
        depth, tree, n = 0, 0, max(1, min(self._paths(), spend.units_left(guess)))
        while n > 0:
            before = spend.spent
            done, frontier, d = await self._search(state, tree, n)
            finished += done
            depth = max(depth, d)
            tree += 1
            if frontier:  # stopped by the budget mid-search
                break
            per_path = (spend.spent - before) / n  # a smaller search fits what is left
            n = min(self._paths(), spend.units_left(per_path))
            if n == 0 and self._per_ext and spend.units_left(self._per_ext) >= 1:
                n = 1  # a last, partial search: its extensions are trimmed to the budget
        completed = await self._complete(state, budget, finished, frontier, tree)
        result = self._result(budget, finished + completed, c.ledger, depth, scorer)
        result.meta.update(searches=tree, completed_open_paths=len(completed))
        return result

    async def _complete(
        self,
        run: SearchRun,
        budget: int,
        finished: list[SearchPath],
        frontier: list[SearchPath],
        tree: int,
    ) -> list[SearchPath]:
        """Finish the best open paths the rest of the budget pays for (at least one when no
        path finished, so there is always a complete output)."""
        if not frontier:
            return []
        ranked = sorted(frontier, key=lambda p: -p.score)
        per = max(1.0, self._finish_reserve())
        count = min(len(ranked), run.spend.holding(None).units_left(per))
        if not finished:
            count = max(1, count)
        seeds = [self.seed + 100_000 * tree + 500_000 + k for k in range(count)]
        return await gather_or_cancel(
            self._grow(run, p, s, finish=True) for p, s in zip(ranked, seeds, strict=False)
        )

    def _result(
        self,
        budget: int,
        paths: list[SearchPath],
        ledger: Ledger,
        depth: int,
        scorer: DistinctScorer,
    ) -> MethodResult:
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
            {"depth": depth, "finished": len(paths), **scorer.counts()},
        )
