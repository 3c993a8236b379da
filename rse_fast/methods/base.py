"""One interface for every TTS family: ``await method.run(problem, budget, client)``.

A method grows a pool of candidates (exploration) and turns it into one output (exploitation),
spending about ``budget`` tokens (prompt + completion of every call, every role) as recorded in
its own ledger. Methods size their width and depth adaptively from the measured cost of their
first calls so that the total lands near the budget.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from rse_fast.answers import extract_answer
from rse_fast.llm.client import LLMClient
from rse_fast.llm.ledger import Ledger
from rse_fast.options import keyword_names, reject_unknown

T = TypeVar("T")


@dataclass
class Candidate:
    """One output in the pool: text, extracted answer, scores by name, and its token cost."""

    text: str
    answer: str | None = None
    scores: dict[str, float] = field(default_factory=dict)
    cost: int = 0  # tokens spent producing (and scoring) this candidate
    completion_tokens: int = 0  # of which the generated text itself
    origin: str = "sample"  # sample | refine | fuse | beam | particle | rse-round-N

    @classmethod
    def of(cls, text: str, **kw: Any) -> Candidate:
        return cls(text=text, answer=extract_answer(text), **kw)


@dataclass
class MethodResult:
    method: str
    budget: int
    final: Candidate | None
    pool: list[Candidate]
    ledger: Ledger
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        return self.ledger.total_tokens

    @property
    def budget_error(self) -> float:
        return self.tokens / self.budget - 1 if self.budget else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "budget": self.budget,
            "tokens": self.tokens,
            "final": asdict(self.final) if self.final else None,
            "pool": [asdict(c) for c in self.pool],
            "ledger": self.ledger.summary(),
            "meta": self.meta,
        }


@dataclass
class Problem:
    """A task: the prompt text, and (for verifiable tasks) a gold answer."""

    id: str
    prompt: str
    gold: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)


def best_index(scores: list[float]) -> int | None:
    """Index of the highest score (NaN counts as lowest), ties to the earliest; None if empty."""
    if not scores:
        return None
    return max(
        range(len(scores)),
        key=lambda k: (scores[k] if scores[k] == scores[k] else float("-inf"), -k),
    )


class Spend:
    """Budget bookkeeping on a method's private ledger."""

    def __init__(self, ledger: Ledger, budget: int) -> None:
        self.ledger, self.budget = ledger, budget

    @property
    def spent(self) -> int:
        return self.ledger.total_tokens

    @property
    def left(self) -> int:
        return self.budget - self.spent

    def units_left(self, unit_cost: float) -> int:
        """Whole units that still fit, rounding to the nearest so the total lands near budget."""
        if unit_cost <= 0:
            return 0
        return max(0, int(self.left / unit_cost + 0.5))


async def in_waves(
    unit: Callable[[int], Awaitable[T]],
    spend: Spend,
    first_cost: float,
    parallel: int,
    limit: int | None = None,
) -> list[T]:
    """Run ``unit(i)`` in parallel waves until the budget is spent (or ``limit`` units ran),
    re-estimating the unit cost from what the last waves really cost."""
    out: list[T] = []
    cost = max(1.0, first_cost)
    while True:
        n = spend.units_left(cost)
        if limit is not None:
            n = min(n, limit - len(out))
        if n <= 0:
            return out
        wave = min(n, parallel)
        before = spend.spent
        results = await asyncio.gather(*(unit(len(out) + j) for j in range(wave)))
        out.extend(results)
        cost = max(1.0, (spend.spent - before) / wave)


class Method(abc.ABC):
    """A TTS family: ``await method.run(problem, budget, client) -> MethodResult``.

    Args (common to every family; subclasses add their own keyword options):
        parallel: calls in flight at once.
        max_tokens: completion tokens per generation call.
        temperature: sampling temperature of generation calls.
        seed: base seed; call ``i`` uses ``seed + i`` so runs repeat.

    An option no family in the class's MRO takes raises ``UnknownOptionError`` (a
    ``ValueError``) naming it and the valid ones.
    """

    name = "method"
    subsamples = False  # True: a run at the largest budget can be cut to smaller ones

    def __init__(
        self,
        *,
        parallel: int = 4,
        max_tokens: int = 1024,
        temperature: float = 0.7,
        seed: int = 0,
        **unknown: Any,
    ) -> None:
        reject_unknown(f"method {self.name!r}", unknown, keyword_names(type(self)))
        self.parallel, self.max_tokens, self.temperature, self.seed = (
            parallel,
            max_tokens,
            temperature,
            seed,
        )

    @abc.abstractmethod
    async def run(self, problem: Problem, budget: int, client: LLMClient) -> MethodResult:
        """Spend about ``budget`` tokens (every call, every role) on ``problem``."""

    def subsample(self, full: MethodResult, budget: int) -> MethodResult:
        """The result this method would have had at a smaller ``budget`` (``subsamples``)."""
        raise NotImplementedError(f"method {self.name!r} cannot be subsampled")
