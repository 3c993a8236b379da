"""Parallel-sampling families: self-consistency (majority vote), best-of-N with a verifier, and
fusion (one synthesis call over a random subset of the pool). SC and BoN can be subsampled:
generate once at the largest budget, then take the prefix of the pool that fits each smaller
budget. Every family fans its first wave out at once (no solo probe call)."""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Literal

from rse_fast.answers import answers_equivalent, majority_vote, off_loop
from rse_fast.answers.confidence import rollout_confidence, token_confidences
from rse_fast.errors import BudgetExhaustedError
from rse_fast.llm.client import LLMClient
from rse_fast.llm.ledger import Ledger
from rse_fast.methods.base import (
    Candidate,
    EarlyStop,
    Method,
    MethodResult,
    Problem,
    Spend,
    best_index,
    blend,
    buys_part_unit,
    in_waves,
    prompt_cost,
)
from rse_fast.methods.judge import DistinctScorer, LLMJudge, Verifier
from rse_fast.methods.voting import (
    ConfidenceRule,
    OnlineGate,
    beta_settled,
    confident_vote,
    passing_visible,
    settled,
    vote_final,
    vote_settled,
)
from rse_fast.prompts import fusion_messages

#: Judge prompt tokens beyond the problem and the response (template, instructions) and its
#: reply: what a first wave of best-of-N assumes a judge call adds before one is measured.
JUDGE_OVERHEAD_TOKENS = 100


async def sample(
    method: Method,
    client: LLMClient,
    problem: Problem,
    i: int,
    role: str = "explore",
    confidence: ConfidenceRule | None = None,
    on_logprobs: Callable[[Any], None] | None = None,
) -> Candidate:
    """One sample. With a ``confidence`` rule the call asks for the top-k logprobs and the
    candidate's ``confidence`` score is the rule's measure (absent when the server sent none);
    ``on_logprobs`` sees them too (the online rule's warm-up)."""
    res = await client.chat(
        problem.messages(),
        role=role,
        task=f"c{i}",
        seed=method.seed + i,
        temperature=method.temperature,
        max_tokens=method.max_tokens,
        tools=list(problem.tools) or None,
        tool_choice=problem.tool_choice if problem.tools else None,
        logprobs=True if confidence else None,
        top_logprobs=confidence.top_logprobs if confidence else None,
    )
    cand = Candidate.of(
        res.text,
        cost=res.usage.total_tokens,
        completion_tokens=res.usage.completion_tokens,
        origin="sample",
        tool_calls=res.choices[0].tool_calls if res.choices else (),
    )
    if confidence is not None and res.choices:
        score = confidence.score(res.choices[0].logprobs)
        if score is not None:
            cand.scores["confidence"] = score
        if on_logprobs is not None:
            on_logprobs(res.choices[0].logprobs)
    return cand


async def sample_online(
    method: Method, client: LLMClient, problem: Problem, i: int, gate: OnlineGate
) -> Candidate:
    """One sample under DeepConf's online rule: before the threshold is set (the first wave)
    a plain sample that teaches the gate; after it, a streamed one stopped the moment its
    window confidence falls below the threshold. A stopped sample's tokens are booked (the
    stream's estimate) and it has no answer, so it does not vote."""
    rule = gate.rule
    if not gate.ready():
        return await sample(method, client, problem, i, confidence=rule, on_logprobs=gate.learn)
    text: list[str] = []
    confidences: list[float] = []
    stream = client.stream(
        problem.messages(),
        role="explore",
        task=f"c{i}",
        seed=method.seed + i,
        temperature=method.temperature,
        max_tokens=method.max_tokens,
        logprobs=True,
        top_logprobs=rule.top_logprobs,
    )
    stopped = False
    try:
        async for event in stream:
            text.append(event.delta)
            confidences += token_confidences(event.logprobs) or []
            if gate.unsure(confidences):
                stopped = True
                break
    finally:
        await stream.aclose()
    cost = _task_tokens(client.ledger, f"c{i}")  # this sample's calls alone
    if stopped:
        gate.stopped += 1
        return Candidate(text="".join(text), cost=cost, origin="stopped-unsure")
    cand = Candidate.of("".join(text), cost=cost, origin="sample")
    summary = rollout_confidence(confidences, rule.window, rule.window)
    if summary is not None:
        cand.scores["confidence"] = summary.measure(rule.measure)
    return cand


def sample_cost(method: Method, client: LLMClient, problem: Problem) -> float:
    """The estimate a first wave starts from: the prompt as counted plus the completion cap.
    ``Method.planned_cost`` scales it by how far such estimates were off in earlier runs (one
    correction on a fixed basis, so it does not compound with another prior)."""
    return prompt_cost(client, problem.messages()) + method.max_tokens


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


ToolVote = Literal["name", "arguments"]


def tool_call_key(calls: Sequence[dict[str, Any]], match: ToolVote) -> str:
    """What two agentic replies must share to count as the same vote: the names of the
    functions called (as a multiset), or names and arguments (arguments parsed, so key order
    and spacing do not matter). A reply without tool calls votes for answering in text."""
    if not calls:
        return "(no tool call)"
    parts = []
    for call in calls:
        fn = call.get("function") or {}
        name = str(fn.get("name"))
        if match == "arguments":
            raw = fn.get("arguments")
            try:
                args = json.dumps(json.loads(raw) if isinstance(raw, str) else raw, sort_keys=True)
            except ValueError:
                args = " ".join(str(raw).split())
            name = f"{name}({args})"
        parts.append(name)
    return " | ".join(sorted(parts))


def vote_tools(pool: list[Candidate], match: ToolVote) -> tuple[Candidate | None, dict[str, Any]]:
    keys = [tool_call_key(c.tool_calls, match) for c in pool]
    counts = Counter(keys)
    if not counts:
        return None, {"votes": 0, "voters": 0}
    winner, votes = max(counts.items(), key=lambda kv: (kv[1], -keys.index(kv[0])))
    return pool[keys.index(winner)], {"votes": votes, "voters": len(keys), "tool_vote": winner}


class SelfConsistency(Method):
    """Majority vote over independent samples: over final answers, or for an agentic request
    (a problem with ``tools``) over the tool calls asked for, matched by ``tool_vote``
    (function names, or names and arguments). ``early_stop``: cancel the calls in flight and
    stop once the votes left cannot change the winner (the saving is reported in meta).
    ``stop_epsilon``: stop as soon as the vote is statistically settled (the leader is the
    mode of the top two at ``1 - stop_epsilon``, Beta criterion; implies ``early_stop``).
    ``confidence``: a :class:`ConfidenceRule` (or ``True`` for the default one): samples ask
    for their logprobs and the vote filters and weights by the model's confidence.
    In ``cap`` mode what a stop leaves unspent is the result's ``unspent`` and stays out of
    the ledger (and so of the service's usage). ``execution_filter``: on a problem with a
    ``visible_check`` (code run on the examples it states), the vote is among the samples
    that pass them (all, when none does)."""

    name = "sc"
    subsamples = True

    def __init__(
        self,
        *,
        early_stop: bool = False,
        tool_vote: ToolVote = "arguments",
        stop_epsilon: float | None = None,
        confidence: ConfidenceRule | bool | None = None,
        execution_filter: bool = False,
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        self.execution_filter = execution_filter
        if tool_vote not in ("name", "arguments"):
            raise ValueError(f"tool_vote must be 'name' or 'arguments', got {tool_vote!r}")
        if stop_epsilon is not None and not 0 < stop_epsilon < 1:
            raise ValueError(f"stop_epsilon must be in (0, 1), got {stop_epsilon}")
        self.early_stop, self.tool_vote = early_stop or stop_epsilon is not None, tool_vote
        self.stop_epsilon = stop_epsilon
        self.confidence = ConfidenceRule() if confidence is True else confidence or None

    def _final(
        self, problem: Problem, pool: list[Candidate]
    ) -> tuple[Candidate | None, dict[str, Any]]:
        if problem.tools:
            return vote_tools(pool, self.tool_vote)
        if self.confidence is not None:
            return confident_vote(pool, self.confidence)
        return vote_final(pool)

    def _settled(self, problem: Problem) -> Any:
        if not problem.tools:
            return beta_settled(self.stop_epsilon) if self.stop_epsilon else vote_settled
        return lambda pool, left: settled(
            list(Counter(tool_call_key(c.tool_calls, self.tool_vote) for c in pool).values()), left
        )

    async def run(self, problem: Problem, budget: int, client: LLMClient) -> MethodResult:
        if problem.open_ended and not problem.tools:
            raise ValueError("self-consistency votes on final answers: use it on verifiable tasks")
        c = await self.metered(client, budget, problem)
        early = EarlyStop(self._settled(problem)) if self.early_stop else None
        estimate = sample_cost(self, c, problem)
        rule = self.confidence
        gate = OnlineGate(rule) if rule is not None and rule.online else None
        pool = await in_waves(
            (lambda i: sample_online(self, c, problem, i, gate))
            if gate is not None
            else (lambda i: sample(self, c, problem, i, confidence=rule)),
            Spend(c.ledger, budget),
            self.planned_cost(estimate),
            self.parallel,
            minimum=1,
            early=early,
        )
        self.learn(pool, estimate, c.ledger.total_tokens)
        voters, checked = pool, None
        if self.execution_filter and problem.visible_check is not None:
            voters, checked = await passing_visible(pool, problem.visible_check)
        final, meta = await off_loop(self._final, problem, voters)
        if checked is not None:
            meta["execution_filter"] = checked
        if gate is not None:
            meta["online"] = {"threshold": gate.threshold, "stopped": gate.stopped}
        if early is not None:
            meta["early_stop"] = {
                "stopped": early.stopped,
                "cancelled": early.cancelled,
                "saved_tokens_estimate": early.saved_tokens,
                "rule": f"beta, epsilon {self.stop_epsilon}" if self.stop_epsilon else "exact",
            }
        return MethodResult(self.name, budget, final, pool, c.ledger, meta)

    def subsample(self, full: MethodResult, budget: int) -> MethodResult:
        pool = prefix_within(full.pool, budget)
        final, meta = (
            vote_tools(pool, self.tool_vote) if "tool_vote" in full.meta else vote_final(pool)
        )
        return MethodResult(self.name, budget, final, pool, sub_ledger(full.ledger, pool), meta)


Selection = Literal["best", "weighted"]


class BestOfN(Method):
    """Best-of-N: each distinct sample is scored once by the verifier (LLM judge or reward
    model). ``selection="best"`` returns the top-scored sample; ``"weighted"`` (verifiable
    tasks) votes with the scores as weights and returns the top-scored sample of the winning
    answer. ``execution_filter``: on a problem with a ``visible_check``, the pick is among
    the samples that pass the examples the problem states (all, when none does)."""

    name = "bon"
    subsamples = True
    PRIOR_FIELDS = (*Method.PRIOR_FIELDS, "distinct_prior", "judge_ratio")

    def __init__(
        self,
        *,
        judge: Verifier | None = None,
        selection: Selection = "best",
        execution_filter: bool = False,
        **kw: Any,
    ):
        super().__init__(**kw)
        self.execution_filter = execution_filter
        if selection not in ("best", "weighted"):
            raise ValueError(f"selection must be 'best' or 'weighted', got {selection!r}")
        self.judge: Verifier = judge or LLMJudge()
        self.selection = selection
        self.distinct_prior: float | None = None  # judged ÷ sampled in earlier runs
        self.judge_ratio: float | None = None  # a judge call's cost ÷ its estimate, earlier runs

    async def _judge(self, c: LLMClient, scorer: DistinctScorer, cand: Candidate, i: int) -> None:
        before = _task_tokens(c.ledger, f"c{i}")
        cand.scores["judge"] = await scorer.score(cand.text, seed=self.seed + i, task=f"c{i}")
        cand.cost += _task_tokens(c.ledger, f"c{i}") - before

    async def run(self, problem: Problem, budget: int, client: LLMClient) -> MethodResult:
        """Samples go out in waves; each sample's judging starts when it lands and runs
        alongside the next wave (judging never holds a wave back). Waves are sized by a cost
        model with two parts: samples at their measured cost, and one judge call per distinct
        candidate, the distinct share taken from earlier runs (duplicates are judged free)."""
        if problem.open_ended and self.selection == "weighted":
            raise ValueError("score-weighted voting needs final answers: use selection='best'")
        c = await self.metered(client, budget, problem)
        scorer = DistinctScorer(self.judge, c, problem.transcript, problem.open_ended)
        per_sample = sample_cost(self, c, problem)
        judge_guess = per_sample + JUDGE_OVERHEAD_TOKENS
        judging: list[asyncio.Task[None]] = []

        def mean_tokens(role: str, default: float) -> float:
            """A call's measured cost in this run (reuses are free and not counted)."""
            done = [
                r.total_tokens
                for r in c.ledger.records
                if r.role == role and r.usage_source != "reused"
            ]
            return sum(done) / len(done) if done else default

        def fits(done: int) -> int:
            """More samples the budget buys: n samples cost n·s plus a judge call for each
            distinct candidate expected among n (none while one is expected: a single text
            is never judged); the first wave rounds to the nearest n, later ones buy a part
            sample only as ``buys_part_unit`` says. Expected distinct: the earlier runs'
            share × n until two waves of this run are in, then the texts seen so far plus
            this run's rate of new ones for the samples still to come."""
            s = max(1.0, mean_tokens("explore", self.planned_cost(per_sample)))
            # a judge call reads the problem and one response: before one has been measured,
            # a sample's cost plus the judge's own template and reply
            fresh = s + JUDGE_OVERHEAD_TOKENS
            j = mean_tokens("judge", judge_guess * self.judge_ratio if self.judge_ratio else fresh)
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

        spend = Spend(c.ledger, budget)
        pool: list[Candidate] = []
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
                )
                pool += got
                await asyncio.gather(*judging)
                if not got or fits(len(pool)) < 1:
                    break
        finally:
            for t in judging:
                t.cancel()
        sampled = sum(r.total_tokens for r in c.ledger.records if r.role == "explore")
        if pool:
            self.distinct_prior = blend(self.distinct_prior, scorer.distinct / len(pool))
        if scorer.calls:
            ratio = mean_tokens("judge", judge_guess) / judge_guess
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

    def subsample(self, full: MethodResult, budget: int) -> MethodResult:
        pool = prefix_within(full.pool, budget)
        return self._select(pool, budget, sub_ledger(full.ledger, pool))


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

    async def run(self, problem: Problem, budget: int, client: LLMClient) -> MethodResult:
        c = await self.metered(client, budget, problem)
        prompt = prompt_cost(c, problem.messages())
        per_chars = max(200, self.max_fusion_chars // self.fuse_k)

        def fusion_cost() -> float:
            done = [r.completion_tokens for r in c.ledger.records if r.role == "explore" and r.ok]
            completion = sum(done) / len(done) if done else self.expected_completion()
            shown = min(completion, per_chars / 3)  # ~3+ characters per token
            return prompt + self.fuse_k * shown + completion

        estimate = sample_cost(self, c, problem)
        spend = Spend(c.ledger, budget, reserve=fusion_cost)
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
                final = Candidate.of(res.text, cost=res.usage.total_tokens, origin="fuse")
            except BudgetExhaustedError:  # a cap's room left: fuse fewer candidates
                chosen = chosen[:-1]
        if final is None:  # not even two fit: the vote over the samples answers
            final, _ = await off_loop(vote_final, pool)
        return MethodResult(
            self.name, budget, final, pool, c.ledger, {"fused": len(chosen), "sampled": len(pool)}
        )
