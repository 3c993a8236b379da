"""Every number the READMEs and the user's pages in docs/ print, from bench/results/*.json:
the summary table, the tables the benchmarks own, and each inline value of the prose.

    python -m bench summarize           # rewrite README.md, bench/README.md, docs/ from the JSON
    python -m bench summarize --check   # exit 1 naming every number that differs (a test runs it)

An inline value is written ``<!--v file.key.sub:fmt-->shown<!--/v-->`` (``fmt`` a Python
format spec, optional): ``file`` is ``results/file.json``, the keys descend into it (a number
picks a list item), and ``shown`` is what the reader sees, rewritten from the JSON here. A
list (an interval) is shown item by item, each in ``fmt``: ``[-0.03, +0.07]``. A ``fmt``
ending in ``pts`` shows a difference of shares in percentage points: ``+.1pts``.
A key may hold a colon (a variant such as ``rse:brief``); the spec is what follows the last
colon, so such a key is written with a spec.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import read_result, replace_readme_block

HERE = Path(__file__).parent
ROOT = HERE.parent

#: the user's pages whose numbers come from the JSON (docs/decisions.md is the maintainers'
#: record of why, with the numbers of its day, and is not re-rendered)
PAGES = ("methods", "rse", "cost-and-stopping", "service", "cli", "evaluation", "sandbox",
         "local-models", "develop", "dedup-at-scale")  # fmt: skip
DOCS = (ROOT / "README.md", HERE / "README.md", *(ROOT / "docs" / f"{p}.md" for p in PAGES))
VALUE = re.compile(
    r"<!--v (?P<ref>[\w.\-+ :]+?)(?::(?P<spec>[^:>]*))?-->(?P<shown>.*?)<!--/v-->", re.S
)
#: an opening marker: every one must be a VALUE, or its number would go unchecked
OPENING = re.compile(r"<!--v ")

# (file, key, target, how to read the target, what it means)
ROWS: list[tuple[str, str, str, str]] = [
    (
        "dedup_quick",
        "exact_match",
        "true",
        "kernel == naive loop == NumPy == FAISS decisions, N=1e5 d=384 B∈{1,64,256}",
    ),
    ("dedup_quick", "speedup_vs_naive", "≥ 10", "B=256: vs one mat-vec per candidate"),
    ("dedup_quick", "speedup_vs_numpy", "≥ 1.0", "worst B: vs bank GEMM + batch GEMM + walk"),
    ("dedup_quick", "speedup_vs_faiss_best", "≥ 1.0", "worst B: vs FAISS at its best setting"),
    (
        "dedup_quick",
        "memory_ratio_vs_numpy_max",
        "≤ 0.1",
        "worst B: kernel's peak extra memory ÷ NumPy's",
    ),
    (
        "dedup_quick",
        "memory_ratio_vs_faiss_best_max",
        "≤ 0.1",
        "worst B: kernel's peak extra memory ÷ FAISS's",
    ),
    ("dedup_quick", "fraction_of_sgemm", "≥ 0.8", "B=256: GFLOP/s ÷ square sgemm GFLOP/s"),
    (
        "dedup_quick",
        "fraction_of_shape_best_b64",
        "≥ 0.9",
        "B=64: GFLOP/s ÷ the best BLAS call of that shape over four layouts",
    ),
    ("dedup_quick", "fraction_of_sgemm_b64", "–", "B=64: GFLOP/s ÷ square sgemm GFLOP/s"),
    ("dedup_quick", "scan_fraction_of_bandwidth", "≥ 0.7", "B=1 scan at N=1e6 ÷ read bandwidth"),
    (
        "dedup_scale_quick",
        "decisions_identical",
        "true",
        "float16 == float32 decisions, rows, similarities; == NumPy == FAISS accepted",
    ),
    ("dedup_scale_quick", "float16_vs_numpy_b1", "≥ 1.7", "B=1, N=1e5: float16 bank vs NumPy"),
    (
        "dedup_scale_quick",
        "float16_vs_numpy_b64_b256",
        "≥ 1.0",
        "worst of B=64, 256, N=1e5: float16 bank vs NumPy",
    ),
    ("dedup_scale_quick", "bank_memory_ratio", "≤ 0.55", "float16 index bytes ÷ float32's"),
    (
        "dedup_scale_quick",
        "scan_fraction_of_bandwidth",
        "≥ 0.8",
        "float16 B=1 scan at N=1e6, its bytes read ÷ read bandwidth",
    ),
    (
        "dedup_scale",
        "decisions_identical",
        "true",
        "full run, N up to 5e6: float16 == float32 == NumPy (== FAISS to 1e6)",
    ),
    ("dedup_scale", "float16_vs_numpy_largest_n.1", "–", "B=1, N=5e6: float16 bank vs NumPy"),
    ("dedup_scale", "float16_vs_numpy_largest_n.64", "≥ 1.0", "B=64, N=5e6"),
    ("dedup_scale", "float16_vs_numpy_largest_n.256", "≥ 1.0", "B=256, N=5e6"),
    (
        "dedup_scale",
        "scan_fraction_of_bandwidth",
        "≥ 0.8",
        "float16 B=1 scan at N=5e6, its bytes read ÷ read bandwidth",
    ),
    (
        "dedup_scale_quick",
        "stream_float16_vs_numpy",
        "–",
        "40 batches of 16 into a growing bank of 1e5: float16 index vs NumPy",
    ),
    (
        "encoder_quick",
        "speedup_vs_fastembed_best",
        "≥ 1.2",
        "mixed lengths, fastembed's best batch",
    ),
    (
        "encoder_quick",
        "fraction_of_sgemm",
        "reported",
        "weight-GEMM GFLOP/s ÷ this CPU's sgemm (the int8 weights run as float32)",
    ),
    ("encoder_quick", "speedup_vs_naive_loop", "–", "one session.run per text"),
    ("encoder_quick", "cold_start_s", "≤ 1.5", "import + first embedding"),
    ("client_quick", "speedup_vs_openai_sdk", "≥ 1.5", "requests/s at concurrency 64"),
    ("client_quick", "us_per_request", "–", "client CPU µs per request at concurrency 64"),
    ("client_quick", "lost_calls", "0", "fault mix: calls ending in neither result nor error"),
    ("overhead_quick", "stress.overhead_fraction", "≤ 0.15", "K=32 R=3, whole replies at 200 ms"),
    (
        "overhead_quick",
        "stress.overhead_fraction_floor",
        "–",
        "least possible here: bare loop + float32 encoder at the sgemm rate",
    ),
    ("overhead_quick", "stress.tail_ms_excluding_encoder", "≤ 5", "last distillation → prompt"),
    ("overhead_quick", "realistic.overhead_fraction", "≤ 0.01", "60 tok/s, prefill 0.1-0.3 s"),
    ("overhead_quick", "realistic.tail_ms_excluding_encoder", "≤ 5", "last distillation → prompt"),
    (
        "overhead_quick",
        "realistic_whole_distill.overhead_fraction",
        "–",
        "the same, distillation in one plain call",
    ),
    ("serve", "p50_added_ms", "–", "pass-through, 200 concurrent, 1 s upstream (overhead)"),
    ("serve", "p99_added_ms", "–", "overhead: latency less the upstream handler's time"),
    ("serve", "floor_p99_added_ms", "–", "same load through a minimal raw-bytes aiohttp proxy"),
    ("serve", "latency_p99_added_ms", "–", "ours, from the raw latencies (nothing subtracted)"),
    ("serve", "latency_floor_p99_added_ms", "–", "the floor, from the raw latencies"),
    (
        "serve",
        "p99_added_minus_floor_ms_median",
        "–",
        "ours − the floor, p99 added ms: bootstrap median (rounds, then requests)",
    ),
    ("serve", "p99_added_minus_floor_ms_ci90", "–", "its 5th and 95th percentiles"),
    (
        "serve",
        "p99_added_vs_floor",
        "≤ 1.5",
        "ours ÷ the floor, p99 added: bootstrap median over every draw",
    ),
    ("serve", "p99_added_vs_floor_ci90", "–", "its 5th and 95th percentiles (+∞ kept)"),
    ("serve", "p99_added_vs_floor_infinite_share", "–", "draws where only ours added time"),
    ("serve", "direct_p99_spread_ms", "–", "the direct path's own p99 overhead spread, phases"),
    ("serve", "proxy_cores", "–", "cores of the proxy under test (load and upstream: the rest)"),
    ("serve", "ttft_added_p50_ms", "≤ 2", "streamed: time to first token added, p50"),
    ("serve", "errors", "0", ""),
    ("serve", "soak_requests", "≥ 20000", "pass-through requests in the soak"),
    ("serve", "soak_rss_growth_mb", "< 10", "service RSS growth after warm-up"),
    ("stopping_quick", "wall_ratio", "≤ 0.6", "service sc: settled problem, stop ÷ no stop, wall"),
    ("stopping_quick", "stop_tokens", "–", "tokens the stopping request spent (budget 4,000)"),
    (
        "stopping_quick",
        "wall_ratio_vs_exact_stop",
        "–",
        "library: Beta stop ÷ sc's exact stop (no vote left can change the winner)",
    ),
    (
        "serve_quick",
        "p99_added_minus_floor_ms_ci90",
        "–",
        "quick check (2 rounds), this CPU: ours − the floor, p99 ms, 5-95%",
    ),
    (
        "distill_cache",
        "distill_cached_share",
        "≥ 0.8",
        "distillation prompt served from cache (the task with the shortest rollouts)",
    ),
    (
        "distill_cache",
        "distill_cached_share_by_task.long rollouts",
        "≥ 0.8",
        "the same where rollouts are long (MATH-500 on the 1.5B: ~840-token distillation prompts)",
    ),
    (
        "distill_cache",
        "distill_cached_share_brief",
        "≥ 0.8",
        "the same with the brief ask (rse:brief; opt-in: it lost on dev-brief-three-0.5b)",
    ),
    (
        "distill_cache",
        "distill_cached_share_primed",
        "≥ 0.8",
        "the same with the ask primed in every rollout's system turn (rse:primed, opt-in)",
    ),
    (
        "distill_cache",
        "primed_run_uncached_ratio.three-term sums",
        "< 1",
        "what it costs the whole run: uncached prompt tokens, rollouts too, primed ÷ default",
    ),
    (
        "distill_cache",
        "distill_prefix_served_share",
        "–",
        "of the prompt before the ask (all a cache can hold), the part served",
    ),
    (
        "frontier",
        "pooled.savings_at_sc_accuracy.ratio",
        "≤ 0.5",
        "cheapest rule reaching SC@16's accuracy, its tokens ÷ SC@16's (test cells)",
    ),
    ("frontier", "pooled.savings_at_sc_accuracy.ci95", "–", "bootstrap over problems"),
    (
        "frontier",
        "pooled.best_vs_sc_equal_cost.diff",
        "lower ≥ 0",
        "best rule within SC's spend − SC, every budget, paired",
    ),
    ("frontier", "pooled.best_vs_sc_equal_cost.ci95", "–", "paired bootstrap 95% interval"),
    (
        "frontier",
        "pooled.best_picked_on_dev_vs_sc_equal_cost.diff",
        "–",
        "the same, each budget's rule picked on the dev cells (not the test pools)",
    ),
    (
        "frontier",
        "pooled.best_picked_on_dev_vs_sc_equal_cost.ci95",
        "–",
        "paired bootstrap 95% interval",
    ),
    ("demo", "wall_s", "≤ 240", "`rse-fast solve --demo`, fresh process, 3 rounds × 4"),
    ("demo", "distill_share", "–", "distillation's share of the demo's tokens"),
    ("embed_text", "decision_agreement", "–", "dedup on statements vs rendered lines"),
    ("embed_text", "statement_token_ratio", "–", "tokens embedded, statements ÷ lines"),
    ("rse_ablation", "pooled.problems", "≥ 130", "test-cell problems paired, all cells"),
    ("rse_grounded", "pooled.problems", "≥ 100", "HumanEval test problems paired (60 + 40)"),
    (
        "rse_grounded",
        "pooled.rse_checked_vs_sc_filtered.diff",
        "≥ 0",
        "RSE + checker − sc + execution filter, hidden tests, equal cost",
    ),
    (
        "rse_grounded",
        "pooled.rse_checked_vs_sc_filtered.ci95",
        "lower ≥ −0.03",
        "its paired bootstrap interval",
    ),
    (
        "rse_grounded",
        "pooled.guided_vs_baseline_sample.code_cells_above_zero",
        "≥ 1 cell",
        "code cells whose guided samples pass the stated examples more often than sc's",
    ),
    ("rse_grounded", "pooled.refuted_share", "report", "checked statements refuted"),
    ("rse_ablation", "pooled.rse_vs_sc.diff", "≥ 0", "RSE − SC, equal tokens, pooled test cells"),
    ("rse_ablation", "pooled.rse_vs_sc.ci95", "lower ≥ −0.03", "its paired bootstrap interval"),
    (
        "peers_quick",
        "wall_ratio_vs_its_hub_max",
        "≤ 1.05",
        "5 problems, fresh processes, priors from an earlier one",
    ),
    (
        "peers_quick",
        "wall_ratio_first_contact_max",
        "≤ 1.05",
        "same, a server never seen (no priors: cold)",
    ),
    ("peers_quick", "bon_identical_wall_ratio_max", "≤ 1.05", "best-of-N, every reply the same"),
    ("peers_quick", "bon_identical_calls_ratio_max", "≤ 1.05", "its HTTP calls ours ÷ its_hub"),
    ("peers", "wall_ratio_vs_its_hub_max", "≤ 1.05", "worst cell: sc/bon, N∈{8,32}, C∈{4,32}"),
    ("peers", "wall_ratio_after_first_problem_max", "–", "same, without the cold start"),
    ("peers", "cpu_ratio_vs_its_hub", "≤ 1", "client CPU per HTTP call, ours ÷ its_hub"),
    ("peers", "quality.accuracy_diff", "CI reaches ≥ 0", "ours − its SC, equal tokens"),
    ("peers", "quality.ci95", "–", "paired bootstrap 95% interval of that difference"),
    ("peers", "quality.wall_ratio_vs_its_hub", "≤ 1.05", "same run, wall time ours ÷ its_hub"),
]


def fmt(v: Any, spec: str = "") -> str:
    """``v`` in the format spec ``spec``; a spec ending in ``pts`` shows a share's difference
    in percentage points (``+.1pts``: 0.013 → "+1.3 pts"; an interval "[-0.5, +2.0] pts")."""
    if spec.endswith("pts"):
        inner = spec.removesuffix("pts") + "f"
        if isinstance(v, list):
            return "[" + ", ".join(format(100 * x, inner) for x in v) + "] pts"
        return f"{format(100 * v, inner)} pts"
    if isinstance(v, list):  # an interval: each end in the same format
        return "[" + ", ".join(fmt(x, spec) for x in v) + "]"
    if v == "inf":  # JSON has no infinity: a result file writes it as a string
        return "+∞"
    if spec:
        return format(v, spec)
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"
    return str(v)


#: results measured against the scripted server (a test fixture with injected latencies),
#: not a model: their rows say so
SCRIPTED = frozenset({"client_quick", "overhead_quick", "serve", "serve_quick",
                      "stopping_quick", "peers_quick"})  # fmt: skip


def table() -> str:
    loaded = {name: found for name in {r[0] for r in ROWS} if (found := read_result(name))}
    lines = ["| result file | metric | measured | target | meaning |", "|---|---|---|---|---|"]
    for name, key, target, meaning in ROWS:
        value: Any = loaded.get(name, {})
        for part in key.split("."):  # "stress.overhead_fraction": a nested key
            value = value.get(part, "not run") if isinstance(value, dict) else "not run"
        said = f"scripted server: {meaning}" if name in SCRIPTED else meaning
        lines.append(f"| {name}.json | `{key}` | {fmt(value)} | {target} | {said} |")
    # one line per machine, the 1-minute load each file was measured under named beside it
    machines: dict[str, list[str]] = {}
    for name in sorted(loaded):
        info = loaded[name].get("machine") or {}
        kind = (
            f"{info.get('cpu')}, {info.get('cores')} cores, {info.get('memory_gib')} GiB, "
            f"Python {info.get('python')}"
        )
        load = info.get("load_avg_1m")
        machines.setdefault(kind, []).append(
            f"{name} {load:.2f}" if isinstance(load, (int, float)) else f"{name} not recorded"
        )
    for kind, files in machines.items():
        lines.append(f"\nMachine: {kind}; load per file: {', '.join(files)}.")
    when = sorted(d["measured_at"] for d in loaded.values() if "measured_at" in d)
    if when:
        lines.append(f"Measured {when[0]} to {when[-1]}.")
    return "\n".join(lines)


def lookup(ref: str) -> Any:
    """The JSON value ``file.key.sub`` names. In a list, a number picks an item by position and
    a name picks the item whose ``cell`` is that name (``rse_ablation.cells.test-easy-0.5b``,
    dots and all): a name still points at the same cell when cells are added before it."""
    name, *keys = ref.split(".")
    value: Any = read_result(name)
    if not value:
        raise KeyError(f"{ref}: no results/{name}.json")
    i = 0
    while i < len(keys):
        key = keys[i]
        if isinstance(value, list):
            cells = {v.get("cell"): v for v in value if isinstance(v, dict)}
            # the longest run of parts that names a cell ("probe-gsm-0" + "5b")
            named = next((j for j in range(len(keys), i, -1) if ".".join(keys[i:j]) in cells), 0)
            if named:
                value, i = cells[".".join(keys[i:named])], named
                continue
        if isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        elif isinstance(value, dict) and key in value:
            value = value[key]
        else:
            raise KeyError(f"{ref}: no key {key!r} in results/{name}.json")
        i += 1
    return value


def render_prose(text: str) -> str:
    """``text`` with every inline value rewritten from the JSON (a marker that does not
    read as one is an error naming it, never a number left unchecked)."""
    if len(OPENING.findall(text)) != len(VALUE.findall(text)):
        bad = [m.start() for m in OPENING.finditer(text) if not VALUE.match(text, m.start())]
        where = ", ".join(f"line {text.count(chr(10), 0, at) + 1}" for at in bad)
        raise ValueError(
            f"an inline value marker does not parse ({where}): <!--v key:fmt-->…<!--/v-->"
        )

    def one(m: re.Match[str]) -> str:
        ref, spec = m.group("ref"), m.group("spec")
        value = lookup(ref)
        shown = fmt(value, spec or "")
        tag = f"{ref}:{spec}" if spec else ref
        return f"<!--v {tag}-->{shown}<!--/v-->"

    return VALUE.sub(one, text)


def blocks() -> dict[str, tuple[str, Callable[[], str]]]:
    """Generated blocks of bench/README.md: name → (heading, text from the JSON)."""
    from bench import dedup, eval_local, frontier, peers, rse_ablation, rse_grounded

    out: dict[str, tuple[str, Callable[[], str]]] = {"summary": ("## Summary", table)}
    if read_result("dedup"):
        out["dedup"] = ("## Dedup kernel, full grid", lambda: dedup.table(read_result("dedup")))
    if read_result("peers"):
        out["peers"] = ("## Side by side", lambda: peers.table(read_result("peers")))
    if read_result("rse_ablation"):
        out["rse_ablation"] = (
            "## RSE at equal tokens: dev and test cells",
            lambda: rse_ablation.table(read_result("rse_ablation")),
        )
    if read_result("frontier"):
        out["frontier"] = (
            "## Accuracy per cost: stopping, confidence",
            lambda: frontier.table(read_result("frontier")["cells"]),
        )
    for part in eval_local.PARTS.values():
        if read_result(part["result"]):
            out[part["result"]] = (
                f"## Beside the study: {part['title']}",
                lambda name=part["result"]: eval_local.table(read_result(name)),
            )
    if read_result("rse_grounded"):
        out["rse_grounded"] = (
            "## Checked experience on code",
            lambda: rse_grounded.table(read_result("rse_grounded")),
        )
    return out


def rendered() -> dict[Path, str]:
    """Each README as it should read: generated blocks and inline values from the JSON."""
    out = {doc: render_prose(doc.read_text()) for doc in DOCS}
    bench_readme = HERE / "README.md"
    text = out[bench_readme]
    for name, (_, make) in blocks().items():
        start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
        if start in text:
            head, rest = text.split(start, 1)
            text = f"{head}{start}\n{make()}\n{end}{rest.split(end, 1)[1]}"
    out[bench_readme] = text
    return out


def drift() -> list[str]:
    """One line per README line whose numbers differ from what the JSON gives."""
    problems = []
    for doc, want in rendered().items():
        have = doc.read_text().splitlines()
        for i, (a, b) in enumerate(zip(have, want.splitlines(), strict=False), 1):
            if a != b:
                problems.append(f"{doc.relative_to(ROOT)}:{i}: shows {a!r}, the JSON gives {b!r}")
        if len(have) != len(want.splitlines()):
            problems.append(f"{doc.relative_to(ROOT)}: line count differs from the rendering")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report drift, change nothing")
    args = parser.parse_args()
    if args.check:
        found = drift()
        print("\n".join(found) or "every number matches its JSON")
        raise SystemExit(1 if found else 0)
    for name, (heading, make) in blocks().items():
        replace_readme_block(name, make(), heading)
    for doc in DOCS:
        doc.write_text(render_prose(doc.read_text()))
    print(table())


if __name__ == "__main__":
    main()
