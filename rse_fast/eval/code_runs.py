"""Code in a reply, and running it: the fenced blocks a reply holds, the code a HumanEval
problem's reply completes, and that code run on the problem's stated examples, on probe
inputs (its behaviour) and on its hidden tests, each in the sandbox (``eval.sandbox``)."""

from __future__ import annotations

import hashlib
import json
import re
import textwrap

from rse_fast.eval.sandbox import Limits, SandboxResult, run_tests
from rse_fast.methods.types import Problem, VisibleResult

PYTHON_TAGS = ("", "python", "py", "python3", "py3")


def code_blocks(text: str) -> list[str]:
    """The Python code blocks of a reply, in order, each dedented: fenced by lines that open
    with three backticks (indented too: a block inside a list item), tagged as
    ``PYTHON_TAGS`` or untagged; a block tagged otherwise (``output``, ``text``) is not
    code, and a block never closed (the reply was cut off) is not a block."""
    return _read_fences(text)[0]


def ends_inside_code_block(text: str) -> bool:
    """Whether the reply stops inside a Python block it opened (it was cut off there), read
    by the same fences as :func:`code_blocks`."""
    tag = _read_fences(text)[1]
    return tag is not None and tag in PYTHON_TAGS


def _read_fences(text: str) -> tuple[list[str], str | None]:
    """The closed Python blocks, and the tag of a block still open at the end (None: none)."""
    blocks: list[str] = []
    tag: str | None = None  # the open block's tag; None outside a block
    lines: list[str] = []
    for line in text.splitlines():
        fence = line.strip()
        if not fence.startswith("```"):
            if tag is not None:
                lines.append(line)
            continue
        if tag is not None:
            if tag in PYTHON_TAGS:
                blocks.append(textwrap.dedent("\n".join(lines) + "\n"))
            tag = None
            if fence == "```":
                continue  # a closing fence; one with a tag closes and opens
        tag, lines = fence[3:].strip().lower().split(" ")[0], []
    return blocks, tag


def humaneval_code(problem: Problem, text: str) -> str:
    """The response's code: its last code block that defines the function (a later block
    is often its usage or printed output), else its last block (:func:`code_blocks`), the
    stub prepended if the function is missing; a reply with no block is taken as code."""
    defines = re.compile(rf"^\s*def\s+{re.escape(problem.meta['entry_point'])}\s*\(", re.M)
    blocks = code_blocks(text)
    code = next((b for b in reversed(blocks) if defines.search(b)), blocks[-1]) if blocks else text
    if not defines.search(code):
        code = problem.meta["stub"] + code
    return code


#: One stated example's time limit: an example the code loops on fails as that call, with
#: the line it was running, instead of the whole run timing out unnamed.
VISIBLE_CALL_S = 2.0


def passes_visible(problem: Problem, text: str, timeout_s: float = 5.0) -> VisibleResult | None:
    """Whether the response's code passes the examples the problem states (None: it states
    none), with the first failure: the same sandbox as grading, with those examples in place
    of the hidden tests, each within ``VISIBLE_CALL_S``."""
    tests = problem.meta.get("visible_tests")
    if not tests:
        return None
    code = humaneval_code(problem, text)
    result = _run_code(problem, code, tests, timeout_s, call_timeout_s=VISIBLE_CALL_S)
    examples = int(problem.meta.get("visible_examples") or 0)
    reason, detail = result.reason, result.detail
    if reason == "load-error" and not code_blocks(text):
        reason = "no-code"
        detail = (
            "its code block was never closed (the reply was cut off)"
            if ends_inside_code_block(text)
            else f"the reply has no code block and its text is not Python ({detail})"
        )
    return VisibleResult(
        result.passed,
        detail,
        code=code,
        examples=examples,
        reason=reason,
        where=_code_line(code, result.line) if reason != "no-code" else "",
    )


#: One probe call's time limit: a probe a program cannot answer in it (prime_fib(0) loops
#: for ever in a right program) answers TimeoutError, and the other probes still run.
PROBE_CALL_S = 0.25


def behaviour_of(problem: Problem, text: str, timeout_s: float = 6.0) -> str | None:
    """What the response's program does on inputs near the stated examples', as a short
    digest two programs share when they gave back the same on every probe (None: the problem
    has no probes). Code that does not load, or that the sandbox stopped, has a digest of its
    own kind: programs that fail alike count together, apart from those that ran. Each probe
    has ``PROBE_CALL_S`` (16 of them fit in the run's ``timeout_s``)."""
    tests = problem.meta.get("probe_tests")
    if not tests:
        return None
    code = humaneval_code(problem, text)
    result = _run_code(problem, code, tests, timeout_s, call_timeout_s=PROBE_CALL_S)
    seen = result.value if result.passed else [result.reason]
    return hashlib.sha256(json.dumps(seen).encode()).hexdigest()[:16]


def _run_code(
    problem: Problem, code: str, tests: str, timeout_s: float, call_timeout_s: float = 0.0
) -> SandboxResult:
    """``code`` served from the sandbox, ``tests`` run here with the problem's own helpers."""
    return run_tests(
        code,
        tests,
        problem.meta["entry_point"],
        helpers=problem.meta["stub"],
        limits=Limits(timeout_s=timeout_s, call_timeout_s=call_timeout_s),
    )


def _code_line(code: str, line: int | None) -> str:
    """``line 7: if is_prime(i):``, the line a failure was raised at ("" when unknown)."""
    lines = code.splitlines()
    if line is None or not 0 < line <= len(lines):
        return ""
    text = lines[line - 1].strip()
    return f"line {line}: {text[:120]}" if text else f"line {line}"


def run_humaneval(problem: Problem, text: str, timeout_s: float = 10.0) -> float:
    """1.0 if the response's code passes the problem's tests: the code serves calls from the
    sandbox, the tests (with the problem's own helpers, from its stub) run here."""
    result = _run_code(problem, humaneval_code(problem, text), problem.meta["test"], timeout_s)
    return 1.0 if result.passed else 0.0
