"""The compute-normalised comparison on the embedded local model, and its committed summary.

    python -m bench eval_local                   # both parts (resumes), then summarize
    python -m bench eval_local --part verifiable
    python -m bench eval_local --summarize-only

Part *verifiable*: every method on a seeded reasoning-gym arithmetic set (2-3 terms, 1-2 digits:
single samples of qwen2.5-coder-0.5b are right ~40% of the time) at two budgets; quality is
exact, so Q* needs no correction and ρ_v is the judge against the checker.

Part *healthbench*: a seeded HealthBench subset (conversations with roles, signed-points
rubrics), the open-ended methods (best-of-N, refinement, fusion) at one budget, graded
criterion by criterion by a *second* local model (smollm2-135m) distinct from the verifier (the
policy model judging itself). On this machine the grader is far weaker than the study's ~400B
grader, so its readings are noisy and ρ_v here measures agreement between two small models,
not the verifier's agreement with true quality.

Writes bench/results/eval_local/ and bench/results/eval_local_healthbench/ (results.jsonl,
table.md, summary.json, quality_vs_tokens.png) and bench/results/eval_local.json.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.common import write_result
from rse_fast.eval.summary import write_report

RESULTS = Path(__file__).parent / "results"
MODEL = "qwen2.5-coder-0.5b (Q4 GGUF, llama.cpp llama-server, CPU)"
PARTS: dict[str, dict[str, Any]] = {
    "healthbench": {
        "out": RESULTS / "eval_local_healthbench",
        "methods": "bon,refine,fusion",
        "dataset": "healthbench",
        "limit": 3,
        "seed": 7,
        "budgets": "3000",
        "max_tokens": 384,
        "parallel": 4,
        "single_samples": 2,
        "grader": "smollm2-135m",
        "title": "HealthBench (3 prompts), qwen2.5-coder-0.5b; grader smollm2-135m (distinct)",
    },
    "verifiable": {
        "out": RESULTS / "eval_local",
        "methods": "sc,bon,beam,particle,refine,fusion,rse",
        "dataset": "gym:basic_arithmetic?min_terms=2&max_terms=3&min_digits=1&max_digits=2",
        "limit": 8,
        "seed": 7,
        "budgets": "800,2400",
        "max_tokens": 384,
        "parallel": 4,
        "single_samples": 4,
        "title": "reasoning-gym basic_arithmetic (2-3 terms), qwen2.5-coder-0.5b, 2 CPU cores",
    },
}


def command(part: dict[str, Any], grader_url: str | None, grader_model: str | None) -> list[str]:
    cmd = [sys.executable, "-m", "rse_fast.cli", "eval"]
    for key in ("methods", "dataset", "limit", "seed", "budgets", "max_tokens", "parallel"):
        cmd += [f"--{key.replace('_', '-')}", str(part[key])]
    cmd += ["--single-samples", str(part["single_samples"]), "--out", str(part["out"])]
    cmd += ["--title", part["title"]]
    if grader_url:
        cmd += ["--grader-url", grader_url, "--grader-model", grader_model or "default"]
    return cmd


async def run_part(name: str) -> None:
    part = PARTS[name]
    if "grader" not in part:
        subprocess.run(command(part, None, None), check=True)
        return
    from rse_fast.local.server import LocalServer

    async with LocalServer(part["grader"], parallel=4) as grader:
        proc = await asyncio.create_subprocess_exec(
            *command(part, grader.base_url, grader.model_name)
        )
        if await proc.wait() != 0:
            raise SystemExit(f"eval part {name} failed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=sorted(PARTS), action="append")
    parser.add_argument("--summarize-only", action="store_true")
    args = parser.parse_args()
    names = args.part or list(PARTS)
    if not args.summarize_only:
        for name in names:
            asyncio.run(run_part(name))
    summary: dict[str, Any] = {"model": MODEL, "parts": {}}
    for name, part in PARTS.items():
        if not (part["out"] / "results.jsonl").exists():
            continue
        report = write_report(part["out"] / "results.jsonl", part["out"], part["title"])
        settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in part.items()}
        summary["parts"][name] = {
            "settings": settings,
            "rows": report["rows"],
            "paired": report["paired"],
            "h_vs_rho_v": report["h_vs_rho_v"],
            "unreadable": report["unreadable"],
        }
        print(report["table"])
    path = write_result("eval_local", summary)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
