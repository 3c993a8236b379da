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


def test_sc_filter_picks_the_first_sample_that_passes_the_stated_examples() -> None:
    if not sandbox.bwrap_works(interpreter()):
        if os.environ.get("CI") == "true":
            pytest.fail("bubblewrap cannot run here; .ci/run installs it")
        pytest.skip("bubblewrap (bwrap) is not available: apt-get install bubblewrap")
    p = next(x for x in rse_grounded.humaneval().problems if x.id == "HumanEval/0")
    assert rse_grounded.filtered_pick(p, [WRONG, RIGHT, WRONG]) == RIGHT
    assert rse_grounded.filtered_pick(p, [WRONG, WRONG]) == WRONG  # none pass: all vote
    assert rse_grounded.visible_passes(p, [WRONG, RIGHT]) == [0.0, 1.0]


def test_verdicts_are_summed_over_problems_with_the_refuted_share() -> None:
    rows = [{"checks": {"verified": 3, "refuted": 1}}, {"checks": None}, {"checks": {"unknown": 4}}]
    got = rse_grounded.verdicts(rows)
    assert got == {"verified": 3, "refuted": 1, "unknown": 4, "refuted_share": 1 / 8}
    assert rse_grounded.verdicts([{}])["refuted_share"] is None


def test_the_readme_table_marks_a_running_cell_and_names_what_rse_is_compared_with() -> None:
    method = {"pass_rate": 0.5, "ci95": [0.25, 0.75], "cost_tokens": 7000.0, "wall_s": 120.0}
    cell = {
        "cell": "test-he-0.5b", "problems": 12, "planned_problems": 60, "partial": True,
        "methods": {"sc+filter": method, "rse+check": {**method, "pass_rate": 0.6}},
        "rse_checked_vs_sc_filtered": {"diff": 0.1, "ci95": [-0.05, 0.25]},
        "guided_vs_baseline_sample": {"diff": -0.02, "ci95": [-0.1, 0.06], "problems": 9,
                                      "measure": "stated examples passed"},
        "checks": {"verified": 10, "refuted_share": 0.0},
    }  # fmt: skip
    text = rse_grounded.table({"cells": [cell]})
    assert "| test-he-0.5b (12 of 60) | rse+check | 60% [25%, 75%] | 7,000 |" in text
    assert "rse+check − sc+filter +10.0% [-5.0%, +25.0%]" in text
    assert "rse+check's guided samples − sc's at the same positions (stated examples " in text
    assert "-2.0% [-10.0%, +6.0%], 9 problems" in text and "test-he-0.5b: refuted share 0%" in text
