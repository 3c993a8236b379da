"""The model runs in the order ``bench/cells/queue.toml`` gives, one at a time, each resumed
where it stopped and a finished cell skipped: one command keeps the local model busy across
sessions (``nohup python -m bench queue &``).

    python -m bench queue            # run what is left, in order
    python -m bench queue --status   # each cell's progress, nothing run
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import tomllib

from bench.common import read_jsonl

HERE = Path(__file__).parent
QUEUE = HERE / "cells" / "queue.toml"


@dataclass(frozen=True)
class Entry:
    bench: str
    cell: str
    why: str


def entries(path: Path = QUEUE) -> list[Entry]:
    """The queue, each entry checked against its bench's cells (a typo fails naming it)."""
    rows = tomllib.loads(path.read_text())["run"]
    out = [Entry(r["bench"], r["cell"], r.get("why", "")) for r in rows]
    for e in out:
        if e.cell not in cells_of(e.bench):
            raise ValueError(f"{path.name}: {e.bench} has no cell {e.cell!r}")
    return out


def cells_of(bench: str) -> dict[str, object]:
    from bench import frontier, rse_ablation, rse_grounded

    found = {"rse_ablation": rse_ablation.CELLS, "rse_grounded": rse_grounded.CELLS,
             "frontier": frontier.CELLS}  # fmt: skip
    if bench not in found:
        raise ValueError(
            f"the queue runs rse_ablation, rse_grounded and frontier cells, not {bench}"
        )
    return dict(found[bench])


def records(e: Entry) -> list[set[str]]:
    """The problems each method of the cell has a record of (a frontier cell: one pool)."""
    cell = cells_of(e.bench)[e.cell]
    folder = HERE / "results" / e.bench / e.cell
    if e.bench == "frontier":
        path = folder / "pools.jsonl"
        return [{r["id"] for r in read_jsonl(path)} if path.exists() else set()]
    from bench.rse_ablation import CellRecords

    by_method = CellRecords.read(folder, tuple(cell.methods)).by_method
    return [set(v) for v in by_method.values()]


def progress(e: Entry) -> tuple[int, int]:
    """(problems done by every method of the cell, problems planned)."""
    planned = int(cells_of(e.bench)[e.cell].problems)
    return len(set.intersection(*records(e))), planned


def written(e: Entry) -> int:
    """Records of the cell so far, every method's counted: what an attempt added."""
    return sum(len(ids) for ids in records(e))


def run_until_done(
    e: Entry, attempt: Callable[[], int], retries: int, done: Callable[[], int]
) -> None:
    """Run the cell (each attempt resumes it) until an attempt succeeds. A failed attempt is
    tried again up to ``retries`` times in a row while it adds no record (a transient
    failure, such as one call timing out on a loaded machine, costs one attempt, not the
    queue); an attempt that added records resets the count. Past that it stops, naming it."""
    failures, before = 0, done()
    while (code := attempt()) != 0:
        after = done()
        failures = 0 if after > before else failures + 1
        before = after
        if failures > retries:
            raise SystemExit(
                f"{e.bench} --cell {e.cell} failed (exit {code}) {failures} times in a row "
                "without writing a record: the queue stops here"
            )
        print(f"--- {e.bench} --cell {e.cell} failed (exit {code}): resuming it", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--status", action="store_true", help="each cell's progress only")
    parser.add_argument(
        "--retries", type=int, default=1,
        help="failed attempts in a row, writing no record, to resume before stopping",
    )  # fmt: skip
    args = parser.parse_args()
    for e in entries():
        done, planned = progress(e)
        print(f"{e.bench}/{e.cell}: {done}/{planned}  ({e.why})", flush=True)
        if args.status or done >= planned:
            continue
        run = [sys.executable, "-m", "bench", e.bench, "--cell", e.cell]
        attempt = partial(lambda cmd: subprocess.run(cmd).returncode, run)
        run_until_done(e, attempt, args.retries, partial(written, e))


if __name__ == "__main__":
    main()
