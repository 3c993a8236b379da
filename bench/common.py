"""Shared helpers for the benchmarks: timing, machine description, result files."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import tomllib

from rse_fast.eval.records import repair_torn_tail

RESULTS = Path(__file__).parent / "results"
ROOT = Path(__file__).resolve().parents[1]
CELLS_DIR = ROOT / "bench" / "cells"
CellT = TypeVar("CellT")


def module_command(module: str, *args: str) -> list[str]:
    """``python -m module args``: how a benchmark starts a process of its own (one of its
    modules, or the package's), run with the project root as its working directory, which
    ``-m`` puts first on ``sys.path`` (so ``bench`` imports there, with no PYTHONPATH)."""
    return [sys.executable, "-m", module, *args]


def start_ready(
    cmd: list[str], ready: str = "READY", cores: set[int] | None = None
) -> tuple[subprocess.Popen[str], str]:
    """Start ``cmd`` (on ``cores`` only, when given: every thread and child inherits them) and
    wait for its first line, which must carry ``ready``: the process and that line."""

    def pin() -> None:
        if cores:
            os.sched_setaffinity(0, cores)

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, preexec_fn=pin, cwd=ROOT)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if ready not in line:
        proc.kill()
        raise RuntimeError(f"{cmd[:4]} did not start: {line!r}")
    return proc, line.strip()


def best_time(fn: Callable[[], object], repeat: int = 3, min_time: float = 0.0) -> float:
    """Best wall time of ``fn`` over ``repeat`` runs (and at least ``min_time`` seconds total)."""
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < repeat or time.perf_counter() - start < min_time:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    mem_gib = None
    with contextlib.suppress(ValueError, OSError, AttributeError):
        mem_gib = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    load = None
    with contextlib.suppress(OSError, AttributeError):
        load = round(os.getloadavg()[0], 2)
    return {
        "cpu": cpu,
        "cores": cores,
        "memory_gib": mem_gib,
        "python": platform.python_version(),
        "platform": platform.platform(),
        # > cores: something else was running (a local-model run): speed ratios are suspect
        "load_avg_1m": load,
    }


def measured_on(cells: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The machine a summary's cells ran on (each cell keeps the machine it started on): the
    first cell's, with the highest load any cell started under, and the other CPUs named
    where cells ran on several; None without cells."""
    machines = [c["machine"] for c in cells if c.get("machine")]
    if not machines:
        return None
    first = dict(machines[0])
    loads = [m["load_avg_1m"] for m in machines if m.get("load_avg_1m") is not None]
    first["load_avg_1m"] = max(loads) if loads else None
    others = sorted({str(m.get("cpu")) for m in machines} - {str(first.get("cpu"))})
    if others:
        first["also_on"] = others
    return first


def read_result(name: str) -> dict[str, Any]:
    """The committed ``results/<name>.json`` ({} when it has not been written)."""
    path = RESULTS / f"{name}.json"
    return dict(json.loads(path.read_text())) if path.exists() else {}


def write_result(
    name: str, payload: dict[str, Any], measured_on: dict[str, Any] | None = None
) -> Path:
    """``results/<name>.json``: the payload, the machine and when. A summary of records
    measured earlier (model cells) passes the machine they were measured on
    (``measured_on``: a cell's ``machine``), and says when it was summarized: the machine
    summarizing them is not what the numbers ran on."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    stamp = (
        {"machine": machine(), "measured_at": now}
        if measured_on is None
        else {"machine": measured_on, "summarized_at": now}
    )
    payload = {**stamp, **payload}
    path.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n")
    return path


def replace_readme_block(name: str, body: str, heading: str) -> None:
    """Put ``body`` between ``<!-- name:start -->`` and ``<!-- name:end -->`` in bench/README.md
    (appended under ``heading`` the first time)."""
    readme = Path(__file__).parent / "README.md"
    text = readme.read_text() if readme.exists() else "# Benchmarks\n"
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    block = f"{start}\n{body}\n{end}"
    if start in text:
        head, rest = text.split(start, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip() + f"\n\n{heading}\n\n{block}\n"
    readme.write_text(text)


def read_jsonl(path: Path, *, repair: bool = False) -> list[dict[str, Any]]:
    """The records of an append-only JSONL file. A last line cut off by a writer that was
    killed is skipped; with ``repair`` it is also cut from the file, by the evaluation's own
    rule (``repair_torn_tail``), so the next record appended starts on a line of its own. A
    bad line anywhere else raises."""
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    rows: list[dict[str, Any]] = []
    for k, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError:
            if k != len(lines) - 1:
                raise
            if repair:
                repair_torn_tail(path)
    return rows


def load_cells(bench: str, make: Callable[..., CellT]) -> dict[str, CellT]:
    """A benchmark's cells, data in ``bench/cells/<bench>.toml`` (what each is for in its
    ``why``), task names resolved through ``bench/cells/tasks.toml``. A field the cell type
    does not know fails here, naming the cell."""
    tasks = tomllib.loads((CELLS_DIR / "tasks.toml").read_text())["tasks"]
    cells = tomllib.loads((CELLS_DIR / f"{bench}.toml").read_text())["cells"]
    out: dict[str, CellT] = {}
    for name, fields in cells.items():
        if fields["task"] not in tasks:
            raise ValueError(f"cell {name!r} of {bench}: unknown task {fields['task']!r}")
        fields = {**fields, "task": tasks[fields["task"]]}
        if "methods" in fields:
            fields["methods"] = tuple(fields["methods"])
        try:
            out[name] = make(**fields)
        except TypeError as exc:
            raise ValueError(f"cell {name!r} of {bench}: {exc}") from exc
    return out
