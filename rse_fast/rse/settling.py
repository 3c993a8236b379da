"""When RSE stops guiding or sampling: round 1's settle margin (its vote is clear enough that
nothing later would read its bank), the statistical stop over every round's answers, and a
round's answers as they come in."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from rse_fast.answers import answers_equivalent, majority_vote, off_loop
from rse_fast.rse.config import RSEConfig
from rse_fast.rse.results import RolloutRecord, RoundResult

#: (round, rollout index): where a rollout, and an experience distilled from it, came from
Source = tuple[int, int]


@dataclass
class Memory:
    """What one solve's finished rollouts leave for its later rounds: each one's answer and
    confidence (a shown proposition sides with their weighted vote), and the answers the
    stop counts. Derived from the solve's rounds, so a resume rebuilds it from the
    checkpointed ones (:meth:`recalled`); ``keep_bank``: the bank is wanted after the solve
    (None: the config decides, ``distill_final_round``)."""

    keep_bank: bool | None = None
    sides: dict[Source, tuple[str | None, float | None]] = field(default_factory=dict)
    agreeing: set[Source] = field(default_factory=set)  # sides with the weighted vote
    answers: list[str | None] = field(default_factory=list)
    confidences: list[float | None] = field(default_factory=list)

    @classmethod
    async def recalled(
        cls, rounds: list[RoundResult], follows_vote: bool, keep_bank: bool | None
    ) -> Memory:
        """The memory of a solve that has run ``rounds`` (a resumed one goes on as the
        interrupted one would have)."""
        memory = cls(keep_bank)
        for done in rounds:
            await memory.remember(done.round, done.rollouts, follows_vote)
        return memory

    async def remember(self, r: int, records: list[RolloutRecord], follows_vote: bool) -> None:
        """Round ``r``'s finished rollouts: their sides and, with ``follows_vote``, which
        side with the confidence-weighted vote over every round so far (worked out off the
        event loop: it compares answers); their answers for the stop."""
        kept = [x for x in records if x.error is None]
        for rec in kept:
            self.sides[(r, rec.index)] = (rec.answer, rec.confidence)
        if follows_vote:
            self.agreeing = await off_loop(agreeing_sources, self.sides)
        self.answers += [x.answer for x in kept]
        self.confidences += [x.confidence for x in kept]

    def shown_if(self) -> Callable[[str, set[Source]], bool]:
        """Whether an item may be shown: a pitfall always; a proposition while a rollout it
        came from sides with the confidence-weighted vote over every round so far."""
        return lambda kind, sources: kind == "negative" or bool(sources & self.agreeing)


class Settling:
    """The settle rules of one engine, over its config and a solve's :class:`Memory`."""

    def __init__(self, config: RSEConfig) -> None:
        self.config = config
        #: a stop over the answers of every round so far (``RSEMethod``'s ``stop_epsilon``):
        #: a round whose answers settle it is not distilled (no later round would read it)
        self.stop_rule: Callable[[list[str | None], list[float | None]], bool] | None = None

    def bank_wanted(self, memory: Memory) -> bool:
        """Whether the bank is wanted after the solve (then a settled round is still
        distilled): its ``keep_bank``, else ``distill_final_round``."""
        return self.config.distill_final_round if memory.keep_bank is None else memory.keep_bank

    def stops_here(
        self, memory: Memory, answers: list[str | None], confidences: list[float | None]
    ) -> bool:
        assert self.stop_rule is not None
        return self.stop_rule(memory.answers + answers, memory.confidences + confidences)

    async def round_needs_no_bank(self, r: int, split: RoundSplit, memory: Memory) -> bool:
        """Whether no later round would read round ``r``'s bank: its vote settles round 1,
        or its answers settle the stop (each asked once for the whole round)."""
        if self.may_settle(r, memory) and await split.settled(self.settles, "settle"):
            return True
        return self.stop_rule is not None and await split.settled(
            lambda answers: self.stops_here(memory, answers, split.confidences), "stop"
        )

    def is_settled(self, first: RoundResult) -> bool:
        """Whether round 1's vote is settled by ``settle_margin`` (the winner's share minus
        the runner-up's; failed rollouts count as no answer)."""
        return bool(first.rollouts) and self.settles(first.answers)

    def settles(self, answers: list[str | None]) -> bool:
        """Whether a first round with these answers is settled by ``settle_margin``."""
        margin = self.config.settle_margin
        return margin is not None and bool(answers) and vote_margin(answers) >= margin - 1e-9

    def may_settle(self, r: int, memory: Memory) -> bool:
        """Whether round ``r`` is distilled only if its vote does not settle: round 1 under a
        settle rule with ``skip_settled_distill``, unless the bank itself is wanted
        (:meth:`bank_wanted`: saved or carried to another problem)."""
        cfg = self.config
        return (
            r == 1
            and cfg.skip_settled_distill
            and cfg.settle_margin is not None
            and not self.bank_wanted(memory)
        )


class RoundSplit:
    """The answers of one round's rollouts as they come in; ``all_in`` waits for the last
    (a distiller shown the split reads every rollout's answer, its own among them)."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.answers: list[str | None] = []
        self.confidences: list[float | None] = []
        self._done = asyncio.Event()
        self._settled: dict[str, asyncio.Future[bool]] = {}

    def add(self, answer: str | None, confidence: float | None = None) -> None:
        self.answers.append(answer)
        self.confidences.append(confidence)
        if len(self.answers) >= self.k:
            self._done.set()

    async def among_most_confident(self, confidence: float | None, share: float) -> bool:
        """Whether ``confidence`` is among the round's most confident ``share`` (once all
        are in; a rollout, or a round, without confidence counts as confident)."""
        await self._done.wait()
        known = sorted((c for c in self.confidences if c is not None), reverse=True)
        if confidence is None or not known:
            return True
        keep = max(1, round(share * len(known)))
        return confidence >= known[keep - 1]

    async def sides_with_confident_vote(self, answer: str | None, confidence: float | None) -> bool:
        """Whether a rollout is among the round's more confident half and its answer is the
        round's confidence-weighted leader (once all are in)."""
        if answer is None or not await self.among_most_confident(confidence, 0.5):
            return False
        leader = await off_loop(weighted_leader, self.answers, self.confidences)
        return leader is not None and await off_loop(answers_equivalent, answer, leader)

    async def all_in(self) -> list[str | None]:
        await self._done.wait()
        return self.answers

    async def settled(self, rule: Callable[[list[str | None]], bool], name: str) -> bool:
        """``rule`` (by ``name``) over the round's answers, computed once (off the loop) for
        all rollouts."""
        if name not in self._settled:
            self._settled[name] = asyncio.ensure_future(off_loop(rule, await self.all_in()))
        return await self._settled[name]


def weighted_leader(answers: list[str | None], confidences: list[float | None]) -> str | None:
    """The answer with the largest summed confidence (a rollout without one weighs 1)."""
    weights = [1.0 if c is None else c for c in confidences]
    return majority_vote(answers, weights=weights).answer


def agreeing_sources(sides: dict[Source, tuple[str | None, float | None]]) -> set[Source]:
    """The (round, rollout) pairs whose answer is the confidence-weighted vote's over all
    of ``sides`` (pair → answer and confidence)."""
    leader = weighted_leader([a for a, _ in sides.values()], [c for _, c in sides.values()])
    if leader is None:
        return set()
    return {s for s, (a, _) in sides.items() if a is not None and answers_equivalent(a, leader)}


def vote_margin(answers: list[str | None]) -> float:
    """The winner's share of ``answers`` minus the runner-up's (no answer counts against)."""
    if not answers:
        return 0.0
    clusters = sorted((n for _, n in majority_vote(answers).clusters), reverse=True)
    top = clusters[0] if clusters else 0
    second = clusters[1] if len(clusters) > 1 else 0
    return (top - second) / len(answers)
