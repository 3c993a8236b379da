"""The examples a code problem states for itself, as checks a candidate can be run on while
it is being solved (the hidden tests stay for grading alone).

HumanEval writes them as doctests (``>>> f(2)`` then the expected line) or as prose arrows
(``f(2) ==> 4``, ``f(2) ➞ 4``, ``f(2) => 4``, ``f(2) -> 4``, ``f(2) == 4``). Only examples
whose arguments and expected value are Python literals are kept (``true`` read as ``True``),
so what runs in the harness is data, never code from the prompt.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

_ARROWS = ("==>", "➞", "=>", "->", "==")
_BOOLS = re.compile(r"\b(true|false|none)\b")


@dataclass(frozen=True)
class Example:
    call: str  # the call as written, e.g. "f([1, 2], 3)"
    expected: str  # a Python literal, e.g. "[1, 2]"


def _literal(text: str) -> str | None:
    fixed = _BOOLS.sub(lambda m: m.group(1).capitalize(), text.strip().rstrip(".,;"))
    try:
        ast.literal_eval(fixed)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return fixed


def _call_at(line: str, entry_point: str) -> tuple[str, int] | None:
    """The call ``entry_point(...)`` in ``line`` (balanced parentheses) and where it ends,
    when its arguments are literals."""
    start = re.search(rf"(?<![\w.]){re.escape(entry_point)}\(", line)
    if start is None:
        return None
    depth, i = 0, start.end() - 1
    for i in range(start.end() - 1, len(line)):
        depth += {"(": 1, ")": -1}.get(line[i], 0)
        if depth == 0:
            break
    if depth != 0:
        return None
    call = line[start.start() : i + 1]
    try:
        node = ast.parse(call, mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(node, ast.Call) or node.keywords:
        return None
    try:
        for arg in node.args:
            ast.literal_eval(arg)
    except (ValueError, SyntaxError, RecursionError):
        return None
    return call, i + 1


def visible_examples(stub: str, entry_point: str) -> list[Example]:
    """The examples the problem text states for ``entry_point``, in order, without repeats."""
    lines = stub.splitlines()
    found: list[Example] = []
    for k, raw in enumerate(lines):
        line = raw.strip().lstrip("*").strip()
        doctest = line.startswith(">>>")
        found_call = _call_at(line, entry_point)
        if found_call is None:
            continue
        call, end = found_call
        rest = line[end:].strip()
        expected: str | None = None
        for arrow in _ARROWS:
            if rest.startswith(arrow):
                expected = _literal(rest[len(arrow) :])
                break
        if expected is None and doctest and not rest:
            following = next((x.strip() for x in lines[k + 1 :] if x.strip()), "")
            if following and not following.startswith(">>>"):
                expected = _literal(following)
        if expected is not None:
            example = Example(call, expected)
            if example not in found:
                found.append(example)
    return found


#: how a visible test compares what came back with what the example states: as ``==``, but
#: floats (also inside lists, tuples and dict values) within a relative 1e-9, so a right
#: program is not failed for floating-point noise (0.1 + 0.2 against a stated 0.3)
SAME = """def _same(got, want):
    import math
    if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(want, (list, tuple)) and type(got) is type(want) and len(got) == len(want):
        return all(_same(g, w) for g, w in zip(got, want))
    if isinstance(want, dict) and isinstance(got, dict) and got.keys() == want.keys():
        return all(_same(got[k], want[k]) for k in want)
    return got == want
"""


def visible_tests(examples: list[Example], entry_point: str) -> str:
    """A ``check(candidate)`` that runs each example and stops at the first that fails,
    saying which call it was and what came back or what it raised (the sandbox's harness runs
    it: only data crosses)."""
    body = [SAME + f"def check(candidate):\n    {entry_point} = candidate"]
    for ex in examples:
        said, wanted = f"{ex.call} returned ", f", expected {ex.expected}"
        raised = f"{ex.call} raised "
        body.append(
            f"    try:\n"
            f"        _got = {ex.call}\n"
            f"    except Exception as _error:\n"
            f"        _why = type(_error).__name__ + ': ' + str(_error)\n"
            f"        raise AssertionError({raised!r} + _why + {wanted!r}) from None\n"
            f"    assert _same(_got, {ex.expected}), {said!r} + repr(_got) + {wanted!r}"
        )
    return "\n".join(body) + "\n"


#: Probe calls a behaviour signature runs at most (a sandbox run serves them all).
PROBES = 16


def _variants(value: Any) -> list[Any]:
    """Small, deterministic changes to one literal argument: neighbours of a number, a string
    or list shortened, reversed, emptied or grown by its own first item. Magnitudes stay near
    the stated ones, so a slow but right program is not told apart from a fast one."""
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value + 1, value - 1, 0]
    if isinstance(value, float):
        return [value + 0.5, -value, 0.0]
    if isinstance(value, (str, list, tuple)):
        seq: Any = value  # one of the three; each slices and grows as the others do
        return [seq[::-1], seq[1:], seq + seq[:1], seq[:0]]
    if isinstance(value, dict):
        keys = list(value)
        return [{k: value[k] for k in keys[1:]}, {}] if keys else []
    return []


def probe_calls(examples: list[Example], entry_point: str, limit: int = PROBES) -> list[str]:
    """Calls of ``entry_point`` on inputs near the stated examples' (one argument changed at a
    time, taken in turn from each example and argument), none a stated call: what two programs
    that both pass the examples do differently shows there (AlphaCode and MBR-exec cluster
    programs by their outputs on such inputs). Only literals, as the examples are."""
    per_example: list[list[str]] = []
    stated = {ex.call for ex in examples}
    for ex in examples:
        node = ast.parse(ex.call, mode="eval").body
        assert isinstance(node, ast.Call)
        args = [ast.literal_eval(a) for a in node.args]
        calls: list[str] = []
        for i, arg in enumerate(args):
            for changed in _variants(arg):
                text = ", ".join(repr(changed if j == i else a) for j, a in enumerate(args))
                call = f"{entry_point}({text})"
                if call not in stated:
                    calls.append(call)
        per_example.append(calls)
    found: list[str] = []
    for turn in range(max((len(c) for c in per_example), default=0)):
        for calls in per_example:
            if turn < len(calls) and calls[turn] not in found and len(found) < limit:
                found.append(calls[turn])
    return found


def behaviour_tests(calls: list[str], entry_point: str) -> str:
    """A ``check(candidate)`` that returns what each probe call gave back (its value's repr,
    floats to 6 places; or the name of what it raised) instead of asserting anything: the
    program's behaviour as data, for a vote among programs."""
    body = [
        "def _norm(x):",
        "    if isinstance(x, float):",
        "        return round(x, 6) if x == x else 'nan'",
        "    if isinstance(x, (list, tuple)):",
        "        return type(x)(_norm(i) for i in x)",
        "    if isinstance(x, dict):",
        "        return {k: _norm(v) for k, v in x.items()}",
        "    return x",
        "",
        f"def check(candidate):\n    {entry_point} = candidate\n    seen = []",
    ]
    for call in calls:
        body.append(
            f"    try:\n"
            f"        seen.append(repr(_norm({call}))[:400])\n"
            f"    except Exception as _error:\n"
            f"        seen.append('raised ' + type(_error).__name__)"
        )
    body.append("    return seen")
    return "\n".join(body) + "\n"
