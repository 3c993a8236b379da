"""The distillation reply's format in one place: what the distiller may answer (the JSON
schema servers constrain decoding with, and the two item styles), how a structured item is
rendered as one line, and the tolerant parser that turns whatever came back into short, clean
experience statements.

Parsing, as it was written for small distillers:
Servers with JSON-schema decoding return clean JSON; others wrap it in prose or code fences, or
use other key names (the reference code's ``verified_propositions`` / ``critical_pitfalls``).
Structured items (a proposition's statement, conditions and source; a pitfall's context, kind,
trigger, action and consequence) become one line each; plain strings are kept as they are.
Anything that still yields no lists is *unparseable*: counted by the caller, never fatal.
Statements that only restate the problem or the distiller's own instructions carry nothing and
are dropped (counted as echoes). LaTeX written straight into a JSON string (``\\frac``,
``\\boxed``, ``\\(``) is read as LaTeX, not as JSON escapes (see :func:`repair_escapes`).
A streamed reply is read as it arrives by :class:`ItemScanner`, which hands over each list
item the moment its JSON closes (so it can be embedded while the rest is still being
written); the whole reply is then parsed as above, the authority.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from rse_fast.prompts.reply_json import (
    NOT_JSON,
    first_json_object,
    python_literal,
    repair_escapes,
    salvage,
)

PITFALL_KINDS = ("dead end", "fatal flaw", "risk")


def render_proposition(statement: str, conditions: str = "", source: str = "") -> str:
    """One line for a proposition: the claim, when it holds, and how it was obtained."""
    line = statement.strip()
    extra = [
        f"{lead} {part.strip()}"
        for lead, part in (("holds if", conditions), ("from", source))
        if part.strip() and part.strip().lower() not in line.lower()  # nothing said twice
    ]
    return f"{line} ({'; '.join(extra)})" if extra else line


def render_pitfall(
    context: str = "", kind: str = "", trigger: str = "", action: str = "", consequence: str = ""
) -> str:
    """One line for a pitfall: ``[kind] context: trigger -> action -> consequence``; a part
    that repeats an earlier one is left out ("X -> X" says nothing twice)."""
    seen: list[str] = []
    for part in (context, trigger, action, consequence):
        p = part.strip()
        if p and not any(p.lower() in s.lower() for s in seen):
            seen.append(p)
    head = f"[{kind.strip()}] " if kind.strip() else ""
    if context.strip() and len(seen) > 1 and seen[0] == context.strip():
        return head + f"{seen[0]}: " + " -> ".join(seen[1:])
    return head + " -> ".join(seen)


DistillFormat = Literal["compact", "structured"]


#: Characters per field of a distilled item. Why: constrained decoding enforces them, so a
#: small distiller cannot write at length (measured: ~900 tokens per reply without bounds,
#: several times the rollout it distills).
FIELD_CHARS = {"line": 160, "statement": 200, "conditions": 100, "source": 80, "context": 100,
               "trigger": 100, "action": 120, "consequence": 100}  # fmt: skip


def distill_schema(max_items: int, style: DistillFormat = "compact") -> dict[str, Any]:
    """``response_format`` for servers with JSON-schema constrained decoding. Only the two
    lists are required, never an item or a field beyond an item's main text."""

    def text(name: str) -> dict[str, Any]:
        return {"type": "string", "minLength": 1, "maxLength": FIELD_CHARS[name]}

    def item_of(fields: dict[str, Any], main: str) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": fields,
            "required": [main],
            "additionalProperties": False,
        }

    if style == "compact":
        proposition: dict[str, Any] = text("line")
        pitfall: dict[str, Any] = text("line")
    else:
        proposition = item_of({n: text(n) for n in ("statement", "conditions", "source")},
                              "statement")  # fmt: skip
        pitfall = item_of(
            {
                "context": text("context"),
                "kind": {"type": "string", "enum": list(PITFALL_KINDS)},
                "trigger": text("trigger"),
                "action": text("action"),
                "consequence": text("consequence"),
            },
            "action",
        )
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


#: Phrases of the project's own instructions (distiller's and solver's). A statement that
#: carries one copies instructions, not experience.
INSTRUCTION_PHRASES = (
    "unverified hypothesis", "treat everything it claims", "the attempt may be wrong",
    "nobody has checked", "re-check any note", "notes from earlier attempts",
    "put the final answer", "reason step by step", "check your work", "stand alone",
    "nothing sure to add", "found right", "re-derived and found", "reply with json",
    "distrust every number", "verify before use", "pitfalls to avoid", "take a different route",
)  # fmt: skip


POSITIVE_KEYS = (
    "propositions",
    "positive",
    "positives",
    "verified_propositions",
    "lemmas",
    "facts",
)
NEGATIVE_KEYS = ("pitfalls", "negative", "negatives", "critical_pitfalls", "mistakes", "errors")


@dataclass(frozen=True)
class Distilled:
    positive: list[str]
    negative: list[str]
    echoes: int = 0  # statements dropped for restating the problem or the instructions


#: A backslash and what follows it: a ``\\uXXXX`` escape, a run of letters, or one character.
def _field(item: dict[str, Any], problem: str | None, *names: str) -> str:
    """The first non-empty field of ``names``; "" when it only echoes the problem or the
    instructions (a field such as "from the attempt" carries nothing)."""
    for name in names:
        value = item.get(name)
        if isinstance(value, str) and value.strip():
            return "" if problem is not None and is_echo(value, problem) else value
    return ""


def _item_text(item: dict[str, Any], positive: bool, problem: str | None) -> str:
    """One line for a structured item; "" when its main field (a proposition's statement, a
    pitfall's wrong move) is missing or an echo."""
    if positive:
        statement = _field(item, problem, "statement", "proposition", "text", "content")
        if not statement:
            return ""
        return render_proposition(
            statement,
            _field(item, problem, "conditions", "condition"),
            _field(item, problem, "source"),
        )
    action = _field(item, problem, "action", "invalid_action", "text", "statement", "content")
    if not action:
        return ""
    return render_pitfall(
        _field(item, problem, "context"),
        _field(item, None, "kind", "type"),
        _field(item, problem, "trigger"),
        action,
        _field(item, problem, "consequence"),
    )


def _as_texts(value: Any, positive: bool, problem: str | None) -> tuple[list[str], int] | None:
    """Texts of a list of items and how many structured items were echoes."""
    if isinstance(value, str):
        return [value], 0
    if not isinstance(value, list):
        return None
    out, echoes = [], 0
    for item in value:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            text = _item_text(item, positive, problem)
            if text:
                out.append(text)
            else:
                echoes += 1
    return out, echoes


_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    "the a an and or of to in on for is are was were be it its this that with as by at from "
    "not no so if then than into out do does did can may must should would will".split()
)


def _content_words(text: str) -> set[str]:
    """Lower-case words of 3+ characters, stop words out, a plural "s" stripped."""
    words = (w for w in _WORD.findall(text.lower()) if len(w) > 2 and w not in _STOP)
    return {w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w for w in words}


#: Words of verdicts that say nothing about the problem ("the attempt was incorrect").
GENERIC_WORDS = frozenset(
    "incorrect correct correctly incorrectly failed fail fails wrong wrongly expected result "
    "results solution solutions solve solving solved problem problems answer answers provided "
    "produce produced error errors mistake mistakes approach method methods carefully properly "
    "process calculation calculations final given need needs needed follow following break "
    "down let lets outlined revisit examine re-examine test retest these those".split()
)


#: Words the distiller's instructions use and a statement about the problem has no need of
#: ("the attempt did not check the claim that every claim is an unverified hypothesis").
#: Normalised as statements are (plural "s" stripped), so "hypothesis" matches "hypothesi".
INSTRUCTION_WORDS = _content_words(
    "attempt attempts unverified hypothesis hypotheses claim claims verify verified check "
    "checked checking proposition propositions pitfall pitfalls lesson lessons reuse "
    "reusable derive derived rederived review extract json later went took stuck risk "
    "risky dead end fatal flaw trigger consequence lemma lemmas intermediate statement "
    "conditions source context kind move moves reformulation reformulations step note notes "
    "nobody recheck re-check rely"
) | _content_words(" ".join(GENERIC_WORDS))
#: A statement that talks about "the attempt" is commentary on one rollout, not a
#: self-contained experience (the prompt asks for lines that stand alone).
_META = re.compile(r"\b(?:the|this|that|an|each|every|previous|earlier)\s+attempts?\b", re.I)


def is_echo(statement: str, problem: str) -> bool:
    """True when a statement adds nothing: it copies the project's instruction text, talks
    about "the attempt" instead of the problem, or (almost) every content word of it is a
    word of the problem or of the instructions."""
    body = re.sub(r"^\[[^\]]*\]\s*", "", statement)
    lowered = body.lower()
    if _META.search(body) or any(p in lowered for p in INSTRUCTION_PHRASES):
        return True
    words = _content_words(body)
    if not words:
        return True
    problem_words = _content_words(problem)
    in_problem = len(words & problem_words) / len(words)
    in_rules = len(words & (INSTRUCTION_WORDS - problem_words)) / len(words)
    return in_problem >= 0.9 or in_rules >= 0.6 or in_problem + in_rules >= 0.95


def clean_statement(text: str, max_chars: int) -> str:
    """One line, no bullet or numbering, at most ``max_chars`` (cut at a word, marked …)."""
    s = re.sub(r"\s+", " ", text).strip()
    s = re.sub(r"^(?:[-*•]|\d+[.)])\s*", "", s)
    if len(s) > max_chars:
        cut = s[: max_chars - 1]
        if " " in cut[max_chars // 2 :]:
            cut = cut[: cut.rfind(" ")]
        s = cut.rstrip(" ,;:") + "…"
    return s


def parse_distillation(
    text: str, max_items: int, max_chars: int, problem: str | None = None
) -> Distilled | None:
    """Propositions and pitfalls from a distiller reply, or None if unparseable. With
    ``problem``, statements that only echo it or the instructions are dropped."""
    repaired = repair_escapes(text)
    try:
        data: Any = json.loads(repaired)
    except NOT_JSON:  # salvage repairs each item it reads, so it gets the reply as written
        data = first_json_object(repaired) or python_literal(repaired) or salvage(text)
    if not isinstance(data, dict):
        return None
    lowered = {str(k).lower(): v for k, v in data.items()}
    pos = next((_as_texts(lowered[k], True, problem) for k in POSITIVE_KEYS if k in lowered), None)
    neg = next((_as_texts(lowered[k], False, problem) for k in NEGATIVE_KEYS if k in lowered), None)
    if pos is None and neg is None:
        return None
    echoes = (pos[1] if pos else 0) + (neg[1] if neg else 0)

    def tidy(found: tuple[list[str], int] | None) -> list[str]:
        nonlocal echoes
        out: list[str] = []
        for t in found[0] if found else []:
            c = clean_statement(t, max_chars)
            if problem is not None and c and is_echo(c, problem):
                echoes += 1
                continue
            if c and c not in out:
                out.append(c)
        return out[:max_items]

    return Distilled(tidy(pos), tidy(neg), echoes)


def item_statement(key: str, item: Any, max_chars: int, problem: str | None = None) -> str | None:
    """The statement one list item of a reply becomes under ``parse_distillation``'s rules
    (None when its key is no experience list, or it is empty or an echo)."""
    key = key.lower()
    if key not in POSITIVE_KEYS and key not in NEGATIVE_KEYS:
        return None
    found = _as_texts([item], key in POSITIVE_KEYS, problem)
    if not found or not found[0]:
        return None
    c = clean_statement(found[0][0], max_chars)
    if not c or (problem is not None and is_echo(c, problem)):
        return None
    return c
