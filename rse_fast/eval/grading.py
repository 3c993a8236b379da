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
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rse_fast.errors import LLMError
from rse_fast.llm.client import LLMClient
from rse_fast.methods.judge import parse_score
from rse_fast.methods.types import Problem
from rse_fast.prompts import (
    JUDGE_SCHEMA,
    MET_SCHEMA,
    criterion_met_messages,
    criterion_scale_messages,
)
from rse_fast.util.tasks import gather_or_cancel


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


@dataclass
class RubricGrader:
    """Grades responses against a problem's criteria on ``client`` (the grader endpoint).

    ``identity`` names the grader (endpoint and model) so a report can tell a distinct grader
    from the verifier grading itself."""

    client: LLMClient
    temperature: float = 0.7
    max_tokens: int = 32
    retries: int = 1
    parallel: int = 8  # grader calls in flight, over every reading this grader runs
    garbage: int = field(default=0, init=False)
    _gate: asyncio.Semaphore | None = field(default=None, init=False, repr=False)

    @property
    def identity(self) -> str:
        return self.client.identity

    async def grade(self, problem: Problem, response: str, seed: int) -> float:
        """One reading of ``response`` in [0, 1], NaN if the grader failed on a criterion."""
        return (await self.grade_both(problem, response, seed))[0]

    async def grade_both(self, problem: Problem, response: str, seed: int) -> tuple[float, float]:
        """One reading, clipped to [0, 1] and unclipped (the same for 1-10 scales)."""
        criteria: list[Criterion] = problem.meta.get("rubric") or []
        if not criteria:
            raise ValueError(f"problem {problem.id}: no rubric to grade against")
        if self._gate is None:
            self._gate = asyncio.Semaphore(self.parallel)
        gate = self._gate
        scaled = all(c.levels for c in criteria)

        async def one(k: int, c: Criterion) -> Any:
            async with gate:
                return await self._criterion(problem, response, c, scaled, seed * 1000 + k)

        verdicts = await gather_or_cancel(one(k, c) for k, c in enumerate(criteria))
        if any(v is None for v in verdicts):
            self.garbage += 1
            return math.nan, math.nan
        if scaled:
            score = scale_score(verdicts)
            return score, score
        return points_score(criteria, verdicts), points_score(criteria, verdicts, clip=False)

    async def criterion_met(
        self, problem: Problem, response: str, criterion: Criterion, seed: int
    ) -> bool | None:
        """One reading of one met/not-met criterion (None: the grader gave no verdict)."""
        value = await self._criterion(problem, response, criterion, False, seed)
        return None if value is None else bool(value)

    async def _criterion(
        self, problem: Problem, response: str, c: Criterion, scaled: bool, seed: int
    ) -> bool | float | None:
        if scaled:
            messages = criterion_scale_messages(
                problem.transcript, response, c.text, c.levels or {}
            )
            schema = JUDGE_SCHEMA
        else:
            messages = criterion_met_messages(problem.transcript, response, c.text)
            schema = MET_SCHEMA
        for attempt in range(self.retries + 1):
            try:
                reply = await self.client.chat_json(
                    messages,
                    schema,
                    role="grade",
                    temperature=self.temperature,
                    max_tokens=self.max_tokens,
                    seed=seed + 7919 * attempt,
                )
            except LLMError:
                continue
            value = parse_score(reply.text) if scaled else parse_met(reply.text)
            if value is not None:
                return value
        return None
