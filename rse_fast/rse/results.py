"""RSE results: per rollout, per round and per run (JSON-serialisable via ``to_dict``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from rse_fast.rse.bank import Decision


@dataclass(frozen=True, kw_only=True)
class Progress:
    """What a live display needs, emitted after every rollout, distillation and round."""

    round: int
    rounds: int
    k: int
    rollouts_done: int
    distills_done: int
    failures: int
    bank_sizes: dict[str, int]
    #: distillations that gave nothing usable: the reply did not parse, or the call failed
    unparseable: int = 0
    tokens: int
    round_done: bool = False


@dataclass(kw_only=True)
class RolloutRecord:
    """One rollout: its reply (content and, from thinking models, the reasoning trace), the
    extracted answer, and what its distillation produced. ``truncated``: cut off by the length
    limit (still distilled: its dead ends are real). ``distill_tries``: distillation calls made
    (retries after unparseable replies included); ``echoes``: statements dropped for only
    restating the problem or the instructions; ``embedded_early``: statements embedded while
    their distillation was still streaming."""

    index: int
    text: str = ""
    reasoning: str | None = None
    answer: str | None = None
    correct: bool | None = None
    finish_reason: str | None = None
    truncated: bool = False
    #: the model's own confidence in it (``confidence_measure``), when logprobs were asked
    confidence: float | None = None
    error: str | None = None
    distill: Literal["ok", "unparseable", "failed", "skipped"] = "skipped"
    distill_tries: int = 0
    echoes: int = 0
    embedded_early: int = 0
    positive: list[str] = field(default_factory=list)
    negative: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class RoundResult:
    round: int
    k: int
    experience_block: str  # the bank as rendered into this round's prompt
    rollouts: list[RolloutRecord]
    decisions: list[Decision]
    bank_sizes: dict[str, int]
    answer: str | None
    votes: int
    accuracy: float | None
    unparseable: int
    failed_rollouts: int
    failed_distills: int
    tokens: int
    wall_s: float
    tail_ms: float  # last distillation's return → bank updated and next prompt rendered
    tail_encoder_ms: float  # the part of the tail spent waiting for the encoder
    checkpoint_ms: float = 0.0
    #: rollouts a cap refused before they were sent (not failures: the budget was spent)
    refused_rollouts: int = 0

    @property
    def answers(self) -> list[str | None]:
        return [r.answer for r in self.rollouts]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RoundResult:
        d = dict(d)
        d["rollouts"] = [RolloutRecord(**r) for r in d["rollouts"]]
        d["decisions"] = [Decision(**x) for x in d["decisions"]]
        return cls(**d)


@dataclass(kw_only=True)
class RSEResult:
    problem: str
    answer: str | None
    votes: int
    total_votes: int
    correct: bool | None
    rounds: list[RoundResult]
    bank_sizes: dict[str, int]
    ledger: dict[str, Any]
    wall_s: float
    resumed_from_round: int = 0
    #: a budgeted run that bought no distillation: the first round it could not, the tokens
    #: that round, its distillations and a guided round needed, and the tokens left
    distillation_unaffordable: dict[str, float] | None = None
    #: with a checker: its verdicts on the statements of the rounds this run distilled
    #: (``verified``, ``refuted``, ``unknown``); None without one
    checks: dict[str, int] | None = None

    @property
    def accuracy_per_round(self) -> list[float | None]:
        return [r.accuracy for r in self.rounds]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["accuracy_per_round"] = self.accuracy_per_round
        return d
