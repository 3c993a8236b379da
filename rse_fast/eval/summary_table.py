"""The study's table as Markdown: one row per method and budget, and the notes that say how
to read it and what the runs cost."""

from __future__ import annotations

import math
from typing import Any

from rse_fast.eval.findings import budget_text
from rse_fast.eval.runner import SINGLE
from rse_fast.llm.cost import TOKENS, CostModel


def verdicts_text(checks: dict[str, Any]) -> str:
    counts = ", ".join(f"{n} {v}" for v, n in sorted(checks.items()) if v != "refuted_share")
    return f"{checks['refuted_share']:.0%} refuted ({counts})"


def _fmt(x: Any, pct: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if pct:
        return f"{100 * x:.0f}%"
    return f"{x:.2f}" if isinstance(x, float) else str(x)


def _ci(x: list[float] | None) -> str:
    return "" if not x else f" [{100 * x[0]:.0f}, {100 * x[1]:.0f}]"


RHO_LABEL = {
    "verifier-vs-exact": "ρ_v",
    "verifier-vs-grader": "ρ_v",
    "self-agreement": "self-agreement",
}


def markdown_table(summary: dict[str, Any]) -> str:
    """The study's table, one row per method and budget, and the notes that read it."""
    rows = summary["rows"]
    notes = [*_reading_notes(summary), *_pair_notes(summary), *_run_notes(summary)]
    return "\n".join(_table_lines(rows)) + ("\n\n" + "\n\n".join(notes) if notes else "")


def _table_lines(rows: list[dict[str, Any]]) -> list[str]:
    head = (
        "| method | budget | tokens (overshoot MAE / max / spread) | final Q [95% CI] | "
        "oracle Q* | single μ | "
        "headroom Q*−μ | Q−Q* | capture h | ρ_v (pools) | diversity (cos dist) | "
        "garbage judge/grade | explore share |\n" + "|---" * 13 + "|"
    )
    lines = [head]
    for r in rows:
        rho = _fmt(r["rho_v"])
        if r["rho_v"] is not None:
            label = RHO_LABEL.get(r["rho_v_kind"] or "", "ρ_v")
            by = f", {r['verifier_kind']}" if r.get("verifier_kind") else ""
            rho = f"{rho} ({r['rho_v_pools']}{by})" + ("" if label == "ρ_v" else f" {label}")
        lines.append(
            f"| {r['method']} | {budget_text(r)} | {r['tokens']:.0f} "
            f"({_fmt(r['overshoot_mae'], True)} / {_fmt(r['overshoot_max'], True)} / "
            f"{_fmt(r['overshoot_spread'], True)}) | {_fmt(r['final'], True)}"
            f"{_ci(r['final_ci95'])} "
            f"| {_fmt(r['oracle'], True)} | {_fmt(r['single'], True)} | "
            f"{_fmt(r['headroom'], True)} | {_fmt(r['net_exploitation'], True)} | "
            f"{_fmt(r['capture'], True)} | {rho} | {_fmt(r['diversity'])} | "
            f"{r['judge_garbage']}/{r['grade_garbage']} | {_fmt(r['exploration_share'], True)} |"
        )
    return lines


def _reading_notes(summary: dict[str, Any]) -> list[str]:
    """How to read the columns: corrections, self-agreement, fits, clipping, capture."""
    rows = summary["rows"]
    notes = []
    if any(r["oracle_corrected"] for r in rows):
        notes.append(
            "Q* is bias-corrected in closed form from two independent grader readings per "
            "candidate (i.i.d. Gaussian candidates; see eval.metrics.oracle_bias_corrected)."
        )
    if any(r["rho_v_kind"] == "self-agreement" for r in rows):
        notes.append(
            "The verifier and the grader are the same model behind the same endpoint: the ρ "
            "column is its self-agreement, not ρ_v. Pass --grader-url/--grader-model."
        )
    for family, fit in (summary.get("h_vs_rho_v") or {}).items():
        notes.append(
            f"h vs ρ_v for {family} over {fit['points']} budgets: h = {fit['intercept']:.2f} + "
            f"{fit['slope']:.2f}·ρ_v, R² = {fit['r2']:.2f}."
        )
    simple = [r for r in rows if r.get("final_simple_evals") is not None]
    if simple:
        notes.append(
            "Final Q clips each response's score to [0, 1]; HealthBench's overall score as "
            "OpenAI's simple-evals computes it (per-example scores unclipped, the mean "
            "clipped): "
            + "; ".join(
                f"{r['method']}@{budget_text(r)} {_fmt(r['final_simple_evals'], True)}"
                for r in simple
            )
        )
    small = [r for r in rows if r.get("capture_note")]
    if small:
        notes.append(
            "Capture h not reported (–) where the headroom Q*−μ is below 0.05: "
            + "; ".join(f"{r['method']}@{budget_text(r)} ({r['capture_note']})" for r in small)
        )
    return notes


def _pair_notes(summary: dict[str, Any]) -> list[str]:
    """Methods paired at matched spend, and each against single samples."""
    notes = []
    matched = [p for p in summary["paired"] if p["b"] != SINGLE]
    if matched:
        unit = summary.get("cost_unit", "tokens")
        label = (
            TOKENS.label
            if unit == "tokens"
            else CostModel.parse(unit).label
            if unit == ("time")
            else "$"
        )
        notes.append(
            f"Methods compared at matched actual spend in {unit} (mean spend within ±10%, "
            "nominal budgets may differ), paired by problem, 95% CI: "
            + "; ".join(
                f"{p['a']}@{p['tokens_a']:,.4g} − {p['b']}@{p['tokens_b']:,.4g} {label} "
                f"{100 * p['diff']:+.0f}{_ci(p['ci95'])}"
                for p in matched
            )
        )
    paired = [p for p in summary["paired"] if p["b"] == SINGLE]
    if paired:
        notes.append(
            "Gain over single samples (paired by problem, 95% CI): "
            + "; ".join(
                f"{p['a']}@{budget_text(p)} {100 * p['diff']:+.0f}{_ci(p['ci95'])}" for p in paired
            )
        )
    return notes


def _run_notes(summary: dict[str, Any]) -> list[str]:
    """What the runs cost and saw: cache, wall time, the grader's check, the checker."""
    rows = summary["rows"]
    notes = []
    for key, intro, shown in (
        (
            "cached_share",
            "Prompt tokens the server's prefix cache served (what a price with a cached-input "
            "rate bills less; `--cost price:...` pairs methods by it): ",
            "{:.0%}",
        ),
        (
            "wall_s",
            "Wall seconds a problem's run took (SC and best-of-N run once at their largest "
            "budget, cut to the smaller ones): ",
            "{:.0f} s",
        ),
    ):
        having = [r for r in rows if r.get(key) is not None]
        if having:
            notes.append(
                intro
                + "; ".join(
                    f"{r['method']}@{budget_text(r)} {shown.format(r[key])}" for r in having
                )
            )
    check = summary.get("grader_check")
    if check and check.get("agreement") is not None:
        notes.append(
            f"The grader against hand verdicts on {check['items']} bundled criteria "
            f"({check['readings']} readings): agreement {check['agreement']:.0%}"
            f"{_ci(check['ci95'])}, {check['on_met']:.0%} where the criterion is met and "
            f"{check['on_not_met']:.0%} where it is not; {check['garbage']} without a verdict."
        )
    twin = (check or {}).get("per_criterion")
    if twin and twin.get("agreement") is not None:
        notes.append(
            f"The same grader reading criterion by criterion on those criteria: agreement "
            f"{twin['agreement']:.0%}{_ci(twin['ci95'])}, {twin['on_met']:.0%} where met and "
            f"{twin['on_not_met']:.0%} where not."
        )
    reads = summary.get("reads_check")
    if reads:
        notes.append(
            f"Whole-rubric readings against criterion-by-criterion readings of the same "
            f"{reads['responses']} responses ({reads['verdicts']} verdicts): agreement "
            f"{reads['agreement']:.0%}{_ci(reads['ci95'])}; met {reads['met_share_rubric']:.0%} "
            f"vs {reads['met_share_criterion']:.0%}; {reads['without_verdict']} without one."
        )
    if summary.get("unreadable"):
        notes.append(f"Unreadable result lines (not counted): {', '.join(summary['unreadable'])}")
    checked = [r for r in rows if r.get("checks")]
    if checked:
        notes.append(
            "The checker's verdicts on distilled statements (a refuted proposition reached no "
            "prompt): "
            + "; ".join(
                f"{r['method']}@{budget_text(r)} {verdicts_text(r['checks'])}" for r in checked
            )
        )
    for r in (r for r in rows if r["accuracy_per_round"]):
        acc = ", ".join(_fmt(a, True) for a in r["accuracy_per_round"])
        notes.append(f"{r['method']} @{budget_text(r)}: accuracy per round {acc}")
    return notes
