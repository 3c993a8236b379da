"""Verifiers: an LLM judge (pointwise 1-10 through a JSON schema) and a reward-model endpoint,
and the per-run scorer that judges each distinct candidate once.

A judge reply that yields no score is *garbage*: scored None (NaN in a pool), never fatal, and
counted per run by the method that asked.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Protocol

from rse_fast.errors import BudgetExhaustedError, LLMError
from rse_fast.llm.client import LLMClient
from rse_fast.llm.routing import Endpoint, EndpointPool
from rse_fast.llm.transport import Timeouts, Transport, read_json
from rse_fast.llm.types import Usage
from rse_fast.prompts import JUDGE_SCHEMA, judge_messages

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


@dataclass(frozen=True)
class ScoreRequest:
    """One candidate to score, and how: a partial solution's promise or a full response."""

    problem: str
    response: str
    partial: bool = False
    open_ended: bool = False
    seed: int | None = None
    task: str | None = None


class Verifier(Protocol):
    """What scores a candidate: an LLM judge, a reward model, or your own."""

    async def score(
        self,
        client: LLMClient,
        problem: str,
        response: str,
        *,
        partial: bool = ...,
        open_ended: bool = ...,
        seed: int | None = ...,
        task: str | None = ...,
    ) -> float | None: ...


class VerifierBase:
    """The :class:`Verifier` call, gathered into one :class:`ScoreRequest` for ``judge``."""

    async def score(
        self,
        client: LLMClient,
        problem: str,
        response: str,
        *,
        partial: bool = False,
        open_ended: bool = False,
        seed: int | None = None,
        task: str | None = None,
    ) -> float | None:
        request = ScoreRequest(problem, response, partial, open_ended, seed, task)
        return await self.judge(client, request)

    async def judge(self, client: LLMClient, request: ScoreRequest) -> float | None:
        raise NotImplementedError


@dataclass
class LLMJudge(VerifierBase):
    """Pointwise judge. ``client`` None means: the method's own client (same model); another
    client is used through a view that books into the run's ledger and draws on its cap."""

    client: LLMClient | None = None
    max_tokens: int = 64
    use_schema: bool = True

    async def judge(self, client: LLMClient, request: ScoreRequest) -> float | None:
        judge = self.client.metered_like(client) if self.client else client
        messages = judge_messages(
            request.problem, request.response, request.partial, request.open_ended
        )
        params: dict[str, Any] = dict(
            role="judge",
            task=request.task,
            temperature=0.0,
            max_tokens=self.max_tokens,
            seed=request.seed,
        )
        try:
            reply = await (
                judge.chat_json(messages, JUDGE_SCHEMA, **params)
                if self.use_schema
                else judge.chat(messages, **params)
            )
        except (LLMError, BudgetExhaustedError):  # failed, or refused by the cap: no score
            return None
        return parse_score(reply.text)


@dataclass
class HTTPRewardModel(VerifierBase):
    """A scoring HTTP API: POST ``{"prompt": ..., "response": ...}`` → ``{"score": float}``.

    It goes through the project's one transport (pooled connections, timeouts, retries with
    backoff on connection errors and 429/5xx); a call that still fails, or a reply without a
    number, scores None. Its tokens are estimated from text length, reserved on the run's cap
    before the call (a refusal scores None, as a refused judge call does) and booked under the
    ``judge`` role with the call's latency."""

    url: str
    timeout_s: float = 60.0
    api_key: str | None = None
    max_concurrency: int = 64
    _transport: Transport | None = field(default=None, init=False, repr=False)

    @property
    def transport(self) -> Transport:
        if self._transport is None:
            endpoint = Endpoint(self.url, self.api_key, self.max_concurrency, versioned=False)
            timeouts = Timeouts(connect_s=min(10.0, self.timeout_s), total_s=self.timeout_s)
            self._transport = Transport(EndpointPool([endpoint]), timeouts)
        return self._transport

    async def judge(self, client: LLMClient, request: ScoreRequest) -> float | None:
        tokens = client.count_tokens(request.problem) + client.count_tokens(request.response)
        body = {"prompt": request.problem, "response": request.response}
        usage = Usage(tokens, 1, "estimated")
        value: float | None = None
        try:
            with client.metered_outside("judge", usage, self.url, request.task):
                data = await self.transport.post("", body, read_json)
                value = float(data["score"])
        except (LLMError, BudgetExhaustedError, ValueError, KeyError, TypeError):
            value = None
        if value is not None and not math.isfinite(value):
            value = None
        return value

    async def close(self) -> None:
        if self._transport is not None:
            await self._transport.close()


def normalise(text: str) -> str:
    """What makes two candidates the same for judging: their text, whitespace collapsed."""
    return " ".join(text.split())


@dataclass
class DistinctScorer:
    """Judges each distinct candidate of one run once: exact duplicates after normalisation
    (and concurrent requests for the same text) share one judge call. A reuse is booked in
    the ledger as a zero-token ``judge`` record with source ``reused``, so the saving shows."""

    judge: Verifier
    client: LLMClient
    problem: str
    open_ended: bool = False
    calls: int = 0
    reused: int = 0
    garbage: int = 0
    _scores: dict[tuple[str, bool], asyncio.Future[float]] = field(default_factory=dict)
    _claimed: set[tuple[str, bool]] = field(default_factory=set)

    @property
    def distinct(self) -> int:
        """Candidates booked for a real judge call so far."""
        return len(self._claimed)

    def claim(self, text: str, partial: bool = False) -> bool:
        """Book ``text`` for judging now (before its ``score`` call runs): True if it is the
        first of its kind, so its judging will be a real call; False if it will be a reuse."""
        key = (normalise(text), partial)
        if key in self._claimed:
            return False
        self._claimed.add(key)
        return True

    async def score(
        self, text: str, *, partial: bool = False, seed: int | None = None, task: str | None = None
    ) -> float:
        """The judge's score of ``text`` (NaN for garbage)."""
        key = (normalise(text), partial)
        known = self._scores.get(key)
        if known is not None:
            self.reused += 1
            self.client.ledger.record_usage(
                "judge", Usage(0, 0, "reused"), 0.0, "reused", task=task
            )
            return await asyncio.shield(known)
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._scores[key] = future
        self.calls += 1
        try:
            value = await self.judge.score(
                self.client,
                self.problem,
                text,
                partial=partial,
                open_ended=self.open_ended,
                seed=seed,
                task=task,
            )
        except BaseException as exc:
            del self._scores[key]
            future.set_exception(exc)
            future.exception()  # retrieved: waiters re-raise it, nobody logs it as lost
            raise
        if value is None:
            self.garbage += 1
        result = math.nan if value is None else float(value)
        future.set_result(result)
        return result

    def counts(self) -> dict[str, int]:
        return {
            "judge_calls": self.calls,
            "judge_reused": self.reused,
            "judge_garbage": self.garbage,
        }
