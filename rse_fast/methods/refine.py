"""Iterative refinement: one sample, then critique-and-revise rounds while the budget lasts.

Every draft is scored by the verifier (each distinct draft once); the output is the
best-scored draft, not the last one (a revision can make things worse), and refinement stops
early once a draft reaches ``stop_score`` (DSPy's Refine keeps the best attempt and stops at a
threshold in the same way).
"""

from __future__ import annotations

from typing import Any

from rse_fast.errors import BudgetExhaustedError
from rse_fast.llm.budget import RunBudget
from rse_fast.llm.client import LLMClient
from rse_fast.methods.base import Method
from rse_fast.methods.judge import DistinctScorer, LLMJudge, Verifier
from rse_fast.methods.sampling import sample
from rse_fast.methods.types import Candidate, MethodResult, Problem
from rse_fast.methods.voting import best_index
from rse_fast.prompts import critique_messages, revise_messages


class Refinement(Method):
    name = "refine"
    needs_judge = True

    def __init__(
        self, *, judge: Verifier | None = None, stop_score: float | None = 9.0, **kw: Any
    ) -> None:
        super().__init__(**kw)
        self.judge: Verifier = judge or LLMJudge()
        self.stop_score = stop_score

    async def _score(self, c: LLMClient, scorer: DistinctScorer, cand: Candidate, r: int) -> None:
        before = c.ledger.total_tokens
        cand.scores["judge"] = await scorer.score(cand.text, seed=self.seed + r, task=f"r{r}")
        cand.cost += c.ledger.total_tokens - before

    def _good_enough(self, cand: Candidate) -> bool:
        score = cand.scores.get("judge", float("nan"))
        return self.stop_score is not None and score == score and score >= self.stop_score

    async def _run(self, problem: Problem, run_budget: RunBudget) -> MethodResult:
        c, budget = run_budget.client, run_budget.budget
        spend = run_budget
        scorer = DistinctScorer(self.judge, c, problem.transcript, problem.open_ended)
        task, open_ended = problem.transcript, problem.open_ended
        current = await sample(self, c, problem, 0)
        await self._score(c, scorer, current, 0)
        pool = [current]
        # critique reads P + C and writes up to ~C; the revision reads P + 2C and writes C;
        # the judge reads P + C: ≈ 3P + 6C per round (P, C: the first sample's prompt and
        # completion), until measured.
        completion = current.completion_tokens
        round_cost = 3.0 * (current.cost - completion) + 6.0 * completion
        r = 0
        while spend.units_left(round_cost) >= 1 and not self._good_enough(current):
            r += 1
            before = spend.spent
            try:
                crit = await c.chat(
                    critique_messages(task, current.text, open_ended),
                    role="refine",
                    seed=self.seed + r,
                    temperature=0.2,
                    max_tokens=self.max_tokens,
                )
                rev = await c.chat(
                    revise_messages(task, current.text, crit.text, open_ended),
                    role="refine",
                    seed=self.seed + r,
                    temperature=self.temperature,
                    max_tokens=self.max_tokens,
                )
            except BudgetExhaustedError:  # a cap-mode budget is spent: keep the best draft
                r -= 1
                break
            current = problem.candidate(
                rev.text,
                completion_tokens=rev.usage.completion_tokens,
                origin=f"refine-{r}",
                reasoning=rev.reasoning,
            )
            await self._score(c, scorer, current, r)
            round_cost = float(spend.spent - before)
            current.cost = int(round_cost)
            pool.append(current)
        best = best_index([p.scores.get("judge", float("nan")) for p in pool])
        final = pool[best] if best is not None else current
        meta: dict[str, Any] = {
            "revisions": r,
            "best_draft": best,
            "stopped_at_threshold": self._good_enough(current),
            **scorer.counts(),
        }
        return MethodResult(self.name, budget, final, pool, c.ledger, meta)
