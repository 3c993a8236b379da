"""Reflexion-style retry where a check is free: each sample that fails an example its problem
states gets one retry that shows it its own failure (the call, what came back, what was
expected); the answer is chosen among the candidates that pass. The baseline that has the
same execution check as RSE's grounded experience, and nothing else."""

from __future__ import annotations

import asyncio
from typing import Any

from rse_fast.answers import off_loop
from rse_fast.errors import BudgetExhaustedError
from rse_fast.llm.budget import RunBudget
from rse_fast.llm.client import LLMClient
from rse_fast.methods.base import Method
from rse_fast.methods.sampling import sample, sample_cost
from rse_fast.methods.types import Candidate, MethodResult, Problem
from rse_fast.methods.voting import passing_visible, vote_final
from rse_fast.methods.waves import in_waves
from rse_fast.prompts import revise_messages


class Reflexion(Method):
    name = "reflexion"

    async def _attempt(self, c: LLMClient, problem: Problem, i: int) -> list[Candidate]:
        """A sample, and one retry with its failure shown when it fails a stated example."""
        assert problem.visible_check is not None
        first = await sample(self, c, problem, i)
        outcome = await asyncio.to_thread(problem.visible_check, first.text)
        if outcome is None or outcome.passed:
            return [first]
        failure = f"Its code {outcome.failure}."
        try:
            res = await c.chat(
                revise_messages(problem.transcript, first.text, failure),
                role="refine",
                task=f"c{i}",
                seed=self.seed + 10_000 + i,
                temperature=self.temperature,
                max_tokens=self.max_tokens,
            )
        except BudgetExhaustedError:  # a cap's room left: the sample stands alone
            return [first]
        retry = problem.candidate(
            res.text,
            cost=res.usage.total_tokens,
            completion_tokens=res.usage.completion_tokens,
            origin="retry",
            reasoning=res.reasoning,
        )
        return [first, retry]

    def check_problem(self, problem: Problem) -> None:
        if problem.visible_check is None:
            raise ValueError(
                "reflexion retries on the examples a problem states; this problem has no "
                "visible_check (HumanEval problems have one)"
            )

    async def _run(self, problem: Problem, run_budget: RunBudget) -> MethodResult:
        assert problem.visible_check is not None  # check_problem refused it otherwise
        c, budget = run_budget.client, run_budget.budget
        estimate = sample_cost(self, c, problem)
        attempts = await in_waves(
            lambda i: self._attempt(c, problem, i),
            run_budget,
            1.5 * self.planned_cost(estimate),  # a sample, and a retry for some
            self.parallel,
            minimum=1,
        )
        pool = [cand for attempt in attempts for cand in attempt]
        voters, checked = await passing_visible(pool, problem.visible_check)
        final, votes = await off_loop(vote_final, voters)
        meta: dict[str, Any] = {
            **votes,
            "execution_filter": checked,
            "retries": sum(len(a) - 1 for a in attempts),
        }
        return MethodResult(self.name, budget, final, pool, c.ledger, meta)
