"""Chat completion JSON (whole or streamed chunk) into the typed records of ``types``.

Reasoning comes as ``reasoning_content`` (vLLM/SGLang reasoning parsers, DeepSeek) or
``reasoning`` (newer vLLM); both are read. Nothing the server sent is dropped: each choice keeps
its raw message, each event its raw chunk.
"""

from __future__ import annotations

import json
import math
from typing import Any

from rse_fast.errors import LLMResponseError
from rse_fast.llm.types import Choice, ServerTimings, StreamEvent, Usage

REASONING_FIELDS = ("reasoning_content", "reasoning")


def _reasoning(message: dict[str, Any]) -> str | None:
    for name in REASONING_FIELDS:
        value = message.get(name)
        if isinstance(value, str):
            return value
    return None


def _text(value: Any) -> str:
    """Message or delta content as text: a string, nothing (null), or a list of content parts
    (``[{"type": "text", "text": ...}]``, as some gateways send) joined; anything else is not a
    chat completion (TypeError)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(p, dict) for p in value):
        return "".join(p["text"] for p in value if isinstance(p.get("text"), str))
    raise TypeError(f"content of type {type(value).__name__}")


def _fields(value: Any, what: str) -> dict[str, Any]:
    """``value`` when it is a JSON object (null reads as an empty one), else TypeError."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TypeError(f"{what} of type {type(value).__name__}")
    return value


def _not_a_completion(exc: Exception, data: dict[str, Any], endpoint: str) -> LLMResponseError:
    return LLMResponseError(
        f"not a chat completion ({exc!r})", endpoint=endpoint, body=json.dumps(data)[:500]
    )


def _tool_calls(value: Any) -> tuple[dict[str, Any], ...]:
    return tuple(c for c in value if isinstance(c, dict)) if isinstance(value, list) else ()


def parse_choices(data: dict[str, Any], endpoint: str) -> tuple[Choice, ...]:
    """The choices of a completion, sorted by index; a body that is not one raises a
    (retryable) LLMResponseError."""
    try:
        choices = []
        for i, c in enumerate(data["choices"]):
            message = _fields(c.get("message"), "message")
            choices.append(
                Choice(
                    index=int(c.get("index", i)),
                    text=_text(message.get("content")),
                    finish_reason=c.get("finish_reason"),
                    logprobs=c.get("logprobs"),
                    reasoning=_reasoning(message),
                    tool_calls=_tool_calls(message.get("tool_calls")),
                    refusal=message.get("refusal"),
                    message=message,
                )
            )
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise _not_a_completion(exc, data, endpoint) from None
    return tuple(sorted(choices, key=lambda c: c.index))


def token_count(value: Any) -> int | None:
    """A token count: a non-negative whole number (``12``, ``12.0`` or ``"12"``), else None."""
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value) if value >= 0 and float(value).is_integer() else None


def _milliseconds(v: Any) -> float | None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
    return float(v) if ok else None


def parse_timings(raw: Any) -> ServerTimings | None:
    """llama.cpp's ``timings`` object, or None when absent or malformed."""
    if not isinstance(raw, dict):
        return None
    prompt_ms, predicted_ms = (
        _milliseconds(raw.get("prompt_ms")),
        _milliseconds(raw.get("predicted_ms")),
    )
    if prompt_ms is None or predicted_ms is None:
        return None
    return ServerTimings(
        prompt_ms,
        predicted_ms,
        token_count(raw.get("cache_n")),
        token_count(raw.get("prompt_n")),
    )


def parse_usage(raw: Any, timings: Any = None) -> Usage | None:
    """``usage`` as the server reported it (with the cached part of the prompt and the
    server's ``timings`` where it sends them), or None when absent or malformed (a count that
    is not a non-negative whole number: the caller then estimates, rather than trust a budget
    to it)."""
    if not isinstance(raw, dict):
        return None
    prompt, completion = (
        token_count(raw.get("prompt_tokens")),
        token_count(raw.get("completion_tokens")),
    )
    if prompt is None or completion is None:
        return None
    details = raw.get("completion_tokens_details")
    reasoning = token_count(details.get("reasoning_tokens")) if isinstance(details, dict) else None
    prompt_details = raw.get("prompt_tokens_details")
    cached = (
        token_count(prompt_details.get("cached_tokens"))
        if isinstance(prompt_details, dict)
        else None
    )
    timed = parse_timings(timings)
    if cached is None and timed is not None:
        cached = timed.cache_n
    if cached is not None:
        cached = min(cached, prompt)
    return Usage(
        prompt, completion, reasoning_tokens=reasoning, cached_tokens=cached, timings=timed
    )


def parse_chunk(data: dict[str, Any], endpoint: str = "") -> list[StreamEvent]:
    """The events of one streamed chunk: one per choice delta, then the usage (if any); a
    chunk that is not one (``choices`` not a list, a delta not an object) raises a
    LLMResponseError."""
    events = []
    try:
        choices = data.get("choices") or []
        if not isinstance(choices, list):
            raise TypeError(f"choices of type {type(choices).__name__}")
        for c in choices:
            if not isinstance(c, dict):
                continue
            delta = _fields(c.get("delta"), "delta")
            events.append(
                StreamEvent(
                    index=int(c.get("index", 0)),
                    role=delta.get("role"),
                    delta=_text(delta.get("content")),
                    reasoning=_reasoning(delta) or "",
                    tool_calls=_tool_calls(delta.get("tool_calls")),
                    finish_reason=c.get("finish_reason"),
                    logprobs=c.get("logprobs"),
                    raw=data,
                )
            )
    except (TypeError, ValueError) as exc:
        raise _not_a_completion(exc, data, endpoint) from None
    usage = parse_usage(data.get("usage"), data.get("timings"))
    if usage is not None:
        events.append(StreamEvent(usage=usage, raw=data))
    return events


def completion_events(data: dict[str, Any], endpoint: str) -> list[StreamEvent]:
    """A whole completion (a server that answered a streamed request with one JSON body) as
    the events its stream would have carried: per choice its role, content, reasoning, tool
    calls and finish reason in one event, then the usage."""
    events = [
        StreamEvent(
            index=c.index,
            role=str(c.message.get("role") or "assistant"),
            delta=c.text,
            reasoning=c.reasoning or "",
            tool_calls=tuple({"index": i, **call} for i, call in enumerate(c.tool_calls)),
            finish_reason=c.finish_reason,
            raw=data,
        )
        for c in parse_choices(data, endpoint)
    ]
    usage = parse_usage(data.get("usage"), data.get("timings"))
    if usage is not None:
        events.append(StreamEvent(usage=usage, raw=data))
    return events
