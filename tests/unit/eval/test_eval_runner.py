"""The runner: resumable, shardable, never silently lossy; μ from independent samples; ρ_v
named for what it is; open-ended tasks graded by a rubric grader."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from rse_fast.cli import main
from rse_fast.eval.datasets import load_dataset
from rse_fast.eval.grading import RubricGrader
from rse_fast.eval.records import Shard, read_records, repair_torn_tail
from rse_fast.eval.runner import SINGLE, EvalPlan, problem_seed_offset, run_eval
from rse_fast.eval.summary import load_records, write_report
from rse_fast.llm.client import LLMClient
from rse_fast.methods import make_method
from rse_fast.prompts import GRADER_SYSTEM
from rse_fast.testing import ScriptedServer

from fakes.scripted_tts import reply


def arithmetic(tmp_path, n: int = 2):
    data = tmp_path / "mine.jsonl"
    data.write_text(
        "\n".join(
            json.dumps({"id": f"q{i}", "problem": "What is 6 times 7?", "answer": "42"})
            for i in range(n)
        )
    )
    return load_dataset(f"jsonl:{data}")


async def test_runner_resumes_and_reports(tmp_path):
    ds = arithmetic(tmp_path)
    out = tmp_path / "run"
    methods = [
        make_method("sc", parallel=4, max_tokens=128),
        make_method("bon", parallel=4, max_tokens=128),
    ]
    plan = EvalPlan(methods, [600, 1500], out, verifier="judge")
    async with ScriptedServer(default_reply=reply) as srv:
        async with LLMClient(srv.base_url, "m") as client:
            lines: list[str] = []
            await run_eval(ds, plan, client, progress=lines.append)
            first = len(srv.requests)
            assert len(lines) == 10 and lines[0].startswith("[1/10 cells, ETA ")
            assert lines[-1].startswith("[10/10 cells, ETA 0m00s]")
            await run_eval(ds, plan, client)  # everything is done: no new calls
            assert len(srv.requests) == first
    recs = load_records(plan.results_path)
    singles = [r for r in recs if r["method"] == SINGLE]
    assert len(recs) == 2 * 2 * 2 + 2 and len(singles) == 2
    assert all(len(r["qualities"]) == 4 for r in singles)
    # each problem's calls carry its own seeds: the same numbering, moved by its offset
    offsets = [problem_seed_offset(p.id) for p in ds.problems]
    assert offsets[0] != offsets[1]
    seeds = [b["seed"] for b in srv.requests if "seed" in b]
    singles = {9_000_000 + j + off for off in offsets for j in range(4)}
    assert singles <= set(seeds) and len(singles) == 8
    for off in offsets:  # sample i of each problem, from a stream of its own
        assert {off + i for i in range(4)} <= set(seeds)
    assert sum(s in singles for s in seeds) == 8  # no method drew a single sample's seed
    for r in recs:
        if r["method"] != SINGLE:
            assert abs(r["budget_error"]) <= 0.15
            # sc and bon run once at 1,500 and are cut to 600: the cut took no time of its own
            assert (r["wall_s"] > 0) == (r["budget"] == 1500) == (not r["cut_from_larger"])
        assert r["load_1m"] is None or r["load_1m"] >= 0
    bon = [r for r in recs if r["method"] == "bon"]
    assert all(r["rho_v"] is not None and r["rho_v"] > 0.9 for r in bon)  # judge knows 42
    report = write_report(plan.results_path, out, "test")
    assert "| bon | 1,500 |" in report["table"]
    assert "Wall seconds a problem's run took" in report["table"] and "bon@1,500" in report["table"]
    row = next(r for r in report["rows"] if r["method"] == "bon")
    assert row["rho_v_kind"] == "verifier-vs-exact" and row["single_problems"] == 2
    assert (out / "quality_vs_tokens.png").stat().st_size > 1000
    # the judge here knows the answer: a ρ_v far from the study's 0.12, said so beside it
    rho = next(f for f in report["findings"] if f["claim"] == "selection is near random")
    assert rho["verdict"] == "disagrees"
    assert "## Beside the study" in (out / "table.md").read_text()
    # no encoder here, so no diversity: a figure with nothing to draw is not written
    assert set(report["figures"]) == {"quality_vs_tokens", "capture", "net_exploitation",
                                      "capture_vs_rho"}  # fmt: skip
    page = Path(report["page"]).read_text()
    assert all(f'src="{Path(p).name}"' in page and Path(p).stat().st_size > 1000
               for p in report["figures"].values())  # fmt: skip


def test_a_torn_last_line_is_truncated_in_place(tmp_path):
    path = tmp_path / "results.jsonl"
    whole = json.dumps({"problem": "a", "method": "sc", "budget": 1}) + "\n"
    path.write_text(whole + '{"problem": "b", "meth')
    inode = os.stat(path).st_ino
    assert repair_torn_tail(path) == len('{"problem": "b", "meth')
    assert path.read_text() == whole and os.stat(path).st_ino == inode
    assert repair_torn_tail(path) == 0


def test_an_unreadable_line_is_counted_not_skipped_silently(tmp_path):
    path = tmp_path / "results.jsonl"
    good = json.dumps({"problem": "a", "method": "sc", "budget": 1})
    path.write_text(f"{good}\nnot json at all\n{good}\n")
    recs = read_records([path])
    assert len(recs.rows) == 1 and recs.duplicates == 1
    assert recs.unreadable == [f"{path}:2"]


async def test_an_interrupted_run_redoes_only_the_torn_cell(tmp_path):
    ds = arithmetic(tmp_path, 1)
    plan = EvalPlan([make_method("sc", parallel=2, max_tokens=64)], [300], tmp_path / "r")
    plan.out.mkdir()
    plan.results_path.write_text('{"problem": "q0", "method": "sc", "bud')  # interrupted write
    async with ScriptedServer(default_reply=reply) as srv, LLMClient(srv.base_url, "m") as c:
        lines: list[str] = []
        await run_eval(ds, plan, c, progress=lines.append)
    assert "torn last line" in lines[0]
    assert len(load_records(plan.results_path)) == 2  # the sc cell and the μ record


def test_shards_split_problems_deterministically():
    ids = [f"p{i}" for i in range(200)]
    shards = [Shard(index=i, count=3) for i in (1, 2, 3)]
    owners = [[s.index for s in shards if s.holds(p)] for p in ids]
    assert all(len(o) == 1 for o in owners)  # every problem in exactly one shard
    sizes = [sum(o == [s.index] for o in owners) for s in shards]
    assert min(sizes) > 40
    assert Shard.parse("2/3") == shards[1]
    for bad in ("0/3", "4/3", "x", "1/0"):
        with pytest.raises(ValueError, match="i/N"):
            Shard.parse(bad)


async def test_shards_merge_into_one_report(tmp_path):
    ds = arithmetic(tmp_path, 6)
    out = tmp_path / "shared"
    async with ScriptedServer(default_reply=reply) as srv, LLMClient(srv.base_url, "m") as c:
        for i in (1, 2):
            plan = EvalPlan(
                [make_method("sc", parallel=2, max_tokens=64)],
                [300],
                out,
                single_samples=1,
                shard=Shard(index=i, count=2),
            )
            await run_eval(ds, plan, c)
    files = sorted(p.name for p in out.glob("results*.jsonl"))
    assert files == ["results.shard-1-of-2.jsonl", "results.shard-2-of-2.jsonl"]
    assert main(["eval", "report", str(out), "--out", str(tmp_path / "merged")]) == 0
    summary = json.loads((tmp_path / "merged" / "summary.json").read_text())
    assert summary["rows"][0]["problems"] == 6 and len(summary["sources"]) == 2


async def test_merged_report_writes_its_plot_beside_its_table_and_prints_where(tmp_path, capsys):
    ds = arithmetic(tmp_path, 4)
    out = tmp_path / "shared"
    async with ScriptedServer(default_reply=reply) as srv, LLMClient(srv.base_url, "m") as c:
        for i in (1, 2):
            plan = EvalPlan([make_method("sc", parallel=2, max_tokens=64)], [300, 600], out,
                            single_samples=1, shard=Shard(index=i, count=2))  # fmt: skip
            await run_eval(ds, plan, c)
    capsys.readouterr()
    assert main(["eval", "report", str(out)]) == 0
    printed = dict(
        line.split(": ", 1) for line in capsys.readouterr().out.splitlines()
        if line.startswith(("plot: ", "table: "))
    )  # fmt: skip
    plot, table = Path(printed["plot"]), Path(printed["table"])
    assert plot.exists() and table.exists() and plot.parent == table.parent == out


def rubric_reply(body: dict, index: int) -> str:
    """Policy answers; a grader that meets 'greets' when the response says hello."""
    if body["messages"][0]["content"] == GRADER_SYSTEM:
        user = body["messages"][-1]["content"]
        response = user.split("grade:\n", 1)[1].split("\n\nCriterion:", 1)[0]
        return json.dumps({"met": "hello" in response.lower()})
    if "Rate it" in str(body["messages"][-1]["content"]):
        return json.dumps({"score": 8 if "Hello" in body["messages"][-1]["content"] else 3})
    seed = int(body.get("seed") or 0)
    return "Hello there!" if seed % 2 else "Hi."


async def test_open_ended_eval_names_self_agreement(tmp_path):
    data = tmp_path / "open.jsonl"
    data.write_text(json.dumps({"id": "o", "prompt": "Greet me", "rubric": ["greets"]}))
    ds = load_dataset(f"jsonl:{data}")
    async with ScriptedServer(default_reply=rubric_reply) as srv:
        async with LLMClient(srv.base_url, "m") as c:
            plan = EvalPlan(
                [make_method("bon", parallel=2, max_tokens=64)],
                [800],
                tmp_path / "open",
                grader=RubricGrader(c),
                verifier=c.identity,  # the same endpoint and model grade and verify
                single_samples=2,
            )
            await run_eval(ds, plan, c)
    report = write_report(plan.results_path, plan.out, "open")
    row = report["rows"][0]
    assert row["oracle_corrected"] and row["rho_v_kind"] == "self-agreement"
    assert "self-agreement" in report["table"] and "not ρ_v" in report["table"]
    rec = next(r for r in load_records(plan.results_path) if r["method"] == "bon")
    assert rec["pool_quality_first"] and rec["grader"] == c.identity
    assert set(rec["pool_quality"]) <= {0.0, 1.0}  # met or not met, one criterion


async def test_open_ended_eval_without_a_grader_is_refused(tmp_path):
    data = tmp_path / "open.jsonl"
    data.write_text(json.dumps({"id": "o", "prompt": "Greet me", "rubric": ["greets"]}))
    ds = load_dataset(f"jsonl:{data}")
    plan = EvalPlan([make_method("bon", max_tokens=64)], [500], tmp_path / "x")
    async with ScriptedServer(default_reply=rubric_reply) as srv:
        async with LLMClient(srv.base_url, "m") as c:
            with pytest.raises(ValueError, match="rubric grader"):
                await run_eval(ds, plan, c)


async def test_eval_with_unevaluable_answers_finishes_and_counts_them_undecided(tmp_path):
    """Samples answering exponent towers: every check is undecided at once (no worker is
    tied up for hours), counted per record, and the run finishes."""
    data = tmp_path / "towers.jsonl"
    data.write_text(json.dumps({"id": "t", "problem": "How big?", "answer": "9^{9^{9^{9}}}"}))
    ds = load_dataset(f"jsonl:{data}")

    def towers(body: dict, index: int) -> str:
        return "It is \\boxed{8^{8^{8^{8}}}}."

    out = tmp_path / "run"
    t0 = asyncio.get_running_loop().time()
    async with ScriptedServer(default_reply=towers) as srv, LLMClient(srv.base_url, "m") as c:
        plan = EvalPlan([make_method("sc", parallel=2, max_tokens=64)], [400], out,
                        single_samples=1)  # fmt: skip
        await run_eval(ds, plan, c)
    assert asyncio.get_running_loop().time() - t0 < 20
    records = [json.loads(x) for x in plan.results_path.read_text().splitlines()]
    method_rows = [r for r in records if r.get("method") == "sc"]
    assert method_rows and all(r["undecided_checks"] >= 1 for r in method_rows)
    assert all(r["final_quality"] != r["final_quality"] for r in method_rows)  # NaN, not 0


async def test_an_open_ended_eval_checks_its_grader_on_hand_verdicts_once(tmp_path, capsys):
    """With a rubric grader, `rse-fast eval` reads the bundled hand-checked criteria once per
    results directory and the report says how far the grader agreed (this grader says "met"
    only to a greeting, so it is right exactly where the criterion is not met)."""
    data = tmp_path / "open.jsonl"
    data.write_text(json.dumps({"id": "o", "prompt": "Greet me", "rubric": ["greets"]}))
    out = tmp_path / "open"
    async with ScriptedServer(default_reply=rubric_reply) as srv:
        argv = [
            "eval",
            "--dataset",
            f"jsonl:{data}",
            "--methods",
            "bon",
            "--budgets",
            "800",
            "--base-url",
            srv.base_url,
            "--model",
            "m",
            "--grader-url",
            srv.base_url,
            "--single-samples",
            "1",
            "--max-tokens",
            "64",
            "--out",
            str(out),
            "--quiet",
        ]
        assert await asyncio.to_thread(main, argv) == 0
        asked = len(srv.requests)
        assert await asyncio.to_thread(main, argv) == 0  # resumed: no cell, no check again
        assert len(srv.requests) == asked
    check = json.loads((out / "grader_check.json").read_text())
    assert (check["on_met"], check["on_not_met"], check["garbage"]) == (0.0, 1.0, 0)
    table = capsys.readouterr().out
    assert "The grader against hand verdicts on 12 bundled criteria" in table
    assert "0% where the criterion is met and 100% where it is not" in table


async def test_eval_runs_a_family_with_and_without_a_modifier_side_by_side(tmp_path, capsys):
    """`--methods sc,sc+stop`: two methods, two rows, and the stop spends less where its vote
    settles (every scripted sample agrees); a bad name fails before any request."""
    data = tmp_path / "mine.jsonl"
    data.write_text(json.dumps({"id": "q", "problem": "What is 6 times 7?", "answer": "42"}))
    out = tmp_path / "mods"
    async with ScriptedServer(default_reply="It is \\boxed{42}.") as srv:
        argv = ["eval", "--dataset", f"jsonl:{data}", "--methods", "sc,sc+stop", "--budgets",
                "2000", "--base-url", srv.base_url, "--model", "m", "--single-samples", "1",
                "--max-tokens", "64", "--out", str(out), "--quiet"]  # fmt: skip
        assert await asyncio.to_thread(main, argv) == 0
        asked = len(srv.requests)
        bad = [*argv[:4], "sc,sc+later", *argv[5:]]
        with pytest.raises(SystemExit) as exc:
            await asyncio.to_thread(main, bad)
        assert exc.value.code == 2 and len(srv.requests) == asked
    assert "unknown modifier +later" in capsys.readouterr().err
    recs = {r["method"]: r for r in load_records(out / "results.jsonl") if r["method"] != SINGLE}
    assert set(recs) == {"sc", "sc+stop"}
    assert recs["sc+stop"]["tokens"] < recs["sc"]["tokens"] / 2
    assert all(r["final_quality"] == 1.0 for r in recs.values())


@pytest.mark.parametrize("cache", ["vllm", None])
async def test_the_report_says_what_share_of_the_prompt_the_cache_served(tmp_path, cache):
    """Each row's cached share is the server's own count over its prompts; a server that says
    nothing of its cache gets no share (not 0%)."""
    ds = arithmetic(tmp_path, 1)
    out = tmp_path / f"cache-{cache}"
    plan = EvalPlan([make_method("sc", parallel=4, max_tokens=64)], [600], out, single_samples=0)
    async with ScriptedServer(default_reply=reply, prefix_cache=cache) as srv:
        async with LLMClient(srv.base_url, "m") as client:
            await run_eval(ds, plan, client)
    (rec,) = [r for r in load_records(plan.results_path) if r["method"] == "sc"]
    report = write_report(plan.results_path, out, "test")
    (row,) = report["rows"]
    if cache is None:
        assert row["cached_share"] is None and "prefix cache served" not in report["table"]
        return
    spend = rec["spend"]
    assert 0 < spend["cached_prompt_tokens"] < spend["prompt_tokens"]
    assert row["cached_share"] == spend["cached_prompt_tokens"] / spend["prompt_tokens"]
    assert f"sc@600 {row['cached_share']:.0%}" in report["table"]
