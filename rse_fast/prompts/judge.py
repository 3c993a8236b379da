"""Verifiers and graders: the pointwise judge of the methods, and the rubric graders of the
open-ended benchmarks (HealthBench met / not met, WritingBench 1-10 with level descriptors)."""

from __future__ import annotations

from typing import Any

from rse_fast.llm.types import Message

JUDGE_SYSTEM = (
    "You grade solutions. You do not know the reference answer. Check the reasoning yourself "
    "and reply with JSON only."
)


def judge_messages(
    problem: str, response: str, partial: bool = False, open_ended: bool = False
) -> list[Message]:
    """Pointwise score 1-10 of a full response, or of a partial solution's promise."""
    noun = "response" if open_ended else "solution"
    what = (
        f"a partial {noun} (judge whether it is correct so far and on a good track)"
        if partial
        else f"a {noun}"
    )
    scale = (
        "Rate it from 1 (inaccurate, unhelpful or unsafe) to 10 (accurate, complete and as "
        "helpful as possible). "
        if open_ended
        else "Rate it from 1 (wrong or useless) to 10 (certainly correct and complete). "
    )
    head = "Task" if open_ended else "Problem"
    user = (
        f"{head}:\n{problem.strip()}\n\nHere is {what}:\n{response.strip()}\n\n{scale}"
        'Reply with JSON only: {"score": <integer 1-10>}'
    )
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]


JUDGE_SCHEMA: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {
        "name": "score",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 10}},
            "required": ["score"],
            "additionalProperties": False,
        },
    },
}


# -- grading open-ended tasks as their benchmarks do -------------------------------------------
GRADER_SYSTEM = (
    "You grade a response against one criterion written by experts. Judge only that "
    "criterion, literally as written, and reply with JSON only."
)

MET_SCHEMA: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {
        "name": "criterion",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"met": {"type": "boolean"}},
            "required": ["met"],
            "additionalProperties": False,
        },
    },
}


def criterion_met_messages(conversation: str, response: str, criterion: str) -> list[Message]:
    """HealthBench-style: does the response do what the criterion describes? A criterion may
    describe something bad (it then carries negative points); the grader answers whether the
    response does it, not whether it is good."""
    user = (
        f"Conversation:\n{conversation.strip()}\n\nFinal response to grade:\n"
        f"{response.strip()}\n\nCriterion:\n{criterion.strip()}\n\n"
        "Does the response meet this criterion, that is, does it do what the criterion "
        "describes? Some criteria describe mistakes or harmful behaviour: answer true when the "
        "response shows that behaviour. A criterion listing several things is met only when "
        'all of them hold. Reply with JSON only: {"met": true} or {"met": false}'
    )
    return [{"role": "system", "content": GRADER_SYSTEM}, {"role": "user", "content": user}]


RUBRIC_GRADER_SYSTEM = (
    "You grade a response against a numbered list of criteria written by experts. Judge each "
    "criterion on its own, literally as written, and reply with JSON only."
)


def rubric_met_schema(count: int) -> dict[str, Any]:
    """``{"met": [bool × count]}``: one verdict per criterion, in the rubric's order."""
    verdicts = {"type": "array", "items": {"type": "boolean"}, "minItems": count,
                "maxItems": count}  # fmt: skip
    return {
        "type": "json_schema",
        "json_schema": {
            "name": "rubric",
            "strict": True,
            "schema": {
                "type": "object",
                "properties": {"met": verdicts},
                "required": ["met"],
                "additionalProperties": False,
            },
        },
    }


def rubric_met_messages(conversation: str, response: str, criteria: list[str]) -> list[Message]:
    """Every met / not-met criterion of a rubric in one call: the prompt (conversation and
    response) is read once instead of once per criterion."""
    listed = "\n".join(f"{k}. {text.strip()}" for k, text in enumerate(criteria, 1))
    user = (
        f"Conversation:\n{conversation.strip()}\n\nFinal response to grade:\n"
        f"{response.strip()}\n\nCriteria:\n{listed}\n\n"
        "For each criterion, in order, does the response do what it describes? Some criteria "
        "describe mistakes or harmful behaviour: answer true when the response shows that "
        "behaviour. A criterion listing several things is met only when all of them hold. "
        f'Reply with JSON only: {{"met": [...]}} holding exactly {len(criteria)} '
        "true/false values, the first for criterion 1."
    )
    return [{"role": "system", "content": RUBRIC_GRADER_SYSTEM}, {"role": "user", "content": user}]


def criterion_scale_messages(
    task: str, response: str, criterion: str, levels: dict[str, str]
) -> list[Message]:
    """WritingBench-style: one criterion scored 1-10 with the benchmark's level descriptors."""
    ladder = "\n".join(f"- {band}: {text}" for band, text in levels.items())
    user = (
        f"Writing task:\n{task.strip()}\n\nResponse to grade:\n{response.strip()}\n\n"
        f"Criterion:\n{criterion.strip()}\n\nScore levels:\n{ladder}\n\n"
        "Score the response on this criterion from 1 to 10, using the level whose "
        'description fits it best. Reply with JSON only: {"score": <integer 1-10>}'
    )
    return [{"role": "system", "content": GRADER_SYSTEM}, {"role": "user", "content": user}]
