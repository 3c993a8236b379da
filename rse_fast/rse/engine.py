"""The RSE engine: experience-guided rounds of parallel rollouts.

Per round: render the bank into the prompt, sample K rollouts in parallel, distil each rollout
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
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from rse_fast import kernels
from rse_fast.answers import answers_equivalent, extract_answer, majority_vote, off_loop
from rse_fast.encoder import Encoder
from rse_fast.errors import BudgetExhaustedError, LLMError, RoundFailedError
from rse_fast.llm.client import LLMClient
from rse_fast.llm.ledger import CallRecord
from rse_fast.llm.types import Message
from rse_fast.prompts import (
    answer_split,
    distill_batch_messages,
    distill_messages,
    distill_schema,
    solve_messages,
)
from rse_fast.rse.bank import Decision, Experience, ExperienceBank
from rse_fast.rse.checking import Check, ExperienceChecker, Observation
from rse_fast.rse.checkpoint import Checkpoint, problem_id
from rse_fast.rse.config import RSEConfig
from rse_fast.rse.distill import Distilled, ItemScanner, item_statement, parse_distillation
from rse_fast.rse.results import Progress, RolloutRecord, RoundResult, RSEResult
from rse_fast.util.sync import run_sync


@dataclass
class _Outcome:
    record: RolloutRecord
    candidates: list[Experience]
    vectors: np.ndarray | None
    returned_at: float  # when the last call of this rollout returned
    encoded_at: float  # when its experiences were embedded
    error: LLMError | BudgetExhaustedError | None = None


def clip_tokens(text: str, limit: int, count_tokens: Callable[[str], int]) -> str:
    """Keep the head and the tail (where the answer is) of a text over ``limit`` tokens."""
    n = count_tokens(text)
    if n <= limit:
        return text
    keep = max(1, int(len(text) * limit / n) // 2)
    return text[:keep] + "\n[... middle omitted ...]\n" + text[-keep:]


class RSE:
    """Recycling Search Experience: rounds of parallel rollouts steered by an experience bank.

    Args:
        client: the policy model's :class:`~rse_fast.llm.client.LLMClient` (it also distils:
            RSE needs no reward model and no gold answer).
        encoder: sentence encoder for dedup (the bundled all-MiniLM-L6-v2 by default).
        config: :class:`~rse_fast.rse.config.RSEConfig` (rounds, K, τ, sampling, ...).
        checkpoint_dir: write an atomic checkpoint after each round there; ``solve(...,
            resume=True)`` continues from it, losing at most the round in flight.
        progress: called with a :class:`~rse_fast.rse.results.Progress` after every rollout,
            distillation and round.
        distill_client: another endpoint (or model) for distillation; its calls are booked
            in ``client``'s ledger under the ``distill`` role.

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
    ) -> None:
        self.client = client
        self.distill_client = distill_client
        #: a task's check of each distilled statement (``rse.checking``): refuted
        #: propositions never reach a prompt
        self.checker = checker
        self.encoder = encoder or Encoder()
        self.config = config or RSEConfig()
        self.checkpoint = Checkpoint(checkpoint_dir) if checkpoint_dir else None
        self.progress = progress
        self.bank: ExperienceBank | None = None  # the bank of the last solve, when it ends
        self.keep_bank: bool | None = None  # this solve's bank is wanted after it (see solve)
        #: the checker's verdicts on what was filed, counted over this engine's rounds
        self.check_counts: dict[str, int] = {}
        #: a stop over the answers of every round so far (``RSEMethod``'s ``stop_epsilon``):
        #: a round whose answers settle it is not distilled (no later round would read it)
        self.stop_rule: Callable[[list[str | None]], bool] | None = None
        self.earlier_answers: list[str | None] = []
        kernels.warmup(self.encoder.dim)

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
        cfg = self.config
        rounds: list[RoundResult] = []
        bank_given = bank is not None
        bank = (
            bank if bank is not None else ExperienceBank(self.encoder.dim, policy=cfg.dedup_policy)
        )
        if resume and self.checkpoint is not None:
            saved = self.checkpoint.load(problem)
            if saved is not None:
                rounds, bank, records = saved
                self.client.ledger.restore(records)
        resumed_from = len(rounds)
        self.bank = bank
        if keep_bank is None and bank_given:
            keep_bank = True  # a bank carried in from another problem is carried on
        self.keep_bank = keep_bank  # None: the config decides (``distill_final_round``)
        block = self._render(bank, problem)
        settled = bool(rounds) and self.is_settled(rounds[0])
        for r in range(len(rounds) + 1, cfg.rounds + 1):
            if settled and cfg.settle_spend == "stop":
                break
            distil = self.distils(r, settled)
            result, block = await self.run_round(
                problem, r, bank, gold, "" if settled else block,
                distil=distil and cfg.distill_with_model, observe=distil,
            )  # fmt: skip
            rounds.append(result)
            settled = settled or (r == 1 and self.is_settled(result))
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
        )

    def bank_wanted(self) -> bool:
        """Whether the bank is wanted after the run: ``keep_bank`` of this solve, else
        ``distill_final_round``."""
        return self.config.distill_final_round if self.keep_bank is None else self.keep_bank

    def distils(self, r: int, settled: bool) -> bool:
        """Whether round ``r``'s rollouts are distilled: not once the vote is settled, and
        the last round only when its bank is wanted (:meth:`bank_wanted`)."""
        return not settled and (r < self.config.rounds or self.bank_wanted())

    def _stops_here(self, answers: list[str | None]) -> bool:
        assert self.stop_rule is not None
        return self.stop_rule(self.earlier_answers + answers)

    def is_settled(self, first: RoundResult) -> bool:
        """Whether round 1's vote is settled by ``settle_margin`` (the winner's share minus
        the runner-up's; failed rollouts count as no answer)."""
        return bool(first.rollouts) and self.settles(first.answers)

    def settles(self, answers: list[str | None]) -> bool:
        """Whether a first round with these answers is settled by ``settle_margin``."""
        margin = self.config.settle_margin
        return margin is not None and bool(answers) and vote_margin(answers) >= margin - 1e-9

    def _may_settle(self, r: int) -> bool:
        """Whether round ``r`` is distilled only if its vote does not settle: round 1 under a
        settle rule with ``skip_settled_distill``, unless the bank itself is wanted
        (:meth:`bank_wanted`: saved or carried to another problem)."""
        cfg = self.config
        return (
            r == 1
            and cfg.skip_settled_distill
            and cfg.settle_margin is not None
            and not self.bank_wanted()
        )

    async def run_round(
        self,
        problem: str,
        r: int,
        bank: ExperienceBank,
        gold: str | None,
        block: str,
        *,
        distil: bool = True,
        first_index: int | None = None,
        observe: bool = False,
    ) -> tuple[RoundResult, str]:
        """Round r with prompt block ``block``; returns its result and the next round's block.
        ``distil=False``: no distillation (the bank grows only by what a checker that runs
        rollouts observed, with ``observe``: that costs no tokens). ``first_index``: the run's
        sample index of this round's first rollout (seeds follow it; default: the rollouts
        of rounds 1..r-1 as configured)."""
        cfg = self.config
        k = cfg.k_for_round(r)
        t0 = time.perf_counter()
        tokens0 = self.client.ledger.total_tokens
        messages = solve_messages(problem, block)
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

        per_rollout = distil and cfg.distill_mode == "each"
        # round 1 under a settle rule: distil only once its vote shows it is not settled
        # (nothing reads a settled round's bank); the distillations then wait for the round
        waits = per_rollout and (
            cfg.distill_sees_votes or self._may_settle(r) or self.stop_rule is not None
        )
        split = RoundSplit(k) if waits else None
        first = (
            first_index if first_index is not None else sum(cfg.k_for_round(q) for q in range(1, r))
        )
        outcomes = await asyncio.gather(
            *(
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
        )
        if (
            distil
            and cfg.distill_mode == "batch"
            and not (
                self._may_settle(r)
                and await off_loop(self.settles, [o.record.answer for o in outcomes])
            )
        ):
            await self._distill_batch(problem, r, outcomes, first)
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
        next_block = self._render(bank, problem, k)
        t_end = time.perf_counter()
        records = [o.record for o in outcomes]
        self.earlier_answers += [x.answer for x in records if x.error is None]
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

    def _insert(self, bank: ExperienceBank, outcomes: list[_Outcome]) -> list[Decision]:
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
        distil: bool = True,
        split: RoundSplit | None = None,
        first: int = 0,
        observe: bool = False,
    ) -> _Outcome:
        """One rollout, then (``distil``) its distillation, and (``observe``, or with a
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
            )
        except (LLMError, BudgetExhaustedError) as exc:
            rec.error = f"{type(exc).__name__}: {exc}"
            counters["refused" if isinstance(exc, BudgetExhaustedError) else "failures"] += 1
            if split is not None:
                split.add(None)
            report()
            now = time.perf_counter()
            return _Outcome(rec, [], None, now, now, exc)
        choice = res.choices[0]
        rec.text, rec.reasoning, rec.finish_reason = (
            choice.text,
            choice.reasoning,
            choice.finish_reason,
        )
        rec.truncated = choice.finish_reason == "length"
        rec.answer = extract_answer(res.text)
        if gold is not None:
            rec.correct = await off_loop(answers_equivalent, rec.answer, gold)
        counters["rollouts"] += 1
        report()
        if not distil:
            rec.distill = "skipped"
            if observe and self.observes:
                return await self._grounded_only(rec, r, report)
            now = time.perf_counter()
            return _Outcome(rec, [], None, now, now)
        votes = None
        if split is not None:
            split.add(rec.answer)
            answers = await split.all_in()
            if (self._may_settle(r) and await split.settled(self.settles, "settle")) or (
                self.stop_rule is not None and await split.settled(self._stops_here, "stop")
            ):
                now = time.perf_counter()
                rec.distill = "skipped"  # settled or stopping: no later round reads its bank
                return _Outcome(rec, [], None, now, now)
            if cfg.distill_sees_votes:
                votes = answer_split(answers, rec.answer)
        early: dict[str, asyncio.Future[np.ndarray]] = {}
        rollout_tokens = res.usage.completion_tokens or self.client.count_tokens(res.text)
        # the checker runs the rollout while the distiller reads it
        seeing = asyncio.ensure_future(self._observe(rec, r))
        try:
            parsed = await self._distill(
                problem, rec, r, seed, early, rollout_tokens, votes, rollout=messages
            )
            seen = await seeing
        except BaseException:
            seeing.cancel()
            _release(early)
            raise
        returned = time.perf_counter()
        counters["distills"] += rec.distill != "skipped"
        if parsed is None:
            counters["unparseable"] += rec.distill in ("unparseable", "failed")
            report()
            return _Outcome(rec, [], None, returned, returned)
        cands = self._file(rec, parsed, r, seen.rollout) + self._grounded(seen, rec, r)
        vectors = await self._vectors([c.text for c in cands], early) if cands else None
        rec.embedded_early = sum(1 for c in cands if c.text in early)
        report()
        return _Outcome(rec, cands, vectors, returned, time.perf_counter())

    async def _grounded_only(
        self, rec: RolloutRecord, r: int, report: Callable[[], None]
    ) -> _Outcome:
        """No distillation: what running the rollout showed, filed as experience."""
        cands = self._grounded(await self._observe(rec, r), rec, r)
        returned = time.perf_counter()
        vectors = await self.encoder.aencode([c.text for c in cands]) if cands else None
        report()
        return _Outcome(rec, cands, vectors, returned, time.perf_counter())

    async def _distill_batch(
        self, problem: str, r: int, outcomes: list[_Outcome], first: int
    ) -> None:
        """One distillation for the whole round: one rollout per distinct answer (largest
        groups first, at most ``distill_batch``), shown side by side with how the answers
        split, so the distiller compares where they part. Its statements are filed under the
        first rollout it read."""
        cfg = self.config
        done = [o for o in outcomes if o.record.error is None]
        groups: list[tuple[str | None, list[_Outcome]]] = []
        for o in done:
            for answer, members in groups:
                if await off_loop(answers_equivalent, o.record.answer, answer):
                    members.append(o)
                    break
            else:
                groups.append((o.record.answer, [o]))
        groups.sort(key=lambda g: -len(g[1]))
        chosen = [members[0] for _, members in groups[: cfg.distill_batch]]
        if not chosen:
            return
        client = self._distiller()
        attempts = [
            (
                clip_tokens(o.record.text, cfg.attempt_batch_tokens, client.count_tokens),
                o.record.answer,
                len(members),
            )
            for o, (_, members) in zip(chosen, groups, strict=False)
        ]
        messages = distill_batch_messages(
            problem, attempts, len(done), cfg.max_experiences_per_rollout,
            cfg.max_words_per_experience,
        )  # fmt: skip
        longest = max(self.client.count_tokens(o.record.text) for o in chosen)
        params, schema = self._distill_request(r, longest)
        lead = chosen[0]
        parsed = None
        for attempt in range(cfg.distill_retries + 1):
            lead.record.distill_tries += 1
            if cfg.seed is not None:
                params["seed"] = cfg.seed + first + 7919 * (attempt + 1)
            try:
                reply = await (
                    client.chat_json(messages, schema, **params)
                    if schema is not None
                    else client.chat(messages, **params)
                )
            except BudgetExhaustedError:  # not bought: the cap's room is spent
                return
            except LLMError:
                lead.record.distill = "failed"
                return
            parsed = parse_distillation(
                reply.text,
                cfg.max_experiences_per_rollout,
                cfg.max_chars_per_experience,
                problem if cfg.drop_echoes else None,
            )
            if parsed is not None:
                break
        if parsed is None:
            lead.record.distill = "unparseable"
            return
        lead.candidates = self._file(lead.record, parsed, r)
        if lead.candidates:
            lead.vectors = await self.encoder.aencode([c.text for c in lead.candidates])
        lead.returned_at = lead.encoded_at = time.perf_counter()

    def _continues(self) -> bool:
        """Whether a distillation continues its rollout's conversation: as configured, or
        (None) once the server has shown it caches prompts (a call reported cached tokens)."""
        if self.config.distill_continues is not None:
            return self.config.distill_continues
        return any(r.cached_tokens for r in self.client.ledger.records)

    def _distiller(self) -> LLMClient:
        """The client distillations go to, booked in the run's ledger."""
        if self.distill_client is None:
            return self.client
        return self.distill_client.metered_like(self.client)

    def _distill_request(
        self, r: int, read_tokens: int
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """A distillation call's parameters (its cap follows what it reads) and schema."""
        cfg = self.config
        params: dict[str, Any] = dict(
            role="distill",
            task=f"round{r}",
            temperature=cfg.distill_temperature,
            max_tokens=cfg.distill_tokens(read_tokens),
            model=cfg.distill_model,
            extra=dict(cfg.distill_extra) if cfg.distill_extra else None,
        )
        schema = (
            distill_schema(cfg.max_experiences_per_rollout, cfg.distill_format)
            if cfg.use_json_schema
            else None
        )
        return params, schema

    def _file(
        self, rec: RolloutRecord, parsed: Distilled, r: int, rollout: Check | None = None
    ) -> list[Experience]:
        """A parsed distillation recorded on its rollout; its statements as candidates."""
        cfg = self.config
        rec.distill, rec.echoes = "ok", parsed.echoes
        rec.positive = parsed.positive if cfg.use_positive else []
        rec.negative = parsed.negative if cfg.use_negative else []
        found = [
            Experience(text=t, kind=kind, round=r, rollout=rec.index, position=p)
            for kind, texts in (("negative", rec.negative), ("positive", rec.positive))
            for p, t in enumerate(texts)
        ]
        return self._checked(found, r, rollout) if self.checker is not None else found

    @property
    def observes(self) -> bool:
        """Whether the checker runs rollouts itself (grounded experience at no token cost)."""
        return callable(getattr(self.checker, "observe", None))

    async def _observe(self, rec: RolloutRecord, r: int) -> Observation:
        """What a checker that runs rollouts observed of this one (off the event loop; its
        time booked as the checker's)."""
        if not self.observes:
            return Observation()
        t0 = time.perf_counter()
        seen: Observation = await asyncio.to_thread(self.checker.observe, rec.text)  # type: ignore[union-attr]
        self._book_check(time.perf_counter() - t0, r)
        return seen

    def _grounded(self, seen: Observation, rec: RolloutRecord, r: int) -> list[Experience]:
        """An observation's items as experience, filed after the distiller's statements."""
        for _, _, check in seen.items:
            self.check_counts[check.verdict] = self.check_counts.get(check.verdict, 0) + 1
        return [
            Experience(text=text, kind=kind, round=r, rollout=rec.index, position=100 + p,
                       verdict=check.verdict, evidence=check.evidence)
            for p, (kind, text, check) in enumerate(seen.items)
        ]  # fmt: skip

    def _book_check(self, seconds: float, r: int) -> None:
        self.client.ledger.record(
            CallRecord(role="check", prompt_tokens=0, completion_tokens=0, latency_s=seconds,
                       endpoint="checker", task=f"round{r}", work_s=seconds)
        )  # fmt: skip

    def _checked(
        self, found: list[Experience], r: int, rollout: Check | None = None
    ) -> list[Experience]:
        """Each statement with the checker's verdict: a refuted proposition becomes a pitfall
        stating the evidence (or is dropped), a refuted pitfall is dropped; a proposition the
        checker cannot judge alone takes its rollout's verdict (``rollout``: what running
        the rollout showed). Verdicts are counted (``check_counts``); the checker's time is
        booked in the run's ledger (role ``check``: no tokens)."""
        assert self.checker is not None
        t0 = time.perf_counter()
        kept: list[Experience] = []
        for e in found:
            check = self.checker.check(e.text, e.kind)
            if check.verdict == "unknown" and rollout is not None and e.kind == "positive":
                check = rollout
            self.check_counts[check.verdict] = self.check_counts.get(check.verdict, 0) + 1
            if check.verdict != "refuted":
                kept.append(replace(e, verdict=check.verdict, evidence=check.evidence))
            elif e.kind == "positive" and self.config.refuted_as_pitfall:
                text = f'The claim "{e.text}" is wrong: {check.evidence}.'
                kept.append(
                    replace(e, text=text, kind="negative", verdict="refuted",
                            evidence=check.evidence)
                )  # fmt: skip
        self._book_check(time.perf_counter() - t0, r)
        return kept

    async def _vectors(
        self, texts: list[str], early: dict[str, asyncio.Future[np.ndarray]]
    ) -> np.ndarray:
        """Embeddings of ``texts``: those started while the distillation streamed, the rest
        in one call; early ones the final parse did not keep are dropped."""
        rest = [t for t in texts if t not in early]
        try:
            got = dict(zip(rest, await self.encoder.aencode(rest), strict=True)) if rest else {}
            for t in texts:
                if t in early:
                    got[t] = (await early[t])[0]
        finally:
            _release(early)
        return np.stack([got[t] for t in texts])

    async def _distill(
        self,
        problem: str,
        rec: RolloutRecord,
        r: int,
        seed: int | None,
        early: dict[str, asyncio.Future[np.ndarray]],
        rollout_tokens: int = 0,
        votes: str | None = None,
        rollout: list[Message] | None = None,
    ) -> Distilled | None:
        """Distil one rollout, asking again (new seed) while the reply does not parse, up to
        ``distill_retries`` times. Sets ``rec.distill`` to failed/unparseable when it gives up.
        Streamed, each statement's embedding starts as its item closes (into ``early``)."""
        cfg = self.config
        client = self._distiller()
        count = client.count_tokens
        limit = cfg.attempt_max_tokens
        shown = clip_tokens(rec.text, limit // 4 if rec.reasoning else limit, count)
        reasoning = clip_tokens(rec.reasoning, limit, count) if rec.reasoning else None
        items, words = cfg.max_experiences_per_rollout, cfg.max_words_per_experience
        # the same server and model saw the rollout: its prefix cache holds that prefix
        continues = rollout is not None and self.distill_client is None and self._continues()
        messages = distill_messages(
            problem, shown, items, words, reasoning, rec.truncated,
            style=cfg.distill_format, split=votes, rollout=rollout if continues else None,
        )  # fmt: skip
        params, schema = self._distill_request(r, rollout_tokens)
        for attempt in range(cfg.distill_retries + 1):
            rec.distill_tries += 1
            params["seed"] = None if seed is None else seed + 7919 * attempt
            try:
                if cfg.stream_distill:
                    text = await self._streamed_reply(
                        client, problem, messages, schema, params, early
                    )
                elif schema is not None:
                    text = (await client.chat_json(messages, schema, **params)).text
                else:
                    text = (await client.chat(messages, **params)).text
            except BudgetExhaustedError:  # not bought: the cap's room is spent
                rec.distill = "skipped"
                return None
            except LLMError:
                rec.distill = "failed"
                return None
            parsed = parse_distillation(
                text,
                cfg.max_experiences_per_rollout,
                cfg.max_chars_per_experience,
                problem if cfg.drop_echoes else None,
            )
            if parsed is not None:
                return parsed
        rec.distill = "unparseable"
        return None

    async def _streamed_reply(
        self,
        client: LLMClient,
        problem: str,
        messages: list[Message],
        schema: dict[str, Any] | None,
        params: dict[str, Any],
        early: dict[str, asyncio.Future[np.ndarray]],
    ) -> str:
        """A distillation reply read as it streams; each statement (as the final parse will
        render it) goes to the encoder the moment its item closes."""
        cfg = self.config
        events = (
            client.stream_json(messages, schema, **params)
            if schema is not None
            else client.stream(messages, **params)
        )
        scanner, parts = ItemScanner(), []
        echo_of = problem if cfg.drop_echoes else None
        async for event in events:
            if not event.delta:
                continue
            parts.append(event.delta)
            for key, item in scanner.feed(event.delta):
                text = item_statement(key, item, cfg.max_chars_per_experience, echo_of)
                room = len(early) < 2 * cfg.max_experiences_per_rollout
                if text and text not in early and room:
                    early[text] = asyncio.ensure_future(self.encoder.aencode([text]))
        return "".join(parts)


def _release(early: dict[str, asyncio.Future[np.ndarray]]) -> None:
    """Cancel early embeddings still running and read the outcome of finished ones, so none
    is left behind (or logged as an unread error) once a rollout's vectors are settled."""
    for future in early.values():
        if not future.done():
            future.cancel()
        elif not future.cancelled():
            future.exception()


class RoundSplit:
    """The answers of one round's rollouts as they come in; ``all_in`` waits for the last
    (a distiller shown the split reads every rollout's answer, its own among them)."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.answers: list[str | None] = []
        self._done = asyncio.Event()
        self._settled: dict[str, asyncio.Future[bool]] = {}

    def add(self, answer: str | None) -> None:
        self.answers.append(answer)
        if len(self.answers) >= self.k:
            self._done.set()

    async def all_in(self) -> list[str | None]:
        await self._done.wait()
        return self.answers

    async def settled(self, rule: Callable[[list[str | None]], bool], name: str) -> bool:
        """``rule`` (by ``name``) over the round's answers, computed once (off the loop) for
        all rollouts."""
        if name not in self._settled:
            self._settled[name] = asyncio.ensure_future(off_loop(rule, await self.all_in()))
        return await self._settled[name]


def vote_margin(answers: list[str | None]) -> float:
    """The winner's share of ``answers`` minus the runner-up's (no answer counts against)."""
    if not answers:
        return 0.0
    clusters = sorted((n for _, n in majority_vote(answers).clusters), reverse=True)
    top = clusters[0] if clusters else 0
    second = clusters[1] if len(clusters) > 1 else 0
    return (top - second) / len(answers)


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
