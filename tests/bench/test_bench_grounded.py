"""Issue 41's protocol: parts fixed and disjoint, sc+filter replayed through the library's own
filter from sc's pool, and the checker's verdicts summed as the JSON reports them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench import rse_grounded
from rse_fast.eval import sandbox
from rse_fast.eval.sandbox import interpreter

BENCH = Path(__file__).resolve().parents[2] / "bench"


RIGHT = (
    "```python\ndef has_close_elements(numbers, threshold):\n"
    "    return any(abs(a - b) < threshold for i, a in enumerate(numbers)"
    " for b in numbers[i + 1:])\n```"
)
WRONG = "```python\ndef has_close_elements(numbers, threshold):\n    return True\n```"


def test_the_parts_are_disjoint_and_hold_only_problems_that_state_examples() -> None:
    parts = rse_grounded.partition()
    assert {k: len(v) for k, v in parts.items()} == {"dev": 16, "test-0.5b": 60, "test-1.5b": 40}
    every = [i for ids in parts.values() for i in ids]
    assert len(set(every)) == len(every)
    stated = {p.id for p in rse_grounded.humaneval().problems if p.meta.get("visible_tests")}
    assert set(every) <= stated
    assert parts == rse_grounded.partition()  # fixed: the same on every call


def needs_bwrap() -> None:
    """The sandbox needs bubblewrap: a machine without it skips, CI fails (it installs it)."""
    if not sandbox.bwrap_works(interpreter()):
        if os.environ.get("CI") == "true":
            pytest.fail("bubblewrap cannot run here; .ci/run installs it")
        pytest.skip("bubblewrap (bwrap) is not available: apt-get install bubblewrap")


def test_sc_filter_picks_the_first_sample_that_passes_the_stated_examples() -> None:
    needs_bwrap()
    p = next(x for x in rse_grounded.humaneval().problems if x.id == "HumanEval/0")
    assert rse_grounded.filtered_pick(p, [WRONG, RIGHT, WRONG]) == RIGHT
    assert rse_grounded.filtered_pick(p, [WRONG, WRONG]) == WRONG  # none pass: all vote
    assert rse_grounded.visible_passes(p, [WRONG, RIGHT]) == [0.0, 1.0]


def test_the_summary_runs_each_samples_checks_once_and_probes_only_passers() -> None:
    """``warm_checks`` runs what the summary will read (on all cores), so the summary's rules
    (sc+filter, its stop, the behaviour vote, the guided comparison) each read a verdict the
    sandbox gave once; grades run for the first method's pool, probes only for passers."""
    needs_bwrap()
    p = next(x for x in rse_grounded.humaneval().problems if x.id == "HumanEval/2")
    right = "```python\ndef truncate_number(number):\n    return number % 1.0\n```"
    wrong = "```python\ndef truncate_number(number):\n    return 0.0\n```"
    recs = {"sc": {p.id: {"pool_texts": [right, wrong]}},
            "bon+filter": {p.id: {"pool_texts": ["not checked"]}}}  # fmt: skip
    p.visible_check.cache_clear()
    p.behaviour.cache_clear()
    rse_grounded.warm_checks([p], recs, "sc")
    assert p.visible_check.cache_info().currsize == 2  # bon's pool is read by no rule
    assert p.behaviour.cache_info().currsize == 1  # the passer alone
    ran = p.visible_check.cache_info().misses
    assert rse_grounded.visible_passes(p, [wrong, right]) == [0.0, 1.0]
    assert rse_grounded.filtered_pick(p, [wrong, right]) == right
    assert p.visible_check.cache_info().misses == ran
    ds = rse_grounded.humaneval()
    assert [rse_grounded.grade(ds, p, t) for t in (right, wrong)] == [1.0, 0.0]


def test_verdicts_are_summed_over_problems_with_the_refuted_share() -> None:
    rows = [{"checks": {"verified": 3, "refuted": 1}}, {"checks": None}, {"checks": {"unknown": 4}}]
    got = rse_grounded.verdicts(rows)
    assert got == {"verified": 3, "refuted": 1, "unknown": 4, "refuted_share": 1 / 8}
    assert rse_grounded.verdicts([{}])["refuted_share"] is None


def test_verdicts_by_kind_say_how_often_the_propositions_alone_were_wrong() -> None:
    rows = [
        {"checks_by_kind": {"positive": {"refuted": 1, "verified": 1}, "negative": {"unknown": 2}}},
        {"checks_by_kind": {"positive": {"refuted": 1, "unknown": 1}}},
        {"checks": {"unknown": 3}},  # a record from before the split
    ]
    got = rse_grounded.verdicts_by_kind(rows)
    assert got["positive"] == {"refuted": 2, "verified": 1, "unknown": 1, "refuted_share": 0.5}
    assert got["negative"] == {"unknown": 2, "refuted_share": 0.0}
    assert rse_grounded.verdicts_by_kind([{"checks": {"unknown": 1}}]) is None


def test_the_readme_table_marks_a_running_cell_and_names_what_rse_is_compared_with() -> None:
    method = {"pass_rate": 0.5, "ci95": [0.25, 0.75], "cost_tokens": 7000.0, "wall_s": 120.0}
    cell = {
        "cell": "test-he-0.5b", "problems": 12, "planned_problems": 60, "partial": True,
        "methods": {"sc+filter": method, "rse+check": {**method, "pass_rate": 0.6}},
        "rse_checked_vs_sc_filtered": {"diff": 0.1, "ci95": [-0.05, 0.25]},
        "guided_vs_baseline_sample": {"diff": -0.02, "ci95": [-0.1, 0.06], "problems": 9,
                                      "measure": "stated examples passed"},
        "checks": {"verified": 10, "refuted_share": 0.0},
        "distilled_problems": {"rse+check": 0},
    }  # fmt: skip
    text = rse_grounded.table({"cells": [cell]})
    # an arm whose bank the model never fed is named as such, not left to the JSON
    assert "test-he-0.5b: rse+check distilled with the model on 0 of 12 problems" in text
    assert "| test-he-0.5b (12 of 60) | rse+check | 60% [25%, 75%] | 7,000 |" in text
    assert "rse+check − sc+filter +10.0% [-5.0%, +25.0%]" in text
    assert "rse+check's guided samples − sc's at the same positions (stated examples " in text
    assert "-2.0% [-10.0%, +6.0%], 9 problems" in text
    # the share says how often; the counts say of how many, and how many had no verdict
    assert "test-he-0.5b: refuted share 0% of the checked statements (10 verified)" in text


def test_the_pooled_block_pairs_code_cells_and_pools_refutations_over_every_checked_cell():
    """rse+check − sc+filter over the code test cells, paired by problem; the guided-sample
    measure cell by cell, naming the code cells whose interval is above 0; the refuted share
    over every test cell's checked statements (a dev cell counts for none of them)."""

    def cell(name, split, per_problem, guided, checks, measure="stated examples passed"):
        return {"cell": name, "split": split, "per_problem": per_problem, "checks": checks,
                "guided_vs_baseline_sample": {"diff": guided[0], "ci95": guided[1],
                                              "problems": 3, "measure": measure}}  # fmt: skip

    two = {"rse+check": {"1": 1.0, "2": 0.0}, "sc+filter": {"1": 0.0, "2": 0.0}}
    code_a = cell("a", "test", two, (0.2, [0.05, 0.3]), {"verified": 6})
    code_b = cell("b", "test", {"rse+check": {"3": 1.0}, "sc+filter": {"3": 1.0}},
                  (-0.1, [-0.2, 0.1]), {"verified": 2})  # fmt: skip
    arith = cell("c", "test", {"rse": {"4": 1.0}, "rse+arith": {"4": 1.0}},
                 (0.0, [-0.1, 0.1]), {"verified": 6, "refuted": 2, "unknown": 4},
                 measure="answer right")  # fmt: skip
    dev = cell("d", "dev", {"rse+check": {"5": 0.0}, "sc+filter": {"5": 1.0}},
               (0.5, [0.4, 0.6]), {"refuted": 9})  # fmt: skip
    out = rse_grounded.pooled([code_a, code_b, arith, dev])
    assert out["problems"] == 3
    assert out["rse_checked_vs_sc_filtered"]["diff"] == pytest.approx(1 / 3)
    assert out["guided_vs_baseline_sample"]["code_cells_above_zero"] == ["a"]
    assert set(out["guided_vs_baseline_sample"]["by_cell"]) == {"a", "b", "c"}
    assert out["refuted_share"] == pytest.approx(2 / 20)
    assert out["checked_statements"] == 20
