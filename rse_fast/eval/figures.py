"""The study's figures from a summary (PNG, matplotlib when installed) and one self-contained
HTML page that shows them beside the table and the findings.

Figures: quality against spend (final output solid, best candidate dashed: exploitation and
exploration), headroom capture h, net exploitation Q − Q* and candidate diversity per family
against budget, and h against ρ_v with best-of-N's fitted line.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rse_fast.llm.cost import amount_text

Rows = list[dict[str, Any]]


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _by_family(rows: Rows, x: str) -> dict[str, Rows]:
    out: dict[str, Rows] = {}
    for r in rows:
        out.setdefault(r["method"], []).append(r)
    return {m: sorted(rs, key=lambda r: r[x] or 0) for m, rs in sorted(out.items())}


def _save(plt: Any, fig: Any, ax: Any, path: Path, title: str, xlabel: str, ylabel: str) -> Path:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def quality_figure(rows: Rows, path: Path, title: str) -> Path | None:
    """Quality vs tokens: solid = final output (exploitation), dashed = oracle (exploration)."""
    plt = _pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    colours = plt.get_cmap("tab10")
    for i, (m, rs) in enumerate(_by_family(rows, "tokens").items()):
        xs = [r["tokens"] for r in rs]
        ax.plot(xs, [r["final"] for r in rs], "-o", color=colours(i), label=f"{m} final")
        ax.plot(
            xs, [r["oracle"] for r in rs], "--", color=colours(i), alpha=0.6, label=f"{m} oracle"
        )
    ax.set_xscale("log")
    return _save(plt, fig, ax, path, title, "tokens per problem (all roles)", "quality")


def per_budget_figure(
    rows: Rows,
    path: Path,
    title: str,
    value: Callable[[dict[str, Any]], float | None],
    ylabel: str,
    interval: str | None = None,
) -> Path | None:
    """One line per family: ``value`` of its row at each budget (rows without it skipped),
    with the row's ``interval`` field as error bars where it has one."""
    plt = _pyplot()
    if plt is None:
        return None
    series = {
        m: kept
        for m, rs in _by_family(rows, "budget").items()
        if (kept := [(r, v) for r in rs if (v := value(r)) is not None and v == v])
    }
    if not series:
        return None  # nothing measured (e.g. no encoder, no diversity): no empty figure
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for m, kept in series.items():
        xs, ys = [r["budget"] for r, _ in kept], [v for _, v in kept]
        bounds = [(r.get(interval) if interval else None) or [v, v] for r, v in kept]
        yerr = [[v - lo for v, (lo, _) in zip(ys, bounds, strict=True)],
                [hi - v for v, (_, hi) in zip(ys, bounds, strict=True)]]  # fmt: skip
        ax.errorbar(xs, ys, yerr=yerr, fmt="-o", capsize=3, label=m)
    ax.set_xscale("log")
    budgets = sorted({r["budget"] for r in rows})
    label = rows[0].get("budget_unit", "tokens") if rows else "tokens"
    ax.set_xticks(budgets, [amount_text(b, label) for b in budgets])
    ax.minorticks_off()
    return _save(plt, fig, ax, path, title, f"budget ({label})", ylabel)


def capture_vs_rho_figure(rows: Rows, fits: dict[str, Any], path: Path, title: str) -> Path | None:
    """h against ρ_v, a point per (family, budget), with best-of-N's fitted line."""
    plt = _pyplot()
    if plt is None:
        return None

    def measured(rs: Rows) -> list[tuple[float, float]]:
        return [(r["rho_v"], r["capture"]) for r in rs
                if r.get("rho_v") is not None and r.get("capture") is not None]  # fmt: skip

    points = {m: pts for m, rs in _by_family(rows, "budget").items() if (pts := measured(rs))}
    if not points:
        return None
    fig, ax = plt.subplots(figsize=(6, 4.5), dpi=120)
    for m, pts in points.items():
        ax.plot(*zip(*pts, strict=True), "o", label=m)
    fit = fits.get("bon")
    if fit and all(math.isfinite(fit[k]) for k in ("slope", "intercept")):
        xs = [-0.1, 1.0]
        ax.plot(xs, [fit["intercept"] + fit["slope"] * x for x in xs], "k--", lw=1,
                label=f"best-of-N fit, slope {fit['slope']:.2f}")  # fmt: skip
    return _save(plt, fig, ax, path, title, "ρ_v (verifier against truth)", "headroom capture h")


def write_figures(summary: dict[str, Any], out: Path, title: str) -> dict[str, str]:
    """Every figure the summary has data for, into ``out``: name → path (none without
    matplotlib)."""
    rows = summary["rows"]
    made = {
        "quality_vs_tokens": quality_figure(rows, out / "quality_vs_tokens.png", title),
        "capture": per_budget_figure(
            rows, out / "capture.png", f"{title}: headroom capture (95% intervals)",
            lambda r: r.get("capture"), "h = (Q − μ) / (Q* − μ)", "capture_ci95",
        ),
        "net_exploitation": per_budget_figure(
            rows, out / "net_exploitation.png", f"{title}: net exploitation",
            lambda r: r.get("net_exploitation"), "Q − Q*",
        ),
        "diversity": per_budget_figure(
            rows, out / "diversity.png", f"{title}: candidate diversity",
            lambda r: r.get("diversity"), "mean pairwise cosine distance",
        ),
        "capture_vs_rho": capture_vs_rho_figure(
            rows, summary.get("h_vs_rho_v") or {}, out / "capture_vs_rho.png", f"{title}: h vs ρ_v"
        ),
    }  # fmt: skip
    return {name: str(path) for name, path in made.items() if path is not None}


def report_page(title: str, table: str, findings: str, figures: dict[str, str]) -> str:
    """One page: the table and the findings as preformatted markdown, the figures inline by
    file name (they sit beside the page)."""
    images = "".join(
        f'<figure><img src="{html.escape(Path(p).name)}" alt="{html.escape(name)}">'
        f"<figcaption>{html.escape(name)}</figcaption></figure>"
        for name, p in figures.items()
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>body{{font-family:sans-serif;margin:2em}}"
        "pre{background:#f6f6f6;padding:1em;overflow:auto}img{max-width:48%}"
        "figure{display:inline-block;margin:0.5em}</style></head><body>"
        f"<h1>{html.escape(title)}</h1><h2>Table</h2><pre>{html.escape(table)}</pre>"
        f"<h2>Beside the study</h2><pre>{html.escape(findings)}</pre>"
        f"<h2>Figures</h2>{images}</body></html>"
    )
