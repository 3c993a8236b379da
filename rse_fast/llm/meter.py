"""A token cap shared by every call of one method run (every role, prompt + completion).

Each call reserves its worst case before it is sent: its prompt (estimated, with a margin
that learns from the server's own counts) plus ``n`` × its completion cap. When the room left
is smaller, the completion cap is cut to fit; when not even the prompt and a minimal
completion fit, the call is refused (``BudgetExhaustedError``) and the method answers from
what finished. A finished call settles its reservation at the tokens the server reported, so
the meter never ends above the budget as long as a prompt is not undercounted by more than
the margin, which is measured from every reply. The margin outlives the run: the client keeps
it (:class:`PromptCalibration`) and every later cap on that client starts from it, so only a
client's first calls rely on the default margin (a service's first request, not each one).
"""

from __future__ import annotations

from dataclasses import dataclass

from rse_fast.errors import BudgetExhaustedError

#: The smallest completion worth a call (a verdict, a short step).
MIN_COMPLETION = 16


@dataclass
class Grant:
    prompt: int  # reserved for the prompt
    completion: int  # the completion cap the call may use (per choice)
    n: int

    @property
    def total(self) -> int:
        return self.prompt + self.n * self.completion


@dataclass
class PromptCalibration:
    """The prompt margin a client's replies have shown (reported prompt ÷ estimate, with 5%
    to spare), kept across its runs; 0 until a capped call has settled."""

    ratio: float = 0.0

    def observe(self, estimate: int, prompt_tokens: int) -> None:
        if estimate > 0 and prompt_tokens > 0:
            self.ratio = max(self.ratio, 1.05 * prompt_tokens / estimate)


@dataclass
class TokenCap:
    budget: int
    #: the reserved prompt is estimate × ratio + slack; ratio rises to what replies showed
    prompt_ratio: float = 1.15
    prompt_slack: int = 8
    settled: int = 0
    reserved: int = 0
    refused: int = 0
    #: where what this cap learns is kept beyond its run (the client's), if anywhere
    calibration: PromptCalibration | None = None

    def calibrate(self, calibration: PromptCalibration) -> TokenCap:
        """Start from (and feed) ``calibration``: the margin earlier runs measured."""
        self.calibration = calibration
        self.prompt_ratio = max(self.prompt_ratio, calibration.ratio)
        return self

    @property
    def room(self) -> int:
        return self.budget - self.settled - self.reserved

    def reserve(self, prompt_estimate: int, max_completion: int, n: int = 1) -> Grant:
        prompt = int(prompt_estimate * self.prompt_ratio) + self.prompt_slack
        per_choice = min(max_completion, (self.room - prompt) // max(1, n))
        if per_choice < min(MIN_COMPLETION, max_completion):
            self.refused += 1
            raise BudgetExhaustedError(
                f"the budget's {max(0, self.room)} tokens left cannot hold a call of "
                f"~{prompt} prompt tokens and a completion"
            )
        grant = Grant(prompt, per_choice, n)
        self.reserved += grant.total
        return grant

    def settle(self, grant: Grant, prompt_tokens: int, total_tokens: int, estimate: int) -> None:
        """Book a finished call at the server's counts (and learn how it counts prompts)."""
        self.reserved -= grant.total
        self.settled += total_tokens
        if estimate > 0 and prompt_tokens > 0:
            self.prompt_ratio = max(self.prompt_ratio, 1.05 * prompt_tokens / estimate)
            if self.calibration is not None:
                self.calibration.observe(estimate, prompt_tokens)

    def release(self, grant: Grant, spent: int = 0) -> None:
        """A call that failed: its reservation freed, whatever it did spend booked."""
        self.reserved -= grant.total
        self.settled += spent
