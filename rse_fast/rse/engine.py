"""The RSE engine: experience-guided rounds of parallel rollouts.

Per round: render the bank into the prompt, sample K rollouts in parallel, distill each rollout
(its reasoning trace and its final response) the moment it finishes, embed its experiences
while other calls are in flight, then one greedy insert per type in a deterministic order
(rollout index, then position, unless configured otherwise), never arrival order. Rejected
candidates add support to the experience they matched.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from rse_fast import kernels
from rse_fast.answers import answers_equivalent, extract_answer, majority_vote, off_loop
from rse_fast.encoder import Encoder
from rse_fast.llm.budget import RunBudget
from rse_fast.llm.client import LLMClient
from rse_fast.llm.types import Message
from rse_fast.prompts import (
    solve_messages,
)
from rse_fast.rse.bank import ExperienceBank
from rse_fast.rse.checking import ExperienceChecker
from rse_fast.rse.checkpoint import Checkpoint, problem_id
from rse_fast.rse.config import RSEConfig
from rse_fast.rse.distiller import Distiller
from rse_fast.rse.loop import Measured, RoundLoop, Solve, StopRule, first_state, unbounded
from rse_fast.rse.results import Progress, RoundResult, RSEResult
from rse_fast.rse.round import RoundAsk, RoundRun
from rse_fast.rse.settling import Memory, Settling
from rse_fast.util.sync import run_sync


class RSE:
    """Recycling Search Experience: rounds of parallel rollouts steered by an experience bank.

    Args:
        client: the policy model's :class:`~rse_fast.llm.client.LLMClient` (it also distills:
            RSE needs no reward model and no gold answer).
        encoder: sentence encoder for dedup (the bundled all-MiniLM-L6-v2 by default).
        config: :class:`~rse_fast.rse.config.RSEConfig` (rounds, K, τ, sampling, ...).
        checkpoint_dir: write an atomic checkpoint after each round there; ``solve(...,
            resume=True)`` continues from it, losing at most the round in flight.
        progress: called with a :class:`~rse_fast.rse.results.Progress` after every rollout,
            distillation and round.
        distill_client: another endpoint (or model) for distillation; its calls are booked
            in ``client``'s ledger under the ``distill`` role.
        checker: a task's check of each distilled statement (``rse.checking``).
        stop_rule: ``(answers, confidences) -> settled?`` over every round so far, when a run
            stops early: a round that may stop waits for its vote before it distills.
        answer_of: how a rollout's answer is read (default: its ``\\boxed{}`` or stated final
            answer; ``Problem.answer`` for a task that reads answers its own way).

    Example::

        async with LLMClient("http://127.0.0.1:8000/v1", "qwen") as client:
            result = await RSE(client, config=RSEConfig(rounds=3, k=8)).solve("17 * 23?")
            result.answer, result.votes, result.accuracy_per_round, result.bank_sizes

    From sync code: ``RSE(client).solve_sync(problem)``.
    """

    def __init__(
        self,
        client: LLMClient,
        encoder: Encoder | None = None,
        config: RSEConfig | None = None,
        *,
        checkpoint_dir: str | os.PathLike[str] | None = None,
        progress: Callable[[Progress], None] | None = None,
        distill_client: LLMClient | None = None,
        checker: ExperienceChecker | None = None,
        answer_of: Callable[[str], str | None] | None = None,
        stop_rule: Callable[[list[str | None], list[float | None]], bool] | None = None,
    ) -> None:
        self.client = client
        #: how a rollout's answer is read (its vote, the settle margin, the split a distiller
        #: sees): the boxed or stated answer unless the task says otherwise (code: none)
        self.answer_of = answer_of or extract_answer
        self.encoder = encoder or Encoder()
        self._config = config or RSEConfig()
        self.distiller = Distiller(client, self.encoder, self._config,
                                   distill_client=distill_client, checker=checker)  # fmt: skip
        self.settling = Settling(self._config)
        #: whether the answers so far are settled (a run's statistical stop): a round that
        #: may stop waits for its vote before it distills
        self.settling.stop_rule = stop_rule
        self.checkpoint = Checkpoint(checkpoint_dir) if checkpoint_dir else None
        self.progress = progress
        self.bank: ExperienceBank | None = None  # the bank of the last solve, when it ends
        kernels.warmup(self.encoder.dim)

    @property
    def config(self) -> RSEConfig:
        return self._config

    @config.setter
    def config(self, config: RSEConfig) -> None:
        """A new config reaches the distiller and the settle rules too."""
        self._config = self.distiller.config = self.settling.config = config

    @property
    def checker(self) -> ExperienceChecker | None:
        """The task checker the distiller files verdicts with (``rse.checking``)."""
        return self.distiller.checker

    @checker.setter
    def checker(self, checker: ExperienceChecker | None) -> None:
        self.distiller.checker = checker

    @property
    def check_counts(self) -> dict[str, int]:
        """The checker's verdicts so far, by verdict."""
        return dict(self.distiller.check_counts)

    @property
    def check_counts_by_kind(self) -> dict[str, dict[str, int]]:
        """The checker's verdicts so far, by statement kind, then verdict."""
        return {k: dict(v) for k, v in self.distiller.check_counts_by_kind.items()}

    def solve_sync(self, problem: str, **kw: Any) -> RSEResult:
        """``solve`` from sync code; closes the client's session (bound to this run's loop)."""

        async def run() -> RSEResult:
            try:
                return await self.solve(problem, **kw)
            finally:
                await self.client.close()

        return run_sync(run())

    async def solve(
        self,
        problem: str,
        *,
        gold: str | None = None,
        resume: bool = False,
        bank: ExperienceBank | None = None,
        keep_bank: bool | None = None,
    ) -> RSEResult:
        """Run the configured rounds and return the voted answer with every round's record.

        Args:
            problem: the task text.
            gold: a reference answer, used only to report accuracy (never shown to the model).
            resume: continue from the last checkpoint in ``checkpoint_dir`` (a checkpoint of
                another problem is refused).
            bank: start from an existing experience bank (e.g. from a related problem).
            keep_bank: the bank is wanted after this run, so the last round is distilled too
                (and a settled round 1 still is). Default: when a bank was passed in (a bank
                carried from another problem is carried on) or ``distill_final_round``.

        Raises:
            RoundFailedError: every rollout of a round failed (the checkpoint stays intact).
            ValueError: an empty problem.
        """
        if not isinstance(problem, str) or not problem.strip():
            raise ValueError("problem must be a non-empty string")
        t0 = time.perf_counter()
        checked_before = dict(self.distiller.check_counts)  # an engine may solve many problems
        cfg = self.config
        bank_given = bank is not None
        if bank is None:
            bank = ExperienceBank(self.encoder.dim, policy=cfg.dedup_policy)
        if keep_bank is None and bank_given:
            keep_bank = True  # a bank carried in from another problem is carried on
        solve = await self.run_loop(
            problem, unbounded(self.client), bank, gold=gold, resume=resume, keep_bank=keep_bank
        )
        self.bank = bank = solve.bank
        rounds = solve.rounds
        vote = await off_loop(
            majority_vote, [a for rr in select_rounds(rounds, cfg.select_from) for a in rr.answers]
        )
        correct = (
            await off_loop(answers_equivalent, vote.answer, gold) if gold is not None else None
        )
        return RSEResult(
            problem=problem,
            answer=vote.answer,
            votes=vote.count,
            total_votes=vote.total,
            correct=correct,
            rounds=rounds,
            bank_sizes=bank.sizes(),
            ledger=self.client.ledger.summary(),
            wall_s=time.perf_counter() - t0,
            resumed_from_round=solve.resumed_from,
            checks=(
                {k: n - checked_before.get(k, 0) for k, n in self.distiller.check_counts.items()}
                if self.distiller.checker is not None
                else None
            ),
        )

    async def run_loop(
        self,
        problem: str,
        spend: RunBudget,
        bank: ExperienceBank,
        *,
        gold: str | None = None,
        resume: bool = False,
        budget: list[Any] | None = None,
        cost_model: str | None = None,
        stops: StopRule | None = None,
        measured: Measured | None = None,
        priors: tuple[float | None, float | None] = (None, None),
        keep_bank: bool | None = None,
    ) -> Solve:
        """The rounds of one solve against ``spend`` (``loop.unbounded`` for none), from
        ``bank``, resumed from the checkpoint when asked; ``budget`` and ``cost_model`` are
        what a checkpoint records to refuse a resume under another budget; ``keep_bank``:
        the bank is wanted after the solve (None: ``distill_final_round`` decides)."""
        loop = RoundLoop(self, problem, spend, gold=gold, checkpoint=self.checkpoint,
                         stops=stops, measured=measured)  # fmt: skip
        state = first_state(self, problem, budget, cost_model, *priors)
        memory = Memory(keep_bank)
        state.block = self.render(bank, problem, memory=memory)
        solve = Solve([], bank, state, memory)
        if resume:
            solve = await loop.resumed(solve)
        solve.resumed_from = len(solve.rounds)
        return await loop.run(solve)

    # -- one round -------------------------------------------------------------------------
    def render(
        self, bank: ExperienceBank, problem: str, k: int | None = None, *, memory: Memory
    ) -> str:
        """The bank block of the next prompt; ``k``: the size of the round just distilled
        (it sets the support an experience needs to be shown); ``memory``: the solve's, whose
        weighted vote a shown proposition sides with (``bank_follows_vote``)."""
        cfg = self.config
        return bank.render(
            cfg.bank_token_budget,
            self.client.count_tokens,
            max_per_kind=cfg.max_rendered_per_type,
            same_problem=bank.problem_ids <= {problem_id(problem)},
            min_support=cfg.shown_support(k if k is not None else cfg.k_for_round(1)),
            guidance=cfg.guidance,
            shown_if=memory.shown_if() if cfg.bank_follows_vote else None,
        )

    def rollout_messages(self, problem: str, block: str) -> list[Message]:
        """A rollout's prompt: the problem under the bank block (and the primed ask, where
        the distillation that continues the rollout expects it)."""
        return solve_messages(problem, block, preamble=self.distiller.rollout_preamble())

    async def run_round(
        self,
        problem: str,
        r: int,
        bank: ExperienceBank,
        gold: str | None,
        block: str,
        *,
        distill: bool = True,
        first_index: int | None = None,
        observe: bool = False,
        k: int | None = None,
        memory: Memory | None = None,
    ) -> tuple[RoundResult, str]:
        """Round r alone (the loop runs rounds as :class:`~rse_fast.rse.round.RoundRun`);
        returns its result and the next round's block. ``first_index``: the run's sample
        index of this round's first rollout (default: the rollouts of rounds 1..r-1 as
        configured); ``k``: its rollouts (default: as configured); ``memory``: what the
        solve's earlier rounds left (default: none), updated with this round's."""
        cfg = self.config
        k = k if k is not None else cfg.k_for_round(r)
        if first_index is None:
            first_index = sum(cfg.k_for_round(q) for q in range(1, r))
        ask = RoundAsk(problem, r, k, block, gold, distill=distill, observe=observe,
                       first=first_index)  # fmt: skip
        return await RoundRun(self, ask, bank, memory or Memory()).run()


def select_rounds(rounds: list[RoundResult], select_from: str) -> list[RoundResult]:
    """The rounds whose answers the final vote counts: all, the guided ones (round 2 on, or
    all when there was only one round), or the last."""
    if select_from == "last":
        return rounds[-1:]
    if select_from == "guided":
        return [r for r in rounds if r.round > 1] or rounds
    return rounds


def warmup() -> None:
    """Compile (or load) the dedup kernels and start the answer-checking workers, so a
    service's first request pays for neither; idempotent."""
    from rse_fast.answers.checker import POOL

    kernels.warmup()
    POOL.warm()
