"""Rewrite the summary table of bench/README.md from bench/results/*.json.

python bench/summarize.py
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from common import read_result, replace_readme_block  # noqa: E402

# (file, key, target, how to read the target, what it means)
ROWS: list[tuple[str, str, str, str]] = [
    ("dedup_quick", "exact_match", "true", "kernel decisions == naive loop, N=1e5 d=384 B=256"),
    ("dedup_quick", "speedup_vs_naive", "≥ 10", "vs one mat-vec per candidate"),
    ("dedup_quick", "speedup_vs_faiss_batched", "≥ 1.3", "vs one batched FAISS search + walk"),
    ("dedup_quick", "fraction_of_sgemm", "≥ 0.8", "B=256: GFLOP/s ÷ square sgemm GFLOP/s"),
    ("dedup_quick", "fraction_of_sgemm_b64", "≥ 0.8", "B=64: GFLOP/s ÷ square sgemm GFLOP/s"),
    (
        "dedup_quick",
        "shape_gemm_fraction_of_sgemm_b64",
        "–",
        "B=64: one BLAS call of the same shape ÷ square sgemm (this BLAS's own limit)",
    ),
    ("dedup_quick", "scan_fraction_of_bandwidth", "≥ 0.7", "B=1 scan at N=1e6 ÷ read bandwidth"),
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
        "p99_added_vs_floor",
        "≤ 1.5",
        "ours ÷ the floor, p99 added latency (None: the floor's is within the noise)",
    ),
    ("serve", "p99_added_minus_floor_ms", "–", "ours − the floor, p99 added latency"),
    ("serve", "p99_added_vs_floor_bootstrap", "–", "its 5/50/95th pct, rounds+requests resampled"),
    ("serve", "direct_p99_spread_ms", "–", "the direct path's own p99 overhead spread, phases"),
    ("serve", "proxy_cores", "–", "cores of the proxy under test (load and upstream: the rest)"),
    ("serve", "ttft_added_p50_ms", "≤ 2", "streamed: time to first token added, p50"),
    ("serve", "errors", "0", ""),
    ("serve", "soak_requests", "≥ 20000", "pass-through requests in the soak"),
    ("serve", "soak_rss_growth_mb", "< 10", "service RSS growth after warm-up"),
    ("rse_ablation", "pooled.problems", "≥ 130", "test-cell problems paired, all cells"),
    ("rse_ablation", "pooled.rse_vs_sc.diff", "≥ 0", "RSE − SC, equal tokens, pooled test cells"),
    ("rse_ablation", "pooled.rse_vs_sc.ci95", "lower ≥ −0.03", "its paired bootstrap interval"),
    ("peers", "wall_ratio_vs_its_hub_max", "≤ 1.05", "worst cell: sc/bon, N∈{8,32}, C∈{4,32}"),
    ("peers", "wall_ratio_after_first_problem_max", "–", "same, without the cold start"),
    ("peers", "cpu_ratio_vs_its_hub", "≤ 1", "client CPU per HTTP call, ours ÷ its_hub"),
    ("peers", "quality.accuracy_diff", "CI reaches ≥ 0", "ours − its SC, equal tokens"),
    ("peers", "quality.ci95", "–", "paired bootstrap 95% interval of that difference"),
    ("peers", "quality.wall_ratio_vs_its_hub", "≤ 1.05", "same run, wall time ours ÷ its_hub"),
]


def fmt(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"
    return str(v)


def table() -> str:
    loaded = {name: found for name in {r[0] for r in ROWS} if (found := read_result(name))}
    lines = ["| result file | metric | measured | target | meaning |", "|---|---|---|---|---|"]
    for name, key, target, meaning in ROWS:
        value: Any = loaded.get(name, {})
        for part in key.split("."):  # "stress.overhead_fraction": a nested key
            value = value.get(part, "not run") if isinstance(value, dict) else "not run"
        lines.append(f"| {name}.json | `{key}` | {fmt(value)} | {target} | {meaning} |")
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
    when = sorted(d.get("measured_at", "") for d in loaded.values())
    if when:
        lines.append(f"Measured {when[0]} to {when[-1]}.")
    return "\n".join(lines)


def main() -> None:
    summary = table()
    replace_readme_block("summary", summary, "## Summary")
    print(summary)


if __name__ == "__main__":
    main()
