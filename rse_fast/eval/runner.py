"""Compute-normalised runner: every method × budget × problem, one JSONL record each, resumable.

Methods that can (SC, BoN) generate once at the largest budget and are subsampled for the
smaller ones. True quality: the dataset's verifier, or (open-ended tasks) a rubric judge scoring
every candidate twice with different seeds on its own ledger, outside every method's budget.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rse_fast.encoder import Encoder
from rse_fast.eval.datasets import Dataset
from rse_fast.eval.metrics import mean_pairwise_cosine, spearman
from rse_fast.eval.report import load_records
from rse_fast.llm.client import LLMClient
from rse_fast.llm.ledger import Ledger
from rse_fast.methods import Method, MethodResult, Problem
from rse_fast.methods.judge import LLMJudge


@dataclass
class EvalPlan:
    methods: Sequence[Method]
    budgets: Sequence[int]
    out: Path
    grader: LLMJudge = field(default_factory=LLMJudge)
    grader_client: LLMClient | None = None  # defaults to the policy client

    @property
    def results_path(self) -> Path:
        return self.out / "results.jsonl"


def _drop_torn_tail(path: Path) -> None:
    """An interrupted run may leave half a line at the end: cut it so appends stay valid."""
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        path.write_bytes(data[: data.rfind(b"\n") + 1])


def _done(path: Path) -> set[tuple[str, str, int]]:
    """Keys already recorded; a torn last line (interrupted run) is skipped and redone."""
    if not path.exists():
        return set()
    return {
        (r["problem"], r["method"], int(r["budget"]))
        for r in load_records(path)
        if {"problem", "method", "budget"} <= r.keys()
    }


async def _qualities(
    ds: Dataset, problem: Problem, texts: list[str], plan: EvalPlan, client: LLMClient
) -> tuple[list[float], list[float]]:
    """Two independent quality readings per text (identical for verifiable tasks)."""
    if ds.kind != "rubric":
        q = [ds.grade(problem, t) for t in texts]
        return q, q
    grader = (plan.grader_client or client).with_ledger(Ledger())
    rubric = problem.meta.get("rubric") or []
    out: list[list[float]] = [[], []]
    for seed in (0, 1):
        for t in texts:
            s = await plan.grader.score(grader, problem.prompt, t, rubric=rubric, seed=seed)
            out[seed].append((s - 1) / 9 if s is not None else math.nan)
    return out[0], out[1]


async def record_for(
    ds: Dataset,
    problem: Problem,
    result: MethodResult,
    plan: EvalPlan,
    client: LLMClient,
    encoder: Encoder | None,
) -> dict[str, Any]:
    pool = result.pool
    texts = [c.text for c in pool] + ([result.final.text] if result.final else [])
    q1, q2 = await _qualities(ds, problem, texts, plan, client)
    pool_q1, pool_q2 = q1[: len(pool)], q2[: len(pool)]
    final_q = (q1[-1] + q2[-1]) / 2 if result.final else 0.0
    judge = [c.scores.get("judge", math.nan) for c in pool]
    diversity = None
    if encoder is not None and len(pool) > 1:
        diversity = mean_pairwise_cosine(encoder.encode([c.text for c in pool]))
    ledger = result.ledger
    return {
        "problem": problem.id,
        "method": result.method,
        "budget": result.budget,
        "tokens": result.tokens,
        "budget_error": result.budget_error,
        "exploration_tokens": ledger.exploration_tokens,
        "exploitation_tokens": ledger.exploitation_tokens,
        "final_answer": result.final.answer if result.final else None,
        "final_quality": final_q,
        "pool_quality": [(a + b) / 2 for a, b in zip(pool_q1, pool_q2, strict=True)],
        "pool_quality_first": pool_q1,
        "pool_quality_second": pool_q2,
        "pool_origin": [c.origin for c in pool],
        "judge_scores": judge,
        "rho_v": spearman(judge, pool_q1) if any(j == j for j in judge) else None,
        "diversity": diversity,
        "meta": {k: v for k, v in result.meta.items() if k != "scorer"},
    }


async def run_eval(
    ds: Dataset,
    plan: EvalPlan,
    client: LLMClient,
    *,
    encoder: Encoder | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Run what is missing from ``results.jsonl``; returns its path."""
    plan.out.mkdir(parents=True, exist_ok=True)
    _drop_torn_tail(plan.results_path)
    done = _done(plan.results_path)
    budgets = sorted(set(plan.budgets))
    cells = [(p.id, m.name, b) for p in ds.problems for m in plan.methods for b in budgets]
    finished = sum(c in done for c in cells)
    started, new = time.perf_counter(), 0
    with open(plan.results_path, "a", encoding="utf-8") as fh:
        for problem in ds.problems:
            for method in plan.methods:
                todo = [b for b in budgets if (problem.id, method.name, b) not in done]
                if not todo:
                    continue
                results = await _run_method(method, problem, todo, client)
                for res in results:
                    rec = await record_for(ds, problem, res, plan, client, encoder)
                    fh.write(json.dumps(rec, default=str) + "\n")
                    fh.flush()
                    os.fsync(fh.fileno())
                    finished, new = finished + 1, new + 1
                    if progress is not None:
                        eta = (time.perf_counter() - started) / new * (len(cells) - finished)
                        progress(
                            f"[{finished}/{len(cells)} problem×method×budget, ETA "
                            f"{_clock(eta)}] {problem.id} {method.name} @{res.budget}: "
                            f"{rec['tokens']} tokens, final {rec['final_quality']:.2f}"
                        )
    return plan.results_path


def _clock(seconds: float) -> str:
    seconds = int(max(0.0, seconds))
    return (
        f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
        if seconds >= 3600
        else (f"{seconds // 60}m{seconds % 60:02d}s")
    )


async def _run_method(
    method: Method, problem: Problem, budgets: list[int], client: LLMClient
) -> list[MethodResult]:
    if method.subsamples:
        full = await method.run(problem, max(budgets), client)
        return [full if b == full.budget else method.subsample(full, b) for b in budgets]
    return [await method.run(problem, b, client) for b in budgets]
