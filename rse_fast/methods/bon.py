"""Best-of-N: independent samples scored by a verifier (an LLM judge or a reward model),
the best (or the score-weighted vote) chosen; its cost model plans samples and scoring."""

from __future__ import annotations

import asyncio
import functools
from typing import Any, Literal

from rse_fast.answers import answers_equivalent, majority_vote, off_loop
from rse_fast.llm.budget import RunBudget, buys_part_unit
from rse_fast.llm.client import LLMClient
from rse_fast.llm.ledger import Ledger
from rse_fast.methods.base import Method, blend
from rse_fast.methods.judge import DistinctScorer, LLMJudge, Verifier
from rse_fast.methods.request_fields import STOP_FIELD
from rse_fast.methods.sampling import cut_within, sample, sample_cost, task_tokens
from rse_fast.methods.types import Candidate, MethodResult, Problem
from rse_fast.methods.voting import (
    best_index,
    beta_settled,
    passed_visible,
    passing_visible,
    valid_epsilon,
)
from rse_fast.methods.waves import EarlyStop, in_waves

#: Judge prompt tokens beyond the problem and the response (template, instructions) and its
#: reply: what a first wave of best-of-N assumes a judge call adds before one is measured.
JUDGE_OVERHEAD_TOKENS = 100


Selection = Literal["best", "weighted"]


class BestOfN(Method):
    """Best-of-N: each distinct sample is scored once by the verifier (LLM judge or reward
    model). ``selection="best"`` returns the top-scored sample; ``"weighted"`` (verifiable
    tasks) votes with the scores as weights and returns the top-scored sample of the winning
    answer. ``execution_filter``: on a problem with a ``visible_check``, the pick is among
    the samples that pass the examples the problem states (all, when none does).
    ``stop_epsilon`` (verifiable tasks): stop sampling once the samples' answers are
    statistically settled (Beta criterion at ``1 - stop_epsilon``, as ``sc``'s stop): more
    samples would rarely bring the verifier an answer it has not seen."""

    name = "bon"
    needs_judge = True
    takes_reward_model = True
    subsamples = True
    request_fields = (STOP_FIELD,)
    PRIOR_FIELDS = (*Method.PRIOR_FIELDS, "distinct_prior", "judge_ratio")

    def __init__(
        self,
        *,
        judge: Verifier | None = None,
        selection: Selection = "best",
        execution_filter: bool = False,
        stop_epsilon: float | None = None,
        **kw: Any,
    ):
        super().__init__(**kw)
        self.stop_epsilon = valid_epsilon(stop_epsilon)
        self.execution_filter = execution_filter
        if selection not in ("best", "weighted"):
            raise ValueError(f"selection must be 'best' or 'weighted', got {selection!r}")
        self.judge: Verifier = judge or LLMJudge()
        self.selection = selection
        self.distinct_prior: float | None = None  # judged ÷ sampled in earlier runs
        self.judge_ratio: float | None = None  # a judge call's cost ÷ its estimate, earlier runs

    async def _judge(self, c: LLMClient, scorer: DistinctScorer, cand: Candidate, i: int) -> None:
        before = task_tokens(c.ledger, f"c{i}")
        cand.scores["judge"] = await scorer.score(cand.text, seed=self.seed + i, task=f"c{i}")
        cand.cost += task_tokens(c.ledger, f"c{i}") - before

    def check_problem(self, problem: Problem) -> None:
        if problem.open_ended and self.selection == "weighted":
            raise ValueError("score-weighted voting needs final answers: use selection='best'")
        if problem.open_ended and self.stop_epsilon is not None:
            raise ValueError("stop_epsilon stops on settled final answers: verifiable tasks only")

    async def _run(self, problem: Problem, run_budget: RunBudget) -> MethodResult:
        """Samples go out in waves; each sample's judging starts when it lands and runs
        alongside the next wave (judging never holds a wave back). Waves are sized by a cost
        model with two parts: samples at their measured cost, and one judge call per distinct
        candidate, the distinct share taken from earlier runs (duplicates are judged free)."""
        c, budget = run_budget.client, run_budget.budget
        scorer = DistinctScorer(self.judge, c, problem.transcript, problem.open_ended)
        per_sample = sample_cost(self, c, problem)
        judge_guess = per_sample + JUDGE_OVERHEAD_TOKENS
        judging: list[asyncio.Task[None]] = []

        fits = functools.partial(self._fits, c.ledger, scorer, budget, per_sample, judge_guess)

        deferred: list[tuple[Candidate, int]] = []  # judged once a second distinct text comes

        async def unit(i: int) -> Candidate:
            cand = await sample(self, c, problem, i)
            scorer.claim(cand.text)
            if scorer.distinct < 2:  # one distinct text so far: nothing to choose between
                deferred.append((cand, i))
                return cand
            for waiting, k in [*deferred, (cand, i)]:
                judging.append(asyncio.ensure_future(self._judge(c, scorer, waiting, k)))
            deferred.clear()
            return cand

        spend = run_budget
        pool: list[Candidate] = []
        early = None
        if self.stop_epsilon is not None:  # settled over the whole pool, not one call's waves
            rule = beta_settled(self.stop_epsilon)
            early = EarlyStop(lambda got, left: rule(pool + got, left))
        try:
            while True:  # the last waves' judging settles the judge cost: go on if room
                got = await in_waves(
                    unit,
                    spend,
                    per_sample,
                    self.parallel,
                    minimum=0 if pool else 1,
                    start=len(pool),
                    fits=fits,
                    early=early,
                )
                pool += got
                await asyncio.gather(*judging)
                if not got or (early is not None and early.stopped) or fits(len(pool)) < 1:
                    break
        finally:
            for t in judging:
                t.cancel()
        return await self._finish(
            problem, pool, scorer, c, budget, (per_sample, judge_guess), early
        )

    def _fits(
        self,
        ledger: Ledger,
        scorer: DistinctScorer,
        budget: int,
        per_sample: float,
        judge_guess: float,
        done: int,
    ) -> int:
        """More samples the budget buys: n samples cost n·s plus a judge call for each
        distinct candidate expected among n (none while one is expected: a single text
        is never judged); the first wave rounds to the nearest n, later ones buy a part
        sample only as ``buys_part_unit`` says. Expected distinct: the earlier runs'
        share × n until two waves of this run are in, then the texts seen so far plus
        this run's rate of new ones for the samples still to come."""
        s = max(1.0, _mean_tokens(ledger, "explore", self.planned_cost(per_sample)))
        # a judge call reads the problem and one response: before one has been measured,
        # a sample's cost plus the judge's own template and reply
        fresh = s + JUDGE_OVERHEAD_TOKENS
        j = _mean_tokens(
            ledger, "judge", judge_guess * self.judge_ratio if self.judge_ratio else fresh
        )
        share = self.distinct_prior
        own = share is None or done >= 2 * self.parallel  # two waves in: this run's own
        # this run's rate of new texts after the first (the first is always new)
        rate = (scorer.distinct - 1) / (done - 1) if done > 1 else 1.0

        def judged(n: int) -> float:
            if own:
                return scorer.distinct + rate * (n - done) if done else float(n)
            return max(scorer.distinct, (share or 1.0) * n)

        def total(n: int) -> float:
            k = judged(n)
            return n * s + (j * k if k > 1 else 0.0)  # one distinct text: no judge call

        n = done
        while total(n + 1) <= budget:
            n += 1
        part = (budget - total(n)) / (total(n + 1) - total(n))
        units = budget / (total(n + 1) / (n + 1))
        more = part >= 0.5 if done == 0 else buys_part_unit(part, units)
        return n + more - done

    async def _finish(
        self,
        problem: Problem,
        pool: list[Candidate],
        scorer: DistinctScorer,
        c: LLMClient,
        budget: int,
        guesses: tuple[float, float],
        early: EarlyStop | None,
    ) -> MethodResult:
        """Keep what this run measured as priors, then pick the final candidate."""
        per_sample, judge_guess = guesses
        sampled = c.ledger.tokens_of(role="explore")
        if pool:
            self.distinct_prior = blend(self.distinct_prior, scorer.distinct / len(pool))
        if scorer.calls:
            ratio = _mean_tokens(c.ledger, "judge", judge_guess) / judge_guess
            self.judge_ratio = blend(self.judge_ratio, ratio)
        self.learn(pool, per_sample, sampled)  # also keeps the two priors above
        chosen_from, checked = pool, None
        if self.execution_filter and problem.visible_check is not None:
            chosen_from, checked = await passing_visible(pool, problem.visible_check)
        result = await off_loop(self._select, chosen_from, budget, c.ledger)
        result.pool = pool
        if checked is not None:
            result.meta["execution_filter"] = checked
        if result.final is None and pool and scorer.distinct == 1:
            result.final = pool[0]  # every sample said the same: no judge call was needed
        result.meta.update(judge_calls=scorer.calls, judge_reused=scorer.reused,
                           judged_none_single_text=scorer.distinct == 1)  # fmt: skip
        if early is not None:
            result.meta["early_stop"] = {
                "stopped": early.stopped,
                "cancelled": early.cancelled,
                "rule": f"beta, epsilon {self.stop_epsilon}",
            }
        return result

    def _select(self, pool: list[Candidate], budget: int, ledger: Ledger) -> MethodResult:
        scores = [p.scores.get("judge", float("nan")) for p in pool]
        meta: dict[str, Any] = {"judge_garbage": sum(1 for s in scores if s != s)}
        if self.selection == "weighted":
            vote = majority_vote([p.answer for p in pool], weights=scores)
            members = [
                k
                for k, p in enumerate(pool)
                if vote.answer is not None and answers_equivalent(p.answer, vote.answer)
            ]
            pick = best_index([scores[k] for k in members])
            best = members[pick] if pick is not None else best_index(scores)
            meta["vote_weight"] = vote.weight
        else:
            best = best_index(scores)
        final = pool[best] if best is not None else None
        return MethodResult(self.name, budget, final, pool, ledger, meta)

    def subsample(self, full: MethodResult, budget: float) -> MethodResult:
        cut = cut_within(full, budget, self.budget_unit)
        chosen_from, checked = cut.pool, None
        if "execution_filter" in full.meta:
            chosen_from, checked = passed_visible(cut.pool)
        result = self._select(chosen_from, cut.tokens, cut.ledger)
        result.pool = cut.pool
        if checked is not None:
            result.meta["execution_filter"] = checked
        return self.price(result, budget)


def _mean_tokens(ledger: Ledger, role: str, default: float) -> float:
    """A call's measured cost in this run (reuses are free and not counted)."""
    measured = ledger.mean_call(role, measured=True)
    return default if measured is None else measured
