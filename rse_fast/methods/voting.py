"""Turning a pool of samples into one answer, and knowing when the vote is settled: the plain
majority vote, the exact stop (no vote left can change the winner), the statistical stop
(Beta criterion), and the confidence rules that filter and weight a vote by the model's own
token probabilities (``rse_fast.answers.confidence``)."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from rse_fast.answers import answers_equivalent, majority_vote
from rse_fast.answers.confidence import (
    MEASURES,
    keep_most_confident,
    rollout_confidence,
    statistically_settled,
    threshold_from_warmup,
    token_confidences,
)
from rse_fast.methods.types import Candidate, VisibleResult


def vote_final(pool: list[Candidate]) -> tuple[Candidate | None, dict[str, Any]]:
    vote = majority_vote([c.answer for c in pool])
    final = next(
        (c for c in pool if vote.answer is not None and answers_equivalent(c.answer, vote.answer)),
        pool[0] if pool else None,
    )
    return final, {"votes": vote.count, "voters": vote.total}


def settled(counts: Sequence[float], still_possible: int) -> bool:
    """True when no outcome of the ``still_possible`` votes left can change the winner."""
    ranked = sorted(counts, reverse=True)
    if not ranked:
        return False
    runner_up = ranked[1] if len(ranked) > 1 else 0
    return ranked[0] - runner_up > still_possible


def vote_settled(pool: list[Candidate], still_possible: int) -> bool:
    return settled([n for _, n in majority_vote([c.answer for c in pool]).clusters], still_possible)


def valid_epsilon(epsilon: float | None) -> float | None:
    """``stop_epsilon`` as every family takes it: None (spend the budget) or in (0, 1)."""
    if epsilon is not None and not 0 < epsilon < 1:
        raise ValueError(f"stop_epsilon must be in (0, 1), got {epsilon}")
    return epsilon


def beta_settled(epsilon: float, weighted: bool = False) -> Callable[[list[Candidate], int], bool]:
    """The statistical stop: the leader is the mode of the top two at ``1 - epsilon``
    (Adaptive-Consistency's Beta criterion), or no vote left can change the winner;
    ``weighted``: votes count by the samples' confidence (:func:`confidence_weights`)."""

    def check(pool: list[Candidate], still_possible: int) -> bool:
        weights = (
            confidence_weights([c.scores.get("confidence") for c in pool]) if weighted else None
        )
        return answers_settled([c.answer for c in pool], epsilon, still_possible, weights)

    return check


def confidence_weights(confidences: Sequence[float | None]) -> list[float] | None:
    """Votes weighted by confidence, scaled to a mean of 1, so the Beta criterion counts
    effective votes rather than confidence units (a vote without a confidence weighs the
    mean); None when no vote has one (the plain count then decides)."""
    known = [c for c in confidences if c is not None and c == c and c > 0]
    if not known:
        return None
    fill = sum(known) / len(known)
    weights = [c if c is not None and c == c and c > 0 else fill for c in confidences]
    mean_weight = sum(weights) / len(weights)
    return [w / mean_weight for w in weights]


def answers_settled(
    answers: Sequence[str | None],
    epsilon: float,
    still_possible: int | None = None,
    weights: Sequence[float] | None = None,
) -> bool:
    """The statistical stop over final answers (and the exact one, given the votes left:
    with ``weights``, each vote left counted at the mean weight, 1)."""
    vote = majority_vote(list(answers), weights=weights)
    votes = vote.masses if weights is not None else [float(n) for _, n in vote.clusters]
    if still_possible is not None and settled(votes, still_possible):
        return True
    return len(answers) >= 2 and statistically_settled(votes, epsilon)


def confident_vote(
    pool: list[Candidate], rule: ConfidenceRule
) -> tuple[Candidate | None, dict[str, Any]]:
    """The vote over the most confident ``rule.keep`` of the pool, weighted by confidence
    when ``rule.weighted``; a pool without confidence (the server sent no logprobs) gets the
    plain vote, and the meta says so."""
    scores = [c.scores.get("confidence") for c in pool]
    if all(s is None for s in scores):
        final, meta = vote_final(pool)
        return final, {**meta, "confidence": "unavailable: plain vote (no logprobs)"}
    kept = [c for c, k in zip(pool, keep_most_confident(scores, rule.keep), strict=True) if k]
    weights = [c.scores.get("confidence", 0.0) for c in kept] if rule.weighted else None
    vote = majority_vote([c.answer for c in kept], weights=weights)
    final = next((c for c in kept if c.answer == vote.answer), kept[0] if kept else None)
    meta = {
        "votes": vote.count,
        "voters": vote.total,
        "confidence": f"{rule.measure}, kept {len(kept)} of {len(pool)}"
        + (", weighted" if rule.weighted else ""),
    }
    return final, meta


@dataclass(frozen=True)
class ConfidenceRule:
    """How a vote uses the model's own token probabilities (DeepConf's offline rules):
    keep the ``keep`` share of samples with the highest ``measure`` (``mean``,
    ``lowest_window``, ``tail``, ``bottom10``; windows of ``window`` tokens), and weight the
    vote by it when ``weighted``."""

    keep: float = 1.0
    weighted: bool = True
    measure: str = "lowest_window"
    window: int = 32
    top_logprobs: int = 5
    #: DeepConf online: the first wave sets a threshold (the confidence the ``keep`` share
    #: clears), and a later sample whose window confidence falls below it is stopped
    #: mid-stream (its tokens are paid for and booked; it does not vote)
    online: bool = False

    def __post_init__(self) -> None:
        if self.measure not in MEASURES:
            raise ValueError(f"unknown confidence measure {self.measure!r}; one of {MEASURES}")
        if not 0 < self.keep <= 1:
            raise ValueError(f"keep must be in (0, 1], got {self.keep}")

    def score(self, logprobs: Any) -> float | None:
        summary = rollout_confidence(token_confidences(logprobs), self.window, self.window)
        return summary.measure(self.measure) if summary else None


@dataclass
class OnlineGate:
    """The online rule's state in one run: the warm-up's window confidences, and the
    threshold they set once the first wave is in."""

    rule: ConfidenceRule
    warmup: list[float] = field(default_factory=list)
    threshold: float | None = None
    stopped: int = 0

    def learn(self, logprobs: Any) -> None:
        summary = rollout_confidence(token_confidences(logprobs), self.rule.window, 1)
        if summary is not None:
            self.warmup.append(summary.lowest_window)

    def ready(self) -> bool:
        """Whether a threshold is set (it is, from the warm-up, as a later wave starts)."""
        if self.threshold is None and self.warmup:
            self.threshold = threshold_from_warmup(self.warmup, self.rule.keep)
        return self.threshold is not None

    def unsure(self, confidences: Sequence[float]) -> bool:
        """Whether a streaming sample's last window has fallen below the threshold."""
        w = self.rule.window
        if self.threshold is None or len(confidences) < w:
            return False
        return sum(confidences[-w:]) / w < self.threshold


async def passing_visible(
    pool: list[Candidate], check: Callable[[str], VisibleResult | None]
) -> tuple[list[Candidate], dict[str, Any]]:
    """The candidates that pass the problem's own examples (each distinct text run once, off
    the event loop), or the whole pool when none passes, and what the filter saw."""
    verdicts: dict[str, bool | None] = {
        c.text: c.scores["visible"] == 1.0 for c in pool if "visible" in c.scores
    }  # checked as they finished (a run that stops once a passer settles its pick)
    for c in pool:
        if c.text not in verdicts:
            outcome = await asyncio.to_thread(check, c.text)
            verdicts[c.text] = None if outcome is None else outcome.passed
    for c in pool:
        ok = verdicts[c.text]
        if ok is not None:
            c.scores["visible"] = 1.0 if ok else 0.0
    passing = [c for c in pool if verdicts[c.text]]
    meta = {"passed": len(passing), "of": len(pool), "distinct_run": len(verdicts),
            "fell_back": not passing}  # fmt: skip
    return (passing or pool), meta


async def check_visible(candidate: Candidate, check: Callable[[str], VisibleResult | None]) -> None:
    """Run ``candidate`` on the examples its problem states (off the event loop) and leave
    the verdict on it (``scores["visible"]``), as :func:`passing_visible` does."""
    outcome = await asyncio.to_thread(check, candidate.text)
    if outcome is not None:
        candidate.scores["visible"] = 1.0 if outcome.passed else 0.0


def filtered_settled(
    inner: Callable[[list[Candidate], int], bool], reads_answers: bool
) -> Callable[[list[Candidate], int], bool]:
    """A stop for a vote among the candidates that passed the stated examples (verdicts left
    on them as they finished): none yet, nothing is settled (the vote may still fall back to
    all); a task that reads no answers (code: ``no_answer``) picks its earliest passer, so
    one passer settles it; else ``inner`` over the passers."""

    def rule(pool: list[Candidate], still_possible: int) -> bool:
        passing = [c for c in pool if c.scores.get("visible") == 1.0]
        if not passing:
            return False
        return not reads_answers or inner(passing, still_possible)

    return rule


def passed_visible(pool: list[Candidate]) -> tuple[list[Candidate], dict[str, Any]]:
    """What :func:`passing_visible` chose, read back from the verdicts it left on the
    candidates (``scores["visible"]``): a pool cut to a smaller budget keeps its filter
    without running any code again."""
    judged = [c for c in pool if "visible" in c.scores]
    passing = [c for c in judged if c.scores["visible"] == 1.0]
    meta = {"passed": len(passing), "of": len(pool), "distinct_run": len({c.text for c in judged}),
            "fell_back": not passing}  # fmt: skip
    return (passing or pool), meta


async def behaviour_vote(
    pool: list[Candidate], behaviour: Callable[[str], str | None]
) -> tuple[Candidate | None, dict[str, Any]]:
    """A vote among programs: candidates whose code gave back the same on every probe input
    count together (each distinct text run once, off the event loop; the digest is left on
    the candidate), the largest group wins, ties to the group seen first, and its earliest
    candidate is the pick. Code has no final answer to count; its behaviour is one."""
    digests: dict[str, str | None] = {c.text: c.behaviour for c in pool if c.behaviour}
    for c in pool:
        if c.text not in digests:
            digests[c.text] = await asyncio.to_thread(behaviour, c.text)
        c.behaviour = digests[c.text]
    return voted_behaviour(pool)


def refuse_stopped_behaviour_vote(behaviour_vote: bool, stops: bool) -> None:
    """The behaviour vote counts groups once the pool is whole; a stop decides before that
    (on code: at the first sample that passes the examples), so one would overrule the other."""
    if behaviour_vote and stops:
        raise ValueError(
            "behaviour_vote does not combine with a stop (stop_epsilon, early_stop): the vote "
            "by behaviour needs the whole pool; use one or the other"
        )


def voted_behaviour(pool: list[Candidate]) -> tuple[Candidate | None, dict[str, Any]]:
    """:func:`behaviour_vote` from the digests already on the candidates (a pool cut to a
    smaller budget re-votes without running code); a candidate without one counts alone."""
    if not pool:
        return None, {"votes": 0, "voters": 0}
    keys = [c.behaviour or f"unprobed {k}" for k, c in enumerate(pool)]
    counts = Counter(keys)
    winner = max(counts, key=lambda key: (counts[key], -keys.index(key)))
    sizes = sorted(counts.values(), reverse=True)
    return pool[keys.index(winner)], {
        "votes": counts[winner],
        "voters": len(pool),
        "behaviour_groups": sizes,
    }


def best_index(scores: list[float]) -> int | None:
    """Index of the highest score (NaN counts as lowest), ties to the earliest; None if empty."""
    if not scores:
        return None
    return max(
        range(len(scores)),
        key=lambda k: (scores[k] if scores[k] == scores[k] else float("-inf"), -k),
    )


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
