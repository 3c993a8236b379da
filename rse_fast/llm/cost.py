"""What a call costs, in the unit a user pays in.

``tokens``: every prompt and completion token alike (the evaluation's default, as the study
counts). ``price``: per-million prices for uncached input, cached input and output, as hosted
APIs bill (a cached prompt token is what the server's prefix cache served, as it reported).
``time``: the server's own prefill and decode seconds where it reports them (llama.cpp's
``timings``), else the call's latency. Every ledger record carries what each unit needs, so
one run can be read in any unit afterwards.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from rse_fast.errors import CostModelError
from rse_fast.llm.ledger import CallRecord, Ledger

CostUnit = Literal["tokens", "price", "time"]
UNITS: tuple[CostUnit, ...] = ("tokens", "price", "time")
PRICE_FORM = "price:input=0.15,cached=0.075,output=0.6 ($ per million tokens)"


@dataclass(frozen=True)
class CostModel:
    """How a call's cost is counted. Prices are per million tokens (``cached_input_per_m``
    defaults to the input price: a server that reports no cache bills every prompt token)."""

    unit: CostUnit = "tokens"
    input_per_m: float = 0.0
    cached_input_per_m: float | None = None
    output_per_m: float = 0.0

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise CostModelError(f"unknown cost unit {self.unit!r}; one of {', '.join(UNITS)}")
        prices = (self.input_per_m, self.cached_input_per_m or 0.0, self.output_per_m)
        if not all(math.isfinite(p) and p >= 0 for p in prices):
            raise CostModelError(f"prices must be finite and not negative: {prices}")
        if self.unit == "price" and not any(prices):
            raise CostModelError(f"the price unit needs prices, e.g. {PRICE_FORM}")

    @classmethod
    def parse(cls, spec: str) -> CostModel:
        """``tokens``, ``time``, or ``price:input=0.15,cached=0.075,output=0.6`` ($ per 1M;
        ``cached`` is optional and defaults to the input price; input and output are required,
        so a forgotten price is an error, not a free token)."""
        unit, _, rest = spec.strip().partition(":")
        if unit != "price":
            if rest:
                raise CostModelError(f"the {unit} unit takes no settings: {spec!r}")
            if unit not in UNITS:
                raise CostModelError(
                    f"unknown cost unit {unit!r} in {spec!r}; one of tokens, time, {PRICE_FORM}"
                )
            return cls(unit)
        fields = {"input": "input_per_m", "cached": "cached_input_per_m", "output": "output_per_m"}
        values: dict[str, float] = {}
        for part in filter(None, (p.strip() for p in rest.split(","))):
            key, eq, value = (x.strip() for x in part.partition("="))
            if not eq or key not in fields:
                raise CostModelError(f"bad price setting {part!r} in {spec!r}; {PRICE_FORM}")
            if fields[key] in values:
                raise CostModelError(f"{key}= given twice in {spec!r}")
            try:
                values[fields[key]] = float(value)
            except ValueError:
                raise CostModelError(f"bad price {value!r} for {key}= in {spec!r}") from None
        missing = [k for k in ("input", "output") if fields[k] not in values]
        if missing:
            raise CostModelError(
                f"{' and '.join(k + '=' for k in missing)} missing in {spec!r}; {PRICE_FORM}"
            )
        return cls("price", **values)

    def of_call(
        self,
        prompt_tokens: int,
        completion_tokens: int,
        cached_tokens: int | None = None,
        seconds: float | None = None,
    ) -> float:
        if self.unit == "tokens":
            return float(prompt_tokens + completion_tokens)
        if self.unit == "time":
            return float(seconds or 0.0)
        cached = min(cached_tokens or 0, prompt_tokens)
        cached_price = (
            self.input_per_m if self.cached_input_per_m is None else self.cached_input_per_m
        )
        return (
            (prompt_tokens - cached) * self.input_per_m
            + cached * cached_price
            + completion_tokens * self.output_per_m
        ) / 1e6

    def of_record(self, rec: CallRecord) -> float:
        """A call's cost in this unit; in price, at the prices of the model that served it
        where it names them (a judge on another model)."""
        if self.unit == "price" and rec.priced_as is not None and rec.priced_as != self.spec:
            return CostModel.parse(rec.priced_as).of_record(rec)
        if rec.prefill_s is not None and rec.decode_s is not None:
            seconds = rec.prefill_s + rec.decode_s + rec.work_s
        else:
            seconds = rec.latency_s + rec.work_s
        return self.of_call(rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens, seconds)

    def of_records(self, records: Iterable[CallRecord]) -> float:
        return sum(self.of_record(r) for r in records)

    def of_ledger(self, ledger: Ledger) -> float:
        return self.of_records(list(ledger.records))

    def of_spend(self, spend: dict[str, Any]) -> float:
        """The cost of a run from its ``spend_summary`` (what an eval record keeps)."""
        return self.of_call(
            int(spend["prompt_tokens"]),
            int(spend["completion_tokens"]),
            int(spend.get("cached_prompt_tokens") or 0),
            float(spend.get("time_s") or 0.0),
        )

    @property
    def spec(self) -> str:
        """The model as ``parse`` reads it: ``CostModel.parse(m.spec) == m``."""
        if self.unit != "price":
            return self.unit
        cached = "" if self.cached_input_per_m is None else f",cached={self.cached_input_per_m!r}"
        return f"price:input={self.input_per_m!r}{cached},output={self.output_per_m!r}"

    @property
    def label(self) -> str:
        return {"tokens": "tokens", "price": "$", "time": "s"}[self.unit]

    @property
    def meterable(self) -> bool:
        """Whether a call's worst case is known before it is sent (what a cap needs): in
        tokens and prices yes; in time no, the server's speed is only known afterwards."""
        return self.unit != "time"

    def token_rates(self) -> tuple[float, float]:
        """The worst-case cost of one uncached prompt token and of one completion token."""
        if self.unit == "tokens":
            return 1.0, 1.0
        if self.unit == "price":
            return self.input_per_m / 1e6, self.output_per_m / 1e6
        raise ValueError("a time cost has no price per token: the server's speed sets it")


def amount_text(amount: float, label: str = "tokens") -> str:
    """An amount as a reader writes it in its unit's label: ``8,000`` tokens, ``$0.0021``,
    ``30 s``."""
    if label == "$":
        return f"${amount:.4g}"
    if label == "s":
        return f"{amount:.4g} s"
    return f"{amount:,.0f}" if float(amount).is_integer() else f"{amount:,.4g}"


def spend_summary(ledger: Ledger) -> dict[str, Any]:
    """What a run spent, in the quantities every unit is computed from (a cost in any unit,
    prices included, can be read from it later: the units are linear in these)."""
    records = list(ledger.records)
    return {
        "prompt_tokens": ledger.prompt_tokens,
        "cached_prompt_tokens": ledger.cached_tokens,
        # calls whose server said anything of its cache (0: the cached count means "unknown")
        "cache_reported_calls": sum(r.cached_tokens is not None for r in records),
        "completion_tokens": ledger.completion_tokens,
        "time_s": CostModel("time").of_records(records),
        "server_timed_calls": sum(r.prefill_s is not None for r in records),
    }


def paid_lines(ledger: dict[str, Any], price: CostModel | None = None) -> list[tuple[str, str]]:
    """What a run cost as a user pays it, from its ledger summary, as (label, text) pairs for
    a summary line or a report row: the prompt the server's cache served and the server's own
    seconds (where it reported them), and dollars at ``price``."""
    lines = []
    cached, prompt = ledger.get("cached_prompt_tokens"), ledger.get("prompt_tokens", 0)
    if cached is not None and prompt:
        lines.append(
            (
                "prompt tokens served from the server's cache",
                f"{cached:,} of {prompt:,} ({cached / prompt:.0%})",
            )
        )
    timed = ledger.get("server_time_s")
    if timed:
        # a checker's records are booked for their seconds, but they are no LLM calls
        calls = ledger.get("calls", 0) - ledger.get("roles", {}).get("check", {}).get("calls", 0)
        lines.append(
            (
                "server time",
                f"prefill {timed['prefill']:.1f} s, decode {timed['decode']:.1f} s, summed over "
                f"{timed['calls']} of {calls} calls (parallel calls overlap)",
            )
        )
    if price is not None:
        lines.append(("cost at the given prices", f"${price.of_spend(ledger):.4g}"))
    return lines


TOKENS = CostModel()
TIME = CostModel("time")


@dataclass
class ServerSpeed:
    """The seconds per token a client's server has taken (prefill and decode together, as
    the time unit counts them), over every run through the client: its views share one, so
    a budget in seconds can be turned into tokens before a run has measured its own."""

    seconds: float = 0.0
    tokens: int = 0

    def learn(self, records: Iterable[CallRecord]) -> None:
        for rec in records:
            self.seconds += TIME.of_record(rec)
            self.tokens += rec.total_tokens

    def learn_spend(self, spend: dict[str, Any]) -> None:
        """Fold in a run kept only as its ``spend_summary`` (a resumed evaluation's records)."""
        self.seconds += float(spend.get("time_s") or 0.0)
        self.tokens += int(spend["prompt_tokens"]) + int(spend["completion_tokens"])

    @property
    def seconds_per_token(self) -> float | None:
        return self.seconds / self.tokens if self.tokens and self.seconds > 0 else None
