"""RSE's prompts: the bank block of the guided solve prompt, and distillation (prompt, schema).

Why the distillation prompt is short: on small models a rollout is short, so every token of
instructions in a distillation or a guided prompt is paid again per rollout (the rules above
the bank stay because the dev set measured them worth their tokens; docs/decisions.md has the
measurements). Why they are written this way (docs/rse.md):
- a distiller forced to fill every field of a pitfall invents flaws in correct work, so no
  field and no count is required: an empty list is a valid answer;
- banning every number of the bank switches recycling off on arithmetic, so propositions keep
  what was derived, numbers included, and the solver re-checks what it relies on;
- the distiller never sees a gold answer; what it may see is how the round's own answers split
  (its own samples), which tells a majority computation from a minority slip.
Experience texts are inserted verbatim.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from rse_fast.llm.types import Message
from rse_fast.prompts.distill_format import DistillFormat

Guidance = Literal["short", "rules", "checked"]
#: The framing RSE and a bank render with unless told otherwise (chosen on the dev set).
DEFAULT_GUIDANCE: Guidance = "rules"

#: The one framing line above the bank (``guidance="short"``, an ablation).
UNCHECKED = "Nobody has checked them: re-check any note you rely on."
FRAMING = {
    True: f"Notes from earlier attempts at this problem. {UNCHECKED}",
    False: f"Notes from attempts at related problems (not this one: a note may not apply). "
    f"{UNCHECKED}",
}
AVOID = "avoid"
KNOWN = "found"

#: The four rules above the bank (``guidance="rules"``, the default: on the dev set they beat
#: the one framing line on accuracy and on the guided samples; rule 3 asks for a re-check
#: instead of forbidding every number, as the previous release's did).
GUIDED_RULES = (
    "Below is experience collected from earlier attempts at {origin}. Nobody has checked it "
    "against a correct answer, and parts of it are wrong. Use it this way:\n"
    "1. Pitfalls first. Never repeat one: when your reasoning reaches the situation a pitfall "
    "describes, take a different route at that point.\n"
    "2. Propositions are hypotheses about the structure of the problem, not facts. Before you "
    "rely on one, check that its conditions hold here and derive it again yourself.\n"
    "3. Re-check every number and result written below before you use it.\n"
    "4. If the experience contradicts itself or your own derivation, go back to the problem "
    "statement, question the assumptions you started from, and rebuild from there."
)
#: The framing of a bank whose items were observed by running code (``guidance="checked"``,
#: opt-in: a grounded bank is told apart from a distiller's opinions, which ``rules`` calls
#: unchecked and partly wrong; not yet measured on a dev cell).
CHECKED_RULES = (
    "Below is what running the code of earlier attempts at {origin} on the examples the "
    "problem states showed. Each item was observed, not guessed: it is a fact about that "
    "attempt, not advice about the right solution.\n"
    "1. A pitfall names a stated example an earlier attempt got wrong: what it gave back or "
    "raised, and where. Make sure your code gets that example right.\n"
    "2. A proposition describes an attempt that passed the stated examples; inputs the "
    "problem does not state may still tell it apart from a right one.\n"
    "3. Write your own complete solution; do not patch one line of an attempt."
)
ORIGIN_SAME = "this same problem"
ORIGIN_RELATED = "related problems (not this one: check that each item applies at all)"
PITFALLS_HEADER = "Pitfalls to avoid:"
PROPOSITIONS_HEADER = "Propositions to verify before use:"


def render_experiences(
    negatives: Sequence[str],
    positives: Sequence[str],
    same_problem: bool = True,
    guidance: Guidance = DEFAULT_GUIDANCE,
) -> str:
    """The bank as prompt text; "" when both lists are empty. ``short``: one framing line,
    then one tagged line per item, pitfalls first. ``rules``: the long rules and headers;
    ``checked``: the same headers under rules for items observed by running code."""
    if not negatives and not positives:
        return ""
    if guidance == "short":
        lines = [FRAMING[same_problem]]
        lines += [f"- {AVOID}: {t}" for t in negatives]
        lines += [f"- {KNOWN}: {t}" for t in positives]
        return "\n".join(lines)
    rules = CHECKED_RULES if guidance == "checked" else GUIDED_RULES
    parts = [rules.format(origin=ORIGIN_SAME if same_problem else ORIGIN_RELATED)]
    if negatives:
        parts.append(PITFALLS_HEADER + "\n" + "\n".join(f"- {t}" for t in negatives))
    if positives:
        parts.append(PROPOSITIONS_HEADER + "\n" + "\n".join(f"- {t}" for t in positives))
    return "\n\n".join(parts)


DISTILL_SYSTEM = (
    "You read worked attempts at a problem and note what a fresh attempt should reuse or "
    "avoid. Nobody knows whether an attempt is right. Reply with JSON only."
)


def answer_split(answers: Sequence[str | None], own: str | None = None) -> str:
    """How a round's answers split, e.g. "42 (3 attempts), 41 (1); this attempt: 41"."""
    counts: dict[str, int] = {}
    for a in answers:
        key = a if a is not None else "no answer"
        counts[key] = counts.get(key, 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])
    text = ", ".join(f"{a} ({n})" for a, n in ranked)
    return text + (f"; this attempt: {own if own is not None else 'no answer'}" if own else "")


DistillAsk = Literal["full", "brief", "primed"]


def _distill_ask(max_items: int, max_words: int, style: DistillFormat, ask: DistillAsk) -> str:
    if ask == "brief":  # the reply's shape comes from the JSON schema, not from this text
        return (
            f"Up to {max_items} lines per list, under {max_words} words each. propositions: "
            "results you re-checked, with numbers. pitfalls: wrong steps it took, and why. "
            "Empty lists when unsure."
        )
    if style == "compact":
        return (
            f"Write at most {max_items} short lines (under {max_words} words each) in each "
            'list. "propositions": results the attempt derived that you re-checked and found '
            'right, numbers included, each with how it follows. "pitfalls": steps the attempt '
            "actually took that are wrong, each naming the step and why it fails. Each line "
            "must stand alone: name the quantities. Leave a list empty when there is nothing "
            "sure to add; a correct attempt has no pitfalls."
        )
    return (
        f"At most {max_items} items per list, all fields of an item under {max_words} "
        'words together. "propositions": results the attempt derived that you re-checked '
        "and found right, numbers included (statement; conditions; source: how it was "
        'derived). "pitfalls": steps the attempt actually took that are wrong (context; '
        "kind: dead end, fatal flaw or risk; trigger; action: the wrong step; consequence). "
        "Fill only the fields you can; leave a list empty when there is nothing sure to "
        "add; a correct attempt has no pitfalls."
    )


#: The brief ask's opening, continuing a rollout's conversation (the full ask's is
#: "Now review the reply above as someone else's attempt." and the distiller's system text).
BRIEF_REVIEW = "Review the reply above as another's attempt that may be wrong. JSON only."

#: The primed ask's cue: the whole ask already sits in the rollout's system turn
#: (:func:`primed_preamble`), where the prefix cache holds it.
PRIMED_CUE = "Review your reply above now, as the review instructions say. JSON only."


def primed_preamble(max_items: int, max_words: int, style: DistillFormat) -> str:
    """The full distillation ask, worded for the rollout's system turn (``ask="primed"``).
    It is the same text for every rollout of a run, so a server's prefix cache serves it to
    every call after a slot's first; the distillation that continues the rollout then ends
    in :data:`PRIMED_CUE` alone. It is read by every rollout, so it says plainly that it
    applies only when a review is asked for."""
    return (
        "Review instructions (only for a later turn that asks you to review your reply; "
        "until then, solve as asked): treat the reply as someone else's attempt that may be "
        "wrong, note what a fresh attempt should reuse or avoid, and answer with JSON only. "
        f"{_distill_ask(max_items, max_words, style, 'full')}"
    )


def distill_messages(
    problem: str,
    response: str,
    max_items: int,
    max_words: int,
    reasoning: str | None = None,
    truncated: bool = False,
    *,
    style: DistillFormat = "compact",
    split: str | None = None,
    rollout: Sequence[Message] | None = None,
    ask: DistillAsk = "full",
) -> list[Message]:
    """Distil(x, ω): the problem, the attempt's reasoning trace (its dead ends are there) and
    final response, optionally how the round's answers split → propositions and pitfalls.
    ``ask="brief"``: an ask under half as long (40 words against 110) for a server that
    enforces the reply's JSON schema: a continued conversation's cache then serves more of
    the prompt. ``ask="primed"``: the rollout's system turn already carries the ask
    (:func:`primed_preamble`), so a continued conversation ends in a one-line cue; a fresh
    prompt gets the full ask.

    With ``rollout`` (the rollout's own messages) the distillation is the next turn of that
    conversation: its exact prompt, the reply as the assistant turn, then the ask. A server's
    prefix cache (llama.cpp's slots, vLLM's and SGLang's prefix caches) already holds that
    prefix, so only the ask is prefilled; the fresh prompt that pastes the rollout is
    prefilled in full (and reads fewer tokens: no bank block)."""
    if rollout is None:  # the attempt pasted after the problem, under the distiller's system
        attempt = ""
        if reasoning:
            attempt += f"Reasoning of the attempt:\n{reasoning.strip()}\n\n"
        attempt += f"Attempt:\n{response.strip() or '(none)'}"
        if truncated:
            attempt += "\n(cut off by its length limit)"
        if split:
            attempt += f"\n\nFinal answers of all attempts this round: {split}."
        request = _distill_ask(max_items, max_words, style, "full" if ask == "primed" else ask)
        user = f"Problem:\n{problem.strip()}\n\n{attempt}\n\n{request}"
        return [{"role": "system", "content": DISTILL_SYSTEM}, {"role": "user", "content": user}]
    opening = f"Now review the reply above as someone else's attempt. {DISTILL_SYSTEM}"
    notes = [{"brief": BRIEF_REVIEW, "primed": PRIMED_CUE}.get(ask, opening)]
    if reasoning:
        notes.append(f"The reasoning behind that reply was:\n{reasoning.strip()}")
    if truncated:
        notes.append("That reply was cut off by its length limit.")
    if split:
        notes.append(f"Final answers of all attempts this round: {split}.")
    asked = [] if ask == "primed" else [_distill_ask(max_items, max_words, style, ask)]
    request = "\n\n".join([*notes, *asked])
    return [
        *rollout,
        {"role": "assistant", "content": response},
        {"role": "user", "content": request},
    ]


def is_distillation(messages: Sequence[Message]) -> bool:
    """Whether a request is a distillation, in either form (a fresh prompt under the
    distiller's system turn, or the ask that continues a rollout's conversation)."""
    if not messages:
        return False
    last = str(messages[-1].get("content") or "")
    return messages[0].get("content") == DISTILL_SYSTEM or (
        messages[-1].get("role") == "user"
        and any(cue in last for cue in (DISTILL_SYSTEM, BRIEF_REVIEW, PRIMED_CUE))
    )


def distill_batch_messages(
    problem: str,
    attempts: Sequence[tuple[str, str | None, int]],
    total: int,
    max_items: int,
    max_words: int,
) -> list[Message]:
    """One distillation for a round: one attempt per distinct answer (text, answer, how many
    of the ``total`` attempts gave it), side by side. Where they part is where a step went
    wrong; what they share is likely right."""
    shown = "\n\n".join(
        f"Attempt {chr(65 + i)} (answer {answer if answer is not None else 'none'}, given by "
        f"{count} of {total} attempts):\n{text.strip() or '(none)'}"
        for i, (text, answer, count) in enumerate(attempts)
    )
    compare = (
        "Compare the attempts step by step. "
        if len(attempts) > 1
        else "All attempts agree on this answer. "
    )
    ask = (
        f"{compare}Write at most {max_items} short lines (under {max_words} words each) in "
        'each list. "propositions": intermediate results you re-checked and found right, '
        'numbers included, each with how it follows. "pitfalls": a wrong step one of the '
        "attempts actually took, naming the step and why it fails. Each line must stand alone: "
        "name the quantities, not the attempts. Leave a list empty when there is nothing sure "
        "to add."
    )
    user = f"Problem:\n{problem.strip()}\n\n{shown}\n\n{ask}"
    return [{"role": "system", "content": DISTILL_SYSTEM}, {"role": "user", "content": user}]
