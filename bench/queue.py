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
from dataclasses import dataclass
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


def progress(e: Entry) -> tuple[int, int]:
    """(problems done by every method of the cell, problems planned)."""
    cell = cells_of(e.bench)[e.cell]
    planned = int(cell.problems)
    folder = HERE / "results" / e.bench / e.cell
    if e.bench == "frontier":
        path = folder / "pools.jsonl"
        return (len(read_jsonl(path)) if path.exists() else 0), planned
    from bench.rse_ablation import CellRecords

    by_method = CellRecords.read(folder, tuple(cell.methods)).by_method
    return len(set.intersection(*(set(v) for v in by_method.values()))), planned


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--status", action="store_true", help="each cell's progress only")
    args = parser.parse_args()
    for e in entries():
        done, planned = progress(e)
        print(f"{e.bench}/{e.cell}: {done}/{planned}  ({e.why})", flush=True)
        if args.status or done >= planned:
            continue
        run = [sys.executable, "-m", "bench", e.bench, "--cell", e.cell]
        if subprocess.run(run).returncode != 0:
            raise SystemExit(f"{e.bench} --cell {e.cell} failed: the queue stops here")


if __name__ == "__main__":
    main()
