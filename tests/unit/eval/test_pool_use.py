"""What the shared pool saved a run: counted per record where the runner kept the pool's
counters, bounded from the files where it did not."""

from __future__ import annotations

import json

import pytest

from rse_fast.eval.datasets import load_dataset
from rse_fast.eval.pool_use import describe, pool_use
from rse_fast.eval.runner import EvalPlan, run_eval
from rse_fast.eval.summary import load_records
from rse_fast.llm import LLMClient
from rse_fast.llm.sample_pool import PooledReply, SamplePool
from rse_fast.methods import make_method
from rse_fast.testing import ScriptedServer
from rse_fast.util.version import code_version

from fakes.scripted_tts import reply


def arithmetic(tmp_path):
    data = tmp_path / "mine.jsonl"
    rows = [{"id": f"q{i}", "problem": "What is 6 times 7?", "answer": "42"} for i in range(2)]
    data.write_text("\n".join(json.dumps(r) for r in rows))
    return load_dataset(f"jsonl:{data}")


def reply_with(tokens: int) -> PooledReply:
    return PooledReply({"usage": {"completion_tokens": tokens}}, 2.0, "http://x")


def test_the_bound_from_the_files(tmp_path):
    path = tmp_path / "pool.jsonl"
    pool = SamplePool(path)
    pool.put({"seed": 1}, reply_with(30))
    pool.put({"seed": 2}, reply_with(10))
    records = [
        {"method": "sc", "spend": {"completion_tokens": 100, "time_s": 9.0}},
        {"method": "sc", "spend": {"completion_tokens": 60}, "cut_from_larger": True},
        {"method": "bon", "spend": {"completion_tokens": 60, "time_s": 3.0}},
    ]
    use = pool_use(records, path)
    assert use is not None
    assert (use["pooled_replies"], use["pooled_completion_tokens"]) == (2, 40)
    assert (use["charged_completion_tokens"], use["charged_server_s"]) == (160, 12.0)
    assert use["saved_share_at_most"] == pytest.approx(1 - 40 / 160)
    assert "saved_share" not in use and "at most 75%" in describe(use)
    assert pool_use(records, tmp_path / "none.jsonl") is None


async def test_a_run_counts_what_its_pool_answered(tmp_path):
    ds = arithmetic(tmp_path)
    methods = [make_method(n, parallel=4, max_tokens=128) for n in ("sc", "bon")]
    plan = EvalPlan(methods, [600, 1500], tmp_path / "run", verifier="judge")
    pool = SamplePool(plan.out / "sample_pool.jsonl")
    async with ScriptedServer(default_reply=reply) as srv:
        async with LLMClient(srv.base_url, "m") as client:
            await run_eval(ds, plan, client.with_options(samples=pool))
    records = load_records(plan.results_path)
    bon = [r for r in records if r["method"] == "bon" and not r["cut_from_larger"]]
    # best-of-N asks what self-consistency asked: its samples come from the pool
    assert all(r["sample_pool"]["hits"] >= 4 for r in bon)
    assert all(r["sample_pool"]["saved_completion_tokens"] > 0 for r in bon)
    cut = [r for r in records if r.get("cut_from_larger")]
    assert cut and all(r["sample_pool"]["hits"] == 0 for r in cut)  # counted once
    use = pool_use(records, plan.out / "sample_pool.jsonl")
    assert use is not None and 0 < use["saved_share"] <= use["saved_share_at_most"]
    assert sum(r["sample_pool"]["hits"] for r in records if "sample_pool" in r) == pool.hits
    assert json.dumps(use)  # plain JSON for the summary
    assert all(r["code"] == code_version() for r in records)  # each names its code
