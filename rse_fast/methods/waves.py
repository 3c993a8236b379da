"""Spending a budget in waves: the early stop, and the wave scheduler every sampling family
fans its calls out with (the run's budget they spend is ``llm.budget.RunBudget``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from rse_fast.errors import BudgetExhaustedError
from rse_fast.llm.budget import RunBudget

T = TypeVar("T")


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
