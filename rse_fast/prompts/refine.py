"""Exploitation by rewriting: critique and revise (refinement), and fusion across candidates."""

from __future__ import annotations

from collections.abc import Sequence

from rse_fast.llm.types import Message
from rse_fast.prompts.common import framing, turns
from rse_fast.prompts.judge import JUDGE_SYSTEM


def critique_messages(problem: str, response: str, open_ended: bool = False) -> list[Message]:
    head, noun, _ = framing(open_ended)
    user = (
        f"{head}:\n{problem.strip()}\n\nProposed {noun}:\n{response.strip()}\n\n"
        f"Check this {noun} carefully. List its mistakes and gaps concisely; if it is fully "
        "correct, say so."
    )
    return [
        {"role": "system", "content": JUDGE_SYSTEM.replace(" and reply with JSON only", "")},
        {"role": "user", "content": user},
    ]


def revise_messages(
    problem: str, response: str, critique: str, open_ended: bool = False
) -> list[Message]:
    head, noun, _ = framing(open_ended)
    finish = "" if open_ended else " Put the final answer in \\boxed{}."
    user = (
        f"{head}:\n{problem.strip()}\n\nPrevious {noun}:\n{response.strip()}\n\n"
        f"Review of it:\n{critique.strip()}\n\nWrite an improved, complete {noun} that fixes "
        f"the problems found (keep what was right).{finish}"
    )
    return turns(open_ended, user)


def fusion_messages(
    problem: str, candidates: Sequence[str], open_ended: bool = False
) -> list[Message]:
    head, noun, _ = framing(open_ended)
    listed = "\n\n".join(f"### Candidate {i + 1}\n{c.strip()}" for i, c in enumerate(candidates))
    finish = (
        "keep what is accurate and helpful, fix the errors, and write one complete response."
        if open_ended
        else "keep the correct reasoning, fix the errors, and put the final answer in \\boxed{}."
    )
    user = (
        f"{head}:\n{problem.strip()}\n\nSeveral independent attempts follow. They may disagree "
        f"and any of them may be wrong.\n\n{listed}\n\nSynthesise the best possible {noun}: "
        f"compare the attempts, {finish}"
    )
    return turns(open_ended, user)
