"""The compute-normalised comparison on the embedded local model, and its committed summary.

    python bench/eval_local.py            # run (resumes) and summarise
    python bench/eval_local.py --summarise-only

Runs every method on a seeded reasoning-gym arithmetic set (2-3 terms, 1-2 digits: single
samples of qwen2.5-coder-0.5b are right ~40% of the time) at two budgets, writes
bench/results/eval_local/{results.jsonl,table.md,quality_vs_tokens.png} and
bench/results/eval_local.json (rows, settings, model, machine).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from rse_fast.eval.report import load_records, write_report

from common import write_result

OUT = Path(__file__).parent / "results" / "eval_local"
SETTINGS = {
    "methods": "sc,bon,beam,particle,refine,fusion,rse",
    "dataset": "gym:basic_arithmetic?min_terms=2&max_terms=3&min_digits=1&max_digits=2",
    "limit": 8,
    "seed": 7,
    "budgets": "800,2400",
    "max_tokens": 384,
    "parallel": 4,
    "model": "qwen2.5-coder-0.5b (Q4 GGUF, llama.cpp llama-server, CPU)",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--summarise-only", action="store_true")
    args = parser.parse_args()
    if not args.summarise_only:
        s = SETTINGS
        subprocess.run(
            [
                sys.executable,
                "-m",
                "rse_fast.cli",
                "eval",
                "--methods",
                s["methods"],
                "--dataset",
                s["dataset"],
                "--limit",
                str(s["limit"]),
                "--seed",
                str(s["seed"]),
                "--budgets",
                s["budgets"],
                "--max-tokens",
                str(s["max_tokens"]),
                "--parallel",
                str(s["parallel"]),
                "--out",
                str(OUT),
            ],
            check=True,
        )
    title = "reasoning-gym basic_arithmetic (2-3 terms), qwen2.5-coder-0.5b on 2 CPU cores"
    report = write_report(OUT / "results.jsonl", OUT, title)
    records = load_records(OUT / "results.jsonl")
    per_problem = Counter(r["problem"] for r in records)
    problems = sorted(per_problem)
    complete = [p for p in problems if per_problem[p] == 7 * 2]
    path = write_result(
        "eval_local",
        {
            "settings": SETTINGS,
            "problems_with_records": len(problems),
            "problems_complete": len(complete),
            "rows": report["rows"],
        },
    )
    print(report["table"])
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
