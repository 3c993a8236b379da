"""Every prompt template of the project, in one place.

Each builder returns OpenAI chat messages. Experience texts are inserted verbatim; the guided
solve prompt lists pitfalls first (as the reference implementation did) and frames propositions
as claims to verify before use, since the distiller never sees a gold answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rse_fast.llm.types import Message

SOLVE_SYSTEM = (
    "You are a careful problem solver. Reason step by step, check your work, and end with the "
    "final answer written as \\boxed{answer}."
)

GUIDED_HEADER = "Notes from earlier attempts at this same problem (they may contain mistakes):"
PITFALLS_HEADER = "Pitfalls to avoid (errors and dead ends seen before):"
PROPOSITIONS_HEADER = "Propositions found before (unverified: check each one before relying on it):"


def render_experiences(negatives: Sequence[str], positives: Sequence[str]) -> str:
    """The bank as prompt text; empty when both lists are empty."""
    if not negatives and not positives:
        return ""
    parts = [GUIDED_HEADER]
    if negatives:
        parts.append(PITFALLS_HEADER + "\n" + "\n".join(f"- {t}" for t in negatives))
    if positives:
        parts.append(PROPOSITIONS_HEADER + "\n" + "\n".join(f"- {t}" for t in positives))
    return "\n\n".join(parts)


def solve_messages(problem: str, experience_block: str = "") -> list[Message]:
    """Round r's prompt u_r = Prompt(x, E_pos, E_neg); plain sampling when the bank is empty."""
    user = f"Problem:\n{problem.strip()}"
    if experience_block:
        user += f"\n\n{experience_block}"
    user += "\n\nSolve the problem. Put the final answer in \\boxed{}."
    return [{"role": "system", "content": SOLVE_SYSTEM}, {"role": "user", "content": user}]


DISTILL_SYSTEM = (
    "You review one attempted solution of a problem. You do not know the correct answer, and the "
    "attempt may be wrong: treat every claim in it as an unverified hypothesis and check it "
    "yourself. Reply with JSON only."
)


def distill_messages(problem: str, attempt: str, max_items: int, max_words: int) -> list[Message]:
    """Distil(x, ω) → {"positive": [...], "negative": [...]}."""
    user = (
        f"Problem:\n{problem.strip()}\n\nAttempted solution:\n{attempt.strip()}\n\n"
        "Extract reusable experience for future attempts at this same problem:\n"
        '- "positive": propositions, lemmas or intermediate results from the attempt that you '
        "checked and found correct;\n"
        '- "negative": mistakes, false assumptions, fatal flaws or dead ends you found in it.\n'
        f"Each item: one atomic statement of at most {max_words} words, self-contained (restate "
        'what it is about; never say "the attempt" or "step 3"). At most '
        f"{max_items} items per list; an empty list is fine.\n"
        'Reply with JSON only: {"positive": ["..."], "negative": ["..."]}'
    )
    return [{"role": "system", "content": DISTILL_SYSTEM}, {"role": "user", "content": user}]


def distill_schema(max_items: int) -> dict[str, Any]:
    """``response_format`` for servers with JSON-schema constrained decoding."""
    items = {"type": "array", "items": {"type": "string"}, "maxItems": max_items}
    return {
        "type": "json_schema",
        "json_schema": {
            "name": "experiences",
            "strict": True,
            "schema": {
                "type": "object",
                "properties": {"positive": items, "negative": items},
                "required": ["positive", "negative"],
                "additionalProperties": False,
            },
        },
    }


# -- judging ---------------------------------------------------------------------------------
JUDGE_SYSTEM = (
    "You grade solutions. You do not know the reference answer. Check the reasoning yourself "
    "and reply with JSON only."
)


def judge_messages(problem: str, response: str, partial: bool = False) -> list[Message]:
    """Pointwise score 1-10 of a full response, or of a partial solution's promise."""
    what = (
        "a partial solution (judge whether it is correct so far and on a good track)"
        if partial
        else "a solution"
    )
    user = (
        f"Problem:\n{problem.strip()}\n\nHere is {what}:\n{response.strip()}\n\n"
        "Rate it from 1 (wrong or useless) to 10 (certainly correct and complete). "
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


def rubric_messages(task: str, response: str, rubric: Sequence[str]) -> list[Message]:
    """Open-ended tasks: a judge checks the response against a rubric / checklist."""
    items = "\n".join(f"- {r}" for r in rubric) or "- helpful, correct, complete, well written"
    user = (
        f"Task:\n{task.strip()}\n\nResponse:\n{response.strip()}\n\nCriteria:\n{items}\n\n"
        "Rate how well the response meets the criteria from 1 (not at all) to 10 (fully). "
        'Reply with JSON only: {"score": <integer 1-10>}'
    )
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]


# -- step-wise search (beam search, particle filtering) --------------------------------------
def next_step_messages(problem: str, steps: Sequence[str]) -> list[Message]:
    """Ask for exactly one more reasoning step after the steps so far (works on any server:
    no assistant prefill needed)."""
    done = "\n\n".join(steps) if steps else "(no steps yet)"
    user = (
        f"Problem:\n{problem.strip()}\n\nSolution so far:\n{done}\n\n"
        "Write only the next step of the solution, in one short paragraph. If the solution is "
        "complete after this step, end the step with the final answer in \\boxed{}."
    )
    return [{"role": "system", "content": SOLVE_SYSTEM}, {"role": "user", "content": user}]


# -- refinement ------------------------------------------------------------------------------
def critique_messages(problem: str, response: str) -> list[Message]:
    user = (
        f"Problem:\n{problem.strip()}\n\nProposed solution:\n{response.strip()}\n\n"
        "Check this solution carefully. List its mistakes and gaps concisely; if it is fully "
        "correct, say so."
    )
    return [
        {"role": "system", "content": JUDGE_SYSTEM.replace(" and reply with JSON only", "")},
        {"role": "user", "content": user},
    ]


def revise_messages(problem: str, response: str, critique: str) -> list[Message]:
    user = (
        f"Problem:\n{problem.strip()}\n\nPrevious solution:\n{response.strip()}\n\n"
        f"Review of it:\n{critique.strip()}\n\nWrite an improved, complete solution that fixes "
        "the problems found (keep what was right). Put the final answer in \\boxed{}."
    )
    return [{"role": "system", "content": SOLVE_SYSTEM}, {"role": "user", "content": user}]


# -- fusion ----------------------------------------------------------------------------------
def fusion_messages(problem: str, candidates: Sequence[str]) -> list[Message]:
    listed = "\n\n".join(f"### Candidate {i + 1}\n{c.strip()}" for i, c in enumerate(candidates))
    user = (
        f"Problem:\n{problem.strip()}\n\nSeveral independent attempts follow. They may disagree "
        f"and any of them may be wrong.\n\n{listed}\n\nSynthesise the best possible solution: "
        "compare the attempts, keep the correct reasoning, fix the errors, and put the final "
        "answer in \\boxed{}."
    )
    return [{"role": "system", "content": SOLVE_SYSTEM}, {"role": "user", "content": user}]
