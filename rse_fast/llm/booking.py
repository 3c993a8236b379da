"""How one call is paid for, apart from how it travels: reserved on the run's cap before it is
sent (its ``max_tokens`` cut to the room left), settled at the server's counts when it is
answered, and booked in the ledger; a call that got no reply is booked at a bound of what the
server may have done for it (what a stream had delivered, or for a whole reply its
reservation), an error reply at nothing. The client (transport) asks :class:`CallBooking`;
it never touches the cap or the ledger itself."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from rse_fast.llm.cost import CostModel
from rse_fast.llm.ledger import Ledger, TokenCounter, count_prompt_tokens
from rse_fast.llm.meter import BudgetCap, Grant, PromptMargin
from rse_fast.llm.types import Usage


@dataclass(frozen=True)
class Reservation:
    """What a call holds on the cap (no grant: uncapped) and its prompt's estimate."""

    grant: Grant | None
    estimate: int


@dataclass(frozen=True)
class CallBooking:
    """The accounting of one client view: its ledger, its cap (None: uncapped), the prompt
    margin its replies taught, the prices of its model where they are not the run's."""

    ledger: Ledger
    cap: BudgetCap | None
    margin: PromptMargin
    count_tokens: TokenCounter
    price: CostModel | None = None

    @property
    def priced_as(self) -> str | None:
        return self.price.spec if self.price is not None else None

    # -- before the call ---------------------------------------------------------------------
    def prompt_estimate(self, body: dict[str, Any]) -> int:
        estimate = count_prompt_tokens(body["messages"], self.count_tokens)
        if body.get("tools"):
            estimate += self.count_tokens(json.dumps(body["tools"]))
        return estimate

    def prompt_bound(self, body: dict[str, Any]) -> int:
        """A prompt as the server may have counted it: the estimate widened by the margin
        every reply so far taught the client."""
        return self.margin.reserve(self.prompt_estimate(body))

    def reserve(self, body: dict[str, Any], n: int) -> Reservation:
        """Reserve a call's worst case on the cap, cutting ``body``'s ``max_tokens`` to fit
        (BudgetExhaustedError when not even a minimal one does)."""
        if self.cap is None:
            return Reservation(None, 0)
        estimate = self.prompt_estimate(body)
        wanted = int(body.get("max_tokens") or body.get("max_completion_tokens") or 4096)
        grant = self.cap.reserve(estimate, wanted, n, margin=self.margin, price=self.price)
        body["max_tokens"] = grant.completion
        body.pop("max_completion_tokens", None)
        return Reservation(grant, estimate)

    def add_requests(self, held: Reservation, count: int) -> int:
        """A server that ignored ``n`` must be asked ``count`` more times: how many of those
        the cap holds (their prompts reserved)."""
        if held.grant is None or self.cap is None:
            return count
        return self.cap.add_requests(held.grant, count)

    # -- after it ----------------------------------------------------------------------------
    def answered(
        self,
        held: Reservation,
        role: str,
        usage: Usage,
        latency_s: float,
        endpoint: str,
        *,
        n: int = 1,
        task: str | None = None,
        requests: int = 1,
    ) -> None:
        """A reply came: settled at the server's counts (the margin learns from them) and
        booked."""
        if held.grant is not None and self.cap is not None:
            per_request = usage.prompt_tokens // max(1, requests)
            self.cap.settle(
                held.grant, per_request, usage.total_tokens, held.estimate, self.margin,
                requests=max(1, requests), cached_tokens=usage.cached_tokens or 0,
                price=self.price,
            )  # fmt: skip
        self.ledger.record_usage(role, usage, latency_s, endpoint, n, task, self.priced_as)

    def failed(
        self,
        held: Reservation,
        role: str,
        error: BaseException,
        latency_s: float,
        endpoint: str,
        task: str | None = None,
        bound: Usage | None = None,
    ) -> None:
        """A call that ended in ``error``: its reservation freed and ``bound`` (what it may
        have cost; None: nothing, as for an error reply) booked in the cap and the ledger."""
        self.release(held, bound.total_tokens if bound else 0)
        self.ledger.record_error(role, error, latency_s, endpoint, task, bound, self.priced_as)

    def cut_short(
        self,
        held: Reservation,
        role: str,
        bound: Usage,
        latency_s: float,
        endpoint: str,
        task: str | None = None,
    ) -> None:
        """A stream its caller stopped (or that was cancelled): what it had streamed, as a
        bound, paid for and booked."""
        self.release(held, bound.total_tokens)
        self.ledger.record_usage(role, bound, latency_s, endpoint, 1, task, self.priced_as)

    def release(self, held: Reservation, spent: int = 0) -> None:
        if held.grant is not None and self.cap is not None:
            self.cap.release(held.grant, spent)

    def unanswered_bound(self, body: dict[str, Any], n: int, estimate: int) -> Usage:
        """What a call that got no reply is booked at: the prompt and every completion token
        it asked for (as reserved: a cap cut ``max_tokens`` to fit). A server that went on
        generating after the caller left spent at most that; booking less could let a cap
        be overrun by work nobody waits for."""
        prompt = self.margin.reserve(estimate or self.prompt_estimate(body))
        completion = int(body.get("max_tokens") or body.get("max_completion_tokens") or 0)
        return Usage(prompt * n, completion * n, "bound")

    def streamed_bound(
        self, body: dict[str, Any], content: list[str], reasoning: list[str]
    ) -> Usage:
        """What a stream cut short may have cost: its prompt's bound and what it had sent."""
        prompt = self.prompt_bound(body)
        return Usage(prompt, self.count_tokens("".join(content) + "".join(reasoning)), "bound")

    @contextlib.contextmanager
    def outside(
        self, role: str, usage: Usage, endpoint: str, task: str | None = None
    ) -> Iterator[None]:
        """A call that is not a chat completion (a reward model's HTTP API), metered like
        one: its ``usage`` (an estimate) reserved on the cap before it is sent
        (BudgetExhaustedError when it does not fit), and booked when it ends, answered or
        not."""
        grant = None
        if self.cap is not None:
            exact = PromptMargin(ratio=1.0, slack=0)
            grant = self.cap.reserve(
                usage.prompt_tokens, usage.completion_tokens, margin=exact, price=self.price
            )
        t0 = time.perf_counter()
        try:
            yield
        finally:
            if grant is not None and self.cap is not None:
                self.cap.release(grant, usage.total_tokens)
            self.ledger.record_usage(
                role, usage, time.perf_counter() - t0, endpoint, task=task,
                priced_as=self.priced_as,
            )  # fmt: skip
