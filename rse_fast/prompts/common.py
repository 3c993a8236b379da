"""What every family shares: the solve and respond system turns, conversation history, and the
framing of a task (its heading, its noun, how the work must end)."""

from __future__ import annotations

from collections.abc import Sequence

from rse_fast.llm.types import Message

SOLVE_SYSTEM = (
    "You are a careful problem solver. Reason step by step, check your work, and end with the "
    "final answer written as \\boxed{answer}."
)

#: Open-ended tasks (advice, writing): a complete response, no final-answer box.
RESPOND_SYSTEM = (
    "You are a careful, knowledgeable assistant. Give a complete, accurate and helpful "
    "response that fits what the user asked; do not wrap it in a final-answer box."
)

#: How a step-wise search on an open-ended task says a response is complete.
END_MARK = "[END]"


def system_for(open_ended: bool) -> str:
    return RESPOND_SYSTEM if open_ended else SOLVE_SYSTEM


def with_history(messages: list[Message], history: Sequence[Message]) -> list[Message]:
    """Put the earlier turns of a conversation between the system turn and the last user
    turn, roles kept, so a multi-turn task is answered as the conversation it is."""
    if not history:
        return messages
    return [messages[0], *history, *messages[1:]]


def turns(open_ended: bool, user: str) -> list[Message]:
    return [
        {"role": "system", "content": system_for(open_ended)},
        {"role": "user", "content": user},
    ]


def so_far(steps: Sequence[str]) -> str:
    return "\n\n".join(steps) if steps else "(nothing yet)"


def framing(open_ended: bool) -> tuple[str, str, str]:
    """(heading of the task, its noun for the work so far, how the work must end)."""
    if open_ended:
        return "Task", "response", f"end it with the line {END_MARK}"
    return "Problem", "solution", "end the step with the final answer in \\boxed{}"


def solve_messages(
    problem: str,
    experience_block: str = "",
    *,
    open_ended: bool = False,
    history: Sequence[Message] = (),
    preamble: str = "",
) -> list[Message]:
    """Round r's prompt u_r = Prompt(x, E_pos, E_neg): the guidance and the bank in the system
    turn, the problem in the user turn; plain sampling when the bank is empty. An open-ended
    task gets its user turn as written (no box asked for), after its earlier turns.
    ``preamble``: text every prompt of a run shares, placed before the bank so that a prefix
    cache serves it across rounds and problems (RSE's primed distillation ask)."""
    fixed = system_for(open_ended) + (f"\n\n{preamble}" if preamble else "")
    system = fixed + (f"\n\n{experience_block}" if experience_block else "")
    if open_ended:
        messages: list[Message] = [
            {"role": "system", "content": system},
            {"role": "user", "content": problem.strip()},
        ]
        return with_history(messages, history)
    user = f"Problem:\n{problem.strip()}\n\nSolve the problem. Put the final answer in \\boxed{{}}."
    return with_history(
        [{"role": "system", "content": system}, {"role": "user", "content": user}], history
    )
