"""Typed results of chat calls: what every caller of the client gets back.

They keep everything an OpenAI-compatible server sends that a caller may need: the answer
(``content``), a thinking model's trace (``reasoning_content`` or, on newer vLLM,
``reasoning``), tool calls, a refusal, logprobs and the raw message itself.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Literal

Message = dict[str, Any]
#: "bound": a call that ended without a reply (cancelled, timed out, cut off): the server may
#: have generated up to what was reserved for it, and that bound is what is booked
UsageSource = Literal["reported", "estimated", "corrected", "reused", "bound"]


@dataclass(frozen=True, kw_only=True)
class Choice:
    """One choice of a completion. ``text`` is the message content ("" when null);
    ``reasoning`` the separate reasoning trace, when the server sends one."""

    index: int
    text: str
    finish_reason: str | None = None
    logprobs: Any = None
    reasoning: str | None = None
    tool_calls: tuple[dict[str, Any], ...] = ()
    refusal: str | None = None
    message: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class ServerTimings:
    """What llama.cpp's ``timings`` say a call cost in time: prefill and decode milliseconds
    (``prompt_ms``, ``predicted_ms``) and the prompt tokens it served from its cache
    (``cache_n``) and evaluated (``prompt_n``)."""

    prompt_ms: float
    predicted_ms: float
    cache_n: int | None = None
    prompt_n: int | None = None


@dataclass(frozen=True)
class Usage:
    """Token counts of one call. ``source`` says whether the server reported them, we estimated
    them (server sent none), or we corrected an under-report (llama.cpp with n > 1).
    ``reasoning_tokens`` is the part of the completion spent thinking, when reported;
    ``cached_tokens`` the part of the prompt the server's prefix cache served, when reported
    (vLLM, llama.cpp: ``prompt_tokens_details.cached_tokens``; else llama.cpp's ``cache_n``);
    ``timings`` what the server measured, when it sends them (llama.cpp)."""

    prompt_tokens: int
    completion_tokens: int
    source: UsageSource = "reported"
    _: KW_ONLY
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None
    timings: ServerTimings | None = None

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, kw_only=True)
class ChatResult:
    """A whole completion: its choices, usage, and where and how fast it was served."""

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

    @property
    def reasoning(self) -> str | None:
        """The first choice's reasoning trace (a thinking model's), when it sent one."""
        return self.choices[0].reasoning if self.choices else None


@dataclass(frozen=True, kw_only=True)
class StreamEvent:
    """One delta of a streamed choice: its role, content, reasoning and tool-call fragments
    (``tool_calls`` as the server sent them, with ``index`` and argument pieces), or the usage
    chunk. The last event of a stream has ``done`` and the call's usage."""

    index: int = 0
    role: str | None = None
    delta: str = ""
    reasoning: str = ""
    tool_calls: tuple[dict[str, Any], ...] = ()
    finish_reason: str | None = None
    done: bool = False
    usage: Usage | None = None
    #: this delta's tokens' logprobs (``{"content": [...]}``), when they were asked for
    logprobs: Any = None
    raw: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    @property
    def empty(self) -> bool:
        """True for a chunk that carries nothing a caller acts on."""
        return not (
            self.role or self.delta or self.reasoning or self.tool_calls or self.finish_reason
        )
