"""RSE as one more TTS family: K rollouts per round, as many rounds as the budget allows."""

from __future__ import annotations

from typing import Any

from rse_fast.answers import answers_equivalent, majority_vote
from rse_fast.bank import ExperienceBank
from rse_fast.client import LLMClient
from rse_fast.encoder import Encoder
from rse_fast.ledger import Ledger
from rse_fast.methods.base import Candidate, Method, MethodResult, Problem, Spend
from rse_fast.rse import RSE
from rse_fast.rse_types import RSEConfig


class RSEMethod(Method):
    name = "rse"

    def __init__(
        self, *, encoder: Encoder | None = None, k: int = 4, max_rounds: int = 8, **kw: Any
    ) -> None:
        super().__init__(**kw)
        self.encoder, self.k, self.max_rounds = encoder, k, max_rounds

    async def run(self, problem: Problem, budget: int, client: LLMClient) -> MethodResult:
        c = client.with_ledger(Ledger())
        spend = Spend(c.ledger, budget)
        cfg = RSEConfig(
            rounds=self.max_rounds,
            k=self.k,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            seed=self.seed,
        )
        self.encoder = self.encoder or Encoder()
        engine = RSE(c, self.encoder, cfg)
        bank = ExperienceBank(self.encoder.dim)
        rounds, block, round_cost = [], "", 0.0
        for r in range(1, self.max_rounds + 1):
            if r > 1 and spend.units_left(round_cost) < 1:
                break
            before = spend.spent
            result, block = await engine.run_round(problem.prompt, r, bank, problem.gold, block)
            rounds.append(result)
            round_cost = float(spend.spent - before)
        pool = [
            Candidate.of(x.text, cost=0, origin=f"rse-round-{rr.round}")
            for rr in rounds
            for x in rr.rollouts
            if x.error is None
        ]
        vote = majority_vote([p.answer for p in pool])
        final = next(
            (
                p
                for p in pool
                if vote.answer is not None and answers_equivalent(p.answer, vote.answer)
            ),
            pool[0] if pool else None,
        )
        meta = {
            "rounds": len(rounds),
            "accuracy_per_round": [x.accuracy for x in rounds],
            "answer_per_round": [x.answer for x in rounds],
            "bank_sizes": bank.sizes(),
        }
        return MethodResult(self.name, budget, final, pool, c.ledger, meta)
