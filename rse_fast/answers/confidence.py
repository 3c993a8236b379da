"""How sure a rollout was, from the model's own token probabilities, and what to do with it.

Token confidence follows DeepConf: at each generated token, the negative mean log-probability
of its top-k alternatives (high when the distribution is peaked). A rollout is summarized by
its mean, its lowest sliding-window mean (a stretch where the model was lost), its tail (the
last tokens, where the answer is written) and its bottom-10% windows. Where the server sent
no ``top_logprobs`` there is no confidence, and callers fall back to plain voting and say so.

The stopping rule follows Adaptive-Consistency's Beta criterion: with the leader's and the
runner-up's (weighted) votes ``a`` and ``b``, stop once P(p > 1/2) under Beta(a + 1, b + 1)
reaches ``1 - epsilon``: the leader is then almost surely the mode of the two.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


def token_confidences(logprobs: Any) -> list[float] | None:
    """Per generated token, −mean of its top-k log-probabilities; None without top-k data
    (no logprobs, or only the chosen token's, which carries no spread)."""
    content = logprobs.get("content") if isinstance(logprobs, dict) else logprobs
    if not isinstance(content, list) or not content:
        return None
    out: list[float] = []
    for entry in content:
        tops = entry.get("top_logprobs") if isinstance(entry, dict) else None
        if not isinstance(tops, list) or len(tops) < 2:
            return None
        values = [
            float(t["logprob"])
            for t in tops
            if isinstance(t, dict)
            and isinstance(t.get("logprob"), (int, float))
            and math.isfinite(t["logprob"])
        ]
        if not values:
            return None
        out.append(-sum(values) / len(values))
    return out


def window_means(conf: Sequence[float], window: int) -> list[float]:
    """The mean of every run of ``window`` consecutive tokens (one mean when shorter)."""
    if not conf:
        return []
    w = max(1, min(window, len(conf)))
    total = sum(conf[:w])
    means = [total / w]
    for i in range(w, len(conf)):
        total += conf[i] - conf[i - w]
        means.append(total / w)
    return means


@dataclass(frozen=True)
class RolloutConfidence:
    mean: float
    lowest_window: float
    tail: float
    bottom10: float
    tokens: int

    def measure(self, name: str) -> float:
        if name not in MEASURES:
            raise ValueError(f"unknown confidence measure {name!r}; one of {MEASURES}")
        return float(getattr(self, name))


MEASURES = ("mean", "lowest_window", "tail", "bottom10")


def rollout_confidence(
    conf: Sequence[float] | None, window: int = 64, tail: int = 64
) -> RolloutConfidence | None:
    """A rollout's summary measures (windows of ``window`` tokens, the last ``tail``)."""
    if not conf:
        return None
    means = window_means(conf, window)
    low = sorted(means)[: max(1, len(means) // 10)]
    last = conf[-tail:]
    return RolloutConfidence(
        mean=sum(conf) / len(conf),
        lowest_window=min(means),
        tail=sum(last) / len(last),
        bottom10=sum(low) / len(low),
        tokens=len(conf),
    )


def keep_most_confident(scores: Sequence[float | None], keep: float) -> list[bool]:
    """Which rollouts survive a filter keeping the ``keep`` share (0 < keep ≤ 1) with the
    highest confidence (at least one); a rollout without confidence is kept."""
    if not 0 < keep <= 1:
        raise ValueError(f"keep must be in (0, 1], got {keep}")
    known = sorted((s for s in scores if s is not None), reverse=True)
    if not known:
        return [True] * len(scores)
    cut = known[max(1, math.ceil(keep * len(known))) - 1]
    return [s is None or s >= cut for s in scores]


def threshold_from_warmup(scores: Sequence[float], keep: float) -> float:
    """The online stop threshold: the confidence below which a warm-up rollout would have been
    filtered out at the ``keep`` share (DeepConf's rule, set from the first wave)."""
    if not scores:
        raise ValueError("no warm-up confidences to set a threshold from")
    ordered = sorted(scores, reverse=True)
    return ordered[max(1, math.ceil(keep * len(ordered))) - 1]


def beta_leader_probability(a: float, b: float, steps: int = 2000) -> float:
    """P(p > 1/2) for p ~ Beta(a + 1, b + 1): how sure the leader (``a`` votes) beats the
    runner-up (``b``). Integrated numerically, so weighted (fractional) votes work too."""
    if a < 0 or b < 0:
        raise ValueError("votes cannot be negative")
    alpha, beta = a + 1.0, b + 1.0
    log_norm = math.lgamma(alpha + beta) - math.lgamma(alpha) - math.lgamma(beta)
    h = 0.5 / steps
    total = 0.0
    for i in range(steps):  # midpoint rule over (1/2, 1)
        x = 0.5 + (i + 0.5) * h
        total += math.exp(log_norm + (alpha - 1) * math.log(x) + (beta - 1) * math.log1p(-x))
    return min(1.0, total * h)


def statistically_settled(weights_by_answer: Sequence[float], epsilon: float) -> bool:
    """Whether the leader's lead is settled at ``1 - epsilon`` (Beta criterion on the top
    two); one answer alone is settled once it has votes the criterion accepts."""
    ranked = sorted((w for w in weights_by_answer if w > 0), reverse=True)
    if not ranked:
        return False
    runner_up = ranked[1] if len(ranked) > 1 else 0.0
    return beta_leader_probability(ranked[0], runner_up) >= 1 - epsilon
