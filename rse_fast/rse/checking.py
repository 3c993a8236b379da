"""Checking experience where a check is free: a task-supplied checker says of each distilled
statement whether it is verified, refuted or unknown, with its evidence.

A refuted proposition never reaches a prompt: it is dropped, or (``refuted_as_pitfall``)
filed as a pitfall that states the check's evidence ("81 + 78 = 159, not 3"). A refuted pitfall
is dropped, and so is a verified one: the step it warns against is right. Every kept
statement carries its verdict and evidence into the bank, and the checker's time is booked in
the run's ledger (role ``check``: no tokens, its seconds).

:class:`ArithmeticChecker` re-computes every equation between numbers a statement makes
(``a op b ... = c``, ``c = a op b``, chains; + - * / and parentheses, as text, LaTeX or
Unicode writes them), exactly, in fractions.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal, NamedTuple, Protocol

Verdict = Literal["verified", "refuted", "unknown", "unchecked"]


@dataclass(frozen=True)
class Check:
    verdict: Verdict
    evidence: str = ""


@dataclass(frozen=True)
class Observation:
    """What running one rollout showed: ``items``, grounded experience to file as
    ``(kind, text, check)``; ``rollout``, the verdict that rollout's own distilled propositions
    take where the checker cannot judge a statement alone (its code passed the examples the
    problem states: verified)."""

    items: list[tuple[str, str, Check]] = field(default_factory=list)
    rollout: Check = Check("unknown")


class ExperienceChecker(Protocol):
    """What checks a distilled statement (``kind``: ``positive`` or ``negative``). A checker
    that can also run a rollout itself has ``observe(response) -> Observation``: experience
    grounded in what happened, filed beside the distiller's (and filed even where no
    distillation was bought: running the code costs no tokens). Both are called in a worker
    thread, off the event loop (a check may run a tool or a process), one rollout's statements
    at a time but rollouts concurrently: a checker that keeps state guards it."""

    def check(self, text: str, kind: str) -> Check: ...


class CodeExamplesChecker:
    """Runs each rollout's code on the examples its problem states (``visible_check``: a
    ``Problem``'s, run in the sandbox) and files a failure as a pitfall naming the call, what
    came back (or what it raised) and what was expected. Statements are not code: their
    verdict is unknown alone; the propositions distilled from a rollout that passed the stated
    examples are verified by that run. A passing rollout files no item of its own unless
    ``file_passing``: then its function (docstring and comments dropped, at most
    ``MAX_PASSING_CHARS``) becomes a verified proposition, the one fact a run that works
    establishes."""

    #: the longest passing function filed as a proposition (a bank line, not a program)
    MAX_PASSING_CHARS = 900

    def __init__(self, visible_check: Callable[[str], Any], file_passing: bool = False) -> None:
        self.visible_check = visible_check
        self.file_passing = file_passing

    def check(self, text: str, kind: str) -> Check:
        return Check("unknown")

    def observe(self, response: str) -> Observation:
        outcome = self.visible_check(response)
        if outcome is None:
            return Observation()
        if outcome.passed:
            passed = Check("verified", "its code passed the stated examples")
            code = bare_function(getattr(outcome, "code", "")) if self.file_passing else None
            if code is None or len(code) > self.MAX_PASSING_CHARS:
                return Observation(rollout=passed)
            stated = getattr(outcome, "examples", 0) or "the"
            text = f"This code passed all {stated} examples the problem states:\n{code}"
            return Observation([("positive", text, passed)], rollout=passed)
        failure = outcome.failure
        text = f"An attempt's code {failure}."
        failed = Check("verified", f"ran the stated examples: the code {failure}")
        return Observation([("negative", text, failed)])


def bare_function(code: str) -> str | None:
    """``code`` with its docstrings and comments dropped (what it does, not what the problem
    already says), or None when it does not parse."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module))
            and isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return ast.unparse(tree).strip() or None


_OPERATOR = r"[-+*/xX]"
#: one pass over a statement: spaces, numbers, words, any other character (no backtracking,
#: so a long or hostile statement costs its length)
_TOKEN = re.compile(r"(?P<space>\s+)|(?P<number>\d+(?:\.\d+)?)|(?P<word>[^\W\d]+)|(?P<other>.)",
                    re.DOTALL)  # fmt: skip
#: the written forms of an operator a distiller uses (LaTeX, Unicode), as Python writes them
_SPELLINGS = (("\\times", "*"), ("\\cdot", "*"), ("×", "*"), ("·", "*"), ("⋅", "*"),
              ("\\div", "/"), ("÷", "/"), ("−", "-"), ("==", "="))  # fmt: skip
_MATH = set("+-*/()=")
#: a currency sign written before an amount (LaTeX escapes the dollar): not part of the claim
_CURRENCY = re.compile(r"\\?[$€£](?=\d)")
#: what may not touch a claim on either side: it would carry a number into a word, a power,
#: a percentage or a longer number ("1,000")
_BEFORE = re.compile(r"[\w.,^]")
_AFTER = re.compile(r"\w|[.,]\d|[\^%]")
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.Div: operator.truediv}  # fmt: skip
#: characters of one expression re-computed at most (a claim, not a program)
MAX_EXPRESSION = 120


def evaluate(expression: str) -> Fraction | None:
    """The exact value of a small arithmetic expression, or None when it is not one."""
    text = expression.replace("×", "*").replace("÷", "/")
    text = re.sub(r"(?<=[\d)])\s*[xX]\s*(?=[\d(-])", "*", text)
    if len(text) > MAX_EXPRESSION:
        return None
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return None

    def value(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return Fraction(str(node.value))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            inner = value(node.operand)
            return -inner if isinstance(node.op, ast.USub) else inner
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](value(node.left), value(node.right))  # type: ignore[no-any-return]
        raise ValueError("not arithmetic")

    try:
        return value(tree.body)
    except (ValueError, ZeroDivisionError):
        return None


def _shown(x: Fraction) -> str:
    if x.denominator == 1:
        return str(x.numerator)
    return f"{float(x):.6g}"


class ArithmeticChecker:
    """Re-computes the equations between numbers a statement states (either side may be an
    expression; a chain ``a = b = c`` is read link by link, two plain numbers held to the
    nearest expression; an amount's currency sign is no part of it: ``$20 - $12 = $8``). All
    right: verified; any wrong: refuted, with the right value as evidence; none: unknown. A
    side that runs on into a term it leaves out (``x + 3 = 5``, ``2^3 = 8``) is no claim about
    numbers and is skipped."""

    def check(self, text: str, kind: str) -> Check:
        right: list[str] = []
        wrong: list[str] = []
        for c in equations(text):
            if c.holds:
                right.append(f"{c.expression} = {_shown(c.value)}")
            else:
                stated = (
                    f"{c.stated} = {_shown(c.stated_value)}" if _operators(c.stated) else c.stated
                )
                wrong.append(f"{c.expression} = {_shown(c.value)}, not {stated}")
        if wrong:
            return Check("refuted", "; ".join(wrong))
        if right:
            return Check("verified", "re-computed: " + "; ".join(right))
        return Check("unknown")


#: the checkers a name alone builds: they need nothing from the problem (``"visible"``, code run
#: on a problem's stated examples, is built per problem by the method that runs it)
NAMED_CHECKERS: dict[str, Callable[[], ExperienceChecker]] = {"arithmetic": ArithmeticChecker}


class Claim(NamedTuple):
    """``expression = stated``, as a statement wrote it, with both values re-computed."""

    expression: str
    value: Fraction
    stated: str
    stated_value: Fraction

    @property
    def holds(self) -> bool:
        """Exactly, or as a decimal written to fewer places than the value has: ``1 / 3 =
        0.333`` and ``2 / 3 = 0.666`` hold (rounded, cut), ``1 / 3 = 0.34`` does not."""
        if self.value == self.stated_value:
            return True
        places = _decimals(self.stated)
        if not places:
            return False
        scaled = self.value * 10**places
        return any(Fraction(n, 10**places) == self.stated_value
                   for n in (round(scaled), math.trunc(scaled)))  # fmt: skip


def equations(text: str) -> list[Claim]:
    """Each claim ``text`` makes that an arithmetic expression equals a value, one for each
    "=". Where both sides compute, the side with more operators is the one re-computed; two
    plain numbers in a chain are each held to its nearest expression (``3 + 4 = 7 = 8``
    claims 3 + 4 = 8 too: every link of a chain is equal)."""
    for spelled, op in _SPELLINGS:
        text = text.replace(spelled, op)
    text = _CURRENCY.sub("", text)  # "$20 - $12 = $8": the amounts are the numbers
    found = []
    for run in _runs(text):
        sides = [" ".join(_balanced(x).split()) for x in run.strip("= ").split("=")]
        valued = [(x, v) for x in sides if (v := evaluate(x)) is not None]
        if len(sides) < 2 or len(valued) < len(sides):
            continue
        computed = [i for i, (x, _) in enumerate(valued) if _operators(x)]
        if not computed:
            continue  # "5 = 5": no arithmetic
        for i in range(len(valued) - 1):
            a, b = valued[i], valued[i + 1]
            if not (_operators(a[0]) or _operators(b[0])):
                e = min(computed, key=lambda c: (abs(c - i - 0.5), c))
                a, b = valued[e], (b if e < i else a)
            elif _operators(b[0]) > _operators(a[0]):
                a, b = b, a
            found.append(Claim(a[0], a[1], b[0], b[1]))
    return found


def _runs(text: str) -> list[str]:
    """The stretches of ``text`` made only of numbers, operators, parentheses and "=" that
    touch no word, power or percentage (``x + 3 = 5``, ``2^3 = 8`` and ``7 = 7x`` state nothing
    about numbers alone). A run that opens with an operator continues a term it left out."""
    tokens = [(m.lastgroup, m.group(), m.start()) for m in _TOKEN.finditer(text)]
    solid = [i for i, t in enumerate(tokens) if t[0] != "space"]

    def mathy(at: int) -> bool:
        kind, value, _ = tokens[solid[at]]
        if kind == "number" or (kind == "other" and value in _MATH):
            return True
        # "6 x 7", "(2) x (-3)": an x between two numbers is a times sign
        if value not in ("x", "X") or not 0 < at < len(solid) - 1:
            return False
        left, right = tokens[solid[at - 1]], tokens[solid[at + 1]]
        return (left[0] == "number" or left[1] == ")") and (
            right[0] == "number" or right[1] in ("(", "-")
        )

    runs = []
    at = 0
    while at < len(solid):
        if not mathy(at):
            at += 1
            continue
        first = at
        while at < len(solid) and mathy(at):
            at += 1
        start, (_, last, last_at) = tokens[solid[first]][2], tokens[solid[at - 1]]
        end = last_at + len(last)
        run = text[start:end]
        opens_with_operator = run[0] in "+*/" or (run[0] == "-" and not run[1:2].isdigit())
        if (
            "=" in run.strip("= ")
            and not opens_with_operator
            and not (start and _BEFORE.match(text, start - 1))
            and not _AFTER.match(text, end)
        ):
            runs.append(run)
    return runs


def _decimals(side: str) -> int:
    """The places after the point of a side that is one decimal number (0 otherwise)."""
    m = re.fullmatch(r"\(?-?\d+\.(\d+)\)?", side)
    return len(m.group(1)) if m else 0


def _operators(side: str) -> int:
    return len(re.findall(rf"(?<=[\d)\s]){_OPERATOR}", side))


def _balanced(side: str) -> str:
    """``side`` without the parentheses it opened or closed outside itself ("(3 + 4" of
    "(3 + 4 = 7)")."""
    side = side.strip()
    while side.startswith("(") and side.count("(") > side.count(")"):
        side = side[1:].lstrip()
    while side.endswith(")") and side.count(")") > side.count("("):
        side = side[:-1].rstrip()
    return side
