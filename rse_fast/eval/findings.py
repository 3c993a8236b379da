"""The study's findings ("TTS in the wild"), each set beside what a run of ours measured.

Each finding has a rule, written before any of our runs was read, that says whether the run
agrees, disagrees or cannot tell; a finding the run has no data for says so. The rules:

- exploration scales: every family's Q* at its largest budget above Q* at its smallest
  (agrees); some family's Q* at its largest below the low end of its smallest's interval
  (disagrees); else cannot tell.
- selection is near random (ρ_v ≈ 0.12): the mean ρ_v over the rows that measured it (never
  self-agreement) below 0.3 agrees, above 0.5 disagrees.
- best-of-N's capture follows ρ_v (slope ~1.2): best-of-N's fit of h on ρ_v with at least
  three points and R² ≥ 0.3 and a slope in [0.6, 2.4] agrees; a slope ≤ 0 disagrees.
- tree search collapses diversity (particle filtering 0.04–0.07 against best-of-N ~0.12):
  particle filtering's and beam search's mean diversity below best-of-N's at every budget
  they share agrees; above at every budget disagrees.
- refinement helps on one benchmark of five: one run is one benchmark, so this never agrees
  or disagrees; it reports whether refinement's final quality beat single samples here.
- fusion recovers ~40% of the headroom: fusion's mean capture h in [0.2, 0.6] agrees;
  outside [0.1, 0.8] disagrees.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from rse_fast.llm.cost import amount_text

Rows = list[dict[str, Any]]


def budget_text(row: dict[str, Any]) -> str:
    """A row's budget in its own unit (records in dollars or seconds say so)."""
    return amount_text(row["budget"], row.get("budget_unit", "tokens"))


@dataclass(frozen=True)
class Finding:
    claim: str
    paper: str
    ours: str
    verdict: str  # "agrees", "disagrees", "cannot tell", "not run"


def _family(rows: Rows, family: str) -> Rows:
    return sorted(
        (r for r in rows if r["method"].split(":")[0] == family), key=lambda r: r["budget"]
    )


def _families(rows: Rows) -> list[str]:
    return sorted({r["method"].split(":")[0] for r in rows})


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def exploration_scales(rows: Rows) -> Finding:
    claim, paper = "exploration scales", "Q* rises with budget for every family"
    rises: dict[str, float] = {}
    falls = []
    for family in _families(rows):
        mine = [r for r in _family(rows, family) if r.get("oracle") is not None]
        if len(mine) < 2:
            continue
        low, high = mine[0], mine[-1]
        rises[family] = high["oracle"] - low["oracle"]
        interval = low.get("oracle_ci95")
        if interval and high["oracle"] < interval[0]:
            falls.append(family)
    if not rises:
        return Finding(claim, paper, "no family ran at two budgets", "not run")
    ours = ", ".join(f"{f} {d:+.1%}" for f, d in rises.items())
    verdict = (
        "disagrees" if falls else "agrees" if all(d > 0 for d in rises.values()) else "cannot tell"
    )
    return Finding(claim, paper, f"Q*(largest) − Q*(smallest): {ours}", verdict)


def selection_near_random(rows: Rows) -> Finding:
    claim, paper = "selection is near random", "ρ_v ≈ 0.12 on open-ended tasks"
    rhos = [
        r["rho_v"]
        for r in rows
        if r.get("rho_v") is not None and r.get("rho_v_kind") != "self-agreement"
    ]
    rho = _mean(rhos)
    if rho is None:
        return Finding(claim, paper, "no ρ_v measured (or only self-agreement)", "not run")
    verdict = "agrees" if rho < 0.3 else "disagrees" if rho > 0.5 else "cannot tell"
    return Finding(claim, paper, f"mean ρ_v {rho:.2f} over {len(rhos)} rows", verdict)


def capture_follows_rho(fits: dict[str, Any]) -> Finding:
    claim, paper = "best-of-N's capture follows ρ_v", "h ≈ ρ_v, slope ~1.2 (R² 0.66)"
    fit = fits.get("bon")
    if not fit or fit["points"] < 3:
        return Finding(claim, paper, "fewer than three best-of-N points", "not run")
    ours = f"slope {fit['slope']:.2f}, R² {fit['r2']:.2f}, {fit['points']} points"
    if fit["slope"] <= 0:
        verdict = "disagrees"
    elif fit["r2"] >= 0.3 and 0.6 <= fit["slope"] <= 2.4:
        verdict = "agrees"
    else:
        verdict = "cannot tell"
    return Finding(claim, paper, ours, verdict)


def tree_search_collapses_diversity(rows: Rows) -> Finding:
    claim = "tree search collapses diversity"
    paper = "particle filtering 0.04–0.07 against best-of-N ~0.12"
    bon = {r["budget"]: r.get("diversity") for r in _family(rows, "bon")}
    below, above, parts = 0, 0, []
    for family in ("particle", "beam"):
        for r in _family(rows, family):
            theirs, ref = r.get("diversity"), bon.get(r["budget"])
            if theirs is None or ref is None:
                continue
            below += theirs < ref
            above += theirs > ref
            parts.append(f"{family}@{budget_text(r)} {theirs:.2f} vs {ref:.2f}")
    if not parts:
        return Finding(
            claim, paper, "no tree search beside best-of-N at a shared budget", "not run"
        )
    verdict = "agrees" if not above else "disagrees" if not below else "cannot tell"
    return Finding(claim, paper, "; ".join(parts), verdict)


def refinement_rarely_helps(rows: Rows) -> Finding:
    claim, paper = "refinement helps rarely", "above single samples on one benchmark of five"
    mine = [r for r in _family(rows, "refine") if r.get("final") is not None and r.get("single")]
    if not mine:
        return Finding(claim, paper, "refine not run", "not run")
    parts = []
    for r in mine:
        low = (r.get("final_ci95") or [r["final"]])[0]
        helps = "helps" if low > r["single"] else "does not help"
        parts.append(f"@{budget_text(r)}: Q {r['final']:.2f} vs μ {r['single']:.2f} ({helps})")
    return Finding(claim, paper, "; ".join(parts) + " (one benchmark)", "cannot tell")


def fusion_recovers_some_headroom(rows: Rows) -> Finding:
    claim, paper = "fusion recovers some headroom", "~40% of Q* − μ"
    h = _mean([r["capture"] for r in _family(rows, "fusion") if r.get("capture") is not None])
    if h is None:
        return Finding(claim, paper, "fusion not run, or no headroom to capture", "not run")
    verdict = "agrees" if 0.2 <= h <= 0.6 else "disagrees" if not 0.1 <= h <= 0.8 else "cannot tell"
    return Finding(claim, paper, f"mean capture h {h:.0%}", verdict)


RULES: tuple[Callable[[Rows], Finding], ...] = (
    exploration_scales,
    selection_near_random,
    tree_search_collapses_diversity,
    refinement_rarely_helps,
    fusion_recovers_some_headroom,
)


def findings(summary: dict[str, Any]) -> list[dict[str, str]]:
    """Every finding of the study beside this summary's numbers (``summarize``'s output)."""
    rows = summary["rows"]
    out = [rule(rows) for rule in RULES[:2]]
    out.append(capture_follows_rho(summary.get("h_vs_rho_v") or {}))
    out += [rule(rows) for rule in RULES[2:]]
    return [asdict(f) for f in out]


def findings_table(found: list[dict[str, str]]) -> str:
    lines = ["| finding | the study | this run | verdict |", "|---|---|---|---|"]
    lines += [f"| {f['claim']} | {f['paper']} | {f['ours']} | {f['verdict']} |" for f in found]
    return "\n".join(lines)
