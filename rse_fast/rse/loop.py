"""The one RSE loop: rounds planned against a budget until it (or the rounds) run out.

An unbudgeted solve is this loop under a budget nothing reaches (``unbounded``): every round
runs its configured K and the affordability checks always pass. Under a budget, a round is
distilled only when a full guided round still fits after it (the last round only when the
bank is wanted after the run), later rounds buy only whole rollouts, and a spent budget ends
the run with the rounds that ran. The solve's state (its rounds, its bank and what the loop
carries) is one value, :class:`Solve`, checkpointed whole after every round.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from rse_fast.errors import BudgetExhaustedError
from rse_fast.llm.budget import RunBudget
from rse_fast.llm.ledger import CallRecord, count_prompt_tokens
from rse_fast.llm.types import Message
from rse_fast.rse.bank import ExperienceBank
from rse_fast.rse.checkpoint import Checkpoint
from rse_fast.rse.config import RSEConfig
from rse_fast.rse.results import RoundResult
from rse_fast.rse.round import RoundAsk, RoundRun
from rse_fast.rse.settling import Memory

if TYPE_CHECKING:
    from rse_fast.llm.client import LLMClient
    from rse_fast.rse.engine import RSE

#: Chat template and system turn around the problem, in tokens (a first estimate).
PROMPT_OVERHEAD_TOKENS = 40
#: The distillation prompt's own instructions, in tokens (a first estimate).
DISTILL_PROMPT_TOKENS = 160
#: Tokens no budget reaches: the budget of an unbudgeted solve.
UNBOUNDED = 1 << 62


@dataclass
class LoopState:
    """What the loop carries from round to round (plain JSON in the checkpoint), so a resumed
    run plans its next round as the interrupted one would have."""

    roll: float  # tokens a rollout costs, as measured so far (the prior before any)
    dist: float  # tokens a distillation costs, as measured so far
    budget: list[Any] | None  # [unit, amount]; None: no budget. A resume under another is refused
    cost_model: str | None = None  # CostModel.spec: a $ budget resumed at other prices is too
    block: str = ""  # the bank as the next round's prompts show it
    settled: bool = False
    bank_prompt_tokens: int = 0  # the bank block inside guided prompts (estimated)
    guided_rounds: list[int] = field(default_factory=list)  # rounds shown a non-empty bank
    sampled: int = 0  # rollouts so far: sample j is seeded as self-consistency's sample j
    stopped: bool = False  # by the run's stop rule
    finished: bool = False  # the loop ended: a resume only votes
    passed: dict[str, bool] = field(default_factory=dict)  # rollout text → passed examples
    checks: dict[str, int] = field(default_factory=dict)  # the checker's verdicts so far
    checks_by_kind: dict[str, dict[str, int]] = field(default_factory=dict)  # and by kind
    # the first round whose distillation the budget could not buy: {round, needed, left}
    unaffordable: dict[str, float] | None = None


@dataclass
class Solve:
    """One solve's whole state: its rounds, its bank and what the loop carries."""

    rounds: list[RoundResult]
    bank: ExperienceBank
    loop: LoopState
    memory: Memory = field(default_factory=Memory)  # derived from the rounds, not saved
    resumed_from: int = 0  # rounds that ran before this process took the solve over


#: ``stops(rounds, rollouts_still_possible, passed)``: whether the run's answers are settled
StopRule = Callable[[list[RoundResult], float, dict[str, bool]], Awaitable[bool]]
#: ``measured(explore_records, distill_records)``: the round's calls, for priors kept elsewhere
Measured = Callable[[list[CallRecord], list[CallRecord]], None]


def unbounded(client: LLMClient) -> RunBudget:
    """The budget of an unbudgeted solve: what its client spends, never reached."""
    return RunBudget(client, UNBOUNDED)


def distill_guess(cfg: RSEConfig, prompt: float, completion: float, k: int) -> float:
    """One distillation call before any is measured: the problem, the rollout(s) and the
    instructions read, and the completion cap that follows the rollout's length."""
    read = completion
    if cfg.distill_mode == "batch":
        read = min(cfg.distill_batch, k) * min(completion, cfg.attempt_batch_tokens)
    return prompt + read + DISTILL_PROMPT_TOKENS + cfg.distill_tokens(int(completion))


def first_state(
    engine: RSE,
    problem: str,
    budget: list[Any] | None,
    cost_model: str | None = None,
    rollout_prior: float | None = None,
    distill_prior: float | None = None,
) -> LoopState:
    """The loop's state before round 1: a rollout's and a distillation's cost estimated from
    the prompt and the completion cap (or the priors of earlier runs)."""
    cfg, client = engine.config, engine.client
    preamble = engine.distiller.rollout_preamble()  # primed: every rollout reads it
    prompt = client.count_tokens(problem) + PROMPT_OVERHEAD_TOKENS
    prompt += client.count_tokens(preamble) if preamble else 0
    roll = prompt + (rollout_prior or cfg.max_tokens / 2)
    dist = distill_prior or distill_guess(cfg, prompt, roll - prompt, cfg.k_for_round(1))
    return LoopState(roll=roll, dist=dist, budget=budget, cost_model=cost_model)


class RoundLoop:
    """Runs the rounds of one solve on ``engine`` against ``spend``; ``stops`` ends it early
    (a stop rule), ``measured`` sees each round's calls (priors for the next problem)."""

    def __init__(
        self,
        engine: RSE,
        problem: str,
        spend: RunBudget,
        *,
        gold: str | None = None,
        checkpoint: Checkpoint | None = None,
        stops: StopRule | None = None,
        measured: Measured | None = None,
    ) -> None:
        self.engine, self.problem, self.spend, self.gold = engine, problem, spend, gold
        self.checkpoint, self.stops, self.measured = checkpoint, stops, measured

    def _asks(self, block: str) -> int:
        messages: list[Message] = self.engine.rollout_messages(self.problem, block)
        return count_prompt_tokens(messages, self.engine.client.count_tokens)

    def _plan(self, r: int, solve: Solve) -> tuple[int, bool, bool, int]:
        """Round r's rollouts, whether it is distilled and observed, and the bank tokens its
        prompts show; 0 rollouts: the budget is spent."""
        engine, spend, cfg, st = self.engine, self.spend, self.engine.config, solve.loop
        client = engine.client
        shown = 0 if st.settled else client.count_tokens(st.block)
        unit = st.roll + shown
        most = cfg.k_for_round(r)
        # later rounds buy whole rollouts as sc's later waves do, and under a cap only as
        # many as it lets run to a typical length: one cut short is a truncated sample
        k_r = min(most, spend.units_left(unit, tail=r > 1))
        if r > 1:
            asked = self._asks("" if st.settled else st.block)
            k_r = spend.calls_that_fit(k_r, asked, cfg.max_tokens, unit)
        if k_r == 0:
            if r > 1:
                return 0, False, False, shown
            k_r = 1
        distill, observe = self._distills(r, k_r, solve, unit)
        return k_r, distill, observe, shown

    def _distills(self, r: int, k_r: int, solve: Solve, unit: float) -> tuple[bool, bool]:
        """Whether round r is distilled (wanted, and affordable with a guided round after
        it) and observed by a checker that runs rollouts (that costs no tokens)."""
        engine, cfg, spend, st = self.engine, self.engine.config, self.spend, solve.loop
        later = not st.settled and (r < cfg.rounds or engine.settling.bank_wanted(solve.memory))
        wanted = cfg.distill_with_model and later
        guided_after = 0.0
        if r < cfg.rounds:
            guided = engine.client.count_tokens(st.block)
            guided_after = spend.room_for(
                cfg.k_for_round(r + 1), self._asks(st.block) + 60, cfg.max_tokens,
                st.roll + guided + 60,
            )  # fmt: skip
        experience = st.dist * (k_r if cfg.distill_mode == "each" else 1)
        needed = k_r * unit + experience + guided_after
        distill = wanted and spend.left >= needed
        if wanted and not distill and st.unaffordable is None:
            st.unaffordable = {"round": r, "needed": needed, "left": spend.left}
        return distill, engine.distiller.observes and later

    async def run(self, solve: Solve) -> Solve:
        """Rounds from where ``solve`` stands until the budget, the rounds or a stop end it."""
        st, cfg = solve.loop, self.engine.config
        for r in range(len(solve.rounds) + 1, 0 if st.finished else cfg.rounds + 1):
            k_r, distill, observe, shown = self._plan(r, solve)
            if k_r == 0:
                break
            ask = RoundAsk(
                self.problem, r, k_r, "" if st.settled else st.block, self.gold,
                distill=distill, observe=observe, first=st.sampled,
            )  # fmt: skip
            before = self.spend.mark()
            try:
                result, next_block = await RoundRun(
                    self.engine, ask, solve.bank, solve.memory
                ).run()
            except BudgetExhaustedError:
                if solve.rounds:
                    break  # a cap-mode budget is spent: answer from the rounds that ran
                raise
            st.bank_prompt_tokens += k_r * shown
            if shown:
                st.guided_rounds.append(r)
            st.sampled += k_r
            solve.rounds.append(result)
            self._measure(self.spend.calls_since(before), shown, st)
            if distill or observe:
                st.block = next_block
            if r == 1 and self.engine.settling.is_settled(result):
                st.settled = True
                if cfg.settle_spend == "stop":
                    break
            if self.stops is not None and await self.stops(
                solve.rounds, self.spend.left / max(1.0, st.roll), st.passed
            ):
                st.stopped = True
                break
            self.save(solve)
        st.finished = True
        self.save(solve)
        return solve

    def _measure(self, records: list[CallRecord], shown: int, st: LoopState) -> None:
        """A rollout's cost (its bank block taken out) and a distillation's, measured in the
        round just run."""
        explore = [x for x in records if x.role == "explore"]
        distills = [x for x in records if x.role == "distill"]
        if explore:
            st.roll = sum(x.total_tokens - shown for x in explore) / len(explore)
        if distills:
            st.dist = sum(x.total_tokens for x in distills) / len(distills)
        if self.measured is not None and (explore or distills):
            self.measured(explore, distills)

    def save(self, solve: Solve) -> None:
        """Checkpoint the whole solve (nothing without a checkpoint or a round)."""
        if self.checkpoint is None or not solve.rounds:
            return
        distiller, st = self.engine.distiller, solve.loop
        st.checks = dict(distiller.check_counts)
        st.checks_by_kind = copy.deepcopy(distiller.check_counts_by_kind)
        config = self.engine.config.to_dict()
        t0 = time.perf_counter()
        self.checkpoint.save(
            self.problem, config, solve.rounds, solve.bank, self.engine.client.ledger, asdict(st)
        )
        solve.rounds[-1].checkpoint_ms = (time.perf_counter() - t0) * 1e3

    async def resumed(self, fresh: Solve) -> Solve:
        """The checkpoint's last complete round as a solve, its calls booked again in this
        run's budget; ``fresh`` when there is none yet. A checkpoint made under another
        budget, or at other prices, is refused."""
        if self.checkpoint is None:
            return fresh
        saved = self.checkpoint.load(self.problem)
        if saved is None:
            return fresh
        where = f"the checkpoint in {self.checkpoint.dir}"
        try:
            state = LoopState(**saved.state) if saved.state is not None else None
        except TypeError as exc:
            raise ValueError(
                f"{where} holds a loop state this version cannot read ({exc}); delete it (or "
                "use another directory) to start over"
            ) from None
        if state is None:
            raise ValueError(
                f"{where} was written by a version that saved no loop state; delete it (or "
                "use another directory) to start over"
            )
        if state.budget != fresh.loop.budget:
            raise ValueError(
                f"{where} was made {_budget_text(state.budget)}, not "
                f"{_budget_text(fresh.loop.budget)}: resume with the same budget, or use "
                "another directory"
            )
        if state.cost_model is not None and state.cost_model != fresh.loop.cost_model:
            raise ValueError(
                f"{where} was made at {state.cost_model}, not {fresh.loop.cost_model}: its "
                "spend reads differently at other prices; resume with the same prices, or "
                "use another directory"
            )
        self.spend.restore(saved.records)
        follows_vote, keep_bank = self.engine.config.bank_follows_vote, fresh.memory.keep_bank
        memory = await Memory.recalled(saved.rounds, follows_vote, keep_bank)
        distiller = self.engine.distiller
        distiller.check_counts.update(state.checks)
        distiller.check_counts_by_kind.update(copy.deepcopy(state.checks_by_kind))
        return Solve(saved.rounds, saved.bank, state, memory)


def _budget_text(budget: list[Any] | None) -> str:
    return "without a budget" if budget is None else f"under a budget of {budget[1]:g} {budget[0]}"
