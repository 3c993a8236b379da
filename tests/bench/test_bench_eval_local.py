"""Issue 42's run as the bench drives it: the user's recipe (``rse-fast eval`` on the local
model, shardable), and a summary that carries the findings beside the paper, the figures,
the grader's check and the load the records were written under."""

from __future__ import annotations

import json

from bench import eval_local
from rse_fast.eval.datasets import load_dataset
from rse_fast.eval.runner import EvalPlan, run_eval
from rse_fast.llm import LLMClient
from rse_fast.methods import make_method
from rse_fast.testing import ScriptedServer

from fakes.scripted_tts import reply


def test_each_part_is_the_recipe_a_user_runs_with_the_issues_settings():
    """Issue 59's protocol: the 0.5B on the verifiable task, all seven families at three
    budgets, at least 40 problems; HealthBench with at least 16 conversations, best-of-N,
    refinement and fusion at two budgets, the 1.5B grading."""
    verifiable, health = eval_local.PARTS["verifiable"], eval_local.PARTS["healthbench"]
    assert verifiable["limit"] >= 40 and health["limit"] >= 16
    for part, least in ((verifiable, 3), (health, 2)):
        budgets = [int(b) for b in part["budgets"].split(",")]
        assert len(budgets) >= least and max(budgets) >= 4 * min(budgets)
    assert verifiable["model"] == health["model"] == "qwen2.5-coder-0.5b"
    assert set(verifiable["methods"].split(",")) == {
        "sc", "bon", "beam", "particle", "refine", "fusion", "rse"}  # fmt: skip
    assert {"bon", "refine", "fusion"} <= set(health["methods"].split(","))
    assert health["grader"] != health["model"]
    cmd = eval_local.command(health, "2/4", "http://grader/v1")
    assert cmd[cmd.index("--local-model") + 1] == "qwen2.5-coder-0.5b"
    assert cmd[cmd.index("--shard") + 1] == "2/4"
    assert cmd[cmd.index("--grader-model") + 1] == "qwen2.5-coder-1.5b"


async def test_a_part_is_summarized_with_findings_figures_and_load(tmp_path, monkeypatch):
    data = tmp_path / "q.jsonl"
    data.write_text("\n".join(
        json.dumps({"id": f"q{i}", "problem": "What is 6 times 7?", "answer": "42"})
        for i in range(2)
    ))  # fmt: skip
    out = tmp_path / "eval_local"
    part = {**eval_local.PARTS["verifiable"], "out": out}
    monkeypatch.setitem(eval_local.PARTS, "verifiable", part)
    written: dict[str, dict] = {}
    monkeypatch.setattr(eval_local, "write_result", lambda name, s: written.setdefault(name, s))
    assert eval_local.summarize("verifiable") is None  # nothing ran yet
    methods = [make_method("sc", max_tokens=96), make_method("bon", max_tokens=96)]
    plan = EvalPlan(methods, [500, 1000, 2000], out, single_samples=1)
    async with ScriptedServer(default_reply=reply) as srv, LLMClient(srv.base_url, "m") as c:
        await run_eval(load_dataset(f"jsonl:{data}"), plan, c)
    summary = eval_local.summarize("verifiable")
    assert summary is not None and written["eval_local"] is summary
    assert summary["load"]["records"] == 2 * 2 * 3 + 2  # every record says its load
    figures = summary["figures"].values()
    assert figures and all(p.startswith("results/eval_local/") for p in figures)
    assert all((out / p.rsplit("/", 1)[1]).stat().st_size > 1000 for p in figures)
    text = eval_local.table(summary)
    assert text.startswith("**Marked:**")  # the part's mark leads its block
    families = text.split("| family |", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    assert len(families) == len(summary["rows"]) == 2 * 3  # every family at every budget
    assert any(r.startswith("| sc | 2,000 |") for r in families)
    rows = text.split("| finding |", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    assert len(rows) == len(summary["findings"]) >= 5
    assert any("exploration scales" in r for r in rows)
