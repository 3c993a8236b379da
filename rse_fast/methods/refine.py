"""Iterative refinement: one sample, then critique-and-revise rounds while the budget lasts."""

from __future__ import annotations

from rse_fast.llm.client import LLMClient
from rse_fast.llm.ledger import Ledger
from rse_fast.methods.base import Candidate, Method, MethodResult, Problem, Spend
from rse_fast.methods.sampling import sample
from rse_fast.prompts import critique_messages, revise_messages


class Refinement(Method):
    name = "refine"

    async def run(self, problem: Problem, budget: int, client: LLMClient) -> MethodResult:
        c = client.with_ledger(Ledger())
        spend = Spend(c.ledger, budget)
        current = await sample(self, c, problem, 0)
        pool = [current]
        # critique reads P + C and writes up to ~C; the revision reads P + 2C and writes C:
        # ≈ 2P + 5C per round (P, C: the first sample's prompt and completion), until measured.
        completion = current.completion_tokens
        round_cost = 2.0 * (current.cost - completion) + 5.0 * completion
        r = 0
        while spend.units_left(round_cost) >= 1:
            r += 1
            before = spend.spent
            crit = await c.chat(
                critique_messages(problem.prompt, current.text),
                role="refine",
                seed=self.seed + r,
                temperature=0.2,
                max_tokens=self.max_tokens,
            )
            rev = await c.chat(
                revise_messages(problem.prompt, current.text, crit.text),
                role="refine",
                seed=self.seed + r,
                temperature=self.temperature,
                max_tokens=self.max_tokens,
            )
            round_cost = float(spend.spent - before)
            current = Candidate.of(rev.text, cost=int(round_cost), origin=f"refine-{r}")
            pool.append(current)
        return MethodResult(self.name, budget, current, pool, c.ledger, {"revisions": r})
