"""Checking experience where a check is free: a task-supplied checker says of each distilled
statement whether it is verified, refuted or unknown, with its evidence.

A refuted proposition never reaches a prompt: it is dropped, or (``refuted_as_pitfall``)
filed as a pitfall that states the check's evidence ("81 + 78 = 159, not 3"). A refuted pitfall
is dropped. Every kept statement carries its verdict and evidence into the bank, and the
checker's time is booked in the run's ledger (role ``check``: no tokens, its seconds).

:class:`ArithmeticChecker` re-computes every equation between numbers a statement makes
(``a op b ... = c`` with + - * / × ÷ and parentheses), exactly, in fractions.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal, Protocol

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
    distillation was bought: running the code costs no tokens)."""

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


_NUMBER = r"\(?-?\d+(?:\.\d+)?\)?"
_OPERATOR = r"[-+*/×÷xX]"
#: an expression of at least two numbers, then "=" and a number
_EQUATION = re.compile(
    rf"(?<![\w.,])((?:\(\s*)*{_NUMBER}(?:\s*\)*\s*{_OPERATOR}\s*(?:\(\s*)*{_NUMBER}\s*\)*)+)"
    rf"\s*=\s*(-?\d+(?:\.\d+)?)(?!\w|\.\d|\s*[-+*/×÷]\s*\d)"
)
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.Div: operator.truediv}  # fmt: skip
#: characters of one expression re-computed at most (a claim, not a program)
MAX_EXPRESSION = 120


def evaluate(expression: str) -> Fraction | None:
    """The exact value of a small arithmetic expression, or None when it is not one."""
    text = expression.replace("×", "*").replace("÷", "/")
    text = re.sub(r"(?<=\d)\s*[xX]\s*(?=[\d(])", "*", text)
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
    """Re-computes the equations between numbers a statement states. All right: verified;
    any wrong: refuted, with the right value as evidence; none: unknown."""

    def check(self, text: str, kind: str) -> Check:
        right: list[str] = []
        wrong: list[str] = []
        for m in _EQUATION.finditer(text):
            lhs, stated = m.group(1), Fraction(m.group(2))
            actual = evaluate(lhs)
            if actual is None:
                continue
            shown = " ".join(lhs.split())
            if actual == stated:
                right.append(f"{shown} = {_shown(actual)}")
            else:
                wrong.append(f"{shown} = {_shown(actual)}, not {m.group(2)}")
        if wrong:
            return Check("refuted", "; ".join(wrong))
        if right:
            return Check("verified", "re-computed: " + "; ".join(right))
        return Check("unknown")
