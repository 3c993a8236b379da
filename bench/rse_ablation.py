"""What the RSE fidelity work buys, at equal tokens, on the embedded local model.

    python bench/rse_ablation.py                 # the full run (~1.5 h on 2 cores; resumes)
    python bench/rse_ablation.py --scripted      # the plumbing, against the scripted server
    python bench/rse_ablation.py --summarise-only

Three methods on the same seeded problems at the same token budget (prompt + completion of
every call, distillation included), each with the same sampling settings:
- ``rse_new``: RSE as this tree's HEAD commit has it (rules in the guided prompt, structured
  distillation, support-ranked bank, echo filter);
- ``rse_old``: RSE of the previous release (commit ``OLD_COMMIT``), exactly as it was;
- ``sc``: self-consistency (majority vote) at the same budget.
Both trees are exported (``git archive``) to temporary folders and run from there, so edits to
the working tree during the run change nothing. Problems come in chunks that rotate through
the three, so a run cut short stays paired.
Paired bootstrap 95% intervals (resampling problems) for every difference; per-round accuracy
for the RSE variants; a short probe first measures single-sample accuracy of the task.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from rse_fast.eval.datasets import load_dataset
from rse_fast.eval.metrics import bootstrap_mean_ci, paired_difference

from common import replace_readme_block, write_result

HERE = Path(__file__).parent
ROOT = HERE.parent
WORK = HERE / "results" / "rse_ablation"
OLD_COMMIT = "9544e29"
TASK = "gym:basic_arithmetic?min_terms=2&max_terms=3&min_digits=1&max_digits=2"
MODEL = "qwen2.5-coder-0.5b"
VARIANTS = {
    "rse_new": {"method": "rse", "tree": "new"},
    "rse_old": {"method": "rse", "tree": "old"},
    "sc": {"method": "sc", "tree": "new"},
}


def head_commit() -> str:
    out = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return out.stdout.strip()


def export_tree(commit: str, dest: Path) -> Path:
    """A commit's files (git archive), with the links its imports need from a source tree."""
    tree = dest / f"rse-fast-{commit}"
    if (tree / "rse_fast").exists():
        return tree
    tree.mkdir(parents=True, exist_ok=True)
    archive = dest / f"{commit}.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(archive), commit], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    for name in ("kernels", "models"):  # the package-dir maps, as links
        link = tree / "rse_fast" / name
        if not link.exists() and not link.is_symlink():
            link.symlink_to(Path("..") / name)
    return tree


def worker(
    variant: str, problems: Path, url: str, model: str, args: argparse.Namespace,
    trees: dict[str, Path],
) -> None:  # fmt: skip
    spec = VARIANTS[variant]
    tree = trees[spec["tree"]]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [
        sys.executable,
        str(HERE / "rse_worker.py"),
        "--problems", str(problems),
        "--out", str(WORK / f"{variant}.jsonl"),
        "--url", url,
        "--model", model,
        "--method", spec["method"],
        "--label", variant,
        "--budget", str(args.budget),
        "--k", str(args.k),
        "--max-tokens", str(args.max_tokens),
        "--seed", str(args.seed),
    ]  # fmt: skip
    subprocess.run(cmd, check=True, env=env, cwd=str(tree))


async def probe(url: str, model: str, problems: list[Any], grade: Any, samples: int) -> float:
    """Single-sample accuracy of the task: ``samples`` plain samples of each probe problem."""
    from rse_fast.llm.client import LLMClient
    from rse_fast.prompts import solve_messages

    async with LLMClient(url, model) as client:
        results = await asyncio.gather(
            *(
                client.chat(
                    solve_messages(p.prompt), n=samples, temperature=0.7, max_tokens=384, seed=i
                )
                for i, p in enumerate(problems)
            )
        )
    scores = [grade(p, t) for p, r in zip(problems, results, strict=True) for t in r.texts]
    return sum(scores) / len(scores)


def summarise(dataset: Any, args: argparse.Namespace, probe_acc: float | None) -> dict[str, Any]:
    by_id = {p.id: p for p in dataset.problems}
    recs: dict[str, dict[str, dict[str, Any]]] = {}
    for variant in VARIANTS:
        path = WORK / f"{variant}.jsonl"
        rows = (
            [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
            if path.exists()
            else []
        )
        recs[variant] = {r["id"]: r for r in rows}
    common = sorted(set.intersection(*(set(v) for v in recs.values())), key=list(by_id).index)
    score = {
        v: [dataset.grade(by_id[i], recs[v][i]["final_text"]) for i in common] for v in VARIANTS
    }
    out: dict[str, Any] = {
        "task": TASK + f" (seed {args.seed}, reasoning-gym; counted right only at score 1.0)",
        "model": f"{MODEL} (Q4 GGUF, llama.cpp llama-server, 2 CPU cores)",
        "problems": len(common),
        "planned_problems": args.problems,
        "partial": len(common) < args.problems,
        "budget_tokens": args.budget,
        "k": args.k,
        "commits": json.loads((WORK / "commits.json").read_text())
        if (WORK / "commits.json").exists()
        else None,
        "probe_single_sample_accuracy": probe_acc,
        "single_sample_accuracy_sc_pool": _pool_accuracy(dataset, by_id, recs["sc"], common),
        "accuracy": {v: sum(s) / len(s) if s else None for v, s in score.items()},
        "accuracy_ci95": {v: bootstrap_mean_ci(s) for v, s in score.items()},
        "mean_tokens": {
            v: sum(recs[v][i]["tokens"] for i in common) / max(1, len(common)) for v in VARIANTS
        },
        "mean_wall_s": {
            v: sum(recs[v][i]["wall_s"] for i in common) / max(1, len(common)) for v in VARIANTS
        },
        "accuracy_per_round": {
            v: _per_round([recs[v][i].get("accuracy_per_round") for i in common])
            for v in ("rse_new", "rse_old")
        },
    }
    for name, a, b in (
        ("rse_new_vs_sc", "rse_new", "sc"),
        ("rse_new_vs_rse_old", "rse_new", "rse_old"),
        ("rse_old_vs_sc", "rse_old", "sc"),
    ):
        diff, ci = paired_difference(score[a], score[b]) if common else (None, (None, None))
        out[name] = {"accuracy_diff": diff, "ci95": list(ci)}
    return out


def _pool_accuracy(
    dataset: Any, by_id: dict[str, Any], rows: dict[str, Any], ids: list[str]
) -> float | None:
    scores = [dataset.grade(by_id[i], t) for i in ids for t in rows[i].get("pool_texts", [])]
    return sum(scores) / len(scores) if scores else None


def _per_round(runs: list[list[float | None] | None]) -> list[float | None]:
    runs_ = [r for r in runs if r]
    if not runs_:
        return []
    depth = max(len(r) for r in runs_)
    out: list[float | None] = []
    for k in range(depth):
        vals = [r[k] for r in runs_ if k < len(r) and r[k] is not None]
        out.append(sum(vals) / len(vals) if vals else None)  # type: ignore[arg-type]
    return out


def table(s: dict[str, Any]) -> str:
    def pct(x: float | None) -> str:
        return "—" if x is None else f"{100 * x:.0f}%"

    def ci(c: list[float | None]) -> str:
        return "—" if c[0] is None else f"[{100 * c[0]:+.0f}, {100 * c[1]:+.0f}] pts"

    partial = (
        f"**Partial run: {s['problems']} of the {s['planned_problems']} planned problems** "
        "(`python bench/rse_ablation.py` resumes it). With this few problems the intervals "
        "are wide: the run cannot yet show a difference either way.\n\n"
        if s.get("partial")
        else ""
    )
    lines = [
        partial + f"{s['problems']} problems of `{s['task']}`, {s['model']}, budget "
        f"{s['budget_tokens']:,} tokens per problem and method, K={s['k']} per RSE round. "
        f"Single samples right: {pct(s['probe_single_sample_accuracy'])} (probe), "
        f"{pct(s['single_sample_accuracy_sc_pool'])} (every SC sample).",
        "",
        "| method | accuracy (95% CI) | mean tokens | mean wall s | accuracy per round |",
        "|---|---|---|---|---|",
    ]
    for v in VARIANTS:
        lo, hi = s["accuracy_ci95"][v]
        rounds = ", ".join(pct(x) for x in s["accuracy_per_round"].get(v, [])) or "—"
        lines.append(
            f"| {v} | {pct(s['accuracy'][v])} ({pct(lo)}–{pct(hi)}) | {s['mean_tokens'][v]:,.0f} "
            f"| {s['mean_wall_s'][v]:.1f} | {rounds} |"
        )
    lines += [
        "",
        "Mean wall time is per problem on a shared 2-core machine; one SC problem took 920 s "
        "while other work held the CPU, so wall times are only indicative. Equal tokens: each "
        "method ran at the same budget; its mean spend is in the table.",
        "",
        "| paired difference | accuracy | 95% CI (bootstrap over problems) |",
        "|---|---|---|",
    ]
    for name in ("rse_new_vs_sc", "rse_new_vs_rse_old", "rse_old_vs_sc"):
        d = s[name]
        diff = "—" if d["accuracy_diff"] is None else f"{100 * d['accuracy_diff']:+.1f} pts"
        lines.append(f"| {name.replace('_vs_', ' − ')} | {diff} | {ci(d['ci95'])} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=40)
    parser.add_argument("--budget", type=int, default=4000)
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=384)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--chunk", type=int, default=5)
    parser.add_argument("--scripted", action="store_true", help="plumbing check, no model")
    parser.add_argument("--summarise-only", action="store_true")
    args = parser.parse_args()
    global WORK
    if args.scripted:
        WORK = Path(tempfile.mkdtemp(prefix="rse-ablation-"))
    WORK.mkdir(parents=True, exist_ok=True)
    dataset = load_dataset(TASK, args.problems, args.seed)
    probe_path = WORK / "probe.json"
    if args.summarise_only:
        probe_acc = json.loads(probe_path.read_text())["accuracy"] if probe_path.exists() else None
    else:
        probe_acc = asyncio.run(run(dataset, args, probe_path))
    summary = summarise(dataset, args, probe_acc)
    if args.scripted:
        print(json.dumps(summary, indent=1))
        return
    write_result("rse_ablation", summary)
    replace_readme_block(
        "rse_ablation",
        table(summary),
        "## RSE ablation: new prompts and bank vs previous RSE vs SC",
    )
    print(table(summary))


async def run(dataset: Any, args: argparse.Namespace, probe_path: Path) -> float | None:
    dest = Path(tempfile.gettempdir()) / "rse-fast-trees"
    commits_path = WORK / "commits.json"
    if commits_path.exists():  # a resumed run keeps the trees it started with
        commits = json.loads(commits_path.read_text())
    else:
        commits = {"new": head_commit(), "old": OLD_COMMIT}
        commits_path.write_text(json.dumps(commits))
    trees = {k: export_tree(c, dest) for k, c in commits.items()}
    problems = [{"id": p.id, "prompt": p.prompt, "gold": p.gold} for p in dataset.problems]
    if args.scripted:
        from rse_fast.testing import ScriptedServer

        async with ScriptedServer(default_reply="7 + 5 = 12 so \\boxed{12}") as srv:
            await asyncio.to_thread(_chunks, problems, srv.base_url, "scripted", args, trees)
        return None
    from rse_fast.local import LocalServer

    async with LocalServer(MODEL, parallel=4) as server:
        url, model = server.base_url, server.model_name
        if probe_path.exists():
            probe_acc = json.loads(probe_path.read_text())["accuracy"]
        else:
            probe_acc = await probe(url, model, dataset.problems[:12], dataset.grade, 2)
            probe_path.write_text(json.dumps({"accuracy": probe_acc, "problems": 12, "samples": 2}))
        print(f"probe: single samples right {probe_acc:.0%}", flush=True)
        await asyncio.to_thread(_chunks, problems, url, model, args, trees)
    return probe_acc


def _chunks(
    problems: list[dict[str, Any]], url: str, model: str, args: argparse.Namespace,
    trees: dict[str, Path],
) -> None:  # fmt: skip
    for start in range(0, len(problems), args.chunk):
        part = WORK / f"chunk-{start}.json"
        part.write_text(json.dumps(problems[start : start + args.chunk]))
        for variant in VARIANTS:
            worker(variant, part, url, model, args, trees)
        print(f"done {min(start + args.chunk, len(problems))}/{len(problems)}", flush=True)


if __name__ == "__main__":
    main()
