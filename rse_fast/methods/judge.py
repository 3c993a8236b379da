"""Verifiers: an LLM judge (pointwise 1-10 through a JSON schema) and a reward-model endpoint.

A judge reply that yields no score is *garbage*: counted, scored None, never fatal.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from rse_fast.errors import LLMError
from rse_fast.llm.client import LLMClient
from rse_fast.llm.types import Usage
from rse_fast.prompts import JUDGE_SCHEMA, judge_messages, rubric_messages

_SCORE = re.compile(r'"?score"?\s*[:=]\s*(\d+(?:\.\d+)?)', re.IGNORECASE)


def parse_score(text: str, lo: float = 1, hi: float = 10) -> float | None:
    """The score in a judge reply (JSON, "score: N", or a lone number), or None."""
    try:
        data = json.loads(text)
        if isinstance(data, dict) and isinstance(data.get("score"), (int, float)):
            value = float(data["score"])
            return value if lo <= value <= hi else None
    except ValueError:
        pass
    m = _SCORE.search(text) or re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*", text)
    if m:
        value = float(m.group(1))
        return value if lo <= value <= hi else None
    return None


@dataclass
class LLMJudge:
    """Pointwise judge. ``client`` None means: the method's own client (same model)."""

    client: LLMClient | None = None
    max_tokens: int = 64
    use_schema: bool = True
    garbage: int = field(default=0, init=False)

    async def score(
        self,
        client: LLMClient,
        problem: str,
        response: str,
        *,
        partial: bool = False,
        rubric: Sequence[str] | None = None,
        seed: int | None = None,
        task: str | None = None,
    ) -> float | None:
        judge = self.client.with_ledger(client.ledger) if self.client else client
        messages = (
            rubric_messages(problem, response, rubric)
            if rubric is not None
            else judge_messages(problem, response, partial)
        )
        params: dict[str, Any] = dict(
            role="judge", task=task, temperature=0.0, max_tokens=self.max_tokens, seed=seed
        )
        try:
            reply = await (
                judge.chat_json(messages, JUDGE_SCHEMA, **params)
                if self.use_schema
                else judge.chat(messages, **params)
            )
        except LLMError:
            self.garbage += 1
            return None
        value = parse_score(reply.text)
        if value is None:
            self.garbage += 1
        return value


@dataclass
class HTTPRewardModel:
    """A scoring HTTP API: POST ``{"prompt": ..., "response": ...}`` → ``{"score": float}``.
    Its tokens are estimated from text length and booked under the ``judge`` role."""

    url: str
    timeout_s: float = 60.0
    garbage: int = field(default=0, init=False)

    async def score(
        self,
        client: LLMClient,
        problem: str,
        response: str,
        *,
        task: str | None = None,
        **_: object,
    ) -> float | None:
        tokens = client.count_tokens(problem) + client.count_tokens(response)
        try:
            async with (
                aiohttp.ClientSession() as session,
                session.post(
                    self.url,
                    json={"prompt": problem, "response": response},
                    timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                ) as resp,
            ):
                data = await resp.json(content_type=None)
            value = float(data["score"])
        except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, TypeError):
            self.garbage += 1
            value = None
        client.ledger.record_usage("judge", Usage(tokens, 1, "estimated"), 0.0, self.url, task=task)
        return value
