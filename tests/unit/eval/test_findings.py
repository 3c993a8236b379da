"""The study's findings beside a run: each rule can agree, disagree or not tell, and says so
when the run has nothing to judge it by."""

from __future__ import annotations

from typing import Any

from rse_fast.eval.findings import findings, findings_table


def row(method: str, budget: int, **fields: Any) -> dict[str, Any]:
    base = {"method": method, "budget": budget, "oracle": None, "final": None, "single": None,
            "capture": None, "rho_v": None, "rho_v_kind": "verifier-vs-grader",
            "diversity": None}  # fmt: skip
    return {**base, **fields}


def verdicts(rows: list[dict[str, Any]], fits: dict[str, Any] | None = None) -> dict[str, str]:
    return {f["claim"]: f["verdict"] for f in findings({"rows": rows, "h_vs_rho_v": fits or {}})}


def test_exploration_agrees_when_every_family_rises_and_disagrees_on_a_clear_fall():
    rising = [row("bon", 1000, oracle=0.5, oracle_ci95=[0.4, 0.6]), row("bon", 4000, oracle=0.7),
              row("fusion", 1000, oracle=0.4), row("fusion", 4000, oracle=0.45)]  # fmt: skip
    assert verdicts(rising)["exploration scales"] == "agrees"
    falling = [*rising[:2], row("refine", 1000, oracle=0.6, oracle_ci95=[0.55, 0.65]),
               row("refine", 4000, oracle=0.5)]  # fmt: skip
    assert verdicts(falling)["exploration scales"] == "disagrees"
    flat = [*rising[:2], row("refine", 1000, oracle=0.6, oracle_ci95=[0.5, 0.7]),
            row("refine", 4000, oracle=0.58)]  # fmt: skip
    assert verdicts(flat)["exploration scales"] == "cannot tell"


def test_selection_is_judged_by_rho_v_and_never_by_self_agreement():
    weak = [row("bon", 1000, rho_v=0.1), row("bon", 4000, rho_v=0.2)]
    assert verdicts(weak)["selection is near random"] == "agrees"
    assert verdicts([row("bon", 1000, rho_v=0.8)])["selection is near random"] == "disagrees"
    own = [row("bon", 1000, rho_v=0.1, rho_v_kind="self-agreement")]
    assert verdicts(own)["selection is near random"] == "not run"


def test_capture_follows_rho_needs_three_points_and_a_positive_fitting_slope():
    claim = "best-of-N's capture follows ρ_v"
    assert verdicts([], {"bon": {"slope": 1.1, "r2": 0.5, "points": 3}})[claim] == "agrees"
    assert verdicts([], {"bon": {"slope": -0.2, "r2": 0.5, "points": 4}})[claim] == "disagrees"
    assert verdicts([], {"bon": {"slope": 1.1, "r2": 0.1, "points": 4}})[claim] == "cannot tell"
    assert verdicts([], {"bon": {"slope": 1.1, "r2": 0.9, "points": 2}})[claim] == "not run"


def test_tree_search_diversity_is_compared_with_best_of_n_at_the_same_budget():
    claim = "tree search collapses diversity"
    bon = [row("bon", 1000, diversity=0.12), row("bon", 4000, diversity=0.10)]
    lower = [row("particle", 1000, diversity=0.05), row("beam", 4000, diversity=0.06)]
    assert verdicts(bon + lower)[claim] == "agrees"
    higher = [row("particle", 1000, diversity=0.2), row("beam", 4000, diversity=0.3)]
    assert verdicts(bon + higher)[claim] == "disagrees"
    assert verdicts([*bon, row("particle", 2000, diversity=0.01)])[claim] == "not run"


def test_one_run_cannot_tell_how_often_refinement_helps_but_says_whether_it_did_here():
    found = findings({"rows": [row("refine", 1000, final=0.7, final_ci95=[0.62, 0.78],
                                   single=0.5)]})  # fmt: skip
    refine = next(f for f in found if f["claim"] == "refinement helps rarely")
    assert refine["verdict"] == "cannot tell" and "(helps)" in refine["ours"]


def test_fusion_capture_near_the_studys_forty_percent_agrees():
    claim = "fusion recovers some headroom"
    assert (
        verdicts([row("fusion", 1000, capture=0.35), row("fusion", 4000, capture=0.45)])[claim]
        == "agrees"
    )
    assert verdicts([row("fusion", 1000, capture=0.95)])[claim] == "disagrees"
    assert verdicts([row("sc", 1000)])[claim] == "not run"


def test_the_table_has_a_row_per_finding():
    found = findings({"rows": [], "h_vs_rho_v": {}})
    table = findings_table(found)
    assert len(found) == 6 and table.count("\n") == 7
    assert all(line.endswith("| not run |") for line in table.splitlines()[2:])
