"""Grading open-ended responses as their benchmarks' authors do.

HealthBench: every criterion is judged *met* or *not met*; a criterion may describe behaviour to
penalise and then carries negative points. score = Σ points of the met criteria ÷ Σ positive
points, clipped to [0, 1]. WritingBench: every criterion is scored 1-10 against its level
descriptors; the response's score is their mean, mapped to [0, 1] as (s − 1)/9.

A reading is one grading of one response. Readings are sampled (``temperature`` > 0, a seed
per reading) so that two readings of the same response are independent draws of the grader:
what the bias-corrected oracle needs to estimate the grader's noise. A reading with any
criterion the grader could not answer (after ``retries``) is NaN: counted as garbage, never
guessed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from rse_fast.errors import LLMError
from rse_fast.llm.client import LLMClient
from rse_fast.llm.types import Message
from rse_fast.methods.judge import parse_score
from rse_fast.methods.types import Problem
from rse_fast.prompts import (
    JUDGE_SCHEMA,
    MET_SCHEMA,
    criterion_met_messages,
    criterion_scale_messages,
    rubric_met_messages,
    rubric_met_schema,
)


@dataclass(frozen=True, kw_only=True)
class Criterion:
    """One rubric line: its text, its signed points (HealthBench) or its 1-10 level
    descriptors (WritingBench)."""

    text: str
    points: float = 1.0
    levels: dict[str, str] | None = None


def points_score(criteria: Sequence[Criterion], met: Sequence[bool], clip: bool = True) -> float:
    """HealthBench's formula: Σ points of met criteria ÷ Σ positive points, clipped to [0, 1]
    (``clip=False``: the raw ratio, which negative points can push below 0; OpenAI's
    simple-evals averages these and clips only the mean)."""
    if len(criteria) != len(met):
        raise ValueError(f"{len(met)} verdicts for {len(criteria)} criteria")
    positive = sum(c.points for c in criteria if c.points > 0)
    if positive <= 0:
        raise ValueError("a points rubric needs at least one criterion with positive points")
    achieved = sum(c.points for c, m in zip(criteria, met, strict=True) if m)
    ratio = achieved / positive
    return min(1.0, max(0.0, ratio)) if clip else ratio


def scale_score(scores: Sequence[float]) -> float:
    """WritingBench: the mean criterion score on 1-10, mapped to [0, 1]."""
    if not scores:
        raise ValueError("no criterion scores")
    return (sum(scores) / len(scores) - 1.0) / 9.0


def parse_met(text: str) -> bool | None:
    """The verdict in a grader reply: JSON ``{"met": bool}``, or a lone true/false/yes/no."""
    try:
        data = json.loads(text)
        if isinstance(data, dict) and isinstance(data.get("met"), bool):
            return bool(data["met"])
    except ValueError:
        pass
    word = text.strip().strip(".").lower()
    return {"true": True, "yes": True, "false": False, "no": False}.get(word)


T = TypeVar("T")

#: how a grader reads a met / not-met rubric: one call per criterion (the benchmarks' way) or
#: the whole rubric in one call (the prompt is read once; its agreement with the per-criterion
#: reading is measured where it is used, ``eval.runner``'s reads check)
Reads = Literal["criterion", "rubric"]


def parse_met_list(text: str, count: int) -> list[bool] | None:
    """The verdicts in a whole-rubric reply: JSON ``{"met": [bool × count]}``, else None."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    met = data.get("met") if isinstance(data, dict) else None
    if isinstance(met, list) and len(met) == count and all(isinstance(m, bool) for m in met):
        return list(met)
    return None


def reading_seed(response: str, reading: int) -> int:
    """A reading's seed from the response's text, so the same text gets the same two readings
    in every record that holds it (and a grader's memo answers the repeats)."""
    digest = hashlib.sha256(response.encode("utf-8")).digest()
    return int.from_bytes(digest[:2], "big") * 2 + reading


@dataclass
class RubricGrader:
    """Grades responses against a problem's criteria on ``client`` (the grader endpoint).

    ``identity`` names the grader (endpoint and model) so a report can tell a distinct grader
    from the verifier grading itself. A reading is memoised by (problem, response, seed): the
    families that share a sample pool share their candidates' readings too."""

    client: LLMClient
    temperature: float = 0.7
    max_tokens: int = 32
    retries: int = 1
    parallel: int = 8  # readings in flight (each one call at a time): the server's slots
    reads: Reads = "criterion"  # 1-10 scales are always read criterion by criterion
    garbage: int = field(default=0, init=False)
    _gate: asyncio.Semaphore | None = field(default=None, init=False, repr=False)
    _memo: dict[tuple[str, str, int], asyncio.Future[list[bool | float | None]]] = field(
        default_factory=dict, init=False, repr=False
    )

    @property
    def identity(self) -> str:
        suffix = "" if self.reads == "criterion" else " (whole rubric per call)"
        return self.client.identity + suffix

    def reading_as(self, reads: Reads) -> RubricGrader:
        """The same grader on the same endpoint, reading the other way (the reads check)."""
        return dataclasses.replace(self, reads=reads)  # its own memo, gate and counts

    async def grade(self, problem: Problem, response: str, seed: int) -> float:
        """One reading of ``response`` in [0, 1], NaN if the grader failed on a criterion."""
        return (await self.grade_both(problem, response, seed))[0]

    async def grade_both(self, problem: Problem, response: str, seed: int) -> tuple[float, float]:
        """One reading, clipped to [0, 1] and unclipped (the same for 1-10 scales)."""
        criteria: list[Criterion] = problem.meta.get("rubric") or []
        verdicts = await self.verdicts(problem, response, seed)
        if any(v is None for v in verdicts):
            return math.nan, math.nan
        if all(c.levels for c in criteria):
            score = scale_score([float(v) for v in verdicts if v is not None])
            return score, score
        met = [bool(v) for v in verdicts]
        return points_score(criteria, met), points_score(criteria, met, clip=False)

    async def verdicts(
        self, problem: Problem, response: str, seed: int
    ) -> list[bool | float | None]:
        """One reading's verdict per criterion (None where the grader gave none); a reading
        already made is answered from the memo."""
        key = (problem.id, response, seed)
        if key not in self._memo:
            self._memo[key] = asyncio.ensure_future(self._verdicts(problem, response, seed))
        try:
            return await asyncio.shield(self._memo[key])
        except BaseException:
            if self._memo[key].done():
                self._memo.pop(key, None)  # a failed or cancelled reading is not remembered
            raise

    async def _verdicts(
        self, problem: Problem, response: str, seed: int
    ) -> list[bool | float | None]:
        criteria: list[Criterion] = problem.meta.get("rubric") or []
        if not criteria:
            raise ValueError(f"problem {problem.id}: no rubric to grade against")
        if self._gate is None:
            self._gate = asyncio.Semaphore(self.parallel)
        gate = self._gate
        scaled = all(c.levels for c in criteria)
        said: list[bool | float | None]
        if self.reads == "rubric" and not scaled:
            async with gate:
                met = await self._rubric(problem, response, criteria, seed)
            said = list(met) if met is not None else [None] * len(criteria)
        else:
            # one criterion after another on one slot: the conversation and response stay in
            # the server's prompt cache, so each later criterion prefills only its own text
            async with gate:
                said = [await self._criterion(problem, response, c, scaled, seed * 1000 + k)
                        for k, c in enumerate(criteria)]  # fmt: skip
        if any(v is None for v in said):
            self.garbage += 1
        return said

    async def criterion_met(
        self, problem: Problem, response: str, criterion: Criterion, seed: int
    ) -> bool | None:
        """One reading of one met/not-met criterion (None: the grader gave no verdict), read
        the way this grader reads a rubric."""
        if self.reads == "rubric":
            met = await self._rubric(problem, response, [criterion], seed)
            return None if met is None else met[0]
        value = await self._criterion(problem, response, criterion, False, seed)
        return None if value is None else bool(value)

    async def _rubric(
        self, problem: Problem, response: str, criteria: list[Criterion], seed: int
    ) -> list[bool] | None:
        messages = rubric_met_messages(problem.transcript, response, [c.text for c in criteria])
        schema = rubric_met_schema(len(criteria))
        # ~6 tokens a verdict, and room for the braces
        budget = max(self.max_tokens, 8 * len(criteria) + 16)
        return await self._ask(messages, schema, budget, seed,
                               lambda text: parse_met_list(text, len(criteria)))  # fmt: skip

    async def _criterion(
        self, problem: Problem, response: str, c: Criterion, scaled: bool, seed: int
    ) -> bool | float | None:
        if scaled:
            messages = criterion_scale_messages(
                problem.transcript, response, c.text, c.levels or {}
            )
            return await self._ask(messages, JUDGE_SCHEMA, self.max_tokens, seed, parse_score)
        messages = criterion_met_messages(problem.transcript, response, c.text)
        return await self._ask(messages, MET_SCHEMA, self.max_tokens, seed, parse_met)

    async def _ask(
        self,
        messages: list[Message],
        schema: dict[str, Any],
        max_tokens: int,
        seed: int,
        parse: Callable[[str], T | None],
    ) -> T | None:
        for attempt in range(self.retries + 1):
            try:
                reply = await self.client.chat_json(
                    messages,
                    schema,
                    role="grade",
                    temperature=self.temperature,
                    max_tokens=max_tokens,
                    seed=seed + 7919 * attempt,
                )
            except LLMError:
                continue
            value = parse(reply.text)
            if value is not None:
                return value
        return None
