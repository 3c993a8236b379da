"""What the scripted server says and how it fails: replies (content, a reasoning trace, tool
calls, logprobs), the rules that pick them, the faults it injects, and its error bodies and
word counts (its usage counts words). The server itself is :mod:`rse_fast.testing.server`."""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

FaultKind = Literal[
    "status",
    "slow",
    "truncate",
    "malformed",
    "reset",
    "drop_stream",
    "ignore_n",
    "no_usage",
    "rst_stream",
    "close_stream",
    "stall_stream",
    "json_for_stream",
    "deep_json",
]


@dataclass(frozen=True)
class Reply:
    """One scripted choice: content, an optional reasoning trace (sent in ``reasoning_field``),
    tool calls (``{"name", "arguments"}`` dicts; ids are added), and the finish reason."""

    content: str = ""
    reasoning: str | None = None
    tool_calls: tuple[dict[str, Any], ...] = ()
    finish_reason: str | None = None
    reasoning_field: str = "reasoning_content"
    #: the probability the model gave each content token it wrote: what ``logprobs`` reports
    #: when asked (the chosen token first, then ``top_logprobs - 1`` alternatives sharing the
    #: rest), as llama-server and vLLM shape it
    token_probability: float = 0.9

    def logprobs(self, top: int) -> dict[str, Any]:
        """The choice's ``logprobs`` object: one entry per content word (a token here)."""
        p = min(max(self.token_probability, 1e-6), 1 - 1e-6)
        rest = math.log((1 - p) / max(1, top - 1))
        entries = []
        for k, word in enumerate(self.content.split(" ")):
            token = word if k == 0 else " " + word
            alternatives = [{"token": f"<alt{j}>", "logprob": rest} for j in range(top - 1)]
            entries.append(
                {
                    "token": token,
                    "logprob": math.log(p),
                    "bytes": list(token.encode()),
                    "top_logprobs": [{"token": token, "logprob": math.log(p)}, *alternatives],
                }
            )
        return {"content": entries}

    @property
    def finish(self) -> str:
        return self.finish_reason or ("tool_calls" if self.tool_calls else "stop")

    def message(self, index: int) -> dict[str, Any]:
        msg: dict[str, Any] = {
            "role": "assistant",
            "content": None if self.tool_calls and not self.content else self.content,
        }
        if self.reasoning is not None:
            msg[self.reasoning_field] = self.reasoning
        if self.tool_calls:
            msg["tool_calls"] = [
                {
                    "id": f"call_{index}_{k}",
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c.get("arguments", "{}")},
                }
                for k, c in enumerate(self.tool_calls)
            ]
        return msg

    @property
    def tokens(self) -> int:
        calls = " ".join(
            str(c.get("name", "")) + str(c.get("arguments", "")) for c in self.tool_calls
        )
        return word_count(" ".join([self.reasoning or "", self.content, calls]))

    def cut(self, limit: int | None) -> Reply:
        """What a server sends when generation stops at ``limit`` tokens (the request's
        ``max_tokens``): the first ``limit`` of them, reasoning before content, an unfinished
        tool call dropped, and finish_reason ``length``."""
        if limit is None or self.tokens <= limit:
            return self
        left = max(1, limit)
        reasoning = None
        if self.reasoning is not None:
            reasoning = _first_words(self.reasoning, left)
            left -= len(reasoning.split())
        content = _first_words(self.content, left) if left > 0 else ""
        return Reply(
            content=content,
            reasoning=reasoning,
            finish_reason="length",
            reasoning_field=self.reasoning_field,
        )


def _first_words(text: str, k: int) -> str:
    """``text`` up to the end of its ``k``-th word, its spacing kept."""
    for i, m in enumerate(re.finditer(r"\S+", text)):
        if i + 1 == k:
            return text[: m.end()]
    return text


ReplyFn = Callable[[dict[str, Any], int], "str | Reply"]


@dataclass(frozen=True)
class Rule:
    """``match``: regex searched in the whole prompt text, or a predicate on the request body.
    ``reply``: fixed text, or ``fn(body, choice_index) -> text``."""

    match: str | re.Pattern[str] | Callable[[dict[str, Any]], bool]
    reply: str | Reply | ReplyFn

    def matches(self, body: dict[str, Any], prompt: str) -> bool:
        if callable(self.match) and not isinstance(self.match, re.Pattern):
            return bool(self.match(body))
        return re.search(self.match, prompt) is not None


@dataclass(frozen=True)
class Fault:
    """One injected fault. ``status`` faults answer the OpenAI error shape
    ``{"error": {"message", "type", "param", "code"}}``, with ``message`` and ``param`` as
    given (a real server names the field it rejects, e.g. ``param="n"``)."""

    kind: FaultKind
    status: int = 500
    retry_after: float | None = None
    delay_s: float = 0.0
    message: str | None = None
    param: str | None = None
    #: stream faults: chunks sent before the stream breaks. ``drop_stream`` aborts the
    #: connection; ``rst_stream`` resets it (TCP RST: SO_LINGER 0); ``close_stream`` ends the
    #: response cleanly before ``[DONE]``; ``stall_stream`` stops sending, connection open.
    #: ``json_for_stream`` answers a streamed request with one JSON body (as some gateways do).
    #: ``deep_json`` answers (or, streamed, sends one chunk) nested past any JSON parser's
    #: recursion limit: well-formed, and unreadable all the same.
    after_chunks: int = 2
    stall_s: float = 3600.0


def error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    """The error object vLLM/SGLang send: type by status class, ``code`` a string or null."""
    kind = "invalid_request_error" if 400 <= status < 500 else "server_error"
    if status == 401:
        kind = "authentication_error"
    elif status == 429:
        kind = "rate_limit_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": str(status)}}


#: Nesting of a ``deep_json`` reply: past CPython's default recursion limit (1000).
DEEP_NESTING = 5000

FaultPlan = Callable[[int, dict[str, Any]], "Fault | None"]


def prompt_text(body: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content") or "") for m in body.get("messages") or [])


def word_count(text: str) -> int:
    return max(1, len(text.split()))


def fault_mix(probabilities: dict[Fault, float], seed: int = 0) -> FaultPlan:
    """A seeded random plan: each request draws at most one fault with the given odds."""
    rng = random.Random(seed)
    items = list(probabilities.items())

    def plan(i: int, body: dict[str, Any]) -> Fault | None:
        x = rng.random()
        for fault, p in items:
            if x < p:
                return fault
            x -= p
        return None

    return plan
