"""RSE as one more TTS family: K rollouts per round, as many rounds as the budget allows.

Variants for ablations are named ``rse:<variant>`` (see :data:`VARIANTS`): each sets a few
:class:`~rse_fast.rse.config.RSEConfig` fields, e.g. ``rse:neg-only`` recycles pitfalls only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from rse_fast.answers import off_loop
from rse_fast.encoder import Encoder
from rse_fast.llm.client import LLMClient
from rse_fast.llm.ledger import Ledger
from rse_fast.methods.base import Candidate, Method, MethodResult, Problem, Spend
from rse_fast.methods.sampling import vote_final
from rse_fast.rse.bank import ExperienceBank
from rse_fast.rse.config import RSEConfig
from rse_fast.rse.engine import RSE, select_rounds
from rse_fast.rse.results import Progress

#: Ablation variants: name → RSEConfig fields it sets.
VARIANTS: dict[str, dict[str, Any]] = {
    "neg-only": {"use_positive": False},
    "pos-only": {"use_negative": False},
    "no-dedup": {"dedup": False},
    "replace-longer": {"dedup_policy": "replace-longer", "dedup_order": "longest"},
    "guided": {"select_from": "guided"},
    "last": {"select_from": "last"},
}


class RSEMethod(Method):
    """RSE at a token budget.

    Args (besides the common ones):
        encoder: sentence encoder for dedup (loaded on first use when None).
        k: rollouts per round at most (fewer when the budget is small).
        max_rounds: rounds at most; at least two are planned when the budget allows.
        config: further RSEConfig fields (e.g. ``{"tau_negative": 0.8}``).
        variant: a name from :data:`VARIANTS`, applied on top of ``config``.
        progress: called with the engine's progress after every rollout and distillation.
    """

    name = "rse"

    def __init__(
        self,
        *,
        encoder: Encoder | None = None,
        k: int = 4,
        max_rounds: int = 8,
        config: dict[str, Any] | None = None,
        variant: str | None = None,
        progress: Callable[[Progress], None] | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        self.encoder, self.k, self.max_rounds, self.progress = encoder, k, max_rounds, progress
        if variant is not None and variant not in VARIANTS:
            raise ValueError(f"unknown RSE variant {variant!r}; choose from {', '.join(VARIANTS)}")
        self.overrides = {**(config or {}), **(VARIANTS[variant] if variant else {})}
        if variant:
            self.name = f"rse:{variant}"
        RSEConfig(**self.overrides)  # unknown or invalid fields fail here, not mid-run

    async def run(self, problem: Problem, budget: int, client: LLMClient) -> MethodResult:
        if problem.open_ended:
            raise ValueError("RSE answers by a vote over final answers: use it on verifiable tasks")
        c = client.with_ledger(Ledger())
        spend = Spend(c.ledger, budget)
        cfg = RSEConfig(
            **{
                "rounds": self.max_rounds,
                "k": self.k,
                "temperature": self.temperature,
                "max_tokens": self.max_tokens,
                "seed": self.seed,
                **self.overrides,
            }
        )
        self.encoder = self.encoder or Encoder()
        engine = RSE(c, self.encoder, cfg, progress=self.progress)
        bank = ExperienceBank(self.encoder.dim, policy=cfg.dedup_policy)
        # Cost of one rollout + its distillation: guessed (prompts + a full-length attempt read
        # twice), then measured. Aim for at least two rounds so the bank gets used.
        unit = 2.0 * (c.count_tokens(problem.prompt) + 150) + 2.0 * self.max_tokens
        units = spend.left / unit
        planned = max(1, min(self.max_rounds, math.ceil(units / self.k), 2 if units >= 2 else 1))
        rounds: list[Any] = []
        block = ""
        for r in range(1, self.max_rounds + 1):
            units = spend.left / unit
            if r > 1 and units < 0.5:
                break
            k_r = max(1, min(self.k, round(units / max(1, planned - r + 1))))
            engine.config = replace(cfg, k=k_r)
            before = spend.spent
            used = block
            result, block = await engine.run_round(problem.prompt, r, bank, problem.gold, block)
            rounds.append(result)
            # next round's rollouts carry the new experience block instead of this one
            grown = c.count_tokens(block) - c.count_tokens(used)
            unit = max(1.0, (spend.spent - before) / k_r + grown)
            planned = max(planned, r + 1) if spend.left / unit >= 0.5 else r
        pool = [
            Candidate.of(x.text, cost=0, origin=f"rse-round-{rr.round}")
            for rr in select_rounds(rounds, cfg.select_from)
            for x in rr.rollouts
            if x.error is None
        ]
        final, votes = await off_loop(vote_final, pool)
        meta = {
            **votes,
            "rounds": len(rounds),
            "accuracy_per_round": [x.accuracy for x in rounds],
            "answer_per_round": [x.answer for x in rounds],
            "bank_sizes": bank.sizes(),
            "rounds_detail": [
                {
                    "round": x.round,
                    "k": x.k,
                    "answer": x.answer,
                    "answers": x.answers,
                    "bank_sizes": x.bank_sizes,
                    "accepted": [d.text for d in x.decisions if d.accepted],
                }
                for x in rounds
            ],
        }
        return MethodResult(self.name, budget, final, pool, c.ledger, meta)
