"""Aggregate results.jsonl into a table (markdown + JSON) and a quality-vs-tokens plot with the
exploration (oracle) and exploitation (final) curves of each method."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from rse_fast.eval.metrics import mean, oracle, oracle_bias_corrected, recovered_headroom


def load_records(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text().split("\n"):
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def single_sample_quality(records: list[dict[str, Any]]) -> dict[str, float]:
    """Per problem: mean quality of every plain sample seen (any method, any budget)."""
    acc: dict[str, list[float]] = defaultdict(list)
    for r in records:
        for q, origin in zip(r["pool_quality"], r["pool_origin"], strict=True):
            if origin in ("sample", "rse-round-1") and not math.isnan(q):
                acc[r["problem"]].append(q)
    return {p: sum(v) / len(v) for p, v in acc.items() if v}


def aggregate(records: list[dict[str, Any]], noisy: bool = False) -> list[dict[str, Any]]:
    single = single_sample_quality(records)
    groups: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        groups[(r["method"], int(r["budget"]))].append(r)
    rows = []
    for (method, budget), recs in sorted(groups.items()):
        finals, oracles, singles = [], [], []
        for r in recs:
            best = (
                oracle_bias_corrected(r["pool_quality_first"], r["pool_quality_second"])
                if noisy
                else oracle(r["pool_quality"])
            )
            finals.append(r["final_quality"])
            oracles.append(best)
            singles.append(single.get(r["problem"], math.nan))
        f, o, s = mean(finals), mean(oracles), mean(singles)
        rounds = [
            r["meta"].get("accuracy_per_round") for r in recs if r["meta"].get("accuracy_per_round")
        ]
        per_round = (
            [mean([x[i] for x in rounds if i < len(x)]) for i in range(max(len(x) for x in rounds))]
            if rounds
            else None
        )
        rows.append(
            {
                "method": method,
                "budget": budget,
                "problems": len(recs),
                "tokens": mean([r["tokens"] for r in recs]),
                "budget_error": mean([r["budget_error"] for r in recs]),
                "exploration_share": mean(
                    [r["exploration_tokens"] / r["tokens"] for r in recs if r["tokens"]]
                ),
                "final": f,
                "oracle": o,
                "single": s,
                "headroom_recovered": (
                    recovered_headroom(f, s, o)
                    if f is not None and s is not None and o is not None
                    else None
                ),
                "rho_v": mean([r["rho_v"] for r in recs]),
                "diversity": mean([r["diversity"] for r in recs]),
                "accuracy_per_round": per_round,
            }
        )
    return rows


def _fmt(x: Any, pct: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if pct:
        return f"{100 * x:.0f}%"
    return f"{x:.2f}" if isinstance(x, float) else str(x)


def markdown_table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| method | budget | tokens (±) | final | oracle | single | headroom | ρ_v | "
        "diversity (cos) | explore share |\n|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        lines.append(
            f"| {r['method']} | {r['budget']:,} | {r['tokens']:.0f} "
            f"({_fmt(r['budget_error'], True)}) | {_fmt(r['final'], True)} | "
            f"{_fmt(r['oracle'], True)} | {_fmt(r['single'], True)} | "
            f"{_fmt(r['headroom_recovered'], True)} | {_fmt(r['rho_v'])} | "
            f"{_fmt(r['diversity'])} | {_fmt(r['exploration_share'], True)} |"
        )
    rse = [r for r in rows if r["accuracy_per_round"]]
    for r in rse:
        acc = ", ".join(_fmt(a, True) for a in r["accuracy_per_round"])
        lines.append(f"\nRSE @{r['budget']:,}: accuracy per round {acc}")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> Path | None:
    """Quality vs tokens: solid = final output (exploitation), dashed = oracle (exploration)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    methods = sorted({r["method"] for r in rows})
    colours = plt.get_cmap("tab10")
    for i, m in enumerate(methods):
        rs = sorted((r for r in rows if r["method"] == m), key=lambda r: r["tokens"] or 0)
        xs = [r["tokens"] for r in rs]
        ax.plot(xs, [r["final"] for r in rs], "-o", color=colours(i), label=f"{m} final")
        ax.plot(
            xs, [r["oracle"] for r in rs], "--", color=colours(i), alpha=0.6, label=f"{m} oracle"
        )
    ax.set_xscale("log")
    ax.set_xlabel("tokens per problem (prompt + completion, all roles)")
    ax.set_ylabel("quality")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def write_report(results: Path, out: Path, title: str, noisy: bool = False) -> dict[str, Any]:
    rows = aggregate(load_records(results), noisy)
    table = markdown_table(rows)
    (out / "table.md").write_text(f"# {title}\n\n{table}\n")
    (out / "summary.json").write_text(json.dumps(rows, indent=1))
    png = plot(rows, out / "quality_vs_tokens.png", title)
    return {"rows": rows, "table": table, "plot": str(png) if png else None}
