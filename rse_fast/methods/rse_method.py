"""RSE as one more TTS family: K rollouts per round, as many rounds as the budget allows.

Variants for ablations are named ``rse:<variant>`` (see :data:`VARIANTS`): each sets a few
:class:`~rse_fast.rse.config.RSEConfig` fields, e.g. ``rse:neg-only`` recycles pitfalls only.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Any, Literal

from rse_fast.answers import off_loop
from rse_fast.encoder import Encoder
from rse_fast.llm.budget import RunBudget
from rse_fast.llm.client import LLMClient
from rse_fast.methods.base import Method, blend
from rse_fast.methods.request_fields import (
    CONFIDENCE_FIELD,
    STOP_FIELD,
    RequestField,
    RunCounter,
    RunReport,
)
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
from rse_fast.rse.bank import ExperienceBank
from rse_fast.rse.checking import NAMED_CHECKERS, CodeExamplesChecker, ExperienceChecker
from rse_fast.rse.config import PRESETS, RSEConfig
from rse_fast.rse.engine import RSE, select_rounds
from rse_fast.rse.loop import Solve
from rse_fast.rse.results import Progress

#: the checkers named by a string: code run on the stated examples, equations re-computed
CHECKERS = ("visible", *NAMED_CHECKERS)

#: Ablation variants: the config's named presets (``rse.config.PRESETS``).
VARIANTS = PRESETS


#: RSE's runs by whether their bank reached a prompt: distillation no prompt showed bought
#: nothing, and an operator sees how often that happens
BANK_SHOWN = RunCounter(
    name="rse_runs_total",
    label="bank_shown",
    help="RSE requests by whether a bank block reached any of their prompts.",
    wasted_name="rse_unshown_distill_tokens_total",
    wasted_role="distill",
    wasted_help=(
        "Distillation tokens of RSE requests whose bank reached no prompt (compare with "
        'rse_fast_tokens_total{role="distill"}).'
    ),
)


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
        checkpoint_dir, resume: checkpoint every round there; continue from it.
        bank: start from (and grow) this experience bank; the result's ``bank`` is the bank
            at the end either way.
        keep_bank: the bank is wanted after the run, so its last round is distilled too when
            the budget buys it (default: when ``bank`` is given, else the config's
            ``distill_final_round``).
        distill_client: another endpoint (or model) for distillation, booked in the run's
            ledger under the ``distill`` role.
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
        bank: ExperienceBank | None = None,
        keep_bank: bool | None = None,
        distill_client: LLMClient | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        self.bank, self.keep_bank, self.distill_client = bank, keep_bank, distill_client
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
    request_fields = (
        RequestField("rounds", int, 3, lo=1, cap="max_rounds"),
        RequestField("tau", float, 0.85, lo=-0.999, hi=1.0),
        #: stop guiding once round 1's vote margin is this (null: never stop)
        RequestField("settle_margin", float, 1.0, lo=0.001, hi=1.0, nullable=True),
        STOP_FIELD,
        CONFIDENCE_FIELD,
    )
    run_counter = BANK_SHOWN
    variants = VARIANTS

    @classmethod
    def warmup(cls) -> None:
        """The answer-checking workers, and the dedup kernels compiled (or loaded)."""
        from rse_fast.rse.engine import warmup

        warmup()

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

    def run_report(self, result: MethodResult) -> RunReport | None:
        """Whether a bank block reached any prompt of the run."""
        return RunReport(BANK_SHOWN, bool(result.meta.get("guided_rounds")))

    def check_problem(self, problem: Problem) -> None:
        if problem.open_ended:
            raise ValueError("RSE answers by a vote over final answers: use it on verifiable tasks")

    def _config(self) -> RSEConfig:
        return RSEConfig(
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

    def _engine(self, problem: Problem, client: Any, cfg: RSEConfig) -> RSE:
        """The engine of one problem: its checker (the problem's stated examples for
        ``"visible"``), its answer reader, and the stop rule a round waits on."""
        checker = self.checker
        if checker == "visible":
            found = problem.visible_check
            checker = (
                CodeExamplesChecker(found, file_passing=cfg.file_passing_code)
                if found is not None
                else None
            )
        stop_rule = None
        if self.stop_epsilon is not None:
            epsilon, weighted = self.stop_epsilon, self.weighs_by_confidence

            def stop_rule(answers: list[str | None], confidences: list[float | None]) -> bool:
                weights = confidence_weights(confidences) if weighted else None
                return answers_settled(answers, epsilon, weights=weights)

        self.encoder = self.encoder or Encoder()
        return RSE(client, self.encoder, cfg, progress=self.progress, checker=checker,
                   answer_of=problem.answer, checkpoint_dir=self.checkpoint_dir,
                   distill_client=self.distill_client, stop_rule=stop_rule)  # fmt: skip

    async def _run(self, problem: Problem, run_budget: RunBudget) -> MethodResult:
        """The RSE loop (``rse.loop``) under this run's budget: rounds of at most ``k``
        rollouts until the budget (or ``max_rounds``) is spent, a round distilled only when a
        full guided round still fits after it; then the final vote."""
        cfg = self._config()
        engine = self._engine(problem, run_budget.client, cfg)
        bank = self.bank or ExperienceBank(engine.encoder.dim, policy=cfg.dedup_policy)
        asked_for = run_budget.in_unit.amount if run_budget.in_unit else run_budget.tokens

        async def stops(rounds: list[Any], still_possible: float, passed: dict[str, bool]) -> bool:
            return await self._stops(problem, rounds, still_possible, passed)

        solve = await engine.run_loop(
            problem.prompt, run_budget, bank, gold=problem.gold, resume=self.resume,
            budget=[self.budget_unit.label, float(asked_for)], cost_model=self.budget_unit.spec,
            stops=stops, measured=self._measured, priors=(self.rollout_prior, self.distill_prior),
            keep_bank=self.keep_bank,
        )  # fmt: skip
        final, pool, meta = await self._final(problem, solve, cfg)
        if self.checker is not None:
            meta["checks"] = engine.check_counts
            meta["checks_by_kind"] = engine.check_counts_by_kind
        return MethodResult(
            self.name, run_budget.budget, final, pool, run_budget.client.ledger, meta,
            rounds=solve.rounds, bank=solve.bank,
        )  # fmt: skip

    async def _final(
        self, problem: Problem, solve: Solve, cfg: RSEConfig
    ) -> tuple[Candidate | None, list[Candidate], dict[str, Any]]:
        """The pool of the rounds the vote counts, the final pick by this run's rule, and
        what the result reports of the loop."""
        rounds, st = solve.rounds, solve.loop
        chosen = select_rounds(rounds, cfg.select_from)
        pool: list[Candidate] = []
        for rr in chosen:
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
            "bank_sizes": solve.bank.sizes(),
            "rounds_detail": [round_detail(x) for x in rounds],
            "settled": st.settled,
        }
        if self.stop_epsilon is not None:
            meta["early_stop"] = {
                "stopped": st.stopped,
                "rule": f"beta, epsilon {self.stop_epsilon}",
            }
        meta["bank_prompt_tokens"] = st.bank_prompt_tokens
        meta["guided_rounds"] = st.guided_rounds
        meta["pool_rounds"] = [rr.round for rr in chosen for x in rr.rollouts if x.error is None]
        meta["distilled_rounds"] = sum(
            any(x.distill != "skipped" for x in rr.rollouts) for rr in rounds
        )
        if meta["distilled_rounds"] == 0 and st.unaffordable is not None:
            # RSE that bought no distillation is sc in rounds: say so, and what it lacked
            meta["distillation_unaffordable"] = st.unaffordable
        return final, pool, meta

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

    def _measured(self, explore: list[Any], distills: list[Any]) -> None:
        """A round's calls, kept as priors for the next problem (a cold start plans well)."""
        if explore:
            completions = sum(x.completion_tokens for x in explore) / len(explore)
            self.rollout_prior = blend(self.rollout_prior, completions)
        if distills:
            dist = sum(x.total_tokens for x in distills) / len(distills)
            self.distill_prior = blend(self.distill_prior, dist)
        self.persist_priors()


def round_detail(x: Any) -> dict[str, Any]:
    """What a reply reports of one round."""
    return {
        "round": x.round,
        "k": x.k,
        "answer": x.answer,
        "answers": x.answers,
        "bank_sizes": x.bank_sizes,
        "accepted": [d.text for d in x.decisions if d.accepted],
    }
