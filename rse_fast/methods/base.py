"""One interface for every TTS family: ``await method.run(problem, budget, client)``.

A method grows a pool of candidates (exploration) and turns it into one output (exploitation),
spending about ``budget`` tokens (prompt + completion of every call, every role) as recorded in
its own ledger. Methods size their width and depth adaptively from the measured cost of their
first calls so that the total lands near the budget.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Literal, TypeVar

from rse_fast.answers import extract_answer
from rse_fast.errors import BudgetExhaustedError, BudgetTooSmallError
from rse_fast.llm.client import LLMClient
from rse_fast.llm.ledger import Ledger, count_prompt_tokens
from rse_fast.llm.meter import TokenCap
from rse_fast.llm.types import Message
from rse_fast.methods.priors import PriorStore
from rse_fast.prompts import solve_messages
from rse_fast.util.options import keyword_names, reject_unknown

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
    tool_calls: tuple[dict[str, Any], ...] = ()  # agentic requests: the calls it asked for

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

    @property
    def unspent(self) -> int:
        """Budget a run left unspent (a stop once its answer was settled, or a cap's rest)."""
        return max(0, self.budget - self.tokens)

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "budget": self.budget,
            "tokens": self.tokens,
            "unspent": self.unspent,
            "final": asdict(self.final) if self.final else None,
            "pool": [asdict(c) for c in self.pool],
            "ledger": self.ledger.summary(),
            "meta": self.meta,
        }


@dataclass(frozen=True)
class VisibleResult:
    """A response run on the examples its problem states: passed, or the first failure
    (the call, what came back or what it raised, and what was expected)."""

    passed: bool
    detail: str = ""


@dataclass
class Problem:
    """A task: the prompt text (the last user turn), and (for verifiable tasks) a gold answer.

    ``history`` holds the earlier turns of a conversation, roles kept; ``open_ended`` marks a
    task answered by a complete free-form response (no ``\\boxed{}`` answer, no vote).
    An agentic request comes as its own ``conversation`` (sent as written, the caller's system
    prompt and tool results included) with the ``tools`` it may call.
    """

    id: str
    prompt: str
    gold: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    history: tuple[Message, ...] = ()
    open_ended: bool = False
    conversation: tuple[Message, ...] = ()
    tools: tuple[dict[str, Any], ...] = ()
    tool_choice: str | dict[str, Any] | None = None
    #: a check that is free at solving time: whether a response passes the examples the
    #: problem itself states (code run in the sandbox, with what the first failure returned),
    #: None where it states none. The hidden tests are for grading alone and never here.
    visible_check: Callable[[str], VisibleResult | None] | None = field(
        default=None, repr=False, compare=False
    )

    @property
    def transcript(self) -> str:
        """The whole task as text for judges and graders: the conversation with its roles,
        or the prompt alone when there is no history."""
        if not self.history:
            return self.prompt
        turns = [*self.history, {"role": "user", "content": self.prompt}]
        return "\n\n".join(f"[{m['role']}]\n{str(m.get('content') or '').strip()}" for m in turns)

    def messages(self, experience_block: str = "") -> list[Message]:
        """The chat messages that ask for one response to this task."""
        if self.conversation:
            return list(self.conversation)
        return solve_messages(
            self.prompt, experience_block, open_ended=self.open_ended, history=self.history
        )


def best_index(scores: list[float]) -> int | None:
    """Index of the highest score (NaN counts as lowest), ties to the earliest; None if empty."""
    if not scores:
        return None
    return max(
        range(len(scores)),
        key=lambda k: (scores[k] if scores[k] == scores[k] else float("-inf"), -k),
    )


class Spend:
    """Budget bookkeeping on a method's private ledger. ``reserve`` (re-read at every use)
    holds back what a later exploitation call is expected to cost."""

    def __init__(
        self, ledger: Ledger, budget: int, reserve: Callable[[], float] | None = None
    ) -> None:
        self.ledger, self.budget, self.reserve = ledger, budget, reserve

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
        ``tail`` (a later wave) buys a part unit only as ``buys_part_unit`` says."""
        if unit_cost <= 0:
            return 0
        room = max(0.0, self.left / unit_cost)
        if not tail:
            return int(room + 0.5)
        whole = int(room)
        return whole + buys_part_unit(room - whole, self.budget / unit_cost)


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
    spend: Spend,
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
    tasks: Sequence[asyncio.Future[T]], out: list[T], early: EarlyStop, spend: Spend, cost: float
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


def blend(prior: float | None, measured: float) -> float:
    """A prior moved halfway to the latest measurement (the measurement when there is none)."""
    return measured if prior is None else (prior + measured) / 2


def prompt_cost(client: LLMClient, messages: list[Message]) -> int:
    """Prompt tokens of ``messages`` as this client counts them."""
    return count_prompt_tokens(messages, client.count_tokens)


BudgetMode = Literal["cap", "target"]
#: Completion tokens below which a call is not worth making (a budget must buy one).
USEFUL_COMPLETION = 64


class Method(abc.ABC):
    """A TTS family: ``await method.run(problem, budget, client) -> MethodResult``.

    Args (common to every family; subclasses add their own keyword options):
        parallel: calls in flight at once.
        max_tokens: completion tokens per generation call.
        temperature: sampling temperature of generation calls.
        seed: base seed; call ``i`` uses ``seed + i`` so runs repeat.
        budget_mode: ``target`` lands as near the budget as it can on average (the
            evaluation's default: the report pairs methods at their actual spend); ``cap``
            never ends above it: every call reserves its worst case on one meter shared by all
            the run's calls, its completion cap cut to the room left or the call refused, and
            the answer comes from what finished (the service's default).

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
        budget_mode: BudgetMode = "target",
        **unknown: Any,
    ) -> None:
        reject_unknown(f"method {self.name!r}", unknown, keyword_names(type(self)))
        if budget_mode not in ("cap", "target"):
            raise ValueError(f"budget_mode must be 'cap' or 'target', got {budget_mode!r}")
        self.budget_mode: BudgetMode = budget_mode
        self.parallel, self.max_tokens, self.temperature, self.seed = (
            parallel,
            max_tokens,
            temperature,
            seed,
        )
        self.completion_prior: float | None = None
        self.cost_ratio: float | None = None  # measured unit cost ÷ its estimate, last runs
        self.prior_store: PriorStore | None = None
        self._prior_key: str | None = None

    #: The attributes holding what earlier runs measured (what a :class:`PriorStore` keeps).
    PRIOR_FIELDS: ClassVar[tuple[str, ...]] = ("completion_prior", "cost_ratio")

    def keep_priors(self, store: PriorStore | None) -> Method:
        """Read this method's cost priors from ``store`` at the first run against an endpoint
        and model, and write them back as runs measure them: a fresh process then sizes its
        first wave like a warm one. Returns the method."""
        self.prior_store, self._prior_key = store, None
        return self

    def persist_priors(self) -> None:
        """Write the current priors to the store (if any) under the last run's key."""
        if self.prior_store is None or self._prior_key is None:
            return
        values = {f: getattr(self, f) for f in self.PRIOR_FIELDS}
        self.prior_store.save(self._prior_key, {k: v for k, v in values.items() if v is not None})

    def _restore_priors(self, client: LLMClient) -> None:
        if self.prior_store is None:
            return
        key = PriorStore.key(client.identity, self.name, self.max_tokens)
        if key == self._prior_key:
            return
        self._prior_key = key
        for name, value in self.prior_store.load(key).items():
            if name in self.PRIOR_FIELDS and getattr(self, name) is None:
                setattr(self, name, value)

    async def metered(self, client: LLMClient, budget: int, problem: Problem) -> LLMClient:
        """The run's own view of ``client``: a fresh ledger and, in ``cap`` mode, the meter
        every call draws on. A budget below one useful call is refused here, naming the
        minimum, before any completion is asked for (in ``cap`` mode a fresh client first
        asks the server how it counts the prompt, so the minimum holds its template)."""
        self._restore_priors(client)
        if self.budget_mode == "cap":
            await client.calibrate_prompt_margin(problem.messages())
        view = client.with_ledger(Ledger())
        minimum = self.minimum_budget(view, problem)
        if budget < minimum:
            raise BudgetTooSmallError(budget, minimum, f"one useful call of method {self.name!r}")
        if self.budget_mode == "cap":
            view = view.with_cap(TokenCap(budget))
        return view

    def minimum_budget(self, client: LLMClient, problem: Problem) -> int:
        """The cost of one useful call: its prompt (with the meter's margin) and a completion
        of ``USEFUL_COMPLETION`` tokens (or ``max_tokens`` when smaller)."""
        prompt = prompt_cost(client, problem.messages())
        return client.prompt_margin.reserve(prompt) + min(self.max_tokens, USEFUL_COMPLETION)

    def expected_completion(self) -> float:
        """Completion tokens a generation is expected to take: what earlier runs of this
        method measured, or the cap when nothing has run yet (a first wave never overshoots)."""
        return self.completion_prior if self.completion_prior is not None else self.max_tokens

    def planned_cost(self, estimate: float) -> float:
        """The cost a first wave plans with: ``estimate`` corrected by how far off the
        estimates of earlier runs were (token counting differs between servers)."""
        return estimate * (self.cost_ratio or 1.0)

    def learn(self, pool: list[Candidate], estimate: float, spent: int) -> None:
        """Fold a run's measured completion lengths and unit cost into the priors of the next
        run, so its first wave is sized right without a probe call."""
        lengths = [c.completion_tokens for c in pool if c.completion_tokens > 0]
        if not lengths or estimate <= 0:
            return
        measured = min(float(self.max_tokens), sum(lengths) / len(lengths))
        self.completion_prior = blend(self.completion_prior, measured)
        self.cost_ratio = blend(self.cost_ratio, spent / len(pool) / estimate)
        self.persist_priors()

    @abc.abstractmethod
    async def run(self, problem: Problem, budget: int, client: LLMClient) -> MethodResult:
        """Spend about ``budget`` tokens (every call, every role) on ``problem``."""

    def subsample(self, full: MethodResult, budget: int) -> MethodResult:
        """The result this method would have had at a smaller ``budget`` (``subsamples``)."""
        raise NotImplementedError(f"method {self.name!r} cannot be subsampled")
