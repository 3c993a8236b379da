"""RSE configuration: rounds, samples per round, dedup thresholds, sampling, distillation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from rse_fast.options import checked_options


@checked_options
@dataclass(frozen=True)
class RSEConfig:
    """Rounds R, samples per round K_r, τ per experience type, sampling and distillation.

    Fields:
        rounds: R; round 1 is plain parallel sampling (the bank is empty).
        k: rollouts per round, one value for all rounds or a list of K_r.
        tau_positive, tau_negative: dedup thresholds in (-1, 1]: a new experience whose cosine
            to a kept one of its type is >= τ is a repeat and is not added.
        temperature, top_p, top_k, max_tokens, seed: rollout sampling (seed None: unseeded;
            otherwise rollout i of round r uses ``seed + 1000 r + i``).
        distill_temperature, distill_max_tokens: the distillation call.
        max_experiences_per_rollout, max_words_per_experience, max_chars_per_experience:
            what one distillation may add, and how long each statement may be.
        attempt_max_chars: longer attempts are clipped (head and tail kept) for the distiller.
        max_rendered_per_type, bank_token_budget: how much of the bank the prompt shows.
        use_json_schema: ask for JSON-schema constrained distillation output (servers that
            refuse it are asked without, and the reply parsed tolerantly).
        dedup_order: ``rollout`` (rollout index, then position) or ``shortest`` first.
        select_from: the final vote counts ``all`` rounds' answers or the ``last`` round's.

    An unknown field name raises ``UnknownOptionError`` (a ValueError) listing these.
    """

    rounds: int = 4
    k: int | Sequence[int] = 8  # one K for every round, or K_r per round
    tau_positive: float = 0.85
    tau_negative: float = 0.85
    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int | None = 20
    max_tokens: int = 2048
    seed: int | None = 0
    distill_temperature: float = 0.3
    distill_max_tokens: int = 768
    max_experiences_per_rollout: int = 5
    max_words_per_experience: int = 40
    max_chars_per_experience: int = 300
    attempt_max_chars: int = 12000
    max_rendered_per_type: int = 12
    bank_token_budget: int = 1000
    use_json_schema: bool = True
    dedup_order: Literal["rollout", "shortest"] = "rollout"
    select_from: Literal["all", "last"] = "all"

    def __post_init__(self) -> None:
        if self.rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {self.rounds}")
        ks = [self.k] if isinstance(self.k, int) else list(self.k)
        if not ks or any(int(k) < 1 for k in ks):
            raise ValueError(f"k must be >= 1 (or a list of per-round values >= 1), got {self.k}")
        if not isinstance(self.k, int) and len(ks) != self.rounds:
            raise ValueError(f"k lists {len(ks)} rounds but rounds={self.rounds}")
        for name in ("tau_positive", "tau_negative"):
            t = getattr(self, name)
            if not -1.0 < t <= 1.0:
                raise ValueError(f"{name} must be in (-1, 1], got {t}")
        if self.dedup_order not in ("rollout", "shortest"):
            raise ValueError(
                f"dedup_order must be 'rollout' or 'shortest', got {self.dedup_order!r}"
            )
        if self.select_from not in ("all", "last"):
            raise ValueError(f"select_from must be 'all' or 'last', got {self.select_from!r}")

    def k_for_round(self, r: int) -> int:
        """K_r for round r (1-based)."""
        return int(self.k) if isinstance(self.k, int) else int(list(self.k)[r - 1])

    @property
    def tau(self) -> dict[str, float]:
        return {"positive": self.tau_positive, "negative": self.tau_negative}

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["k"] = self.k if isinstance(self.k, int) else list(self.k)
        return d
