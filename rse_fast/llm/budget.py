"""One run's budget: what its calls have spent, what is held back, what is left, and how many
more calls of a kind fit (``RunBudget``). Every plan of a run reads it; the cap on the run's
client view refuses what does not fit."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rse_fast.llm.client import LLMClient
from rse_fast.llm.cost import CostModel
from rse_fast.llm.ledger import CallRecord, Ledger


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

    def mark(self) -> int:
        """Where the run's calls stand now (for :meth:`calls_since`)."""
        return len(self.ledger.records)

    def calls_since(self, mark: int) -> list[CallRecord]:
        """The calls booked since ``mark``."""
        return self.ledger.records[mark:]

    def restore(self, records: list[CallRecord]) -> None:
        """Book an interrupted run's calls again: in the ledger, and in the cap if there is
        one (a resumed run spends only what its first part left)."""
        self.ledger.restore(records)
        if self.client.cap is not None:
            self.client.cap.book_earlier(records)

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
