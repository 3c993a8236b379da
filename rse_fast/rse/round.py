"""One RSE round as an object: its rollouts, their distillations, the bank insert, and the
counters its progress reports read.

The round samples K rollouts in parallel under one prompt, distills each the moment it
finishes (or the whole round at once), embeds the statements while other calls are in
flight, then inserts them per type in a deterministic order (rollout, then position, unless
configured otherwise), never in arrival order.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from rse_fast.answers import answers_equivalent, majority_vote, off_loop
from rse_fast.answers.confidence import rollout_confidence, token_confidences
from rse_fast.errors import BudgetExhaustedError, LLMError, RoundFailedError
from rse_fast.llm.types import Message
from rse_fast.prompts import answer_split
from rse_fast.rse.bank import Decision, Experience, ExperienceBank
from rse_fast.rse.checkpoint import problem_id
from rse_fast.rse.config import RSEConfig
from rse_fast.rse.distiller import RolloutOutcome, release_early
from rse_fast.rse.results import Progress, RolloutRecord, RoundResult
from rse_fast.rse.settling import Memory, RoundSplit
from rse_fast.util.tasks import gather_or_cancel

if TYPE_CHECKING:
    from rse_fast.rse.engine import RSE


@dataclass(frozen=True)
class RoundAsk:
    """What one round is asked to do: round ``r`` of ``problem`` with ``k`` rollouts under
    the bank block ``block``, distilled or not, observed by a checker or not, its first
    rollout being the run's sample ``first`` (seeds follow it)."""

    problem: str
    r: int
    k: int
    block: str
    gold: str | None = None
    distill: bool = True
    observe: bool = False
    first: int = 0


def confidence_request(cfg: RSEConfig) -> dict[str, Any]:
    """The logprobs a rollout asks for when confidence is on (nothing otherwise)."""
    if cfg.confidence_top_logprobs is None:
        return {}
    return {"logprobs": True, "top_logprobs": cfg.confidence_top_logprobs}


def rollout_confidence_of(cfg: RSEConfig, logprobs: Any) -> float | None:
    """A rollout's confidence by ``cfg``'s measure; None without logprobs."""
    if cfg.confidence_top_logprobs is None:
        return None
    window = cfg.confidence_window
    summary = rollout_confidence(token_confidences(logprobs), window, window)
    return summary.measure(cfg.confidence_measure) if summary else None


def _skipped(rec: RolloutRecord) -> RolloutOutcome:
    rec.distill = "skipped"
    now = time.perf_counter()
    return RolloutOutcome(rec, [], None, now, now)


class RoundRun:
    """Round ``ask.r`` of one solve on ``engine``'s client, distiller and settle rules,
    filing into ``bank`` and ``memory`` (the solve's); :meth:`run` returns its result and the
    next round's bank block."""

    def __init__(self, engine: RSE, ask: RoundAsk, bank: ExperienceBank, memory: Memory) -> None:
        self.engine, self.ask, self.bank, self.memory = engine, ask, bank, memory
        self.cfg = engine.config
        self.messages = engine.rollout_messages(ask.problem, ask.block)
        self.rollouts = self.distills = self.failures = self.unparseable = self.refused = 0
        cfg = self.cfg
        self.per_rollout = ask.distill and cfg.distill_mode == "each"
        # round 1 under a settle rule: distill only once its vote shows it is not settled
        # (nothing reads a settled round's bank); the distillations then wait for the round
        waits = self.per_rollout and (
            cfg.distill_sees_votes
            or cfg.distill_confident_share is not None
            or cfg.propositions_from_confident
            or engine.settling.may_settle(ask.r, memory)
            or engine.settling.stop_rule is not None
        )
        self.split = RoundSplit(ask.k) if waits else None

    def report(self, round_done: bool = False) -> None:
        """Tell the engine's progress callback where the round stands."""
        progress = self.engine.progress
        if progress is None:
            return
        progress(
            Progress(
                round=self.ask.r,
                rounds=self.cfg.rounds,
                k=self.ask.k,
                rollouts_done=self.rollouts,
                distills_done=self.distills,
                failures=self.failures,
                unparseable=self.unparseable,
                bank_sizes=self.bank.sizes(),
                tokens=self.engine.client.ledger.total_tokens,
                round_done=round_done,
            )
        )

    async def run(self) -> tuple[RoundResult, str]:
        """Sample, distill, file; the result and the next round's bank block."""
        ask, engine = self.ask, self.engine
        t0 = time.perf_counter()
        tokens0 = engine.client.ledger.total_tokens
        # an unexpected failure (a task's checker, the encoder) ends the round's other
        # rollouts too, rather than leaving them streaming on a client about to close
        outcomes = await gather_or_cancel(self._rollout_and_distill(i) for i in range(ask.k))
        await self._distill_batch(outcomes)
        refusals = self._raise_if_all_failed(outcomes)
        last_return = max(o.returned_at for o in outcomes)
        all_encoded = max(o.encoded_at for o in outcomes)
        decisions = self._insert(outcomes)
        self.bank.problem_ids.add(problem_id(ask.problem))
        records = [o.record for o in outcomes]
        await self.memory.remember(ask.r, records, self.cfg.bank_follows_vote)
        next_block = engine.render(self.bank, ask.problem, ask.k, memory=self.memory)
        t_end = time.perf_counter()
        vote = await off_loop(majority_vote, [x.answer for x in records])
        graded = [x.correct for x in records if x.error is None]
        failed = sum(x.error is not None for x in records)
        result = RoundResult(
            round=ask.r,
            k=ask.k,
            experience_block=ask.block,
            rollouts=records,
            decisions=decisions,
            bank_sizes=self.bank.sizes(),
            answer=vote.answer,
            votes=vote.count,
            accuracy=(sum(bool(c) for c in graded) / len(graded)) if ask.gold is not None else None,
            unparseable=sum(x.distill == "unparseable" for x in records),
            failed_rollouts=failed - refusals,
            refused_rollouts=refusals,
            failed_distills=sum(x.distill == "failed" for x in records),
            tokens=engine.client.ledger.total_tokens - tokens0,
            wall_s=t_end - t0,
            tail_ms=(t_end - last_return) * 1e3,
            tail_encoder_ms=max(0.0, all_encoded - last_return) * 1e3,
        )
        self.report(round_done=True)
        return result, next_block

    async def _distill_batch(self, outcomes: list[RolloutOutcome]) -> None:
        """``distill_mode="batch"``: the round's rollouts distilled together, unless round 1's
        vote settles it (nothing would read its bank)."""
        ask, settling = self.ask, self.engine.settling
        if not ask.distill or self.cfg.distill_mode != "batch":
            return
        if settling.may_settle(ask.r, self.memory) and await off_loop(
            settling.settles, [o.record.answer for o in outcomes]
        ):
            return
        await self.engine.distiller.distill_round(ask.problem, ask.r, outcomes, ask.first)
        self.distills = ask.k
        self.unparseable = sum(o.record.distill in ("unparseable", "failed") for o in outcomes)
        self.report()

    def _raise_if_all_failed(self, outcomes: list[RolloutOutcome]) -> int:
        """The number of rollouts the budget refused; raises when every rollout failed (a
        spent budget as itself, anything else as a RoundFailedError)."""
        k = self.ask.k
        failed = sum(o.record.error is not None for o in outcomes)
        refusals = [o.error for o in outcomes if isinstance(o.error, BudgetExhaustedError)]
        if failed == k and len(refusals) == k:
            raise refusals[0]  # a cap's budget is spent: not a failure of the round
        if failed == k:
            raise RoundFailedError(
                f"round {self.ask.r}: all {k} rollouts failed (first error: "
                f"{outcomes[0].record.error}); the last checkpoint is intact",
                cause=outcomes[0].error,
            )
        return len(refusals)

    def _insert(self, outcomes: list[RolloutOutcome]) -> list[Decision]:
        """One greedy insert per type, candidates in (rollout, position) order — or longest or
        shortest first, ties by (rollout, position) — so the same replies give the same bank."""
        cands: list[Experience] = []
        vecs: list[np.ndarray] = []
        for o in outcomes:  # outcomes are in rollout order already
            if o.vectors is not None:
                cands.extend(o.candidates)
                vecs.append(o.vectors)
        if not cands:
            return []
        vectors = np.vstack(vecs)
        order = list(range(len(cands)))
        sign = {"shortest": 1, "longest": -1}.get(self.cfg.dedup_order)
        if sign is not None:
            order.sort(
                key=lambda j: (sign * len(cands[j].text), cands[j].rollout, cands[j].position)
            )
        return self.bank.add([cands[j] for j in order], vectors[order], self.cfg.tau)

    async def _rollout_and_distill(self, i: int) -> RolloutOutcome:
        """Rollout ``i``, then (when the round distills) its distillation, and (``observe``,
        or with a distillation) what the checker saw running it: grounded experience is filed
        even where no distillation was bought."""
        rec = RolloutRecord(index=i)
        seed = None if self.cfg.seed is None else self.cfg.seed + self.ask.first + i
        try:
            res = await self._sample(seed)
        except (LLMError, BudgetExhaustedError) as exc:
            rec.error = f"{type(exc).__name__}: {exc}"
            if isinstance(exc, BudgetExhaustedError):
                self.refused += 1
            else:
                self.failures += 1
            if self.split is not None:
                self.split.add(None)
            self.report()
            now = time.perf_counter()
            return RolloutOutcome(rec, [], None, now, now, exc)
        await self._read(rec, res)
        if not self.per_rollout:
            return await self._grounded_only(rec, self.ask.observe)
        gate, trusted, votes = await self._gate(rec)
        if gate is not None:
            return gate
        return await self._distill(rec, res, seed, trusted, votes)

    async def _sample(self, seed: int | None) -> Any:
        cfg = self.cfg
        return await self.engine.client.chat(
            self.messages,
            role="explore",
            task=f"round{self.ask.r}",
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            top_k=cfg.top_k,
            max_tokens=cfg.max_tokens,
            seed=seed,
            **confidence_request(cfg),
        )

    async def _read(self, rec: RolloutRecord, res: Any) -> None:
        """What the rollout said: its text, answer, confidence and (with gold) correctness."""
        choice = res.choices[0]
        rec.text, rec.reasoning, rec.finish_reason = (
            choice.text,
            choice.reasoning,
            choice.finish_reason,
        )
        rec.truncated = choice.finish_reason == "length"
        rec.confidence = rollout_confidence_of(self.cfg, choice.logprobs)
        rec.answer = self.engine.answer_of(res.text)
        if self.ask.gold is not None:
            rec.correct = await off_loop(answers_equivalent, rec.answer, self.ask.gold)
        self.rollouts += 1
        self.report()

    async def _grounded_only(self, rec: RolloutRecord, observe: bool) -> RolloutOutcome:
        """A rollout not distilled: what a checker that runs it sees still counts."""
        if observe and self.engine.distiller.observes:
            rec.distill = "skipped"
            return await self.engine.distiller.grounded_only(rec, self.ask.r, self.report)
        return _skipped(rec)

    async def _gate(self, rec: RolloutRecord) -> tuple[RolloutOutcome | None, bool, Any]:
        """Where the round waits for its vote: (the outcome of a rollout it will not distill
        (settled, stopping, or among the unsure) or None to go on, whether its propositions
        are trusted, the round's answers as its distillation sees them)."""
        split, cfg = self.split, self.cfg
        trusted, votes = True, None
        if split is None:
            return None, trusted, votes
        split.add(rec.answer, rec.confidence)
        answers = await split.all_in()
        if await self.engine.settling.round_needs_no_bank(self.ask.r, split, self.memory):
            return _skipped(rec), trusted, votes  # settled or stopping: no later round reads it
        share = cfg.distill_confident_share
        if share is not None and not await split.among_most_confident(rec.confidence, share):
            return await self._grounded_only(rec, True), trusted, votes  # an unsure rollout
        if cfg.propositions_from_confident:
            trusted = await split.sides_with_confident_vote(rec.answer, rec.confidence)
        if cfg.distill_sees_votes:
            votes = answer_split(answers, rec.answer)
        return None, trusted, votes

    async def _distill(
        self, rec: RolloutRecord, res: Any, seed: int | None, trusted: bool, votes: Any
    ) -> RolloutOutcome:
        """The rollout's distillation (while the checker runs it), filed and embedded."""
        distiller, r = self.engine.distiller, self.ask.r
        early: dict[str, asyncio.Future[np.ndarray]] = {}
        rollout_tokens = res.usage.completion_tokens or self.engine.client.count_tokens(res.text)
        seeing = asyncio.ensure_future(distiller.observe(rec, r))
        try:
            parsed = await distiller.distill_rollout(
                self.ask.problem, rec, r, seed, early, rollout_tokens, votes, rollout=self.messages
            )
            seen = await seeing
        except BaseException:
            seeing.cancel()
            release_early(early)
            raise
        returned = time.perf_counter()
        # a parse that worked is marked "ok" only when it is filed, below
        self.distills += parsed is not None or rec.distill != "skipped"
        if parsed is None:
            self.unparseable += rec.distill in ("unparseable", "failed")
            self.report()
            return RolloutOutcome(rec, [], None, returned, returned)
        cands = await distiller.file(
            rec, parsed, r, seen.rollout, propositions=trusted
        ) + distiller.grounded(seen, rec, r)
        vectors = await distiller.vectors([c.text for c in cands], early) if cands else None
        rec.embedded_early = sum(1 for c in cands if c.text in early)
        self.report()
        return RolloutOutcome(rec, cands, vectors, returned, time.perf_counter())


__all__ = ["Message", "RoundAsk", "RoundRun", "confidence_request", "rollout_confidence_of"]
