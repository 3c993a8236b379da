"""Self-consistency: a majority vote over independent samples, with the exact or statistical
stop, confidence rules and the execution filter."""

from __future__ import annotations

from collections import Counter
from typing import Any

from rse_fast.answers import off_loop
from rse_fast.llm.budget import RunBudget
from rse_fast.methods.base import Method
from rse_fast.methods.request_fields import (
    CONFIDENCE_FIELD,
    MEASURED_STOP_FIELD,
    RequestField,
)
from rse_fast.methods.sampling import (
    cut_within,
    sample,
    sample_cost,
    sample_online,
    sample_streamed,
)
from rse_fast.methods.types import Candidate, MethodResult, Problem, no_answer
from rse_fast.methods.voting import (
    ConfidenceRule,
    OnlineGate,
    ToolVote,
    behaviour_vote,
    beta_settled,
    check_visible,
    confident_vote,
    filtered_settled,
    passed_visible,
    passing_visible,
    refuse_stopped_behaviour_vote,
    settled,
    tool_call_key,
    valid_epsilon,
    vote_final,
    vote_settled,
    vote_tools,
    voted_behaviour,
)
from rse_fast.methods.waves import EarlyStop, in_waves


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
    that pass them (all, when none does). ``behaviour_vote``: on code (a problem with
    probes, ``Problem.behaviour``), programs that give back the same on inputs near the
    stated examples' vote together, the largest group's earliest wins (without it code has
    no answer to count, and the pick is the earliest); it decides once the pool is whole, so
    it does not combine with a stop."""

    name = "sc"
    takes_tools = True
    #: how tool calls are voted; the measured stop on unless sent as null
    request_fields = (
        RequestField("tool_vote", str, "arguments", choices=("arguments", "name")),
        MEASURED_STOP_FIELD,
        CONFIDENCE_FIELD,
    )
    subsamples = True

    def __init__(
        self,
        *,
        early_stop: bool = False,
        tool_vote: ToolVote = "arguments",
        stop_epsilon: float | None = None,
        confidence: ConfidenceRule | bool | None = None,
        execution_filter: bool = False,
        behaviour_vote: bool = False,
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        self.execution_filter = execution_filter
        self.behaviour_vote = behaviour_vote
        refuse_stopped_behaviour_vote(behaviour_vote, early_stop or stop_epsilon is not None)
        if tool_vote not in ("name", "arguments"):
            raise ValueError(f"tool_vote must be 'name' or 'arguments', got {tool_vote!r}")
        self.stop_epsilon = valid_epsilon(stop_epsilon)
        self.early_stop, self.tool_vote = early_stop or stop_epsilon is not None, tool_vote
        self.confidence = ConfidenceRule() if confidence is True else confidence or None

    def _final(self, tools: bool, pool: list[Candidate]) -> tuple[Candidate | None, dict[str, Any]]:
        if tools:
            return vote_tools(pool, self.tool_vote)
        if self.confidence is not None:
            return confident_vote(pool, self.confidence)
        return vote_final(pool)

    def _settled(self, problem: Problem) -> Any:
        if not problem.tools:
            if not self.stop_epsilon:
                return vote_settled
            return beta_settled(self.stop_epsilon, weighted=self.weighs_by_confidence)
        return lambda pool, left: settled(
            list(Counter(tool_call_key(c.tool_calls, self.tool_vote) for c in pool).values()), left
        )

    @property
    def weighs_by_confidence(self) -> bool:
        """Whether the final vote, and so the stop, weighs samples by their confidence."""
        return self.confidence is not None and self.confidence.weighted

    def check_problem(self, problem: Problem) -> None:
        if problem.open_ended and not problem.tools:
            raise ValueError("self-consistency votes on final answers: use it on verifiable tasks")

    def _checks_as_it_samples(self, problem: Problem) -> bool:
        """Whether each sample is run on the stated examples as it finishes: with the
        execution filter and a stop, whose rule reads the verdicts (a confidence rule that
        keeps a share of the pool decides only once the pool is whole, so it is left out)."""
        keeps_all = self.confidence is None or self.confidence.keep >= 1.0
        return (
            self.execution_filter
            and self.early_stop
            and keeps_all
            and problem.visible_check is not None
            and not problem.tools
        )

    async def _run(self, problem: Problem, run_budget: RunBudget) -> MethodResult:
        c, budget = run_budget.client, run_budget.budget
        settled_rule = self._settled(problem)
        checks = self._checks_as_it_samples(problem)
        if checks:
            settled_rule = filtered_settled(settled_rule, problem.answer_of is not no_answer)
        early = EarlyStop(settled_rule) if self.early_stop else None
        estimate = sample_cost(self, c, problem)
        rule = self.confidence
        gate = OnlineGate(rule) if rule is not None and rule.online else None

        # under a stop, samples stream: one the stop cancels is booked at what it streamed,
        # where a whole-reply call would be booked at its reservation
        streamed = self.early_stop and not problem.tools

        async def one(i: int) -> Candidate:
            if streamed:
                return await sample_streamed(self, c, problem, i, rule)
            return await sample(self, c, problem, i, confidence=rule)

        async def sample_and_check(i: int) -> Candidate:
            cand = await one(i)
            assert problem.visible_check is not None
            await check_visible(cand, problem.visible_check)
            return cand

        pool = await in_waves(
            (lambda i: sample_online(self, c, problem, i, gate))
            if gate is not None
            else sample_and_check
            if checks
            else one,
            run_budget,
            self.planned_cost(estimate),
            self.parallel,
            minimum=1,
            early=early,
        )
        self.learn(pool, estimate, c.ledger.total_tokens)
        voters, checked = pool, None
        if self.execution_filter and problem.visible_check is not None:
            voters, checked = await passing_visible(pool, problem.visible_check)
        if self.behaviour_vote and problem.behaviour is not None and not problem.tools:
            final, meta = await behaviour_vote(voters, problem.behaviour)
        else:
            final, meta = await off_loop(self._final, bool(problem.tools), voters)
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

    def subsample(self, full: MethodResult, budget: float) -> MethodResult:
        cut = cut_within(full, budget, self.budget_unit)
        voters, checked = cut.pool, None
        if "execution_filter" in full.meta:
            voters, checked = passed_visible(cut.pool)
        if "behaviour_groups" in full.meta:
            final, meta = voted_behaviour(voters)
        else:
            final, meta = self._final("tool_vote" in full.meta, voters)
        if checked is not None:
            meta["execution_filter"] = checked
        result = MethodResult(self.name, cut.tokens, final, cut.pool, cut.ledger, meta)
        return self.price(result, budget)
