"""The RSE engine: experience-guided rounds of parallel rollouts.

Per round: render the bank into the prompt, sample K rollouts in parallel, distill each rollout
(its reasoning trace and its final response) the moment it finishes, embed its experiences
while other calls are in flight, then one greedy insert per type in a deterministic order
(rollout index, then position, unless configured otherwise), never arrival order. Rejected
candidates add support to the experience they matched.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from rse_fast import kernels
from rse_fast.answers import answers_equivalent, extract_answer, majority_vote, off_loop
from rse_fast.answers.confidence import rollout_confidence, token_confidences
from rse_fast.encoder import Encoder
from rse_fast.errors import BudgetExhaustedError, LLMError, RoundFailedError
from rse_fast.llm.client import LLMClient
from rse_fast.llm.types import Message
from rse_fast.prompts import (
    answer_split,
    solve_messages,
)
from rse_fast.rse.bank import Decision, Experience, ExperienceBank
from rse_fast.rse.checking import ExperienceChecker
from rse_fast.rse.checkpoint import Checkpoint, problem_id
from rse_fast.rse.config import RSEConfig
from rse_fast.rse.distiller import Distiller, RolloutOutcome, release_early
from rse_fast.rse.results import Progress, RolloutRecord, RoundResult, RSEResult
from rse_fast.rse.settling import RoundSplit, Settling, agreeing_sources
from rse_fast.util.sync import run_sync
from rse_fast.util.tasks import gather_or_cancel


class RSE:
    """Recycling Search Experience: rounds of parallel rollouts steered by an experience bank.

    Args:
        client: the policy model's :class:`~rse_fast.llm.client.LLMClient` (it also distills:
            RSE needs no reward model and no gold answer).
        encoder: sentence encoder for dedup (the bundled all-MiniLM-L6-v2 by default).
        config: :class:`~rse_fast.rse.config.RSEConfig` (rounds, K, τ, sampling, ...).
        checkpoint_dir: write an atomic checkpoint after each round there; ``solve(...,
            resume=True)`` continues from it, losing at most the round in flight.
        progress: called with a :class:`~rse_fast.rse.results.Progress` after every rollout,
            distillation and round.
        distill_client: another endpoint (or model) for distillation; its calls are booked
            in ``client``'s ledger under the ``distill`` role.
        checker: a task's check of each distilled statement (``rse.checking``).
        answer_of: how a rollout's answer is read (default: its ``\\boxed{}`` or stated final
            answer; ``Problem.answer`` for a task that reads answers its own way).

    Example::

        async with LLMClient("http://127.0.0.1:8000/v1", "qwen") as client:
            result = await RSE(client, config=RSEConfig(rounds=3, k=8)).solve("17 * 23?")
            result.answer, result.votes, result.accuracy_per_round, result.bank_sizes

    From sync code: ``RSE(client).solve_sync(problem)``.
    """

    def __init__(
        self,
        client: LLMClient,
        encoder: Encoder | None = None,
        config: RSEConfig | None = None,
        *,
        checkpoint_dir: str | os.PathLike[str] | None = None,
        progress: Callable[[Progress], None] | None = None,
        distill_client: LLMClient | None = None,
        checker: ExperienceChecker | None = None,
        answer_of: Callable[[str], str | None] | None = None,
    ) -> None:
        self.client = client
        #: how a rollout's answer is read (its vote, the settle margin, the split a distiller
        #: sees): the boxed or stated answer unless the task says otherwise (code: none)
        self.answer_of = answer_of or extract_answer
        self.encoder = encoder or Encoder()
        self._config = config or RSEConfig()
        self.distiller = Distiller(client, self.encoder, self._config,
                                   distill_client=distill_client, checker=checker)  # fmt: skip
        self.settling = Settling(self._config, self.bank_wanted)
        self.checkpoint = Checkpoint(checkpoint_dir) if checkpoint_dir else None
        self.progress = progress
        self.bank: ExperienceBank | None = None  # the bank of the last solve, when it ends
        self.keep_bank: bool | None = None  # this solve's bank is wanted after it (see solve)
        #: (round, rollout) → the answer it gave and its confidence, this solve so far
        self.sides: dict[tuple[int, int], tuple[str | None, float | None]] = {}
        #: the (round, rollout) pairs whose answer is the weighted vote's (bank_follows_vote)
        self.agreeing: set[tuple[int, int]] = set()
        kernels.warmup(self.encoder.dim)

    @property
    def config(self) -> RSEConfig:
        return self._config

    @config.setter
    def config(self, config: RSEConfig) -> None:
        """A new config reaches the distiller and the settle rules too."""
        self._config = self.distiller.config = self.settling.config = config

    @property
    def checker(self) -> ExperienceChecker | None:
        """The task checker the distiller files verdicts with (``rse.checking``)."""
        return self.distiller.checker

    @checker.setter
    def checker(self, checker: ExperienceChecker | None) -> None:
        self.distiller.checker = checker

    def solve_sync(self, problem: str, **kw: Any) -> RSEResult:
        """``solve`` from sync code; closes the client's session (bound to this run's loop)."""

        async def run() -> RSEResult:
            try:
                return await self.solve(problem, **kw)
            finally:
                await self.client.close()

        return run_sync(run())

    async def solve(
        self,
        problem: str,
        *,
        gold: str | None = None,
        resume: bool = False,
        bank: ExperienceBank | None = None,
        keep_bank: bool | None = None,
    ) -> RSEResult:
        """Run the configured rounds and return the voted answer with every round's record.

        Args:
            problem: the task text.
            gold: a reference answer, used only to report accuracy (never shown to the model).
            resume: continue from the last checkpoint in ``checkpoint_dir`` (a checkpoint of
                another problem is refused).
            bank: start from an existing experience bank (e.g. from a related problem).
            keep_bank: the bank is wanted after this run, so the last round is distilled too
                (and a settled round 1 still is). Default: when a bank was passed in (a bank
                carried from another problem is carried on) or ``distill_final_round``.

        Raises:
            RoundFailedError: every rollout of a round failed (the checkpoint stays intact).
            ValueError: an empty problem.
        """
        if not isinstance(problem, str) or not problem.strip():
            raise ValueError("problem must be a non-empty string")
        t0 = time.perf_counter()
        checked_before = dict(self.distiller.check_counts)  # an engine may solve many problems
        cfg = self.config
        rounds: list[RoundResult] = []
        bank_given = bank is not None
        bank = (
            bank if bank is not None else ExperienceBank(self.encoder.dim, policy=cfg.dedup_policy)
        )
        if resume and self.checkpoint is not None:
            saved = self.checkpoint.load(problem)
            if saved is not None:
                rounds, bank = saved.rounds, saved.bank
                self.client.ledger.restore(saved.records)
        resumed_from = len(rounds)
        await self.recall(rounds)
        self.bank = bank
        if keep_bank is None and bank_given:
            keep_bank = True  # a bank carried in from another problem is carried on
        self.keep_bank = keep_bank  # None: the config decides (``distill_final_round``)
        block = self._render(bank, problem)
        settled = bool(rounds) and self.settling.is_settled(rounds[0])
        for r in range(len(rounds) + 1, cfg.rounds + 1):
            if settled and cfg.settle_spend == "stop":
                break
            distill = self.distills(r, settled)
            result, block = await self.run_round(
                problem, r, bank, gold, "" if settled else block,
                distill=distill and cfg.distill_with_model, observe=distill,
            )  # fmt: skip
            rounds.append(result)
            settled = settled or (r == 1 and self.settling.is_settled(result))
            if self.checkpoint is not None:
                c0 = time.perf_counter()
                self.checkpoint.save(problem, cfg.to_dict(), rounds, bank, self.client.ledger)
                rounds[-1].checkpoint_ms = (time.perf_counter() - c0) * 1e3
        vote = await off_loop(
            majority_vote, [a for rr in select_rounds(rounds, cfg.select_from) for a in rr.answers]
        )
        correct = (
            await off_loop(answers_equivalent, vote.answer, gold) if gold is not None else None
        )
        return RSEResult(
            problem=problem,
            answer=vote.answer,
            votes=vote.count,
            total_votes=vote.total,
            correct=correct,
            rounds=rounds,
            bank_sizes=bank.sizes(),
            ledger=self.client.ledger.summary(),
            wall_s=time.perf_counter() - t0,
            resumed_from_round=resumed_from,
            checks=(
                {k: n - checked_before.get(k, 0) for k, n in self.distiller.check_counts.items()}
                if self.distiller.checker is not None
                else None
            ),
        )

    # -- one round -------------------------------------------------------------------------
    def _render(self, bank: ExperienceBank, problem: str, k: int | None = None) -> str:
        """The bank block of the next prompt; ``k``: the size of the round just distilled
        (it sets the support an experience needs to be shown)."""
        cfg = self.config
        return bank.render(
            cfg.bank_token_budget,
            self.client.count_tokens,
            max_per_kind=cfg.max_rendered_per_type,
            same_problem=bank.problem_ids <= {problem_id(problem)},
            min_support=cfg.shown_support(k if k is not None else cfg.k_for_round(1)),
            guidance=cfg.guidance,
            shown_if=self._sides_with_vote() if cfg.bank_follows_vote else None,
        )

    async def recall(self, rounds: list[RoundResult]) -> None:
        """Start from ``rounds`` already run (none: a fresh start): which answer each of
        their rollouts gave and the answers a stop counts, so a resumed run goes on as the
        interrupted one would have."""
        self.sides, self.agreeing = {}, set()
        self.settling.earlier_answers, self.settling.earlier_confidences = [], []
        for done in rounds:
            await self._remember(done.round, done.rollouts)

    async def _remember(self, r: int, records: list[RolloutRecord]) -> None:
        """What round ``r``'s finished rollouts leave for later rounds: their sides, and
        their answers for the stop over every round so far."""
        await self._note_sides(r, records)
        kept = [x for x in records if x.error is None]
        self.settling.earlier_answers += [x.answer for x in kept]
        self.settling.earlier_confidences += [x.confidence for x in kept]

    async def _note_sides(self, r: int, records: list[RolloutRecord]) -> None:
        """Which answer each finished rollout gave, and how sure it was; with
        ``bank_follows_vote``, which of them side with the confidence-weighted vote over
        every round so far (worked out off the event loop: it compares answers)."""
        for rec in records:
            if rec.error is None:
                self.sides[(r, rec.index)] = (rec.answer, rec.confidence)
        if self.config.bank_follows_vote:
            self.agreeing = await off_loop(agreeing_sources, self.sides)

    def _sides_with_vote(self) -> Callable[[str, set[tuple[int, int]]], bool]:
        """Whether an item may be shown: a pitfall always; a proposition while a rollout it
        came from sides with the confidence-weighted vote over every round so far."""
        return lambda kind, sources: kind == "negative" or bool(sources & self.agreeing)

    def bank_wanted(self) -> bool:
        """Whether the bank is wanted after the run: ``keep_bank`` of this solve, else
        ``distill_final_round``."""
        return self.config.distill_final_round if self.keep_bank is None else self.keep_bank

    def distills(self, r: int, settled: bool) -> bool:
        """Whether round ``r``'s rollouts are distilled: not once the vote is settled, and
        the last round only when its bank is wanted (:meth:`bank_wanted`)."""
        return not settled and (r < self.config.rounds or self.bank_wanted())

    def rollout_messages(self, problem: str, block: str) -> list[Message]:
        """A rollout's prompt: the problem under the bank block (and the primed ask, where
        the distillation that continues the rollout expects it)."""
        return solve_messages(problem, block, preamble=self.distiller.rollout_preamble())

    async def run_round(
        self,
        problem: str,
        r: int,
        bank: ExperienceBank,
        gold: str | None,
        block: str,
        *,
        distill: bool = True,
        first_index: int | None = None,
        observe: bool = False,
        k: int | None = None,
    ) -> tuple[RoundResult, str]:
        """Round r with prompt block ``block``; returns its result and the next round's block.
        ``distill=False``: no distillation (the bank grows only by what a checker that runs
        rollouts observed, with ``observe``: that costs no tokens). ``first_index``: the run's
        sample index of this round's first rollout (seeds follow it; default: the rollouts
        of rounds 1..r-1 as configured). ``k``: this round's rollouts (default: as configured;
        a planner sizes each round to its budget without touching the config)."""
        cfg = self.config
        k = k if k is not None else cfg.k_for_round(r)
        t0 = time.perf_counter()
        tokens0 = self.client.ledger.total_tokens
        messages = self.rollout_messages(problem, block)
        counters = {"rollouts": 0, "distills": 0, "failures": 0, "unparseable": 0, "refused": 0}

        def report(round_done: bool = False) -> None:
            if self.progress is not None:
                self.progress(
                    Progress(
                        round=r,
                        rounds=cfg.rounds,
                        k=k,
                        rollouts_done=counters["rollouts"],
                        distills_done=counters["distills"],
                        failures=counters["failures"],
                        unparseable=counters["unparseable"],
                        bank_sizes=bank.sizes(),
                        tokens=self.client.ledger.total_tokens,
                        round_done=round_done,
                    )
                )

        per_rollout = distill and cfg.distill_mode == "each"
        # round 1 under a settle rule: distill only once its vote shows it is not settled
        # (nothing reads a settled round's bank); the distillations then wait for the round
        waits = per_rollout and (
            cfg.distill_sees_votes
            or cfg.distill_confident_share is not None
            or cfg.propositions_from_confident
            or self.settling.may_settle(r)
            or self.settling.stop_rule is not None
        )
        split = RoundSplit(k) if waits else None
        first = (
            first_index if first_index is not None else sum(cfg.k_for_round(q) for q in range(1, r))
        )
        # an unexpected failure (a task's checker, the encoder) ends the round's other
        # rollouts too, rather than leaving them streaming on a client about to close
        outcomes = await gather_or_cancel(
            self._rollout_and_distill(
                problem,
                messages,
                r,
                i,
                gold,
                counters,
                report,
                per_rollout,
                split,
                first,
                observe,
            )
            for i in range(k)
        )
        if (
            distill
            and cfg.distill_mode == "batch"
            and not (
                self.settling.may_settle(r)
                and await off_loop(self.settling.settles, [o.record.answer for o in outcomes])
            )
        ):
            await self.distiller.distill_round(problem, r, outcomes, first)
            counters["distills"] = k
            counters["unparseable"] = sum(o.record.distill in ("unparseable", "failed")
                                          for o in outcomes)  # fmt: skip
            report()
        failed = sum(o.record.error is not None for o in outcomes)
        refusals = [o.error for o in outcomes if isinstance(o.error, BudgetExhaustedError)]
        if failed == k and len(refusals) == k:
            raise refusals[0]  # a cap's budget is spent: not a failure of the round
        if failed == k:
            raise RoundFailedError(
                f"round {r}: all {k} rollouts failed (first error: {outcomes[0].record.error}); "
                "the last checkpoint is intact",
                cause=outcomes[0].error,
            )
        last_return = max(o.returned_at for o in outcomes)
        all_encoded = max(o.encoded_at for o in outcomes)
        decisions = self._insert(bank, outcomes)
        bank.problem_ids.add(problem_id(problem))
        records = [o.record for o in outcomes]
        await self._remember(r, records)
        next_block = self._render(bank, problem, k)
        t_end = time.perf_counter()
        vote = await off_loop(majority_vote, [x.answer for x in records])
        graded = [x.correct for x in records if x.error is None]
        result = RoundResult(
            round=r,
            k=k,
            experience_block=block,
            rollouts=records,
            decisions=decisions,
            bank_sizes=bank.sizes(),
            answer=vote.answer,
            votes=vote.count,
            accuracy=(sum(bool(c) for c in graded) / len(graded)) if gold is not None else None,
            unparseable=sum(x.distill == "unparseable" for x in records),
            failed_rollouts=failed - len(refusals),
            refused_rollouts=len(refusals),
            failed_distills=sum(x.distill == "failed" for x in records),
            tokens=self.client.ledger.total_tokens - tokens0,
            wall_s=t_end - t0,
            tail_ms=(t_end - last_return) * 1e3,
            tail_encoder_ms=max(0.0, all_encoded - last_return) * 1e3,
        )
        report(round_done=True)
        return result, next_block

    def _insert(self, bank: ExperienceBank, outcomes: list[RolloutOutcome]) -> list[Decision]:
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
        sign = {"shortest": 1, "longest": -1}.get(self.config.dedup_order)
        if sign is not None:
            order.sort(
                key=lambda j: (sign * len(cands[j].text), cands[j].rollout, cands[j].position)
            )
        return bank.add([cands[j] for j in order], vectors[order], self.config.tau)

    async def _rollout_and_distill(
        self,
        problem: str,
        messages: list[Message],
        r: int,
        i: int,
        gold: str | None,
        counters: dict[str, int],
        report: Callable[[], None],
        distill: bool = True,
        split: RoundSplit | None = None,
        first: int = 0,
        observe: bool = False,
    ) -> RolloutOutcome:
        """One rollout, then (``distill``) its distillation, and (``observe``, or with a
        distillation) what the checker saw running it: grounded experience is filed even
        where no distillation was bought."""
        cfg = self.config
        rec = RolloutRecord(index=i)
        seed = None if cfg.seed is None else cfg.seed + first + i
        try:
            res = await self.client.chat(
                messages,
                role="explore",
                task=f"round{r}",
                temperature=cfg.temperature,
                top_p=cfg.top_p,
                top_k=cfg.top_k,
                max_tokens=cfg.max_tokens,
                seed=seed,
                **confidence_request(cfg),
            )
        except (LLMError, BudgetExhaustedError) as exc:
            rec.error = f"{type(exc).__name__}: {exc}"
            counters["refused" if isinstance(exc, BudgetExhaustedError) else "failures"] += 1
            if split is not None:
                split.add(None)
            report()
            now = time.perf_counter()
            return RolloutOutcome(rec, [], None, now, now, exc)
        choice = res.choices[0]
        rec.text, rec.reasoning, rec.finish_reason = (
            choice.text,
            choice.reasoning,
            choice.finish_reason,
        )
        rec.truncated = choice.finish_reason == "length"
        rec.confidence = rollout_confidence_of(cfg, choice.logprobs)
        rec.answer = self.answer_of(res.text)
        if gold is not None:
            rec.correct = await off_loop(answers_equivalent, rec.answer, gold)
        counters["rollouts"] += 1
        report()
        if not distill:
            rec.distill = "skipped"
            if observe and self.distiller.observes:
                return await self.distiller.grounded_only(rec, r, report)
            now = time.perf_counter()
            return RolloutOutcome(rec, [], None, now, now)
        votes, trusted = None, True
        if split is not None:
            split.add(rec.answer, rec.confidence)
            answers = await split.all_in()
            if await self.settling.round_needs_no_bank(r, split):
                now = time.perf_counter()
                rec.distill = "skipped"  # settled or stopping: no later round reads its bank
                return RolloutOutcome(rec, [], None, now, now)
            share = cfg.distill_confident_share
            if share is not None and not await split.among_most_confident(rec.confidence, share):
                rec.distill = "skipped"  # an unsure rollout: what a checker sees still counts
                if self.distiller.observes:
                    return await self.distiller.grounded_only(rec, r, report)
                now = time.perf_counter()
                return RolloutOutcome(rec, [], None, now, now)
            if cfg.propositions_from_confident:
                trusted = await split.sides_with_confident_vote(rec.answer, rec.confidence)
            if cfg.distill_sees_votes:
                votes = answer_split(answers, rec.answer)
        early: dict[str, asyncio.Future[np.ndarray]] = {}
        rollout_tokens = res.usage.completion_tokens or self.client.count_tokens(res.text)
        # the checker runs the rollout while the distiller reads it
        seeing = asyncio.ensure_future(self.distiller.observe(rec, r))
        try:
            parsed = await self.distiller.distill_rollout(
                problem, rec, r, seed, early, rollout_tokens, votes, rollout=messages
            )
            seen = await seeing
        except BaseException:
            seeing.cancel()
            release_early(early)
            raise
        returned = time.perf_counter()
        # a parse that worked is marked "ok" only when it is filed, below
        counters["distills"] += parsed is not None or rec.distill != "skipped"
        if parsed is None:
            counters["unparseable"] += rec.distill in ("unparseable", "failed")
            report()
            return RolloutOutcome(rec, [], None, returned, returned)
        cands = await self.distiller.file(
            rec, parsed, r, seen.rollout, propositions=trusted
        ) + self.distiller.grounded(seen, rec, r)
        vectors = await self.distiller.vectors([c.text for c in cands], early) if cands else None
        rec.embedded_early = sum(1 for c in cands if c.text in early)
        report()
        return RolloutOutcome(rec, cands, vectors, returned, time.perf_counter())


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


def select_rounds(rounds: list[RoundResult], select_from: str) -> list[RoundResult]:
    """The rounds whose answers the final vote counts: all, the guided ones (round 2 on, or
    all when there was only one round), or the last."""
    if select_from == "last":
        return rounds[-1:]
    if select_from == "guided":
        return [r for r in rounds if r.round > 1] or rounds
    return rounds


def warmup() -> None:
    """Compile (or load) the dedup kernels and start the answer-checking workers, so a
    service's first request pays for neither; idempotent."""
    from rse_fast.answers.checker import POOL

    kernels.warmup()
    POOL.warm()
