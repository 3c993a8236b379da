"""Compute-normalised runner: every method × budget × problem, one JSONL record each, resumable
and shardable.

Methods that can (SC, BoN) generate once at the largest budget and are subsampled for the
smaller ones. μ comes from ``single_samples`` independent plain samples per problem, drawn once
(their own record, outside every method's budget), never from a method's pool. True quality:
the dataset's verifier (exact), or for open-ended tasks the rubric grader (``eval.grading``),
read twice per candidate with independent samples on its own ledger so the report can correct
the oracle for the grader's noise.
"""

from __future__ import annotations

import hashlib
import math
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rse_fast.encoder import Encoder
from rse_fast.eval.datasets import Dataset
from rse_fast.eval.grading import RubricGrader, reading_seed
from rse_fast.eval.metrics import mean_pairwise_cosine_distance, spearman
from rse_fast.eval.records import (
    Shard,
    append_record,
    read_records,
    repair_torn_tail,
    results_file,
)
from rse_fast.llm.client import LLMClient
from rse_fast.llm.cost import spend_summary
from rse_fast.llm.ledger import Ledger
from rse_fast.methods import Method, MethodResult, Problem
from rse_fast.util.tasks import gather_or_cancel
from rse_fast.util.version import code_version

SINGLE = "single"  # the method name of the μ record


@dataclass
class EvalPlan:
    """What to run. ``grader`` grades open-ended tasks (required for them); ``verifier`` names
    the judge the methods use, so ρ_v is reported as such only when the grader differs."""

    methods: Sequence[Method]
    budgets: Sequence[float]  # in each method's ``budget_unit`` (tokens unless told)
    out: Path
    grader: RubricGrader | None = None
    verifier: str | None = None
    single_samples: int = 4
    shard: Shard | None = None

    @property
    def results_path(self) -> Path:
        return results_file(self.out, self.shard)


async def _qualities(
    ds: Dataset, problem: Problem, texts: list[str], plan: EvalPlan
) -> tuple[list[float], list[float], list[float]]:
    """Two independent quality readings per text (the same exact value for verifiable tasks),
    and per text the mean of its unclipped readings (HealthBench's negative points)."""
    if ds.kind != "rubric":
        q = [ds.grade(problem, t) for t in texts]
        return q, q, q
    if plan.grader is None:
        raise ValueError(f"{ds.name} is open-ended: the plan needs a rubric grader")
    grader = plan.grader

    async def both(text: str) -> tuple[tuple[float, float], tuple[float, float]]:
        # the second reading right after the first: its prompts are still in the cache
        first = await grader.grade_both(problem, text, seed=reading_seed(text, 0))
        return first, await grader.grade_both(problem, text, seed=reading_seed(text, 1))

    readings = await gather_or_cancel(both(t) for t in texts)
    first, second = [a[0] for a, _ in readings], [b[0] for _, b in readings]
    raw = _truth([a[1] for a, _ in readings], [b[1] for _, b in readings])
    return first, second, raw


def _truth(first: list[float], second: list[float]) -> list[float]:
    return [
        (a + b) / 2 if a == a and b == b else (a if a == a else b)
        for a, b in zip(first, second, strict=True)
    ]


def _grader_name(ds: Dataset, plan: EvalPlan) -> str:
    if ds.kind != "rubric":
        return f"exact:{ds.name}"
    return plan.grader.identity if plan.grader else "none"


async def record_for(
    ds: Dataset,
    problem: Problem,
    result: MethodResult,
    plan: EvalPlan,
    encoder: Encoder | None,
    verifier: str | None = None,
    budget: float | None = None,
) -> dict[str, Any]:
    """One cell's record. ``budget``: the plan's budget as given, in the method's unit (a
    budget in dollars or seconds is carried as such; the run's ``result.budget`` is what it
    bought in tokens); default ``result.budget``."""
    pool = result.pool
    texts = [c.text for c in pool] + ([result.final.text] if result.final else [])
    q1, q2, raw = await _qualities(ds, problem, texts, plan)
    truth = _truth(q1, q2)
    pool_truth = truth[: len(pool)]
    judge = [c.scores.get("judge", math.nan) for c in pool]
    diversity = None
    if encoder is not None and len(pool) > 1:
        diversity = mean_pairwise_cosine_distance(encoder.encode([c.text for c in pool]))
    ledger = result.ledger
    cost = result.meta.get("cost")
    return {
        "problem": problem.id,
        "method": result.method,
        "budget": result.budget if budget is None else budget,
        "budget_unit": cost["unit"] if cost else "tokens",
        "tokens": result.tokens,
        # prompt (cached part apart), completion and server seconds: any cost unit, later
        "spend": spend_summary(ledger),
        "budget_error": cost["spent"] / cost["budget"] - 1 if cost else result.budget_error,
        "exploration_tokens": ledger.exploration_tokens,
        "exploitation_tokens": ledger.exploitation_tokens,
        "final_answer": result.final.answer if result.final else None,
        "final_quality": truth[-1] if result.final else 0.0,
        # unclipped (HealthBench can go below 0): simple-evals clips only the mean of these
        "final_quality_unclipped": raw[-1] if result.final else 0.0,
        # answer checks that overran their timeout or could not be evaluated (NaN qualities)
        "undecided_checks": sum(1 for q in truth if q != q),
        "pool_quality": pool_truth,
        "pool_quality_first": q1[: len(pool)],
        "pool_quality_second": q2[: len(pool)],
        "pool_origin": [c.origin for c in pool],
        "judge_scores": judge,
        "judge_garbage": sum(1 for j in judge if j != j) if any(c.scores for c in pool) else 0,
        "grade_garbage": sum(1 for x in q1 + q2 if x != x),
        "rho_v": spearman(judge, pool_truth) if any(j == j for j in judge) else None,
        "verifier": (verifier or plan.verifier) if any(c.scores for c in pool) else None,
        "grader": _grader_name(ds, plan),
        "diversity": diversity,
        "meta": {k: v for k, v in result.meta.items() if k != "scorer"},
        "load_1m": load_1m(),
        "code": code_version(),
    }


def load_1m() -> float | None:
    """The machine's 1-minute load average when a record is written (what ran beside the
    run: a report can tell a quiet run from a shared one); None where the OS has none."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


async def single_record(
    ds: Dataset, problem: Problem, plan: EvalPlan, client: LLMClient, method: Method
) -> dict[str, Any]:
    """μ for one problem: independent plain samples (seeds no method uses), graded like any
    candidate, on a ledger of their own (outside every method's budget)."""
    c = client.with_ledger(Ledger())
    texts = []
    for j in range(plan.single_samples):
        res = await c.chat(
            problem.messages(),
            role="single",
            seed=9_000_000 + j,
            temperature=method.temperature,
            max_tokens=method.max_tokens,
        )
        texts.append(res.text)
    client.speed.learn(c.ledger.records)  # a budget in seconds reads the server's speed
    q1, q2, _ = await _qualities(ds, problem, texts, plan)
    record: dict[str, Any] = {
        "problem": problem.id,
        "method": SINGLE,
        "budget": 0,
        "qualities": _truth(q1, q2),
        "tokens_per_sample": c.ledger.total_tokens / max(1, len(texts)),
        "spend": spend_summary(c.ledger),
        "grade_garbage": sum(1 for x in q1 + q2 if x != x),
        "grader": _grader_name(ds, plan),
        "load_1m": load_1m(),
        "code": code_version(),
    }
    if plan.grader is not None and plan.grader.reads == "rubric" and texts:
        record["reads_check"] = await reads_check(plan.grader, problem, texts[0])
    return record


async def reads_check(grader: RubricGrader, problem: Problem, text: str) -> dict[str, Any]:
    """A grader reading whole rubrics, beside the same reading made criterion by criterion
    (same text, same seed, same endpoint): the run's own sample of how far the cheaper
    reading agrees with the benchmarks' way (one μ sample a problem)."""
    seed = reading_seed(text, 0)
    whole = await grader.verdicts(problem, text, seed)
    apart = await grader.reading_as("criterion").verdicts(problem, text, seed)
    return {"rubric": whole, "criterion": apart}


async def run_eval(
    ds: Dataset,
    plan: EvalPlan,
    client: LLMClient,
    *,
    encoder: Encoder | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Run what is missing from this plan's results file; returns its path. Each problem's
    calls carry seeds of its own (``problem_seed_offset``)."""
    base, say = client, progress or (lambda _line: None)
    plan.out.mkdir(parents=True, exist_ok=True)
    path = plan.results_path
    cut = repair_torn_tail(path)
    if cut:
        say(f"{path}: cut a torn last line ({cut} bytes) left by an interrupted run")
    existing = read_records([path]) if path.exists() else None
    done = existing.keys() if existing else set()
    for row in existing.rows if existing else []:
        if "spend" in row:  # a resumed run's budget in seconds reads the speed seen so far
            client.speed.learn_spend(row["spend"])
    if existing and existing.unreadable:
        say(
            f"{path}: {len(existing.unreadable)} unreadable line(s) "
            f"({', '.join(existing.unreadable[:3])}…): their cells run again"
        )
    problems = [p for p in ds.problems if plan.shard is None or plan.shard.holds(p.id)]
    budgets = sorted(set(plan.budgets))
    cells = [(p.id, m.name, b) for p in problems for m in plan.methods for b in budgets]
    cells += [(p.id, SINGLE, 0) for p in problems] if plan.single_samples > 0 else []
    finished = sum(c in done for c in cells)
    started, new = time.perf_counter(), 0

    def tick(line: str) -> None:
        nonlocal finished, new
        finished, new = finished + 1, new + 1
        eta = (time.perf_counter() - started) / new * (len(cells) - finished)
        say(f"[{finished}/{len(cells)} cells, ETA {_clock(eta)}] {line}")

    with open(path, "a", encoding="utf-8") as fh:
        for problem in problems:
            client = base.with_options(seed_offset=problem_seed_offset(problem.id))
            if plan.single_samples > 0 and (problem.id, SINGLE, 0) not in done:
                rec = await single_record(ds, problem, plan, client, plan.methods[0])
                append_record(fh, rec)
                tick(f"{problem.id} single samples: μ {_mean(rec['qualities']):.2f}")
            for method in plan.methods:
                todo = [b for b in budgets if (problem.id, method.name, b) not in done]
                if not todo:
                    continue
                runs = await _run_method(method, problem, todo, client)
                for budget, (res, seconds, pooled) in zip(todo, runs, strict=True):
                    rec = await record_for(
                        ds, problem, res, plan, encoder, verifier_of(method), budget
                    )
                    # model time of its own: a pool cut to a smaller budget took none (0.0)
                    rec.update(wall_s=seconds, cut_from_larger=seconds == 0.0)
                    if pooled is not None:  # what the shared pool answered this run
                        rec["sample_pool"] = pooled
                    append_record(fh, rec)
                    tick(
                        f"{problem.id} {method.name} @{budget:g}: {rec['tokens']} tokens, "
                        f"final {rec['final_quality']:.2f}"
                    )
    return path


def problem_seed_offset(problem_id: str) -> int:
    """A problem's seed offset, from its id: methods number their calls' seeds from the same
    base on every problem, and without it sample i of every problem would be drawn from one
    random stream (what that did to a run: docs/decisions.md)."""
    digest = hashlib.sha256(problem_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:3], "big") * 64


def _mean(xs: list[float]) -> float:
    vals = [x for x in xs if x == x]
    return sum(vals) / len(vals) if vals else math.nan


def _clock(seconds: float) -> str:
    seconds = int(max(0.0, seconds))
    return (
        f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
        if seconds >= 3600
        else (f"{seconds // 60}m{seconds % 60:02d}s")
    )


def verifier_of(method: Method) -> str | None:
    """Who scored a method's candidates, when it is not the plan's judge: a reward model is
    named ``reward:<url>`` (so ρ_v is labelled by the verifier actually used)."""
    judge = getattr(method, "judge", None)
    url = getattr(judge, "url", None)
    return f"reward:{url}" if isinstance(url, str) else None


async def _run_method(
    method: Method, problem: Problem, budgets: list[float], client: LLMClient
) -> list[tuple[MethodResult, float, dict[str, float] | None]]:
    """One result per budget (in the method's unit), in order, with the wall seconds its run
    took and what the sample pool answered for it: a family that can is run once at the
    largest and cut to the others (0.0 s, nothing pooled)."""
    if method.subsamples:
        top = max(budgets)
        full = await _timed(method.run(problem, top, client), client)
        nothing = None if full[2] is None else dict.fromkeys(full[2], 0.0)
        return [full if b == top else (method.subsample(full[0], b), 0.0, nothing)
                for b in budgets]  # fmt: skip
    return [await _timed(method.run(problem, b, client), client) for b in budgets]


async def _timed(
    run: Awaitable[MethodResult], client: LLMClient
) -> tuple[MethodResult, float, dict[str, float] | None]:
    pool = client.samples
    before = pool.tally() if pool is not None else None
    t0 = time.perf_counter()
    result = await run
    seconds = time.perf_counter() - t0
    if pool is None or before is None:
        return result, seconds, None
    now = pool.tally()
    return result, seconds, {k: now[k] - before[k] for k in now}
