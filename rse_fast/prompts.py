"""Every prompt template of the project, in one place.

Each builder returns OpenAI chat messages. Experience texts are inserted verbatim; the guided
solve prompt gives the rules for using recycled experience, lists pitfalls first and frames
propositions as hypotheses to verify, since the distiller never sees a gold answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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


#: The guidance shown above the bank. Why each rule: the bank is written by the same model
#: without a gold answer, so it holds wrong claims; small models copy numbers and final
#: answers from it, repeat listed mistakes, and spiral when notes contradict each other.
GUIDED_RULES = (
    "Below is experience collected from earlier attempts at {origin}. Nobody has checked it "
    "against a correct answer, and parts of it are wrong. Use it this way:\n"
    "1. Pitfalls first. Never repeat one: when your reasoning reaches the situation a pitfall "
    "describes, take a different route at that point.\n"
    "2. Propositions are hypotheses about the structure of the problem, not facts. Before you "
    "rely on one, check that its conditions hold here and derive it again yourself. General "
    "insights (identities, invariants, reformulations) are worth more than specific values.\n"
    "3. Distrust every number and every final answer written below. Use only numbers you "
    "derive yourself in this attempt.\n"
    "4. If the experience contradicts itself or your own derivation, go back to the problem "
    "statement, question the assumptions you started from, and rebuild from there."
)
ORIGIN_SAME = "this same problem"
ORIGIN_RELATED = "related problems (not this one: check that each item applies at all)"
PITFALLS_HEADER = "Pitfalls to avoid (context, kind: trigger -> wrong move -> consequence):"
PROPOSITIONS_HEADER = "Propositions to verify before use (statement; conditions; how obtained):"
PITFALL_KINDS = ("dead end", "fatal flaw", "risk")


def render_proposition(statement: str, conditions: str = "", source: str = "") -> str:
    """One line for a proposition: the claim, when it holds, and how it was obtained."""
    line = statement.strip()
    extra = [f"holds if {conditions.strip()}" if conditions.strip() else ""]
    extra.append(f"from {source.strip()}" if source.strip() else "")
    extra = [e for e in extra if e]
    return f"{line} ({'; '.join(extra)})" if extra else line


def render_pitfall(
    context: str = "", kind: str = "", trigger: str = "", action: str = "", consequence: str = ""
) -> str:
    """One line for a pitfall: ``[kind] context: trigger -> action -> consequence``."""
    chain = " -> ".join(p.strip() for p in (trigger, action, consequence) if p.strip())
    head = f"[{kind.strip()}] " if kind.strip() else ""
    body = f"{context.strip()}: {chain}" if context.strip() and chain else context.strip() or chain
    return head + body


def render_experiences(
    negatives: Sequence[str], positives: Sequence[str], same_problem: bool = True
) -> str:
    """The bank as prompt text (rules, pitfalls, then propositions); "" when both are empty."""
    if not negatives and not positives:
        return ""
    parts = [GUIDED_RULES.format(origin=ORIGIN_SAME if same_problem else ORIGIN_RELATED)]
    if negatives:
        parts.append(PITFALLS_HEADER + "\n" + "\n".join(f"- {t}" for t in negatives))
    if positives:
        parts.append(PROPOSITIONS_HEADER + "\n" + "\n".join(f"- {t}" for t in positives))
    return "\n\n".join(parts)


def solve_messages(
    problem: str,
    experience_block: str = "",
    *,
    open_ended: bool = False,
    history: Sequence[Message] = (),
) -> list[Message]:
    """Round r's prompt u_r = Prompt(x, E_pos, E_neg): the guidance and the bank in the system
    turn, the problem in the user turn; plain sampling when the bank is empty. An open-ended
    task gets its user turn as written (no box asked for), after its earlier turns."""
    if open_ended:
        system = RESPOND_SYSTEM + (f"\n\n{experience_block}" if experience_block else "")
        messages: list[Message] = [
            {"role": "system", "content": system},
            {"role": "user", "content": problem.strip()},
        ]
        return with_history(messages, history)
    system = SOLVE_SYSTEM + (f"\n\n{experience_block}" if experience_block else "")
    user = f"Problem:\n{problem.strip()}\n\nSolve the problem. Put the final answer in \\boxed{{}}."
    return with_history(
        [{"role": "system", "content": system}, {"role": "user", "content": user}], history
    )


DISTILL_SYSTEM = (
    "You review one attempt at a problem to extract lessons for later attempts. You do not "
    "know the correct answer and the attempt may be wrong: treat everything it claims as an "
    "unverified hypothesis and check each step yourself. Reply with JSON only."
)


def distill_messages(
    problem: str,
    response: str,
    max_items: int,
    max_words: int,
    reasoning: str | None = None,
    truncated: bool = False,
) -> list[Message]:
    """Distil(x, ω): the problem, the attempt's reasoning trace (when the model has one: its dead
    ends are there) and its final response → structured propositions and pitfalls."""
    attempt = ""
    if reasoning:
        attempt += f"Reasoning trace of the attempt:\n{reasoning.strip()}\n\n"
    attempt += f"Final response of the attempt:\n{response.strip() or '(none)'}"
    if truncated:
        attempt += "\n\n(The attempt was cut off by its length limit before it finished.)"
    user = (
        f"Problem:\n{problem.strip()}\n\n{attempt}\n\n"
        "Extract what a later attempt can reuse:\n"
        '- "propositions": intermediate results, lemmas or useful reformulations from the '
        "attempt that you re-derived and found correct. Give each one's statement, the "
        "conditions under which it holds, and its source (how it was derived). State methods "
        "and relationships, not final answers.\n"
        '- "pitfalls": where the attempt went wrong, got stuck, or took a risk. Give the '
        "context, the kind (dead end, fatal flaw or risk), the trigger, the wrong move made, "
        "and its consequence.\n"
        f"Each field is short (all fields of an item together at most {max_words} words) and "
        'self-contained: name the quantities involved, never say "the attempt" or "step '
        '3". Do not restate the problem or these instructions. At most '
        f"{max_items} items per list; empty lists are fine."
    )
    return [{"role": "system", "content": DISTILL_SYSTEM}, {"role": "user", "content": user}]


#: Characters per field of a distilled item. Why: constrained decoding enforces them, so a
#: small distiller cannot fill every field at length (measured: ~900 tokens per reply without
#: bounds, several times the rollout it distils).
FIELD_CHARS = {"statement": 200, "conditions": 100, "source": 80, "context": 100, "trigger": 100,
               "action": 120, "consequence": 100}  # fmt: skip


def distill_schema(max_items: int) -> dict[str, Any]:
    """``response_format`` for servers with JSON-schema constrained decoding."""

    def text(name: str) -> dict[str, Any]:
        return {"type": "string", "minLength": 1, "maxLength": FIELD_CHARS[name]}

    proposition = {
        "type": "object",
        "properties": {n: text(n) for n in ("statement", "conditions", "source")},
        "required": ["statement", "conditions", "source"],
        "additionalProperties": False,
    }
    pitfall = {
        "type": "object",
        "properties": {
            "context": text("context"),
            "kind": {"type": "string", "enum": list(PITFALL_KINDS)},
            "trigger": text("trigger"),
            "action": text("action"),
            "consequence": text("consequence"),
        },
        "required": ["context", "kind", "trigger", "action", "consequence"],
        "additionalProperties": False,
    }
    return {
        "type": "json_schema",
        "json_schema": {
            "name": "experiences",
            "strict": True,
            "schema": {
                "type": "object",
                "properties": {
                    "propositions": {"type": "array", "items": proposition, "maxItems": max_items},
                    "pitfalls": {"type": "array", "items": pitfall, "maxItems": max_items},
                },
                "required": ["propositions", "pitfalls"],
                "additionalProperties": False,
            },
        },
    }


# -- judging ---------------------------------------------------------------------------------
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


# -- step-wise search (beam search, particle filtering) --------------------------------------
def _turns(open_ended: bool, user: str) -> list[Message]:
    return [
        {"role": "system", "content": system_for(open_ended)},
        {"role": "user", "content": user},
    ]


def _so_far(steps: Sequence[str]) -> str:
    return "\n\n".join(steps) if steps else "(nothing yet)"


def _framing(open_ended: bool) -> tuple[str, str, str]:
    """(heading of the task, its noun for the work so far, how the work must end)."""
    if open_ended:
        return "Task", "response", f"end it with the line {END_MARK}"
    return "Problem", "solution", "end the step with the final answer in \\boxed{}"


def next_step_messages(
    problem: str, steps: Sequence[str], open_ended: bool = False
) -> list[Message]:
    """Ask for exactly one more step after the steps so far (works on any server: no
    assistant prefill needed). An open-ended response marks its last part with END_MARK."""
    head, noun, ending = _framing(open_ended)
    user = (
        f"{head}:\n{problem.strip()}\n\n{noun.capitalize()} so far:\n{_so_far(steps)}\n\n"
        f"Write only the next step of the {noun}, in one short paragraph. If the {noun} is "
        f"complete after this step, {ending}."
    )
    return _turns(open_ended, user)


def finish_messages(problem: str, steps: Sequence[str], open_ended: bool = False) -> list[Message]:
    """Carry a partial path of a step-wise search through to its end in one call, so the
    search never returns unfinished work."""
    head, noun, ending = _framing(open_ended)
    ending = ending.replace("the step", "it")
    user = (
        f"{head}:\n{problem.strip()}\n\n{noun.capitalize()} so far:\n{_so_far(steps)}\n\n"
        f"Continue this {noun} from where it stops and carry it through to the end; write only "
        f"the continuation, and {ending}."
    )
    return _turns(open_ended, user)


# -- refinement ------------------------------------------------------------------------------
def critique_messages(problem: str, response: str, open_ended: bool = False) -> list[Message]:
    head, noun, _ = _framing(open_ended)
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
    head, noun, _ = _framing(open_ended)
    finish = "" if open_ended else " Put the final answer in \\boxed{}."
    user = (
        f"{head}:\n{problem.strip()}\n\nPrevious {noun}:\n{response.strip()}\n\n"
        f"Review of it:\n{critique.strip()}\n\nWrite an improved, complete {noun} that fixes "
        f"the problems found (keep what was right).{finish}"
    )
    return _turns(open_ended, user)


# -- fusion ----------------------------------------------------------------------------------
def fusion_messages(
    problem: str, candidates: Sequence[str], open_ended: bool = False
) -> list[Message]:
    head, noun, _ = _framing(open_ended)
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
    return _turns(open_ended, user)
