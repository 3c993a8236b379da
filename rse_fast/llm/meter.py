"""A budget cap shared by every call of one method run (every role, prompt + completion).

Each call reserves its worst case before it is sent: its prompt (estimated, with a margin
that learns from the server's own counts) plus ``n`` × its completion cap. When the room left
is smaller, the completion cap is cut to fit; when not even the prompt and a minimal
completion fit, the call is refused (``BudgetExhaustedError``) and the method answers from
what finished. A finished call settles its reservation at the tokens the server reported, so
the meter never ends above the budget as long as a prompt is not undercounted by more than
the margin, which is measured from every reply. The margin outlives the run: the client keeps
one (:class:`PromptMargin`) that every cap on it shares, and seeds it before its first capped
call from the server's own tokenizer where the server has one (:mod:`rse_fast.llm.prompt_count`),
so only a client of a server without one relies on the default margin for its first calls.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from rse_fast.errors import BudgetExhaustedError
from rse_fast.llm.cost import TOKENS, CostModel
from rse_fast.llm.ledger import CallRecord

#: The smallest completion worth a call (a verdict, a short step).
MIN_COMPLETION = 16


@dataclass
class Grant:
    prompt: int  # reserved for one prompt
    completion: int  # the completion cap the call may use (per choice)
    n: int
    #: prompts paid: one for a call that gets its n choices at once, one per request for a
    #: server that ignores ``n`` and is asked once per choice
    prompts: int = 1
    #: what one uncached prompt token and one completion token of this call cost in the
    #: cap's unit (its model's prices; None: the cap's own)
    rates: tuple[float, float] | None = None

    @property
    def total(self) -> int:
        return self.prompts * self.prompt + self.n * self.completion


#: The most the margin's additive part learns: what a chat template adds (special tokens, a
#: default system turn) is the same for every prompt; an excess beyond it is a miscount that
#: grows with the prompt, and raises the ratio instead.
MAX_LEARNED_SLACK = 64


@dataclass
class PromptMargin:
    """How a call's prompt is reserved: estimate × ``ratio`` + ``slack``. A reply whose prompt
    count (with 5% to spare) the margin did not cover widens it: the slack first, up to
    ``MAX_LEARNED_SLACK``, then the ratio, so one short prompt with a long template does not
    inflate the reservation of every long prompt after it. A client holds one for all its
    runs (:attr:`LLMClient.prompt_margin`); a cap without one learns for its run alone."""

    ratio: float = 1.15
    slack: int = 8
    #: whether a server's count has been seen (a reply's usage, or the server's tokenizer)
    observed: bool = False

    def reserve(self, estimate: int) -> int:
        return int(estimate * self.ratio) + self.slack

    def learn(self, estimate: int, prompt_tokens: int) -> None:
        if estimate <= 0 or prompt_tokens <= 0:
            return
        self.observed = True
        need = 1.05 * prompt_tokens
        if need <= estimate * self.ratio + self.slack:
            return
        wanted = math.ceil(need - estimate * self.ratio)
        self.slack = max(self.slack, min(MAX_LEARNED_SLACK, wanted))
        if need > estimate * self.ratio + self.slack:
            self.ratio = (need - self.slack) / estimate


@dataclass
class BudgetCap:
    """A cap of ``budget`` in ``cost``'s unit (tokens, or a price: uncached input and output
    tokens priced apart, so a long prompt and a long completion weigh what they are billed).
    Reservations price prompts as uncached (the worst case); a finished call settles at what
    it cost, cached input at its own price. Time cannot be capped: nothing knows a call's
    seconds before the server reports them."""

    budget: float
    #: how prompts are reserved; the client's shared margin when the cap is one of its views
    margin: PromptMargin = field(default_factory=PromptMargin)
    cost: CostModel = TOKENS
    settled: float = 0
    reserved: float = 0
    refused: int = 0

    def __post_init__(self) -> None:
        if not self.cost.meterable:
            raise ValueError(
                f"a {self.cost.unit} budget cannot be a cap: a call's {self.cost.unit} is only "
                "known once the server reports it; use budget_mode='target'"
            )
        self._in, self._out = self.cost.token_rates()

    @property
    def room(self) -> float:
        return self.budget - self.settled - self.reserved

    def book_earlier(self, records: Iterable[CallRecord]) -> None:
        """Count calls an interrupted run already paid for (restored from its checkpoint)."""
        self.settled += self.cost.of_records(records)

    def _rates(self, grant: Grant) -> tuple[float, float]:
        return grant.rates if grant.rates is not None else (self._in, self._out)

    def _priced(self, grant: Grant) -> float:
        rate_in, rate_out = self._rates(grant)
        return grant.prompts * grant.prompt * rate_in + grant.n * grant.completion * rate_out

    def rates_of(self, price: CostModel | None) -> tuple[float, float] | None:
        """A call's own token rates in this cap's unit: its model's ``price`` where the cap
        counts dollars (tokens are tokens whatever the model)."""
        if price is None or self.cost.unit != "price" or price.unit != "price":
            return None
        return price.token_rates()

    def _left(self) -> str:
        left = max(0.0, self.room)
        if self.cost.unit == "tokens":
            return f"{int(left)} tokens"
        return f"{left:.6g} {self.cost.label}"

    def reserve(
        self,
        prompt_estimate: int,
        max_completion: int,
        n: int = 1,
        *,
        prompts: int = 1,
        margin: PromptMargin | None = None,
        price: CostModel | None = None,
    ) -> Grant:
        """Reserve a call's worst case: ``prompts`` prompts (one per request it makes) and
        ``n`` completions, each cut to the room left; refused when not even a minimal one
        fits. ``margin``: how the calling client reserves prompts (default: the cap's);
        ``price``: its model's prices, where they are not the run's (a judge elsewhere)."""
        rates = self.rates_of(price)
        rate_in, rate_out = rates if rates is not None else (self._in, self._out)
        prompt = (margin or self.margin).reserve(prompt_estimate)
        free = self.room - prompts * prompt * rate_in
        per_choice = max_completion  # free output: only the prompt limits the call
        if rate_out > 0:
            per_choice = min(max_completion, math.floor(free / max(1, n) / rate_out + 1e-9))
        elif free < 0:
            per_choice = 0
        if per_choice < min(MIN_COMPLETION, max_completion):
            self.refused += 1
            raise BudgetExhaustedError(
                f"the budget's {self._left()} left cannot hold a call of "
                f"~{prompts * prompt} prompt tokens and a completion"
            )
        grant = Grant(prompt, per_choice, n, prompts, rates)
        self.reserved += self._priced(grant)
        return grant

    def add_requests(self, grant: Grant, requests: int) -> int:
        """A call that must send ``requests`` more requests than it reserved for (a server
        that ignored ``n``): reserve their prompts. Where the room does not hold them all,
        the choices that do not fit are dropped (their completions freed); returns how many
        of the requests may be sent."""
        rate_in, rate_out = self._rates(grant)
        one = grant.prompt * rate_in + grant.completion * rate_out
        room = self.room + requests * grant.completion * rate_out  # a dropped request frees
        fits = max(0, min(requests, math.floor(room / max(one, 1e-12) + 1e-9)))
        before = self._priced(grant)
        grant.prompts += fits
        grant.n -= requests - fits
        self.reserved += self._priced(grant) - before
        if fits < requests:
            self.refused += 1
        return fits

    def settle(
        self,
        grant: Grant,
        prompt_tokens: int,
        total_tokens: int,
        estimate: int,
        margin: PromptMargin | None = None,
        *,
        requests: int = 1,
        cached_tokens: int = 0,
        price: CostModel | None = None,
    ) -> None:
        """Book a finished call at the server's counts (and learn how it counts prompts;
        ``prompt_tokens`` is per request, ``cached_tokens`` over all of them), at its model's
        ``price`` where the grant was reserved at it."""
        self.reserved -= self._priced(grant)
        prompt = prompt_tokens * requests
        cost = price if price is not None and grant.rates is not None else self.cost
        self.settled += cost.of_call(prompt, max(0, total_tokens - prompt), cached_tokens)
        (margin or self.margin).learn(estimate, prompt_tokens)

    def release(self, grant: Grant, spent: int = 0) -> None:
        """A call that failed: its reservation freed, whatever it did spend booked (at the
        dearer of the two token prices: which tokens they were is not known)."""
        self.reserved -= self._priced(grant)
        self.settled += spent * max(self._rates(grant))
