"""RSE configuration: rounds, samples per round, dedup thresholds, sampling, distillation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from rse_fast.prompts.rse import DEFAULT_GUIDANCE, Guidance
from rse_fast.util.options import checked_options


@checked_options
@dataclass(frozen=True)
class RSEConfig:
    """Rounds R, samples per round K_r, τ per experience type, sampling and distillation.

    The defaults were chosen on dev seeds; what chose each is in ``docs/decisions.md``
    ("RSE's defaults, and the framing the dev ablation chose").

    Fields:
        rounds: R; round 1 is plain parallel sampling (the bank is empty).
        k: rollouts per round, one value for all rounds or a list of K_r.
        tau_positive, tau_negative: dedup thresholds in (-1, 1]: a new experience whose cosine
            to a kept one of its type is >= τ is a repeat and is not added (it adds support).
        temperature, top_p, top_k, max_tokens, seed: rollout sampling (seed None: unseeded;
            otherwise rollout i of round r uses ``seed`` + the rollouts of rounds 1..r−1 + i,
            so the run's sample j is seeded as self-consistency's sample j with that seed;
            top_p/top_k None: the server's own defaults).
        distill_temperature: the distillation call's temperature.
        distill_max_tokens: the distillation's completion cap; None (the default) follows the
            rollout: ``distill_length_ratio`` × the rollout's completion tokens, clamped to
            [64, 32 + 96 × max_experiences_per_rollout] (a distillation costs in proportion
            to what it reads). Set it for a thinking distiller, which needs room for its trace.
        distill_format: ``compact`` (two flat lists of one-line strings: for small models) or
            ``structured`` (a proposition's statement, conditions, source; a pitfall's context,
            kind, trigger, action, consequence). No field beyond an item's main text and no
            minimum count is required: an empty list is a valid reply.
        distill_ask: ``full`` (the ask says what each list holds and the reply's shape) or
            ``brief`` (under half the words: the JSON schema the server enforces gives the
            shape; the ask is the one part of a continued distillation no prefix cache holds).
            Not the default: on its dev cell it was right less often (docs/decisions.md).
            ``primed``: the full ask moves into every rollout's system turn, ahead of the
            bank, and a continued distillation ends in a one-line cue: the cache then serves
            nearly all of it, while every rollout reads the ask (cached after a slot's first
            call). Rollouts primed are not sc's samples: an accuracy question (dev cell).
        distill_final_round: distill the last round too. Off by default: nothing reads the
            last round's bank unless it is saved (``--bank-out``) or carried to another
            problem, and the reference never distills its last round.
        confidence_top_logprobs, confidence_measure, confidence_window: rollouts ask for
            their top-k logprobs and each carries its confidence (DeepConf's measures, in
            ``rse_fast.answers.confidence``; None: no logprobs asked for).
        distill_confident_share: distill only the most confident share of a round's
            rollouts (the round's distillations then wait for all of them); the rest are
            still run by a checker. None: every rollout; a server without logprobs: every one.
        propositions_from_confident: a rollout's propositions are filed only when it is among
            its round's more confident half and sides with the round's confidence-weighted
            vote; from the others (an unsure rollout, a confident minority) pitfalls only.
        bank_follows_vote: a proposition reaches a prompt only while a rollout it came from
            sides with the confidence-weighted vote over every round so far (pitfalls are
            shown as before).
        file_passing_code: with the stated-example checker (``checker="visible"``), a
            rollout whose code passes the examples files that code (docstring and comments
            dropped) as a verified proposition; off: a passing rollout files nothing.
        distill_sees_votes: show the distiller how the round's answers split (its own
            samples, never a gold answer); the round's distillations then start once all its
            rollouts are in.
        distill_mode: ``each`` (one distillation per rollout, started as it lands) or
            ``batch`` (one per round, over one rollout per distinct answer, at most
            ``distill_batch`` of them, each clipped to ``attempt_batch_tokens``: the
            disagreement itself shows where a step went wrong; its items need no support).
        distill_retries: an unparseable distillation is asked again this many times, each
            with a new seed (every try is booked in the ledger).
        distill_model: model name for distillation (default: the policy model); with
            ``RSE(distill_client=...)`` it may live on another endpoint.
        distill_extra: extra request fields for distillation calls, e.g.
            ``{"chat_template_kwargs": {"enable_thinking": False}}`` on Qwen3-style servers.
        max_experiences_per_rollout, max_words_per_experience, max_chars_per_experience:
            what one distillation may add per type, and how long each statement may be (small
            distillers fill lists to the cap, so the default is small).
        distill_continues: a rollout's distillation is the next turn of the rollout's own
            conversation (its prompt, the reply, then the ask), so the server's prefix cache
            serves the rollout instead of prefilling it again; it re-reads the rollout's
            prompt (bank block included), so it costs more *tokens* than a fresh prompt that
            pastes the rollout, and less time and money where a cache serves it. None
            (default): continue once the server has reported cached prompt tokens on this
            run's calls, paste otherwise; batch mode always pastes.
        distill_with_model: False: no rollout is distilled by the model; the bank holds
            only what a checker that runs rollouts observed (``checker="visible"`` on code:
            each failure on a stated example), which costs no tokens, so every token buys
            samples. For small models, whose own distillations restate their round's errors.
        refuted_as_pitfall: with a checker (``RSE(checker=...)``), a proposition it refutes is
            filed as a pitfall stating the evidence instead of being dropped.
        attempt_max_tokens: the distiller sees the rollout's reasoning trace and final response
            clipped to this many tokens (head and tail kept).
        bank_token_budget, max_rendered_per_type: how much of the bank the prompt shows
            (ranked by support, then recency; None: no per-type cap).
        min_support_shown, min_support_from_k: when the round just distilled had at least
            ``min_support_from_k`` rollouts, only experiences found by at least
            ``min_support_shown`` rollouts reach the prompt; single sightings wait in the bank.
        guidance: the bank block's framing: ``rules`` (four rules on how to use it, with
            headers: the dev set's choice), ``short`` (one line, then the items: an
            ablation) or ``checked`` (rules for items observed by running code, with
            ``checker="visible"``; opt-in, not yet measured).
        settle_margin: stop guiding once round 1's vote is settled: the winner's share minus
            the runner-up's is at least this (1.0: unanimous); None never stops. What follows
            is ``settle_spend``: ``sample`` (the remaining rounds are plain sampling, no bank,
            no distillation) or ``stop`` (no more rounds).
        skip_settled_distill: under a settle rule, round 1's distillations wait for its vote
            and are not made when it settles (unless the bank is wanted:
            ``distill_final_round``). It saves tokens (on dev-easy8k a settled problem's
            round-1 distillations took a sixth of its budget) and costs latency (they no
            longer overlap the round's slower rollouts): on for runs under a token budget
            (``RSEMethod``), off for ``RSE.solve``.
        use_json_schema: ask for JSON-schema constrained distillation output (servers that
            refuse it are asked without, and the reply parsed tolerantly).
        stream_distill: stream distillation replies and embed each statement as soon as its
            item closes, so embedding overlaps the distillation (False: one plain call).
        dedup_order: candidates visited by ``rollout`` (index, then position), ``longest``
            first (the reference's order) or ``shortest`` first; ties by (rollout, position).
        dedup_policy: ``keep-first`` or ``replace-longer`` (a longer near-duplicate replaces
            the kept statement, keeping its support).
        dedup: False keeps every distinct statement (only exact repeats merge): an ablation.
        use_positive, use_negative: recycle propositions / pitfalls (ablations: one off).
        drop_echoes: drop statements that only restate the problem or the instructions.
        select_from: the final vote counts ``all`` rounds, the ``guided`` rounds (2..R), or
            the ``last`` round.

    An unknown field name raises ``UnknownOptionError`` (a ValueError) listing these.
    """

    # -- sampling: how rollouts are sampled and voted
    rounds: int = 4
    k: int | Sequence[int] = 8  # one K for every round, or K_r per round
    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int | None = 20
    max_tokens: int = 2048
    seed: int | None = 0
    select_from: Literal["all", "guided", "last"] = "all"
    confidence_top_logprobs: int | None = None
    confidence_measure: str = "lowest_window"
    confidence_window: int = 32
    # -- distillation: how a rollout becomes statements
    distill_temperature: float = 0.3
    distill_max_tokens: int | None = None
    distill_length_ratio: float = 0.75
    distill_format: Literal["compact", "structured"] = "compact"
    distill_ask: Literal["full", "brief", "primed"] = "full"
    distill_continues: bool | None = None
    distill_final_round: bool = False
    distill_sees_votes: bool = False
    distill_mode: Literal["each", "batch"] = "each"
    distill_batch: int = 3
    attempt_batch_tokens: int = 300
    distill_retries: int = 2
    distill_model: str | None = None
    distill_extra: Mapping[str, Any] | None = None
    max_experiences_per_rollout: int = 2
    max_words_per_experience: int = 40
    max_chars_per_experience: int = 300
    attempt_max_tokens: int = 6000
    use_json_schema: bool = True
    stream_distill: bool = True
    distill_with_model: bool = True
    distill_confident_share: float | None = None
    propositions_from_confident: bool = False
    file_passing_code: bool = False
    drop_echoes: bool = True
    refuted_as_pitfall: bool = True
    # -- bank: what the bank keeps and shows
    tau_positive: float = 0.85
    tau_negative: float = 0.85
    dedup: bool = True
    dedup_order: Literal["rollout", "longest", "shortest"] = "rollout"
    dedup_policy: Literal["keep-first", "replace-longer"] = "keep-first"
    use_positive: bool = True
    use_negative: bool = True
    max_rendered_per_type: int | None = None
    bank_token_budget: int = 1000
    min_support_shown: int = 2
    min_support_from_k: int = 4
    guidance: Guidance = DEFAULT_GUIDANCE
    bank_follows_vote: bool = False
    # -- planner: when rounds settle and what they skip
    settle_margin: float | None = 1.0
    settle_spend: Literal["sample", "stop"] = "sample"
    skip_settled_distill: bool = False

    def __post_init__(self) -> None:
        if self.rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {self.rounds}")
        share = self.distill_confident_share
        if share is not None and not 0 < share <= 1:
            raise ValueError(f"distill_confident_share must be in (0, 1], got {share}")
        for name in ("distill_confident_share", "propositions_from_confident", "bank_follows_vote"):
            if getattr(self, name) not in (None, False) and self.confidence_top_logprobs is None:
                raise ValueError(f"{name} needs confidence_top_logprobs")
        ks = [self.k] if isinstance(self.k, int) else list(self.k)
        if not ks or any(int(k) < 1 for k in ks):
            raise ValueError(f"k must be >= 1 (or a list of per-round values >= 1), got {self.k}")
        if not isinstance(self.k, int) and len(ks) != self.rounds:
            raise ValueError(f"k lists {len(ks)} rounds but rounds={self.rounds}")
        for name in ("tau_positive", "tau_negative"):
            t = getattr(self, name)
            if not -1.0 < t <= 1.0:
                raise ValueError(f"{name} must be in (-1, 1], got {t}")
        choices = {
            "dedup_order": ("rollout", "longest", "shortest"),
            "dedup_policy": ("keep-first", "replace-longer"),
            "select_from": ("all", "guided", "last"),
            "distill_format": ("compact", "structured"),
            "distill_ask": ("full", "brief", "primed"),
            "guidance": ("short", "rules", "checked"),
            "settle_spend": ("sample", "stop"),
            "distill_mode": ("each", "batch"),
        }
        for name, valid in choices.items():
            if getattr(self, name) not in valid:
                raise ValueError(f"{name} must be one of {valid}, got {getattr(self, name)!r}")
        for name in ("distill_max_tokens", "attempt_max_tokens", "bank_token_budget"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.settle_margin is not None and not 0.0 < self.settle_margin <= 1.0:
            raise ValueError(f"settle_margin must be in (0, 1] or None, got {self.settle_margin}")
        if self.distill_length_ratio <= 0:
            raise ValueError(f"distill_length_ratio must be > 0, got {self.distill_length_ratio}")
        if self.min_support_shown < 1:
            raise ValueError(f"min_support_shown must be >= 1, got {self.min_support_shown}")
        if self.distill_retries < 0:
            raise ValueError(f"distill_retries must be >= 0, got {self.distill_retries}")
        schema_shapes_each = self.use_json_schema and self.distill_mode == "each"
        if self.distill_ask == "brief" and not schema_shapes_each:
            raise ValueError(
                "distill_ask='brief' leaves the reply's shape to the JSON schema: it needs "
                "use_json_schema=True and distill_mode='each'"
            )
        if self.distill_ask == "primed" and (
            self.distill_continues is False or self.distill_mode == "batch"
        ):
            raise ValueError(
                "distill_ask='primed' puts the ask in the rollout's prompt for a distillation "
                "that continues it: it needs distill_mode='each' and distill_continues not False"
            )
        if not (self.use_positive or self.use_negative):
            raise ValueError("use_positive and use_negative cannot both be False")

    def grouped(self) -> dict[str, dict[str, Any]]:
        """The fields by concern (:data:`GROUPS`), as a person reads a configuration."""
        values = self.to_dict()
        return {group: {f: values[f] for f in names} for group, names in GROUPS.items()}

    @classmethod
    def preset(cls, name: str, **fields: Any) -> RSEConfig:
        """The named preset (:data:`PRESETS`) with ``fields`` on top."""
        if name not in PRESETS:
            raise ValueError(f"unknown RSE preset {name!r}; choose from {', '.join(PRESETS)}")
        return cls(**{**PRESETS[name], **fields})

    def distill_tokens(self, rollout_tokens: int) -> int:
        """The completion cap of one distillation, for a rollout of ``rollout_tokens``."""
        if self.distill_max_tokens is not None:
            return self.distill_max_tokens
        cap = 32 + 96 * self.max_experiences_per_rollout
        return max(64, min(cap, int(self.distill_length_ratio * rollout_tokens)))

    def shown_support(self, k: int) -> int:
        """The support an experience needs to reach the prompt after a round of ``k``."""
        if self.distill_mode == "batch":  # one call compared the round's rollouts already
            return 1
        return self.min_support_shown if k >= self.min_support_from_k else 1

    def k_for_round(self, r: int) -> int:
        """K_r for round r (1-based)."""
        return int(self.k) if isinstance(self.k, int) else int(list(self.k)[r - 1])

    @property
    def tau(self) -> dict[str, float]:
        """τ per type as dedup applies it (1.0, exact repeats only, when ``dedup`` is off)."""
        if not self.dedup:
            return {"positive": 1.0, "negative": 1.0}
        return {"positive": self.tau_positive, "negative": self.tau_negative}

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["k"] = self.k if isinstance(self.k, int) else list(self.k)
        d["distill_extra"] = dict(self.distill_extra) if self.distill_extra else None
        return d


#: Every field under the one concern it belongs to (a test keeps this whole).
GROUPS: dict[str, tuple[str, ...]] = {
    "sampling": (
        "rounds",
        "k",
        "temperature",
        "top_p",
        "top_k",
        "max_tokens",
        "seed",
        "select_from",
        "confidence_top_logprobs",
        "confidence_measure",
        "confidence_window",
    ),
    "distillation": (
        "distill_temperature",
        "distill_max_tokens",
        "distill_length_ratio",
        "distill_format",
        "distill_ask",
        "distill_continues",
        "distill_final_round",
        "distill_sees_votes",
        "distill_mode",
        "distill_batch",
        "attempt_batch_tokens",
        "distill_retries",
        "distill_model",
        "distill_extra",
        "max_experiences_per_rollout",
        "max_words_per_experience",
        "max_chars_per_experience",
        "attempt_max_tokens",
        "use_json_schema",
        "stream_distill",
        "distill_with_model",
        "distill_confident_share",
        "propositions_from_confident",
        "file_passing_code",
        "drop_echoes",
        "refuted_as_pitfall",
    ),
    "bank": (
        "tau_positive",
        "tau_negative",
        "dedup",
        "dedup_order",
        "dedup_policy",
        "use_positive",
        "use_negative",
        "max_rendered_per_type",
        "bank_token_budget",
        "min_support_shown",
        "min_support_from_k",
        "guidance",
        "bank_follows_vote",
    ),
    "planner": (
        "settle_margin",
        "settle_spend",
        "skip_settled_distill",
    ),
}


#: Named presets of the config: the ablation variants (``rse:<name>``), each the fields it
#: sets on top of the defaults.
PRESETS: dict[str, dict[str, Any]] = {
    "support-1": {"min_support_shown": 1},
    "no-settle": {"settle_margin": None},
    "rules": {"guidance": "rules"},  # the default since dev-three-ablate-0.5b
    "short": {"guidance": "short"},
    # with checker="visible": the bank is framed as what running the code showed
    "checked": {"guidance": "checked"},
    "structured": {"distill_format": "structured"},
    "votes": {"distill_sees_votes": True},
    "batch": {"distill_mode": "batch"},
    "neg-only": {"use_positive": False},
    "pos-only": {"use_negative": False},
    "no-dedup": {"dedup": False},
    "replace-longer": {"dedup_policy": "replace-longer", "dedup_order": "longest"},
    "guided": {"select_from": "guided"},
    "last": {"select_from": "last"},
    "pasted": {"distill_continues": False},  # the rollout pasted into a fresh prompt
    # the short ask (the schema gives the shape): more of a continued distillation is cached
    "brief": {"distill_ask": "brief"},
    # the whole ask in every rollout's system turn, a one-line cue after the rollout: the
    # cache serves nearly all of a distillation (every rollout reads the ask, mostly cached)
    "primed": {"distill_ask": "primed"},
    # experience from running the code alone (with checker="visible"): no model distillation
    "grounded": {"distill_with_model": False},
    # with checker="visible": a passing rollout's code is filed as a verified proposition
    "passing": {"file_passing_code": True},
    # distill only the more confident half of a round (its rollouts ask for logprobs)
    "conf-distill": {"confidence_top_logprobs": 5, "distill_confident_share": 0.5},
    # propositions only from a round's confident rollouts that side with its weighted vote;
    # from the rest (unsure, or a confident minority) pitfalls only
    "conf-split": {"confidence_top_logprobs": 5, "propositions_from_confident": True},
    # a proposition is shown only while its rollouts side with the running weighted vote
    "conf-agree": {"confidence_top_logprobs": 5, "bank_follows_vote": True},
}
