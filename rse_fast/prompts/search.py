"""Step-wise search (beam search, particle filtering): one more step, or carry a path to its end."""

from __future__ import annotations

from collections.abc import Sequence

from rse_fast.llm.types import Message
from rse_fast.prompts.common import framing, so_far, turns


def next_step_messages(
    problem: str, steps: Sequence[str], open_ended: bool = False
) -> list[Message]:
    """Ask for exactly one more step after the steps so far (works on any server: no
    assistant prefill needed). An open-ended response marks its last part with END_MARK."""
    head, noun, ending = framing(open_ended)
    user = (
        f"{head}:\n{problem.strip()}\n\n{noun.capitalize()} so far:\n{so_far(steps)}\n\n"
        f"Write only the next step of the {noun}, in one short paragraph. If the {noun} is "
        f"complete after this step, {ending}."
    )
    return turns(open_ended, user)


def finish_messages(problem: str, steps: Sequence[str], open_ended: bool = False) -> list[Message]:
    """Carry a partial path of a step-wise search through to its end in one call, so the
    search never returns unfinished work."""
    head, noun, ending = framing(open_ended)
    ending = ending.replace("the step", "it")
    user = (
        f"{head}:\n{problem.strip()}\n\n{noun.capitalize()} so far:\n{so_far(steps)}\n\n"
        f"Continue this {noun} from where it stops and carry it through to the end; write only "
        f"the continuation, and {ending}."
    )
    return turns(open_ended, user)
