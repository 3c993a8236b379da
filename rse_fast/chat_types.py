"""Typed results of chat calls: what every caller of the client gets back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Message = dict[str, Any]
UsageSource = Literal["reported", "estimated", "corrected"]


@dataclass(frozen=True)
class Choice:
    index: int
    text: str
    finish_reason: str | None
    logprobs: Any = None


@dataclass(frozen=True)
class Usage:
    """Token counts of one call. ``source`` says whether the server reported them, we estimated
    them (server sent none), or we corrected an under-report (llama.cpp with n > 1)."""

    prompt_tokens: int
    completion_tokens: int
    source: UsageSource = "reported"

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class ChatResult:
    choices: tuple[Choice, ...]
    usage: Usage
    latency_s: float
    endpoint: str
    model: str
    requests: int = 1  # HTTP requests it took (n > 1 fan-out counts each)
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def text(self) -> str:
        return self.choices[0].text if self.choices else ""

    @property
    def texts(self) -> list[str]:
        return [c.text for c in self.choices]


@dataclass(frozen=True)
class StreamEvent:
    """One server-sent chunk: text delta of a choice; the last event has ``done`` and usage."""

    index: int = 0
    delta: str = ""
    finish_reason: str | None = None
    done: bool = False
    usage: Usage | None = None
    raw: dict[str, Any] | None = field(default=None, repr=False, compare=False)
