"""Every prompt template of the project, in one place.

Each builder returns OpenAI chat messages. Experience texts are inserted verbatim; the guided
solve prompt lists pitfalls first (as the reference implementation did) and frames propositions
as claims to verify before use, since the distiller never sees a gold answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rse_fast.chat_types import Message

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
