"""When RSE stops guiding or sampling: round 1's settle margin (its vote is clear enough that
nothing later would read its bank), the statistical stop over every round's answers, and a
round's answers as they come in."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from rse_fast.answers import answers_equivalent, majority_vote, off_loop
from rse_fast.rse.config import RSEConfig
from rse_fast.rse.results import RoundResult


class Settling:
    """The settle rules of one engine, over its config; ``bank_wanted`` says whether the
    bank is wanted after the run (then a settled round is still distilled)."""

    def __init__(self, config: RSEConfig, bank_wanted: Callable[[], bool]) -> None:
        self.config, self.bank_wanted = config, bank_wanted
        #: a stop over the answers of every round so far (``RSEMethod``'s ``stop_epsilon``):
        #: a round whose answers settle it is not distilled (no later round would read it)
        self.stop_rule: Callable[[list[str | None], list[float | None]], bool] | None = None
        self.earlier_answers: list[str | None] = []
        self.earlier_confidences: list[float | None] = []

    def stops_here(self, answers: list[str | None], confidences: list[float | None]) -> bool:
        assert self.stop_rule is not None
        return self.stop_rule(
            self.earlier_answers + answers, self.earlier_confidences + confidences
        )

    async def round_needs_no_bank(self, r: int, split: RoundSplit) -> bool:
        """Whether no later round would read round ``r``'s bank: its vote settles round 1,
        or its answers settle the stop (each asked once for the whole round)."""
        if self.may_settle(r) and await split.settled(self.settles, "settle"):
            return True
        return self.stop_rule is not None and await split.settled(
            lambda answers: self.stops_here(answers, split.confidences), "stop"
        )

    def is_settled(self, first: RoundResult) -> bool:
        """Whether round 1's vote is settled by ``settle_margin`` (the winner's share minus
        the runner-up's; failed rollouts count as no answer)."""
        return bool(first.rollouts) and self.settles(first.answers)

    def settles(self, answers: list[str | None]) -> bool:
        """Whether a first round with these answers is settled by ``settle_margin``."""
        margin = self.config.settle_margin
        return margin is not None and bool(answers) and vote_margin(answers) >= margin - 1e-9

    def may_settle(self, r: int) -> bool:
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


def agreeing_sources(
    sides: dict[tuple[int, int], tuple[str | None, float | None]],
) -> set[tuple[int, int]]:
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
