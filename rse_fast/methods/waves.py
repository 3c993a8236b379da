"""Spending a budget in waves: one run's budget (``RunBudget``), the early stop, and the wave
scheduler every sampling family fans its calls out with."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from rse_fast.errors import BudgetExhaustedError
from rse_fast.llm.client import LLMClient
from rse_fast.llm.cost import CostModel
from rse_fast.llm.ledger import Ledger

T = TypeVar("T")


@dataclass(frozen=True)
class UnitBudget:
    """A budget given in a cost unit other than tokens (``CostModel``: a price, or server
    seconds), and what a token costs in it before the run has measured its own (``rate``)."""

    cost: CostModel
    amount: float
    rate: float


class RunBudget:
    """One run's budget: the client view every call of the run goes through (its own ledger;
    in ``cap`` mode the cap on it refuses a call that does not fit, and settles into that
    ledger) and the count every plan of the run reads (what that ledger booked). ``reserve``
    (re-read at every use) holds back what a later exploitation call is expected to cost.

    Plans count tokens. A budget in another unit (``in_unit``) is seen by them as the tokens
    it still buys: what the run has spent, plus what is left in the unit at the cost per
    token the run has measured so far (before its first call, the prior ``rate``)."""

    def __init__(
        self,
        client: LLMClient,
        budget: int,
        reserve: Callable[[], float] | None = None,
        in_unit: UnitBudget | None = None,
    ) -> None:
        self.client, self.tokens, self.reserve, self.in_unit = client, budget, reserve, in_unit

    def holding(self, reserve: Callable[[], float] | None) -> RunBudget:
        """The same budget and meter, with ``reserve`` held back from what plans see."""
        return RunBudget(self.client, self.tokens, reserve, self.in_unit)

    @property
    def budget(self) -> int:
        """The budget in tokens (for a budget in another unit, what it buys as measured)."""
        if self.in_unit is None:
            return self.tokens
        left = max(0.0, self.in_unit.amount - self.spent_in_unit)
        return int(self.spent + left / self.rate)

    @property
    def rate(self) -> float:
        """What a token costs in the budget's unit: as measured by the run once it has spent
        any, before that the prior (1 for a budget in tokens)."""
        if self.in_unit is None:
            return 1.0
        spent, cost = self.spent, self.spent_in_unit
        return cost / spent if spent and cost > 0 else self.in_unit.rate

    @property
    def cap_room(self) -> float | None:
        """The room the cap has left, in tokens at :attr:`rate` (``None``: no cap)."""
        cap = self.client.cap
        return None if cap is None else cap.room / self.rate

    @property
    def spent_in_unit(self) -> float:
        """What the run has spent, in its budget's unit."""
        if self.in_unit is None:
            return float(self.spent)
        return self.in_unit.cost.of_ledger(self.ledger)

    @property
    def ledger(self) -> Ledger:
        return self.client.ledger

    @property
    def spent(self) -> int:
        return self.ledger.total_tokens

    @property
    def held(self) -> float:
        return self.reserve() if self.reserve is not None else 0.0

    @property
    def left(self) -> float:
        return self.budget - self.held - self.spent

    def units_left(self, unit_cost: float, tail: bool = False) -> int:
        """Units that still fit, rounded to the nearest so the total lands near budget; a
        ``tail`` (a later wave) buys a part unit only as ``buys_part_unit`` says, and never
        under a cap: the cap would cut it short, tokens spent on a truncated sample."""
        if unit_cost <= 0:
            return 0
        room = max(0.0, self.left / unit_cost)
        if not tail:
            return int(room + 0.5)
        whole = int(room)
        if self.client.cap is not None:
            return whole
        return whole + buys_part_unit(room - whole, self.budget / unit_cost)

    def room_for(self, n: int, prompt_tokens: int, max_tokens: int, unit_cost: float) -> float:
        """What ``n`` calls sent at once need of the budget, each typically costing
        ``unit_cost``. Under a cap each holds its worst case (``prompt_tokens`` with the
        meter's margin and ``max_tokens``) until it ends, so all but the last need that; the
        last is cut to the room left, and finishes when that room holds its prompt (with the
        margin) and a typical completion."""
        if n <= 0:
            return 0.0
        if self.client.cap is None:
            return n * unit_cost
        prompt = self.client.prompt_margin.reserve(prompt_tokens)
        typical = prompt + max(0.0, unit_cost - prompt_tokens)
        return (n - 1) * (prompt + max_tokens) + typical

    def calls_that_fit(self, most: int, prompt_tokens: int, max_tokens: int, unit: float) -> int:
        """The most calls, up to ``most``, that can be sent at once with the budget left
        (``room_for``): under a cap, none is cut short of a typical call."""
        cap_room = self.cap_room
        room = self.left if cap_room is None else min(self.left, cap_room)
        n = max(0, most)
        while n > 0 and self.room_for(n, prompt_tokens, max_tokens, unit) > room:
            n -= 1
        return n


def buys_part_unit(part: float, budget_units: float) -> bool:
    """Whether a later wave buys one more unit of which only ``part`` fits in the budget left.

    A unit bought in part overshoots the budget and costs a whole extra round trip (a wave of
    one after a full one doubles the wall time for a fraction of a vote), so a later wave
    buys whole units only, unless leaving ``part`` unspent would land more than 10% under a
    budget of 5 units or more (below 5 units no whole-unit rule can promise 10%)."""
    return budget_units >= 5 and part > 0.1 * budget_units


@dataclass
class EarlyStop:
    """Stop generating once the outcome is settled: ``settled(results, still_possible)`` is
    asked after every finished unit; when it says yes, calls in flight are cancelled. What
    the stop saved is an estimate (units not run × the measured unit cost)."""

    settled: Callable[[list[Any], int], bool]
    stopped: bool = False
    cancelled: int = 0
    saved_tokens: int = 0


async def in_waves(
    unit: Callable[[int], Awaitable[T]],
    spend: RunBudget,
    first_cost: float,
    parallel: int,
    limit: int | None = None,
    minimum: int = 0,
    early: EarlyStop | None = None,
    count_reserve: bool = False,
    start: int = 0,
    fits: Callable[[int], int] | None = None,
) -> list[T]:
    """Run ``unit(i)`` in parallel waves until the budget is spent (or ``limit`` units ran).

    The first wave goes out at once, sized from ``first_cost`` (an estimate from the prompt's
    length and the completion cap or a prior: no solo probe call on the critical path); each
    later wave is sized from what the waves so far really cost (``count_reserve``: counting
    what the reserve holds for work the units started and left running). A method whose units
    do not cost alike passes ``fits(done)``: how many more units its own cost model says the
    budget buys once ``done`` have run (it then replaces the per-unit price). At least
    ``minimum`` units run whatever the budget says. Units are numbered from ``start``."""

    def committed() -> float:
        return spend.spent + (spend.held if count_reserve else 0.0)

    out: list[T] = []
    cost = max(1.0, first_cost)
    one_at_a_time = False  # after a cap refusal: the last units one by one
    while True:
        n = fits(len(out)) if fits is not None else spend.units_left(cost, tail=bool(out))
        n = max(n, minimum - len(out))
        if limit is not None:
            n = min(n, limit - len(out))
        if n <= 0:
            return out
        wave = 1 if one_at_a_time else min(n, parallel)
        before, done_before = committed(), len(out)
        tasks = [asyncio.ensure_future(unit(start + len(out) + j)) for j in range(wave)]
        if early is None:
            done = await _gathered(tasks)
            capped = [d for d in done if isinstance(d, BudgetExhaustedError)]
            for d in done:
                if isinstance(d, BaseException) and not isinstance(d, BudgetExhaustedError):
                    raise d
            out.extend(d for d in done if not isinstance(d, BaseException))
            if capped:  # the cap refused a call: room freed by settled calls is tried one
                if wave == 1:  # unit at a time, until even one is refused
                    return out
                one_at_a_time = True
        elif await _until_settled(tasks, out, early, spend, cost):
            measured = (committed() - before) / max(1, len(out) - done_before)
            early.saved_tokens = int(
                early.cancelled * measured + spend.units_left(measured) * measured
            )
            return out
        cost = max(1.0, (committed() - before) / max(1, len(out) - done_before))


async def _gathered(tasks: Sequence[asyncio.Future[Any]]) -> list[Any]:
    """Every task's result or exception. Cancelled, it cancels them all and returns at once
    (``gather(return_exceptions=True)`` would wait until every one has wound down)."""
    try:
        await asyncio.wait(tasks)
    except asyncio.CancelledError:
        for t in tasks:
            t.cancel()
            t.add_done_callback(_retrieve)
        raise
    return [_outcome(t) for t in tasks]


def _outcome(task: asyncio.Future[Any]) -> Any:
    if task.cancelled():
        return asyncio.CancelledError()
    exc = task.exception()
    return exc if exc is not None else task.result()


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Read a finished task's outcome, so an abandoned one is not logged as lost."""
    if not task.cancelled():
        task.exception()


async def _until_settled(
    tasks: Sequence[asyncio.Future[T]],
    out: list[T],
    early: EarlyStop,
    spend: RunBudget,
    cost: float,
) -> bool:
    """Collect one wave in completion order, asking ``early.settled`` after each unit;
    True (and the rest cancelled) once it is."""
    pending = set(tasks)
    try:
        while pending:
            finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for fut in finished:
                if isinstance(fut.exception(), BudgetExhaustedError):
                    early.stopped = True
                    continue
                out.append(fut.result())
            if early.stopped:
                return True
            possible = max(len(pending), spend.units_left(cost))
            if early.settled(out, possible):
                early.stopped, early.cancelled = True, len(pending)
                return True
        return False
    finally:
        for fut in pending:
            fut.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
