"""One interface for every TTS family: ``await method.run(problem, budget, client)``.

A method grows a pool of candidates (exploration) and turns it into one output (exploitation),
spending about ``budget`` tokens (prompt + completion of every call, every role) as recorded in
its own ledger. Methods size their width and depth adaptively from the measured cost of their
first calls so that the total lands near the budget.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from rse_fast.errors import BudgetTooSmallError, BudgetUnitError
from rse_fast.llm.budget import RunBudget, UnitBudget
from rse_fast.llm.client import LLMClient
from rse_fast.llm.cost import CostModel
from rse_fast.llm.ledger import Ledger, count_prompt_tokens
from rse_fast.llm.meter import BudgetCap
from rse_fast.llm.types import Message
from rse_fast.methods.priors import PriorStore
from rse_fast.methods.request_fields import RequestField, RunCounter, RunReport
from rse_fast.methods.types import Candidate, MethodResult, Problem
from rse_fast.util.options import keyword_names, reject_unknown


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
        budget_unit: what ``budget`` counts: ``tokens`` (every prompt and completion token
            alike, the default), a price (``CostModel.parse("price:input=..,output=..")`` or
            that text: dollars, cached input at its own price) or ``time`` (the server's own
            seconds; target mode only, and once a call through the client has shown its
            speed). The result's ``meta["cost"]`` says what was spent in that unit.

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
        budget_unit: CostModel | str = "tokens",
        **unknown: Any,
    ) -> None:
        reject_unknown(f"method {self.name!r}", unknown, keyword_names(type(self)))
        if budget_mode not in ("cap", "target"):
            raise ValueError(f"budget_mode must be 'cap' or 'target', got {budget_mode!r}")
        unit = CostModel.parse(budget_unit) if isinstance(budget_unit, str) else budget_unit
        if budget_mode == "cap" and not unit.meterable:
            raise ValueError(
                f"a {unit.unit} budget cannot be a cap (a call's {unit.unit} is known only "
                "once the server reports it): use budget_mode='target'"
            )
        self.budget_mode: BudgetMode = budget_mode
        self.budget_unit = unit
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

    async def metered(self, client: LLMClient, budget: float, problem: Problem) -> RunBudget:
        """The run's own view of ``client``: a fresh ledger and, in ``cap`` mode, the meter
        every call draws on. A budget below one useful call is refused here, naming the
        minimum, before any completion is asked for (in ``cap`` mode a fresh client first
        asks the server how it counts the prompt, so the minimum holds its template)."""
        self._restore_priors(client)
        if self.budget_mode == "cap":
            await client.calibrate_prompt_margin(problem.messages())
        view = client.with_ledger(Ledger())
        unit = self.budget_unit
        minimum = self.minimum_budget(view, problem)
        in_unit = None
        if unit.unit != "tokens":
            in_unit = UnitBudget(unit, budget, self.token_rate(view, problem))
            minimum_in_unit = minimum * in_unit.rate
            if budget < minimum_in_unit:
                raise BudgetTooSmallError(
                    budget, minimum_in_unit, f"one useful call of method {self.name!r}", unit.label
                )
            tokens = int(budget / in_unit.rate)
        elif budget < minimum:
            raise BudgetTooSmallError(budget, minimum, f"one useful call of method {self.name!r}")
        else:
            tokens = int(budget)
        if self.budget_mode == "cap":
            view = view.with_cap(BudgetCap(budget, cost=unit))
        return RunBudget(view, tokens, in_unit=in_unit)

    def token_rate(self, client: LLMClient, problem: Problem) -> float:
        """What one token of a typical call of this run costs in ``budget_unit`` before the
        run has measured it: a price from a call of this problem's prompt and a completion
        of half ``max_tokens`` (or what earlier runs measured), priced uncached; seconds from
        the server's speed over the client's earlier runs."""
        unit = self.budget_unit
        if unit.unit == "time":
            rate = client.speed.seconds_per_token
            if rate is None:
                raise BudgetUnitError(
                    "a time budget needs the server's speed, and no call through this client "
                    "has shown it yet: run one with a token budget first, or budget in tokens"
                )
            return rate
        prompt = prompt_cost(client, problem.messages())
        completion = self.completion_prior or self.max_tokens / 2
        return unit.of_call(prompt, int(completion)) / (prompt + int(completion))

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

    #: whether the family reports its own progress (the service then forwards it as is)
    reports_progress: ClassVar[bool] = False
    #: whether the family embeds text (the service then lends it its shared encoder)
    needs_encoder: ClassVar[bool] = False
    #: whether the family scores candidates with a verifier (``judge=``; an evaluation lends
    #: it the run's judge)
    needs_judge: ClassVar[bool] = False
    #: whether that verifier may be a scoring API (a reward model) instead of an LLM judge
    takes_reward_model: ClassVar[bool] = False
    #: whether the family answers agentic requests (``tools`` in a request)
    takes_tools: ClassVar[bool] = False
    #: the service request fields this family reads (beyond those every family takes), each
    #: with its kind, range and the default the measurements chose
    request_fields: ClassVar[tuple[RequestField, ...]] = ()
    #: named presets of the family's options, asked for as ``family:variant``
    variants: ClassVar[Mapping[str, Mapping[str, Any]]] = {}
    #: what the family's runs add to the service's metrics (None: nothing beyond tokens)
    run_counter: ClassVar[RunCounter | None] = None

    @classmethod
    def request_options(
        cls, request: Mapping[str, Any], *, encoder: Any = None, progress: Any = None
    ) -> dict[str, Any]:
        """This family's options from a service request (``k`` and its declared fields by
        name): by default each declared field is the keyword option of the same name."""
        return {f.name: request[f.name] for f in cls.request_fields}

    @classmethod
    def warmup(cls) -> None:
        """What a service does once before its first request so that request does not pay
        for it: start the answer-checking workers every family's answers go through."""
        from rse_fast.answers.checker import POOL

        POOL.warm()

    def reply_details(self, result: MethodResult) -> dict[str, Any]:
        """What a reply's details show of a run (the service's ``rse_fast`` field)."""
        return {k: v for k, v in result.meta.items() if k != "bank_sizes"}

    def run_report(self, result: MethodResult) -> RunReport | None:
        """This run's entry in :attr:`run_counter` (None where the family declares none)."""
        return None

    async def run(self, problem: Problem, budget: float, client: LLMClient) -> MethodResult:
        """Spend about ``budget`` (tokens, or ``budget_unit``; every call, every role) on
        ``problem``: the run's budget is metered once (:meth:`metered`), and the family
        spends it (:meth:`_run`). What the server's speed was is kept on the client."""
        self.check_problem(problem)
        run_budget = await self.metered(client, budget, problem)
        result = await self._run(problem, run_budget)
        client.speed.learn(run_budget.ledger.records)
        if run_budget.in_unit is not None or self.budget_mode == "cap":
            self.price(result, budget)
        return result

    def price(self, result: MethodResult, budget: float) -> MethodResult:
        """Say in ``result.meta["cost"]`` what a run in a unit other than tokens spent of its
        ``budget`` (in cap mode, what it left unspent), and in cap mode book the budget and
        the unspent rest it hands back in the run's ledger. Returns the result."""
        unit = self.budget_unit
        spent = unit.of_ledger(result.ledger)
        if self.budget_mode == "cap":
            result.ledger.settle_budget(budget, spent, unit.label)
        if unit.unit == "tokens":
            return result
        result.meta["cost"] = {
            "unit": unit.label,
            "budget": budget,
            "spent": spent,
            **({"unspent": max(0.0, budget - spent)} if self.budget_mode == "cap" else {}),
        }
        return result

    def check_problem(self, problem: Problem) -> None:
        """Refuse (``ValueError``) a problem this family cannot answer, before anything is
        spent on it (every problem, unless a family says otherwise)."""
        return None

    @abc.abstractmethod
    async def _run(self, problem: Problem, run_budget: RunBudget) -> MethodResult:
        """The family's own run, every call through ``run_budget.client``."""

    def subsample(self, full: MethodResult, budget: float) -> MethodResult:
        """The result this method would have had at a smaller ``budget`` (``subsamples``), in
        ``budget_unit``, chosen by the same rule the full run chose by."""
        raise NotImplementedError(f"method {self.name!r} cannot be subsampled")
