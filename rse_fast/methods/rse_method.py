"""RSE as one more TTS family: K rollouts per round, as many rounds as the budget allows.

Variants for ablations are named ``rse:<variant>`` (see :data:`VARIANTS`): each sets a few
:class:`~rse_fast.rse.config.RSEConfig` fields, e.g. ``rse:neg-only`` recycles pitfalls only.
"""

from __future__ import annotations

import asyncio
import copy
import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from rse_fast.answers import off_loop
from rse_fast.encoder import Encoder
from rse_fast.errors import BudgetExhaustedError
from rse_fast.methods.base import Method, blend, prompt_cost
from rse_fast.methods.types import Candidate, MethodResult, Problem, no_answer
from rse_fast.methods.voting import (
    ConfidenceRule,
    answers_settled,
    behaviour_vote,
    confidence_weights,
    confident_vote,
    passing_visible,
    refuse_stopped_behaviour_vote,
    valid_epsilon,
    vote_final,
)
from rse_fast.methods.waves import RunBudget
from rse_fast.rse.bank import ExperienceBank
from rse_fast.rse.checking import NAMED_CHECKERS, CodeExamplesChecker, ExperienceChecker
from rse_fast.rse.checkpoint import Checkpoint
from rse_fast.rse.config import RSEConfig
from rse_fast.rse.engine import RSE, select_rounds
from rse_fast.rse.results import Progress

#: the checkers named by a string: code run on the stated examples, equations re-computed
CHECKERS = ("visible", *NAMED_CHECKERS)

#: Ablation variants: name → RSEConfig fields it sets.
VARIANTS: dict[str, dict[str, Any]] = {
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


#: Chat template and system turn around the problem, in tokens (a first estimate).
PROMPT_OVERHEAD_TOKENS = 40
#: The distillation prompt's own instructions, in tokens (a first estimate).
DISTILL_PROMPT_TOKENS = 160


@dataclass
class LoopState:
    """What the budgeted loop carries from round to round; a checkpoint saves it with the
    rounds, so a resumed run plans its next round as the interrupted one would have."""

    roll: float  # tokens a rollout costs, as measured so far (the prior before any)
    dist: float  # tokens a distillation costs, as measured so far
    budget: list[Any]  # [unit, amount]: a resume under another budget is refused
    cost_model: str | None = None  # CostModel.spec: a $ budget resumed at other prices is too
    block: str = ""  # the bank as the next round's prompts show it
    settled: bool = False
    bank_prompt_tokens: int = 0  # the bank block inside guided prompts (estimated)
    guided_rounds: list[int] = field(default_factory=list)  # rounds shown a non-empty bank
    sampled: int = 0  # rollouts so far: sample j is seeded as self-consistency's sample j
    stopped: bool = False  # by stop_epsilon
    finished: bool = False  # the loop ended: a resume only votes
    passed: dict[str, bool] = field(default_factory=dict)  # rollout text → passed examples
    checks: dict[str, int] = field(default_factory=dict)  # the checker's verdicts so far
    checks_by_kind: dict[str, dict[str, int]] = field(default_factory=dict)  # and by kind
    # the first round whose distillation the budget could not buy: {round, needed, left}
    unaffordable: dict[str, float] | None = None


def distill_guess(cfg: RSEConfig, prompt: float, completion: float, k: int) -> float:
    """One distillation call before any is measured: the problem, the rollout(s) and the
    instructions read, and the completion cap that follows the rollout's length."""
    read = completion
    if cfg.distill_mode == "batch":
        read = min(cfg.distill_batch, k) * min(completion, cfg.attempt_batch_tokens)
    return prompt + read + DISTILL_PROMPT_TOKENS + cfg.distill_tokens(int(completion))


class RSEMethod(Method):
    """RSE at a token budget.

    Args (besides the common ones):
        encoder: sentence encoder for dedup (loaded on first use when None).
        k: rollouts per round at most (fewer when the budget is small).
        max_rounds: rounds at most; at least two are planned when the budget allows.
        config: further RSEConfig fields (e.g. ``{"tau_negative": 0.8}``).
        variant: a name from :data:`VARIANTS`, applied on top of ``config``.
        progress: called with the engine's progress after every rollout and distillation.
        checker: a task's check of each distilled statement (``rse.checking``, e.g.
            ``ArithmeticChecker()``): refuted propositions never reach a prompt; ``"visible"``:
            each rollout's code is run on the examples its problem states (the problem's
            ``visible_check``), a failure filed as a grounded pitfall; ``"arithmetic"``:
            ``ArithmeticChecker()``, every equation between numbers re-computed.
        stop_epsilon: stop after a round once the answers of every round so far are
            statistically settled (Beta criterion at ``1 - stop_epsilon``, as ``sc``'s stop);
            in ``cap`` mode the rest of the budget is the result's ``unspent``.
        confidence: a :class:`ConfidenceRule` (or ``True`` for the default one): rollouts
            ask for their logprobs and the final vote filters and weights by the model's
            confidence, as ``sc``'s does (the variant ``conf-distill`` also distills only a
            round's more confident half).
        behaviour_vote: on code, the final pick is by behaviour on probe inputs, as ``sc``'s
            (see :class:`~rse_fast.methods.sc.SelfConsistency`); not with ``stop_epsilon``.
    """

    name = "rse"
    PRIOR_FIELDS = (*Method.PRIOR_FIELDS, "rollout_prior", "distill_prior")

    def __init__(
        self,
        *,
        encoder: Encoder | None = None,
        k: int = 4,
        max_rounds: int = 8,
        config: dict[str, Any] | None = None,
        variant: str | None = None,
        progress: Callable[[Progress], None] | None = None,
        checker: ExperienceChecker | Literal["visible", "arithmetic"] | None = None,
        stop_epsilon: float | None = None,
        confidence: ConfidenceRule | bool | None = None,
        behaviour_vote: bool = False,
        checkpoint_dir: str | os.PathLike[str] | None = None,
        resume: bool = False,
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        if resume and checkpoint_dir is None:
            raise ValueError("resume=True needs checkpoint_dir: the rounds to resume are there")
        self.checkpoint_dir, self.resume = checkpoint_dir, resume
        refuse_stopped_behaviour_vote(behaviour_vote, stop_epsilon is not None)
        self.behaviour_vote = behaviour_vote
        self.confidence = ConfidenceRule() if confidence is True else confidence or None
        self.stop_epsilon = valid_epsilon(stop_epsilon)
        self.encoder, self.k, self.max_rounds, self.progress = encoder, k, max_rounds, progress
        if isinstance(checker, str) and checker not in CHECKERS:
            raise ValueError(
                f"unknown checker {checker!r}; choose from {', '.join(map(repr, CHECKERS))} "
                "or pass an object with check(text, kind)"
            )
        if (
            checker is not None
            and not isinstance(checker, str)
            and not callable(getattr(checker, "check", None))
        ):
            raise TypeError(f"checker {checker!r} has no check(text, kind) method")
        self.checker: ExperienceChecker | Literal["visible"] | None = (
            "visible"
            if checker == "visible"
            else NAMED_CHECKERS[checker]()
            if isinstance(checker, str)
            else checker
        )
        if variant is not None and variant not in VARIANTS:
            raise ValueError(f"unknown RSE variant {variant!r}; choose from {', '.join(VARIANTS)}")
        asks: dict[str, Any] = {}
        if (rule := self.confidence) is not None:
            asks = {
                "confidence_top_logprobs": rule.top_logprobs,
                "confidence_measure": rule.measure,
                "confidence_window": rule.window,
            }
        self.overrides = {**asks, **(config or {}), **(VARIANTS[variant] if variant else {})}
        self.rollout_prior: float | None = None  # completion tokens of a rollout, earlier runs
        self.distill_prior: float | None = None  # tokens of one distillation, earlier runs
        if variant:
            self.name = f"rse:{variant}"
        RSEConfig(**self.overrides)  # unknown or invalid fields fail here, not mid-run

    reports_progress = True
    needs_encoder = True
    request_fields = frozenset(
        {"k", "rounds", "tau", "settle_margin", "stop_epsilon", "confidence"}
    )

    @classmethod
    def request_options(
        cls, request: Mapping[str, Any], *, encoder: Any = None, progress: Any = None
    ) -> dict[str, Any]:
        return {
            "encoder": encoder,
            "k": request["k"],
            "max_rounds": request["rounds"],
            "config": {
                "tau_positive": request["tau"],
                "tau_negative": request["tau"],
                "settle_margin": request["settle_margin"],
            },
            "progress": (lambda p: progress(asdict(p))) if progress else None,
            "stop_epsilon": request["stop_epsilon"],
            "confidence": request["confidence"],
        }

    def reply_details(self, result: MethodResult) -> dict[str, Any]:
        details = {
            "votes": result.meta.get("votes"),
            "rounds": result.meta.get("rounds_detail", []),
        }
        if "distillation_unaffordable" in result.meta:  # the budget bought no experience
            details["distillation_unaffordable"] = result.meta["distillation_unaffordable"]
        return details

    def bank_shown(self, result: MethodResult) -> bool | None:
        return bool(result.meta.get("guided_rounds"))

    def check_problem(self, problem: Problem) -> None:
        if problem.open_ended:
            raise ValueError("RSE answers by a vote over final answers: use it on verifiable tasks")

    async def _run(self, problem: Problem, run_budget: RunBudget) -> MethodResult:
        """Rounds of at most ``k`` rollouts until the budget (or ``max_rounds``) is spent. A
        round is distilled only when a full guided round still fits after it: the last round
        is never distilled (nothing would read its bank), and the budget that saves buys
        rollouts. Once round 1's vote is settled (``settle_margin``), the rest is plain
        sampling or a stop (``settle_spend``)."""
        c, budget = run_budget.client, run_budget.budget
        spend = run_budget
        cfg = RSEConfig(
            **{
                "rounds": self.max_rounds,
                "k": self.k,
                "temperature": self.temperature,
                "max_tokens": self.max_tokens,
                "seed": self.seed,
                "top_p": None,  # as every other family samples: the server's defaults
                "top_k": None,
                "skip_settled_distill": True,  # under a budget, tokens buy samples
                **self.overrides,
            }
        )
        self.encoder = self.encoder or Encoder()
        checker = self.checker
        if checker == "visible":
            found = problem.visible_check
            checker = (
                CodeExamplesChecker(found, file_passing=cfg.file_passing_code)
                if found is not None
                else None
            )
        engine = RSE(c, self.encoder, cfg, progress=self.progress, checker=checker,
                     answer_of=problem.answer)  # fmt: skip
        if self.stop_epsilon is not None:
            epsilon, weighted = self.stop_epsilon, self.weighs_by_confidence
            engine.settling.stop_rule = lambda answers, confidences: answers_settled(
                answers, epsilon, weights=confidence_weights(confidences) if weighted else None
            )
        bank = ExperienceBank(self.encoder.dim, policy=cfg.dedup_policy)
        preamble = engine.distiller.rollout_preamble()  # primed: every rollout reads it
        prompt = c.count_tokens(problem.prompt) + PROMPT_OVERHEAD_TOKENS
        prompt += c.count_tokens(preamble) if preamble else 0
        roll = prompt + (self.rollout_prior or self.max_tokens / 2)
        dist = self.distill_prior or distill_guess(cfg, prompt, roll - prompt, self.k)
        asked_for = run_budget.in_unit.amount if run_budget.in_unit else run_budget.tokens
        st = LoopState(
            roll=roll,
            dist=dist,
            budget=[self.budget_unit.label, float(asked_for)],
            cost_model=self.budget_unit.spec,
        )
        rounds: list[Any] = []
        checkpoint = Checkpoint(self.checkpoint_dir) if self.checkpoint_dir else None
        if checkpoint is not None and self.resume:
            rounds, bank, st = await self._resumed(checkpoint, problem, c, engine, st, bank)

        def save() -> None:
            if checkpoint is not None and rounds:
                st.checks = dict(engine.distiller.check_counts)
                st.checks_by_kind = copy.deepcopy(engine.distiller.check_counts_by_kind)
                checkpoint.save(problem.prompt, cfg.to_dict(), rounds, bank, c.ledger, asdict(st))

        for r in range(len(rounds) + 1, 0 if st.finished else self.max_rounds + 1):
            shown = 0 if st.settled else c.count_tokens(st.block)
            unit = st.roll + shown
            # later rounds buy whole rollouts as sc's later waves do, and under a cap only
            # as many as it lets run to a typical length: one cut short is a truncated sample
            k_r = min(self.k, spend.units_left(unit, tail=r > 1))
            asked = prompt_cost(
                c, engine.rollout_messages(problem.prompt, "" if st.settled else st.block)
            )
            if r > 1:
                k_r = spend.calls_that_fit(k_r, asked, self.max_tokens, unit)
            if k_r == 0:
                if r > 1:
                    break
                k_r = 1
            guided = c.count_tokens(st.block)
            guided_asks = prompt_cost(c, engine.rollout_messages(problem.prompt, st.block)) + 60
            guided_after = spend.room_for(
                self.k, guided_asks, self.max_tokens, st.roll + guided + 60
            )
            experience = st.dist * (k_r if cfg.distill_mode == "each" else 1)
            wanted = cfg.distill_with_model and not st.settled and r < self.max_rounds
            needed = k_r * unit + experience + guided_after
            distill = wanted and spend.left >= needed
            if wanted and not distill and st.unaffordable is None:
                st.unaffordable = {"round": r, "needed": needed, "left": spend.left}
            # running the code costs no tokens: a checker that runs rollouts files what it
            # saw whenever a later round may read it, bought distillation or not
            observe = engine.distiller.observes and not st.settled and r < self.max_rounds
            before = len(c.ledger.records)
            try:
                result, next_block = await engine.run_round(
                    problem.prompt, r, bank, problem.gold, "" if st.settled else st.block,
                    distill=distill, first_index=st.sampled, observe=observe, k=k_r,
                )  # fmt: skip
            except BudgetExhaustedError:
                if rounds:
                    break  # a cap-mode budget is spent: answer from the rounds that ran
                raise
            st.bank_prompt_tokens += k_r * shown
            if shown:
                st.guided_rounds.append(r)
            st.sampled += k_r
            rounds.append(result)
            st.roll, st.dist = self._measure(c.ledger.records[before:], shown, st.roll, st.dist)
            if distill or observe:
                st.block = next_block
            if r == 1 and engine.settling.is_settled(result):
                st.settled = True
                if cfg.settle_spend == "stop":
                    break
            if await self._stops(problem, rounds, spend.left / max(1.0, st.roll), st.passed):
                st.stopped = True
                break
            save()
        st.finished = True
        save()
        pool: list[Candidate] = []
        for rr in select_rounds(rounds, cfg.select_from):
            for x in rr.rollouts:
                if x.error is None:
                    origin = f"rse-round-{rr.round}"
                    pool.append(
                        problem.candidate(x.text, cost=0, origin=origin, reasoning=x.reasoning)
                    )
                    if x.confidence is not None:
                        pool[-1].scores["confidence"] = x.confidence
        voters, checked = pool, None
        if self.checker == "visible" and problem.visible_check is not None:
            # the same pick as sc's and best-of-N's execution filter: among those that pass
            voters, checked = await passing_visible(pool, problem.visible_check)
        if self.behaviour_vote and problem.behaviour is not None:
            final, votes = await behaviour_vote(voters, problem.behaviour)
        elif self.confidence is not None:
            final, votes = await off_loop(confident_vote, voters, self.confidence)
        else:
            final, votes = await off_loop(vote_final, voters)
        if checked is not None:
            votes["execution_filter"] = checked
        meta = {
            **votes,
            "rounds": len(rounds),
            "accuracy_per_round": [x.accuracy for x in rounds],
            "answer_per_round": [x.answer for x in rounds],
            "bank_sizes": bank.sizes(),
            "rounds_detail": [
                {
                    "round": x.round,
                    "k": x.k,
                    "answer": x.answer,
                    "answers": x.answers,
                    "bank_sizes": x.bank_sizes,
                    "accepted": [d.text for d in x.decisions if d.accepted],
                }
                for x in rounds
            ],
        }
        meta["settled"] = st.settled
        if self.stop_epsilon is not None:
            meta["early_stop"] = {
                "stopped": st.stopped,
                "rule": f"beta, epsilon {self.stop_epsilon}",
            }
        if self.checker is not None:
            meta["checks"] = dict(engine.distiller.check_counts)
            meta["checks_by_kind"] = copy.deepcopy(engine.distiller.check_counts_by_kind)
        meta["bank_prompt_tokens"] = st.bank_prompt_tokens
        meta["guided_rounds"] = st.guided_rounds
        meta["pool_rounds"] = [
            rr.round
            for rr in select_rounds(rounds, cfg.select_from)
            for x in rr.rollouts
            if x.error is None
        ]
        meta["distilled_rounds"] = sum(
            any(x.distill != "skipped" for x in rr.rollouts) for rr in rounds
        )
        if meta["distilled_rounds"] == 0 and st.unaffordable is not None:
            # RSE that bought no distillation is sc in rounds: say so, and what it lacked
            meta["distillation_unaffordable"] = st.unaffordable
        return MethodResult(self.name, budget, final, pool, c.ledger, meta, rounds=rounds)

    async def _stops(
        self, problem: Problem, rounds: list[Any], still_possible: float, passed: dict[str, bool]
    ) -> bool:
        """Whether the answers of every round so far are settled by ``stop_epsilon``; on
        code checked on its stated examples (no answers to vote on), whether a rollout has
        passed them: the pick is the earliest that passes, which no later round can change
        (``passed``: the verdicts so far, each text run once)."""
        if self.stop_epsilon is None:
            return False
        done = [x for rr in rounds for x in rr.rollouts if x.error is None]
        check = problem.visible_check
        if self.checker == "visible" and check is not None and problem.answer_of is no_answer:
            for x in done:
                if x.text not in passed:
                    outcome = await asyncio.to_thread(check, x.text)
                    passed[x.text] = outcome is not None and outcome.passed
            return any(passed[x.text] for x in done)
        weights = (
            confidence_weights([x.confidence for x in done]) if self.weighs_by_confidence else None
        )
        return answers_settled([x.answer for x in done], self.stop_epsilon, int(still_possible),
                               weights)  # fmt: skip

    @property
    def weighs_by_confidence(self) -> bool:
        """Whether the final vote, and so the stop, weighs rollouts by their confidence."""
        return self.confidence is not None and self.confidence.weighted

    async def _resumed(
        self,
        checkpoint: Checkpoint,
        problem: Problem,
        client: Any,
        engine: RSE,
        fresh: LoopState,
        bank: ExperienceBank,
    ) -> tuple[list[Any], ExperienceBank, LoopState]:
        """The rounds, bank and loop state of the checkpoint's last complete round, its
        calls booked in this run's ledger (and cap); ``fresh`` and ``bank`` when there is
        none yet. A checkpoint made under another budget is refused."""
        saved = checkpoint.load(problem.prompt)
        if saved is None:
            return [], bank, fresh
        if saved.state is None:
            raise ValueError(
                f"the checkpoint in {checkpoint.dir} was written by a run without a budget; "
                "resume it without one, or use another directory"
            )
        try:
            state = LoopState(**saved.state)
        except TypeError as exc:
            raise ValueError(
                f"the checkpoint in {checkpoint.dir} holds a loop state this version cannot "
                f"read ({exc}); delete it (or use another directory) to start over"
            ) from None
        if state.budget != fresh.budget:
            raise ValueError(
                f"the checkpoint in {checkpoint.dir} was made under a budget of "
                f"{state.budget[1]:g} {state.budget[0]}, not {fresh.budget[1]:g} "
                f"{fresh.budget[0]}: resume with the same budget, or use another directory"
            )
        if state.cost_model is not None and state.cost_model != fresh.cost_model:
            raise ValueError(
                f"the checkpoint in {checkpoint.dir} was made at {state.cost_model}, not "
                f"{fresh.cost_model}: its spend reads differently at other prices; resume "
                "with the same prices, or use another directory"
            )
        client.ledger.restore(saved.records)
        if client.cap is not None:
            client.cap.book_earlier(saved.records)
        await engine.recall(saved.rounds)
        engine.distiller.check_counts.update(state.checks)
        engine.distiller.check_counts_by_kind.update(copy.deepcopy(state.checks_by_kind))
        return saved.rounds, saved.bank, state

    def _measure(
        self, records: list[Any], shown: int, roll: float, dist: float
    ) -> tuple[float, float]:
        """A rollout's cost (its bank block taken out) and a distillation's, measured in the
        round just run; kept as priors for the next problem (a cold start plans well)."""
        explore = [x.total_tokens - shown for x in records if x.role == "explore"]
        distills = [x.total_tokens for x in records if x.role == "distill"]
        if explore:
            roll = sum(explore) / len(explore)
            completions = [x.completion_tokens for x in records if x.role == "explore"]
            self.rollout_prior = blend(self.rollout_prior, sum(completions) / len(completions))
        if distills:
            dist = sum(distills) / len(distills)
            self.distill_prior = blend(self.distill_prior, dist)
        if explore or distills:
            self.persist_priors()
        return roll, dist
