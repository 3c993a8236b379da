"""Fusion: one synthesis call over a random subset of the pool."""

from __future__ import annotations

import random
from typing import Any

from rse_fast.answers import off_loop
from rse_fast.errors import BudgetExhaustedError
from rse_fast.llm.budget import RunBudget
from rse_fast.methods.base import Method, prompt_cost
from rse_fast.methods.sampling import sample, sample_cost
from rse_fast.methods.types import Candidate, MethodResult, Problem
from rse_fast.methods.voting import (
    vote_final,
)
from rse_fast.methods.waves import in_waves
from rse_fast.prompts import fusion_messages


def clip_middle(text: str, chars: int) -> str:
    """Head and tail of ``text`` within ``chars`` characters (the ends carry the plan and the
    conclusion)."""
    if len(text) <= chars:
        return text
    return text[: chars // 2] + "\n[...]\n" + text[-chars // 2 :]


class Fusion(Method):
    """Samples, then one synthesis call over a random subset of ``fuse_k`` of them, each
    clipped to ``max_fusion_chars // fuse_k`` characters so the prompt stays bounded. The
    synthesis call's expected cost is held back from sampling, re-estimated as samples land."""

    name = "fusion"

    def __init__(self, *, fuse_k: int = 5, max_fusion_chars: int = 12000, **kw: Any) -> None:
        super().__init__(**kw)
        if fuse_k < 2:
            raise ValueError(f"fuse_k must be at least 2, got {fuse_k}")
        self.fuse_k, self.max_fusion_chars = fuse_k, max_fusion_chars

    async def _run(self, problem: Problem, run_budget: RunBudget) -> MethodResult:
        c, budget = run_budget.client, run_budget.budget
        prompt = prompt_cost(c, problem.messages())
        per_chars = max(200, self.max_fusion_chars // self.fuse_k)

        def fusion_cost() -> float:
            measured = c.ledger.mean_call("explore", completion=True, answered=True)
            completion = measured if measured is not None else self.expected_completion()
            shown = min(completion, per_chars / 3)  # ~3+ characters per token
            return prompt + self.fuse_k * shown + completion

        estimate = sample_cost(self, c, problem)
        spend = run_budget.holding(fusion_cost)
        pool = await in_waves(
            lambda i: sample(self, c, problem, i),
            spend,
            self.planned_cost(estimate),
            self.parallel,
            minimum=2,
        )
        self.learn(pool, estimate, spend.spent)
        rng = random.Random(f"{self.seed}:{problem.id}")
        chosen = rng.sample(pool, min(self.fuse_k, len(pool)))
        final: Candidate | None = None
        while final is None and len(chosen) >= 2:
            try:
                res = await c.chat(
                    fusion_messages(
                        problem.transcript,
                        [clip_middle(p.text, per_chars) for p in chosen],
                        problem.open_ended,
                    ),
                    role="fuse",
                    task="fuse",
                    seed=self.seed,
                    temperature=0.2,
                    max_tokens=self.max_tokens,
                )
                final = problem.candidate(
                    res.text, cost=res.usage.total_tokens, origin="fuse", reasoning=res.reasoning
                )
            except BudgetExhaustedError:  # a cap's room left: fuse fewer candidates
                chosen = chosen[:-1]
        if final is None:  # not even two fit: the vote over the samples answers
            final, _ = await off_loop(vote_final, pool)
        return MethodResult(
            self.name, budget, final, pool, c.ledger, {"fused": len(chosen), "sampled": len(pool)}
        )
