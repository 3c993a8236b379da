"""Aggregate results files (one run or many shards) into the study's metrics: a table
(markdown + JSON) with 95% bootstrap intervals, paired differences between methods at each
budget, the h-vs-ρ_v regression, the study's findings beside them (``findings``), and the
figures and a page (``figures``)."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from itertools import combinations
from pathlib import Path
from typing import Any

from rse_fast.eval.figures import report_page, write_figures
from rse_fast.eval.findings import findings, findings_table
from rse_fast.eval.grader_check import GRADER_CHECK_FILE, reads_agreement
from rse_fast.eval.metrics import (
    bootstrap_mean_ci,
    capture,
    capture_ci,
    capture_reason,
    finite,
    linear_fit,
    mean,
    oracle,
    oracle_bias_corrected,
    paired_difference,
)
from rse_fast.eval.records import Records, read_records, results_files
from rse_fast.eval.runner import SINGLE
from rse_fast.eval.summary_table import markdown_table
from rse_fast.llm.cost import TOKENS, CostModel


def load_records(path: Path) -> list[dict[str, Any]]:
    """The readable records of one results file (see ``read_records`` for what is skipped)."""
    return read_records([path]).rows


def single_sample_quality(records: list[dict[str, Any]]) -> dict[str, float]:
    """μ per problem: the mean quality of its independent single samples."""
    out = {}
    for r in records:
        if r["method"] == SINGLE:
            vals = finite(r["qualities"])
            if vals:
                out[r["problem"]] = sum(vals) / len(vals)
    return out


def rho_kind(recs: list[dict[str, Any]]) -> str | None:
    """What the verifier-vs-truth correlation of these records is: against an exact checker,
    against a distinct grader (ρ_v proper), or the judge agreeing with itself."""
    pairs = {(r.get("verifier"), r.get("grader")) for r in recs if r.get("rho_v") is not None}
    if not pairs:
        return None
    if any(g and g.startswith("exact:") for _, g in pairs):
        return "verifier-vs-exact"
    if any(v is not None and v == g for v, g in pairs):
        return "self-agreement"
    return "verifier-vs-grader"


def simple_evals_score(recs: list[dict[str, Any]]) -> float | None:
    """The mean of unclipped per-example scores, clipped to [0, 1]; None for exact grading
    or results written before the field existed."""
    rubric = [r for r in recs if not str(r.get("grader", "exact:")).startswith("exact:")]
    raw = finite([r["final_quality_unclipped"] for r in rubric if "final_quality_unclipped" in r])
    return min(1.0, max(0.0, sum(raw) / len(raw))) if raw else None


def verifier_kind(recs: list[dict[str, Any]]) -> str | None:
    """What scored the candidates behind ρ_v: a reward model, or the LLM judge."""
    names = {str(r.get("verifier")) for r in recs if r.get("verifier")}
    if not names:
        return None
    return "reward model" if all(n.startswith("reward:") for n in names) else "LLM judge"


def pool_oracle(r: dict[str, Any], noisy: bool) -> float:
    """Q* of one pool: the plain max for exact grades, the closed-form correction for noisy
    ones (falling back to the max when too few candidates have two readings)."""
    if noisy:
        fit = oracle_bias_corrected(r["pool_quality_first"], r["pool_quality_second"])
        if fit is not None:
            return fit.corrected
    return oracle(r["pool_quality"])


def _interval(values: Sequence[float]) -> list[float] | None:
    return _bounds(bootstrap_mean_ci(values))


def _bounds(interval: tuple[float, float]) -> list[float] | None:
    lo, hi = interval
    return None if lo != lo else [lo, hi]


def aggregate(records: list[dict[str, Any]], noisy: bool = False) -> list[dict[str, Any]]:
    single = single_sample_quality(records)
    groups: dict[tuple[str, float], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        if r["method"] != SINGLE:
            groups[(r["method"], float(r["budget"]))].append(r)
    rows = []
    for (method, budget), recs in sorted(groups.items()):
        finals = [r["final_quality"] for r in recs]
        oracles = [pool_oracle(r, noisy) for r in recs]
        singles = [single.get(r["problem"], math.nan) for r in recs]
        q, q_star, mu = mean(finals), mean(oracles), mean(singles)
        rhos = [r["rho_v"] for r in recs if r.get("rho_v") is not None]
        rounds = [
            r["meta"].get("accuracy_per_round") for r in recs if r["meta"].get("accuracy_per_round")
        ]
        per_round = (
            [mean([x[i] for x in rounds if i < len(x)]) for i in range(max(len(x) for x in rounds))]
            if rounds
            else None
        )
        both = q is not None and q_star is not None and mu is not None
        rows.append(
            {
                "method": method,
                "budget": budget,
                "budget_unit": recs[0].get("budget_unit", "tokens"),
                "problems": len(recs),
                "tokens": mean([r["tokens"] for r in recs]),
                # wall seconds a problem's own run took (a pool cut from a larger run: none)
                "wall_s": mean(
                    [
                        r["wall_s"]
                        for r in recs
                        if r.get("wall_s") is not None and not r.get("cut_from_larger")
                    ]
                ),
                "cached_share": cached_share(recs),
                "budget_error": mean([r["budget_error"] for r in recs]),
                **overshoot([r["budget_error"] for r in recs]),
                "exploration_share": mean(
                    [r["exploration_tokens"] / r["tokens"] for r in recs if r["tokens"]]
                ),
                "final": q,
                "final_ci95": _interval(finals),
                # HealthBench as OpenAI's simple-evals scores it: per-example scores unclipped,
                # their mean clipped to [0, 1] ("final" clips each response instead)
                "final_simple_evals": simple_evals_score(recs),
                "oracle": q_star,
                "oracle_ci95": _interval(oracles),
                "oracle_corrected": noisy,
                "single": mu,
                "single_problems": len(finite(singles)),
                "headroom": q_star - mu if both else None,  # type: ignore[operator]
                "net_exploitation": q - q_star if both else None,  # type: ignore[operator]
                "capture": _nan_none(capture(q, mu, q_star)) if both else None,  # type: ignore[arg-type]
                "capture_ci95": _bounds(capture_ci(finals, singles, oracles)) if both else None,
                "capture_note": capture_reason(mu, q_star) if both else "no single samples",  # type: ignore[arg-type]
                "rho_v": sum(rhos) / len(rhos) if rhos else None,
                "rho_v_pools": len(rhos),
                "rho_v_kind": rho_kind(recs),
                "verifier_kind": verifier_kind(recs),
                "diversity": mean([r["diversity"] for r in recs]),
                "judge_garbage": sum(int(r.get("judge_garbage", 0)) for r in recs),
                "grade_garbage": sum(int(r.get("grade_garbage", 0)) for r in recs),
                "accuracy_per_round": per_round,
                "checks": sum_verdicts((r.get("meta") or {}).get("checks") for r in recs),
                "checks_by_kind": sum_verdicts_by_kind(
                    (r.get("meta") or {}).get("checks_by_kind") for r in recs
                ),
            }
        )
    return rows


def sum_verdicts(checks: Iterable[dict[str, int] | None]) -> dict[str, Any] | None:
    """A checker's verdicts on distilled statements (one count per run, None where a run had
    no checker), summed, with the refuted share; None where nothing was checked."""
    counts: dict[str, int] = {}
    for one in checks:
        for verdict, n in (one or {}).items():
            counts[verdict] = counts.get(verdict, 0) + int(n)
    total = sum(counts.values())
    return {**counts, "refuted_share": counts.get("refuted", 0) / total} if total else None


def sum_verdicts_by_kind(
    by_kind: Iterable[dict[str, dict[str, int]] | None],
) -> dict[str, Any] | None:
    """The same by the kind of statement (``positive``: propositions, ``negative``:
    pitfalls), where runs counted it; None where none did."""
    runs = [one or {} for one in by_kind]
    kinds = sorted({k for one in runs for k in one})
    return {k: sum_verdicts(one.get(k) for one in runs) for k in kinds} or None


def cached_share(recs: list[dict[str, Any]]) -> float | None:
    """The share of the prompt tokens the server's prefix cache served, over the records whose
    server reported its cache (None: none did, so nothing is known of it)."""
    spends = [r["spend"] for r in recs if (r.get("spend") or {}).get("cache_reported_calls")]
    prompt = sum(int(s["prompt_tokens"]) for s in spends)
    return sum(int(s["cached_prompt_tokens"]) for s in spends) / prompt if prompt else None


#: Two cells are compared only when their actual mean spends are this close (relative).
MATCHED_SPEND = 0.10


def overshoot(errors: Sequence[float]) -> dict[str, float | None]:
    """How far actual spend landed from the budget, per row: mean absolute error, the worst
    overshoot and the spread (a signed mean lets over- and undershoot cancel)."""
    vals = finite(errors)
    if not vals:
        return {"overshoot_mae": None, "overshoot_max": None, "overshoot_spread": None}
    m = sum(vals) / len(vals)
    spread = math.sqrt(sum((v - m) ** 2 for v in vals) / len(vals))
    return {"overshoot_mae": sum(abs(v) for v in vals) / len(vals),
            "overshoot_max": max(vals), "overshoot_spread": spread}  # fmt: skip


def _nan_none(x: float) -> float | None:
    return None if x != x else x


def spent_in(record: dict[str, Any], cost: CostModel) -> float:
    """A record's actual spend in ``cost``'s unit (records written before ``spend`` was kept
    can only be read in tokens)."""
    if "spend" in record:
        return cost.of_spend(record["spend"])
    if cost.unit == "tokens":
        return float(record["tokens"])
    raise ValueError(
        f"record {record.get('problem')}/{record.get('method')} has no spend breakdown: it "
        f"can be compared in tokens only, not in {cost.unit}"
    )


def paired_rows(records: list[dict[str, Any]], cost: CostModel = TOKENS) -> list[dict[str, Any]]:
    """Pairs of methods **at matched actual spend** (in ``cost``'s unit): cells (method,
    budget) whose mean spend is within ±10% of each other, whatever their nominal budgets, on
    the problems both ran; and every method against its problems' single-sample μ. Mean
    difference of final quality and its 95% bootstrap interval (resampling problems)."""
    finals: dict[tuple[str, float], dict[str, float]] = defaultdict(dict)
    spent: dict[tuple[str, float], list[float]] = defaultdict(list)
    units: dict[tuple[str, float], str] = {}
    for r in records:
        if r["method"] != SINGLE:
            cell = (r["method"], float(r["budget"]))
            finals[cell][r["problem"]] = r["final_quality"]
            spent[cell].append(spent_in(r, cost))
            units[cell] = r.get("budget_unit", "tokens")
    single = single_sample_quality(records)
    tokens = {cell: sum(v) / len(v) for cell, v in spent.items()}
    out = []
    for (a, ba), (b, bb) in combinations(sorted(finals), 2):
        if a == b or abs(tokens[(a, ba)] / max(1e-12, tokens[(b, bb)]) - 1) > MATCHED_SPEND:
            continue
        shared = sorted(finals[(a, ba)].keys() & finals[(b, bb)].keys())
        if shared:
            diff, ci = paired_difference(
                [finals[(a, ba)][p] for p in shared], [finals[(b, bb)][p] for p in shared]
            )
            row = _pair(ba, units[(a, ba)], a, b, shared, diff, ci)
            row.update(budget_b=bb, tokens_a=tokens[(a, ba)], tokens_b=tokens[(b, bb)])
            out.append(row)
    for budget in sorted({b for _, b in finals}):
        methods = sorted(m for m, b in finals if b == budget)
        for m in methods:
            shared = sorted(finals[(m, budget)].keys() & single.keys())
            if shared:
                diff, ci = paired_difference(
                    [finals[(m, budget)][p] for p in shared], [single[p] for p in shared]
                )
                out.append(_pair(budget, units[(m, budget)], m, SINGLE, shared, diff, ci))
    return out


def _pair(
    budget: float,
    unit: str,
    a: str,
    b: str,
    problems: list[str],
    diff: float,
    ci: tuple[float, float],
) -> dict[str, Any]:
    return {
        "budget": budget,
        "budget_unit": unit,
        "a": a,
        "b": b,
        "problems": len(problems),
        "diff": diff,
        "ci95": _bounds(ci),
    }


def capture_vs_rho(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The study's regression of headroom capture h on ρ_v over budgets, per family (the
    study fits best-of-N; pooling families mixes different exploitation steps): best-of-N
    first, then the others that have at least three points."""
    out: dict[str, Any] = {}
    families = sorted({r["method"].split(":")[0] for r in rows}, key=lambda f: (f != "bon", f))
    for family in families:
        mine = [r for r in rows if r["method"].split(":")[0] == family]
        xs = [r["rho_v"] if r["rho_v"] is not None else math.nan for r in mine]
        ys = [r["capture"] if r["capture"] is not None else math.nan for r in mine]
        fit = linear_fit(xs, ys)
        if fit is not None:
            out[family] = {"slope": fit.slope, "intercept": fit.intercept, "r2": fit.r2,
                           "points": fit.points}  # fmt: skip
    return out


def summarize(records: Records, noisy: bool, cost: CostModel = TOKENS) -> dict[str, Any]:
    rows = aggregate(records.rows, noisy)
    return {
        "rows": rows,
        "cost_unit": cost.unit,
        "paired": paired_rows(records.rows, cost),
        "h_vs_rho_v": capture_vs_rho(rows),
        "unreadable": records.unreadable,
        "duplicates": records.duplicates,
        "sources": records.sources,
    }


def grader_check_beside(places: list[Path]) -> dict[str, Any] | None:
    """The grader check ``rse-fast eval`` wrote beside the first results merged, if any."""
    for place in places:
        folder = place if place.is_dir() else place.parent
        path = folder / GRADER_CHECK_FILE
        if path.exists():
            found: dict[str, Any] = json.loads(path.read_text())
            return found
    return None


def write_report(
    results: Path | Iterable[Path],
    out: Path,
    title: str,
    noisy: bool | None = None,
    cost: CostModel = TOKENS,
) -> dict[str, Any]:
    """Merge the results files found at ``results`` (a file, a directory of shards, or
    several) and write table.md, summary.json and the plot into ``out``. ``noisy`` (default:
    whether any record was graded by a rubric grader) turns on the oracle correction;
    ``cost``: the unit methods are paired in at matched actual spend (default tokens)."""
    places = [results] if isinstance(results, Path) else list(results)
    records = read_records(results_files(places))
    if noisy is None:
        noisy = any(not str(r.get("grader", "exact:")).startswith("exact:") for r in records.rows)
    summary = summarize(records, noisy, cost)
    summary["findings"] = findings(summary)
    summary["grader_check"] = grader_check_beside(places)
    summary["reads_check"] = reads_agreement(records.rows)
    table = markdown_table(summary)
    out.mkdir(parents=True, exist_ok=True)
    found = findings_table(summary["findings"])
    (out / "table.md").write_text(f"# {title}\n\n{table}\n\n## Beside the study\n\n{found}\n")
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    figures = write_figures(summary, out, title)
    (out / "report.html").write_text(report_page(title, table, found, figures))
    return {
        **summary,
        "table": table,
        "table_path": str(out / "table.md"),
        "plot": figures.get("quality_vs_tokens"),
        "figures": figures,
        "page": str(out / "report.html"),
    }
