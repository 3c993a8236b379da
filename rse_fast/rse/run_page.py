"""A run report: one self-contained HTML page (inline CSS and SVG, no scripts, no network) that
shows what an RSE run did and what it learned.

Per round: the experience block the prompt carried, every rollout's answer (and correctness
when a gold answer was given), and every candidate experience accepted or rejected with its
similarity and the experience that blocked it; for the run: the answer and its votes, tokens
by role, and accuracy per round as a small chart. Input is the JSON form of an
:class:`~rse_fast.rse.results.RSEResult` (``result.to_dict()``), so a report can be written
from a live result or from a trace (``rse-fast solve --trace`` ends with the result record).
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rse_fast.llm.cost import paid_lines

RESULT_RECORD = "rse_result"  # the "kind" of the trace record holding a run's result

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;padding:0 16px;max-width:1100px;
color:#1d2330}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ccd}
.muted{color:#667}.ok{color:#14753a;font-weight:600}.bad{color:#b3261e;font-weight:600}
table{border-collapse:collapse;width:100%;margin:6px 0 12px}td,th{border:1px solid #dde;
padding:4px 6px;vertical-align:top;text-align:left}th{background:#f3f4f8}
pre{white-space:pre-wrap;background:#f7f7fa;border:1px solid #e3e3ea;padding:8px;max-height:320px;
overflow:auto;font-size:12.5px}.pill{display:inline-block;padding:0 6px;border-radius:8px;
font-size:12px}.acc{background:#dff3e4}.rej{background:#f6e1df}
.sum td{border:none;padding:2px 12px 2px 0}
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _chart(accuracy: list[float | None]) -> str:
    """Accuracy per round as inline SVG bars (rounds without a gold answer are not drawn)."""
    if not any(a is not None for a in accuracy):
        return '<p class="muted">No gold answer was given, so there is no accuracy to chart.</p>'
    w, h, pad, bar = 60 * len(accuracy) + 40, 150, 24, 36
    parts = [f'<svg width="{w}" height="{h + 30}" role="img" aria-label="accuracy per round">']
    parts.append(f'<line x1="{pad}" y1="{h}" x2="{w}" y2="{h}" stroke="#99a"/>')
    for i, a in enumerate(accuracy):
        x = pad + 12 + 60 * i
        if a is not None:
            top = h - (h - 20) * a
            parts.append(
                f'<rect x="{x}" y="{top:.1f}" width="{bar}" height="{h - top:.1f}" fill="#4b7bec"/>'
                f'<text x="{x + bar / 2}" y="{top - 4:.1f}" font-size="12" text-anchor="middle">'
                f"{a:.0%}</text>"
            )
        parts.append(
            f'<text x="{x + bar / 2}" y="{h + 16}" font-size="12" text-anchor="middle">'
            f"round {i + 1}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _verdict(correct: bool | None) -> str:
    if correct is None:
        return '<span class="muted">—</span>'
    return '<span class="ok">right</span>' if correct else '<span class="bad">wrong</span>'


def _unshown(r: Mapping[str, Any], before: Mapping[str, Any] | None) -> str:
    """Why a round's prompt carried no experience: round 1, an empty bank, or a bank whose
    items were held back (not yet found by enough rollouts, or the vote had settled)."""
    if r["round"] == 1:
        return "none (round 1 is plain sampling)"
    held = sum(((before or {}).get("bank_sizes") or {}).values())
    if not held:
        return "none (empty bank)"
    return (
        f"none shown: the bank held {_count(held, 'item')}, held back (not yet found by enough "
        "rollouts, or round 1's vote had settled)"
    )


def _round(r: Mapping[str, Any], before: Mapping[str, Any] | None = None) -> str:
    out = [f'<section class="round"><h2>Round {r["round"]} (K={r["k"]})</h2>']
    acc = r.get("accuracy")
    out.append(
        f"<p>majority answer <b>{_e(r.get('answer'))}</b> ({r.get('votes')} votes)"
        + (f", accuracy {acc:.0%}" if acc is not None else "")
        + f", {r.get('tokens', 0):,} tokens, {r.get('wall_s', 0):.1f} s"
        + f"; distillations unparseable {r.get('unparseable', 0)}, failed "
        f"{r.get('failed_distills', 0)}</p>"
    )
    block = r.get("experience_block") or ""
    out.append("<h3>Experience in this round's prompt</h3>")
    shown = f"<pre>{_e(block)}</pre>" if block else f'<p class="muted">{_unshown(r, before)}</p>'
    out.append(shown)
    out.append("<h3>Rollouts</h3><table><tr><th>#</th><th>answer</th><th>verdict</th>"
               "<th>finish</th><th>distillation</th></tr>")  # fmt: skip
    for x in r.get("rollouts", []):
        status = _e(x.get("error")) if x.get("error") else _e(x.get("distill"))
        if x.get("truncated"):
            status += " (cut off by length)"
        out.append(
            f"<tr><td>{x['index']}</td><td>{_e(x.get('answer'))}</td>"
            f"<td>{_verdict(x.get('correct'))}</td><td>{_e(x.get('finish_reason'))}</td>"
            f"<td>{status}</td></tr>"
        )
    out.append("</table><h3>Candidate experiences</h3>")
    decisions = r.get("decisions", [])
    if not decisions:
        out.append('<p class="muted">no candidates this round</p>')
    else:
        out.append("<table><tr><th>type</th><th>statement</th><th>decision</th>"
                   "<th>similarity</th><th>blocked by</th><th>check</th></tr>")  # fmt: skip
        for d in decisions:
            kind = "pitfall" if d["kind"] == "negative" else "proposition"
            pill = (
                '<span class="pill acc">accepted</span>'
                if d["accepted"]
                else ('<span class="pill rej">rejected</span>')
            )
            sim = "" if d.get("similarity") is None else f"{d['similarity']:.3f}"
            verdict = d.get("verdict", "unchecked")
            check = "" if verdict == "unchecked" else f"{verdict}: {d.get('evidence', '')}"
            out.append(
                f"<tr><td>{kind}</td><td>{_e(d['text'])}</td><td>{pill}</td><td>{sim}</td>"
                f"<td>{_e(d.get('matched')) if not d['accepted'] else ''}</td>"
                f"<td>{_e(check)}</td></tr>"
            )
        out.append("</table>")
    out.append("</section>")
    return "".join(out)


def render_report(result: Mapping[str, Any], title: str = "RSE run") -> str:
    """The whole page for one run (``RSEResult.to_dict()``)."""
    ledger = result.get("ledger", {})
    roles = ledger.get("roles", {})
    role_rows = "".join(
        f"<tr><td>{_e(name)}</td><td>{v.get('calls', 0)}</td><td>{v.get('prompt_tokens', 0):,}"
        f"</td><td>{v.get('completion_tokens', 0):,}</td><td>{v.get('total_tokens', 0):,}</td></tr>"
        for name, v in roles.items()
    )
    rounds = result["rounds"]
    accuracy = result.get("accuracy_per_round") or [r.get("accuracy") for r in rounds]
    sizes = result.get("bank_sizes", {})
    correct = result.get("correct")
    head = (
        f'<h1>{_e(title)}</h1><p class="muted">{_e(result.get("problem"))}</p>'
        '<table class="sum">'
        f"<tr><td>answer</td><td><b>{_e(result.get('answer'))}</b> "
        f"({result.get('votes')}/{result.get('total_votes')} votes) {_verdict(correct)}</td></tr>"
        f"<tr><td>bank</td><td>{_count(sizes.get('negative', 0), 'pitfall')}, "
        f"{_count(sizes.get('positive', 0), 'proposition')}</td></tr>"
        f"<tr><td>tokens</td><td>{ledger.get('total_tokens', 0):,} in "
        f"{ledger.get('calls', 0)} calls, {result.get('wall_s', 0):.1f} s</td></tr>"
        + "".join(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in paid_lines(ledger))
        + "</table>"
    )
    body = [
        head,
        "<h2>Accuracy per round</h2>",
        _chart(list(accuracy)),
        "<h2>Tokens by role</h2><table><tr><th>role</th><th>calls</th><th>prompt</th>"
        f"<th>completion</th><th>total</th></tr>{role_rows}</table>",
        *(_round(r, before) for before, r in zip([None, *rounds], rounds, strict=False)),
    ]
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{CSS}</style></head><body>"
        + "".join(body)
        + "</body></html>\n"
    )


def write_report(
    result: Mapping[str, Any], path: str | os.PathLike[str], title: str = "RSE run"
) -> Path:
    """Write the page atomically; returns its absolute path."""
    out = Path(path).resolve()
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(render_report(result, title), encoding="utf-8")
    os.replace(tmp, out)
    return out


def result_from_trace(lines: Iterable[str], source: str = "trace") -> dict[str, Any]:
    """The last run result recorded in a JSONL trace, or a ValueError saying why not."""
    found: dict[str, Any] | None = None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            raise ValueError(f"{source}: line {n} is not JSON") from None
        if isinstance(rec, dict) and rec.get("kind") == RESULT_RECORD:
            found = rec.get("result")
    if not isinstance(found, dict) or "rounds" not in found:
        raise ValueError(
            f"{source}: holds no RSE result record (write one with `rse-fast solve --trace FILE`)"
        )
    return found
