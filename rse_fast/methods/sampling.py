"""Parallel-sampling families: self-consistency (majority vote), best-of-N with a verifier, and
fusion (one synthesis call over the pool). SC and BoN can be subsampled: generate once at the
largest budget, then take the prefix of the pool that fits each smaller budget."""

from __future__ import annotations

from typing import Any

from rse_fast.answers import answers_equivalent, majority_vote, off_loop
from rse_fast.llm.client import LLMClient
from rse_fast.llm.ledger import Ledger
from rse_fast.methods.base import (
    Candidate,
    Method,
    MethodResult,
    Problem,
    Spend,
    best_index,
    in_waves,
)
from rse_fast.methods.judge import LLMJudge
from rse_fast.prompts import fusion_messages, solve_messages


async def sample(
    method: Method, client: LLMClient, problem: Problem, i: int, role: str = "explore"
) -> Candidate:
    res = await client.chat(
        solve_messages(problem.prompt),
        role=role,
        task=f"c{i}",
        seed=method.seed + i,
        temperature=method.temperature,
        max_tokens=method.max_tokens,
    )
    return Candidate.of(
        res.text,
        cost=res.usage.total_tokens,
        completion_tokens=res.usage.completion_tokens,
        origin="sample",
    )


def prefix_within(pool: list[Candidate], budget: int) -> list[Candidate]:
    """The longest prefix whose cost is nearest to ``budget`` (at least one candidate)."""
    total, best, best_err = 0, 1, float("inf")
    for i, c in enumerate(pool, 1):
        total += c.cost
        if abs(total - budget) < best_err:
            best, best_err = i, abs(total - budget)
        if total > budget:
            break
    return pool[:best]


def _task_tokens(ledger: Ledger, task: str) -> int:
    return sum(r.total_tokens for r in ledger.records if r.task == task)


def sub_ledger(ledger: Ledger, pool: list[Candidate]) -> Ledger:
    """The records of the first ``len(pool)`` candidates (their sampling and scoring calls)."""
    keep = {f"c{i}" for i in range(len(pool))}
    out = Ledger(ledger.exploration_roles)
    for rec in ledger.records:
        if rec.task in keep:
            out.record(rec)
    return out


def vote_final(pool: list[Candidate]) -> tuple[Candidate | None, dict[str, Any]]:
    vote = majority_vote([c.answer for c in pool])
    final = next(
        (c for c in pool if vote.answer is not None and answers_equivalent(c.answer, vote.answer)),
        pool[0] if pool else None,
    )
    return final, {"votes": vote.count, "voters": vote.total}


class SelfConsistency(Method):
    name = "sc"
    subsamples = True

    async def run(self, problem: Problem, budget: int, client: LLMClient) -> MethodResult:
        c = client.with_ledger(Ledger())
        spend = Spend(c.ledger, budget)
        first = await sample(self, c, problem, 0)
        pool = [
            first,
            *await in_waves(
                lambda i: sample(self, c, problem, i + 1), spend, first.cost, self.parallel
            ),
        ]
        final, meta = await off_loop(vote_final, pool)
        return MethodResult(self.name, budget, final, pool, c.ledger, meta)

    def subsample(self, full: MethodResult, budget: int) -> MethodResult:
        pool = prefix_within(full.pool, budget)
        final, meta = vote_final(pool)
        return MethodResult(self.name, budget, final, pool, sub_ledger(full.ledger, pool), meta)


class BestOfN(Method):
    """Best-of-N: every sample is scored by the verifier (LLM judge or reward model)."""

    name = "bon"
    subsamples = True

    def __init__(self, *, judge: Any = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.judge = judge or LLMJudge()

    async def _scored(self, c: LLMClient, problem: Problem, i: int) -> Candidate:
        cand = await sample(self, c, problem, i)
        before = _task_tokens(c.ledger, f"c{i}")
        score = await self.judge.score(
            c, problem.prompt, cand.text, seed=self.seed + i, task=f"c{i}"
        )
        cand.scores["judge"] = score if score is not None else float("nan")
        cand.cost += _task_tokens(c.ledger, f"c{i}") - before
        return cand

    async def run(self, problem: Problem, budget: int, client: LLMClient) -> MethodResult:
        c = client.with_ledger(Ledger())
        spend = Spend(c.ledger, budget)
        first = await self._scored(c, problem, 0)
        pool = [
            first,
            *await in_waves(
                lambda i: self._scored(c, problem, i + 1), spend, first.cost, self.parallel
            ),
        ]
        return self._select(pool, budget, c.ledger)

    def _select(self, pool: list[Candidate], budget: int, ledger: Ledger) -> MethodResult:
        best = best_index([p.scores.get("judge", float("nan")) for p in pool])
        garbage = sum(1 for p in pool if p.scores.get("judge") != p.scores.get("judge"))
        return MethodResult(
            self.name,
            budget,
            pool[best] if best is not None else None,
            pool,
            ledger,
            {"judge_garbage": garbage},
        )

    def subsample(self, full: MethodResult, budget: int) -> MethodResult:
        pool = prefix_within(full.pool, budget)
        return self._select(pool, budget, sub_ledger(full.ledger, pool))


class Fusion(Method):
    """N samples, then one synthesis call over all of them (prompt bounded to the context)."""

    name = "fusion"

    def __init__(self, *, max_fusion_chars: int = 12000, **kw: Any) -> None:
        super().__init__(**kw)
        self.max_fusion_chars = max_fusion_chars

    async def run(self, problem: Problem, budget: int, client: LLMClient) -> MethodResult:
        c = client.with_ledger(Ledger())
        first = await sample(self, c, problem, 0)
        completion = max(1, first.completion_tokens)
        prompt = max(1, first.cost - completion)
        # samples cost N·(P + C); the fusion call ≈ P + N·C (candidates in its prompt) + C.
        per_sample = prompt + 2 * completion
        n_total = max(
            2,
            min(
                self.max_fusion_chars // 200, int((budget - prompt - completion) / per_sample + 0.5)
            ),
        )
        reserve = Spend(c.ledger, budget - (prompt + n_total * completion + completion))
        rest = await in_waves(
            lambda i: sample(self, c, problem, i + 1),
            reserve,
            first.cost,
            self.parallel,
            limit=n_total - 1,
        )
        pool = [first, *rest]
        per = max(200, self.max_fusion_chars // len(pool))
        texts = [
            t if len(t) <= per else t[: per // 2] + "\n[...]\n" + t[-per // 2 :]
            for t in (p.text for p in pool)
        ]
        res = await c.chat(
            fusion_messages(problem.prompt, texts),
            role="fuse",
            task="fuse",
            seed=self.seed,
            temperature=0.2,
            max_tokens=self.max_tokens,
        )
        final = Candidate.of(res.text, cost=res.usage.total_tokens, origin="fuse")
        return MethodResult(self.name, budget, final, pool, c.ledger, {"fused": len(pool)})
