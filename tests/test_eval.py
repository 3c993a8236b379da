"""Evaluation: metrics on hand-made pools, datasets, the resumable runner and the report."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rse_fast.eval.datasets import load_dataset, run_humaneval
from rse_fast.eval.metrics import (
    mean_pairwise_cosine,
    oracle,
    oracle_bias_corrected,
    recovered_headroom,
    spearman,
)
from rse_fast.eval.report import aggregate, load_records, write_report
from rse_fast.eval.runner import EvalPlan, run_eval
from rse_fast.llm.client import LLMClient
from rse_fast.methods import make_method
from rse_fast.testing import ScriptedServer

from fakes.scripted_tts import reply


def test_metrics_on_hand_made_pools():
    assert oracle([0, 0, 1, 0]) == 1 and oracle([]) == 0
    # noisy scores: argmax by the first reading (0.9) is reported with its second reading (0.5)
    assert oracle_bias_corrected([0.2, 0.9, 0.6], [0.3, 0.5, 0.7]) == 0.5
    assert recovered_headroom(final=0.6, single=0.4, oracle_q=0.9) == pytest.approx(0.4)
    assert recovered_headroom(final=0.6, single=0.9, oracle_q=0.9) is None
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(0.866, abs=1e-3)  # tied ranks
    assert spearman([1, 1, 1], [1, 2, 3]) is None
    assert spearman([1.0, float("nan"), 3.0], [1.0, 5.0, float("nan")]) is None  # n < 2 left
    e = np.eye(3, dtype=np.float32)
    assert mean_pairwise_cosine(e) == 0.0
    assert mean_pairwise_cosine(np.ones((3, 2)) / np.sqrt(2)) == pytest.approx(1.0)
    assert mean_pairwise_cosine(e[:1]) is None


def test_report_aggregates_headroom():
    recs = [
        {
            "problem": p,
            "method": "sc",
            "budget": 100,
            "tokens": 100,
            "budget_error": 0.0,
            "exploration_tokens": 100,
            "exploitation_tokens": 0,
            "final_quality": f,
            "pool_quality": pq,
            "pool_quality_first": pq,
            "pool_quality_second": pq,
            "pool_origin": ["sample"] * len(pq),
            "rho_v": None,
            "diversity": 0.5,
            "meta": {},
        }
        for p, f, pq in (("a", 1.0, [0.0, 1.0, 1.0, 0.0]), ("b", 0.0, [0.0, 0.0, 1.0, 0.0]))
    ]
    row = aggregate(recs)[0]
    # single = mean(0.5, 0.25) = 0.375; oracle = 1; final = 0.5 → (0.5-0.375)/(1-0.375) = 0.2
    assert row["single"] == pytest.approx(0.375) and row["oracle"] == 1.0
    assert row["headroom_recovered"] == pytest.approx(0.2)


def test_humaneval_grading_runs_tests_in_a_sandbox():
    ds = load_dataset("humaneval", limit=None)
    p = next(x for x in ds.problems if x.id == "HumanEval/0")
    good = (
        "```python\ndef has_close_elements(numbers, threshold):\n"
        "    return any(abs(a - b) < threshold for i, a in enumerate(numbers)"
        " for b in numbers[i + 1:])\n```"
    )
    assert run_humaneval(p, good) == 1.0
    assert run_humaneval(p, "```python\ndef has_close_elements(n, t):\n    return True\n```") == 0
    loop = "```python\ndef has_close_elements(n, t):\n    while True: pass\n```"
    assert run_humaneval(p, loop, timeout_s=2) == 0.0


def test_offline_datasets_load():
    assert len(load_dataset("mmath:math500").problems) == 311
    assert len(load_dataset("mmath:competition").problems) == 63
    sample = load_dataset("mmath:math500", limit=5, seed=1)
    assert [p.id for p in sample.problems] == [
        p.id for p in load_dataset("mmath:math500", 5, 1).problems
    ]
    gym = load_dataset("gym:basic_arithmetic", limit=3, seed=2)
    p = gym.problems[0]
    assert gym.grade(p, f"so \\boxed{{{p.gold}}}") == 1.0
    assert gym.grade(p, "\\boxed{not a number}") == 0.0
    hb = load_dataset("healthbench", limit=2)
    assert hb.kind == "rubric" and hb.problems[0].meta["rubric"]
    with pytest.raises(ValueError, match="unknown dataset"):
        load_dataset("nope")


async def test_runner_resumes_and_reports(tmp_path):
    data = tmp_path / "mine.jsonl"
    data.write_text(
        "\n".join(
            json.dumps({"id": f"q{i}", "problem": "What is 6 times 7?", "answer": "42"})
            for i in range(2)
        )
    )
    ds = load_dataset(f"jsonl:{data}")
    out = tmp_path / "run"
    methods = [
        make_method("sc", parallel=4, max_tokens=128),
        make_method("bon", parallel=4, max_tokens=128),
    ]
    plan = EvalPlan(methods, [600, 1500], out)
    async with ScriptedServer(default_reply=reply) as srv:
        async with LLMClient(srv.base_url, "m") as client:
            lines: list[str] = []
            await run_eval(ds, plan, client, progress=lines.append)
            first = len(srv.requests)
            assert len(lines) == 8 and lines[0].startswith("[1/8 problem×method×budget, ETA ")
            assert lines[-1].startswith("[8/8 problem×method×budget, ETA 0m00s]")
            await run_eval(ds, plan, client)  # everything is done: no new calls
            assert len(srv.requests) == first
    recs = load_records(plan.results_path)
    assert len(recs) == 2 * 2 * 2
    assert {(r["method"], r["budget"]) for r in recs} == {
        (m, b) for m in ("sc", "bon") for b in (600, 1500)
    }
    for r in recs:
        assert abs(r["budget_error"]) <= 0.15
    bon = [r for r in recs if r["method"] == "bon"]
    assert all(r["rho_v"] is not None and r["rho_v"] > 0.9 for r in bon)  # judge knows 42
    report = write_report(plan.results_path, out, "test")
    assert "| bon | 1,500 |" in report["table"]
    assert (out / "quality_vs_tokens.png").stat().st_size > 1000


async def test_a_torn_results_line_is_redone(tmp_path):
    data = tmp_path / "one.jsonl"
    data.write_text(json.dumps({"id": "q", "problem": "What is 6 times 7?", "answer": "42"}))
    ds = load_dataset(f"jsonl:{data}")
    plan = EvalPlan([make_method("sc", parallel=2, max_tokens=64)], [300], tmp_path / "r")
    plan.out.mkdir()
    plan.results_path.write_text('{"problem": "q", "method": "sc", "bud')  # interrupted write
    async with ScriptedServer(default_reply=reply) as srv, LLMClient(srv.base_url, "m") as c:
        await run_eval(ds, plan, c)
    assert len(load_records(plan.results_path)) == 1
