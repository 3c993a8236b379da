"""Does RSE pay for itself? A protocol: defaults chosen on dev seeds, reported once on test seeds.

    python -m bench rse_ablation --cell dev-easy-0.5b     # run (or resume) one cell
    python -m bench rse_ablation --cell test-easy-0.5b test-three-0.5b test-mid-1.5b  # in turn
    python -m bench rse_ablation --summarize-only         # rse_ablation.json + README table
    python -m bench rse_ablation --scripted               # plumbing: the scripted server

A *cell* is (model, task, seed set, budget, methods). Dev cells hold the ablation variants (each
change switched off); test cells hold ``rse`` at its defaults and ``sc``, on seeds no default
was chosen on. Every method of a cell gets the same problems, the same budget (prompt +
completion tokens of every call, distillation included), the same sampling settings and
seeds. Each cell runs from an exported copy (``git archive``) of the commit it started with
(a method a fix re-pinned runs at its own, ``method_commit``; its earlier records set aside),
so edits to the working tree never change a run in flight; records are appended per problem
and a rerun skips what is done. Problems rotate through the methods in chunks, so a run cut
short stays paired.

What is measured per cell (paired bootstrap intervals, resampling problems):
- accuracy of the final answer, RSE − SC, and RSE − SC-with-the-same-settle-rule;
- the per-role token split and the share spent on experience (distillation + bank block);
- the bank's effect per sample: RSE's guided samples against SC's samples at the same positions,
  conditioned on how many of round 1's samples were right. RSE's round 1 and SC's first K
  samples are the same requests (same prompt, seeds and sampling settings); llama-server does
  not answer identical requests identically (``same_request_same_text_share``: 51-58% of the
  never-guided samples matched SC's text in the test cells), so the pairing removes the
  problem's difficulty, not the sampling noise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.common import (
    load_cells,
    machine,
    measured_on,
    module_command,
    read_jsonl,
    replace_readme_block,
    write_result,
)
from rse_fast.eval.datasets import load_dataset
from rse_fast.eval.metrics import bootstrap_mean_ci, paired_difference

HERE = Path(__file__).parent
ROOT = HERE.parent
WORK = HERE / "results" / "rse_ablation"


def budget_unit(cell: Cell) -> str:
    """What the cell's budget counts: its options' ``budget_unit``, else tokens."""
    return str(cell.options.get("budget_unit", "tokens"))


@dataclass(frozen=True)
class Cell:
    model: str
    task: str
    problems: int
    seed: int
    budget: int
    methods: tuple[str, ...]
    split: str  # "dev" (choose defaults), "test" (report once), "probe" or "retired"
    k: int = 4
    max_tokens: int = 384
    max_rounds: int = 8
    why: str = ""  # what the cell is for, and the rule it ran under
    #: options every method of the cell runs with (e.g. ``{"confidence": true}``: then sc is
    #: sc with the confidence rule, the baseline with the same signal)
    options: dict[str, Any] = field(default_factory=dict)
    #: the cell ran when a code reply's boxed value was its answer for votes (before
    #: ``code_problem``'s ``answer_of``): its offline picks replay that rule
    boxed_code_answers: bool = False


CELLS = load_cells("rse_ablation", Cell)


@dataclass
class CellRecords:
    """One cell's appended records, a file per method: method → problem id → record. (An
    evaluation's records, ``rse_fast.eval.records``, are one file keyed by problem, method
    and budget; a cell's budget is one, and its methods run from their own commits.)"""

    by_method: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    @classmethod
    def read(cls, folder: Path, methods: tuple[str, ...]) -> CellRecords:
        out = cls()
        for m in methods:
            path = folder / f"{slug(m)}.jsonl"
            out.by_method[m] = {r["id"]: r for r in read_jsonl(path)}
        return out

    def common(self, order: list[str]) -> list[str]:
        ids = set.intersection(*(set(v) for v in self.by_method.values()))
        return [i for i in order if i in ids]


def slug(method: str) -> str:
    return method.replace(":", "_")


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


def run_cell(
    name: str,
    cell: Cell,
    scripted: bool,
    *,
    work: Path = WORK,
    problems: list[dict[str, Any]] | None = None,
    method_args: dict[str, list[str]] | None = None,
) -> None:
    """Run (or resume) one cell. ``problems``: its problems (default: ``cell.task``'s seeded
    sample); ``method_args``: extra worker arguments per method label (its family and
    options, the dataset to look problems up in)."""
    folder = work / name if not scripted else Path(tempfile.mkdtemp(prefix="rse-ablation-"))
    folder.mkdir(parents=True, exist_ok=True)
    meta_path = folder / "cell.json"
    if meta_path.exists():  # a resumed cell keeps the commit it started with
        meta = json.loads(meta_path.read_text())
    else:
        meta = {"cell": asdict(cell), "commit": head_commit(), "machine": machine()}
        meta_path.write_text(json.dumps(meta, indent=1))
    trees = {
        m: export_tree(method_commit(meta, m), Path(tempfile.gettempdir()) / "rse-fast-trees")
        for m in cell.methods
    }
    if problems is None:
        dataset = load_dataset(cell.task, cell.problems, cell.seed)
        problems = [{"id": p.id, "prompt": p.prompt, "gold": p.gold} for p in dataset.problems]
    asyncio.run(_serve_and_run(cell, folder, trees, problems, scripted, method_args or {}))


def method_commit(meta: dict[str, Any], method: str) -> str:
    """The commit a cell's method runs at: the cell's, unless a fix re-pinned that method
    alone (``repinned``: method → commit and reason; its earlier records were set aside)."""
    return str(meta.get("repinned", {}).get(method, {}).get("commit", meta["commit"]))


async def _serve_and_run(
    cell: Cell,
    folder: Path,
    trees: dict[str, Path],
    problems: list[dict[str, Any]],
    scripted: bool,
    method_args: dict[str, list[str]],
) -> None:
    if scripted:
        from rse_fast.testing import ScriptedServer

        async with ScriptedServer(default_reply="7 + 5 = 12 so \\boxed{12}") as srv:
            await asyncio.to_thread(
                _chunks, cell, folder, trees, problems, srv.base_url, "s", method_args
            )
        return
    from rse_fast.local import LocalServer

    async with LocalServer(cell.model, parallel=cell.k) as server:
        await asyncio.to_thread(
            _chunks, cell, folder, trees, problems, server.base_url, server.model_name,
            method_args,
        )  # fmt: skip


def _chunks(
    cell: Cell, folder: Path, trees: dict[str, Path], problems: list[dict[str, Any]], url: str,
    model: str,
    method_args: dict[str, list[str]], chunk: int = 4,
) -> None:  # fmt: skip
    for start in range(0, len(problems), chunk):
        part = folder / "chunk.json"
        part.write_text(json.dumps(problems[start : start + chunk]))
        for method in cell.methods:
            cmd = [
                *module_command("bench.rse_worker"),
                "--problems", str(part), "--out", str(folder / f"{slug(method)}.jsonl"),
                "--url", url, "--model", model, "--method", method, "--label", method,
                "--budget", str(cell.budget), "--k", str(cell.k), "--parallel", str(cell.k),
                "--max-tokens", str(cell.max_tokens), "--max-rounds", str(cell.max_rounds),
                "--seed", str(cell.seed), *method_args.get(method, []),
            ]  # fmt: skip
            tree = str(trees[method])
            # -m from the pinned tree puts its rse_fast and bench first on sys.path
            subprocess.run(cmd, check=True, cwd=tree)
        print(f"{folder.name}: {min(start + chunk, len(problems))}/{len(problems)}", flush=True)


# -- analysis ---------------------------------------------------------------------------------
def graded(dataset: Any, problem: Any, texts: list[str]) -> list[float]:
    return [float(dataset.grade(problem, t)) for t in texts]


def graded_mean(dataset: Any, problem: Any, texts: list[str]) -> float:
    scores = graded(dataset, problem, texts)
    return sum(scores) / len(scores) if scores else 0.0


def overhead_share(rows: list[dict[str, Any]]) -> float | None:
    """Distillation + bank-block tokens ÷ all tokens, over a method's records."""
    total = sum(r["tokens"] for r in rows)
    spent = sum((r.get("roles") or {}).get("distill", 0) + (r.get("bank_prompt_tokens") or 0)
                for r in rows)  # fmt: skip
    return spent / total if total else None


def guided_rounds(record: dict[str, Any]) -> set[int]:
    """The rounds whose prompts carried a bank block. Records from before ``guided_rounds``
    was kept say only whether any prompt did (``bank_prompt_tokens``); for those every round
    after the first counts, an upper bound."""
    if record.get("guided_rounds") is not None:
        return set(record["guided_rounds"])
    if not record.get("bank_prompt_tokens"):
        return set()
    return {r for r in record.get("pool_rounds") or [] if r > 1}


def guided_vs_sc_samples(
    dataset: Any, by_id: dict[str, Any], rse: dict[str, Any], sc: dict[str, Any], ids: list[str],
    k: int, score: Callable[[Any, list[str]], list[float]] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Per problem: mean correctness of RSE's guided samples (those whose prompt carried a bank
    block) minus SC's samples at the same positions (RSE's sample j is seeded as SC's sample
    j), overall and by how many of round 1's k samples were right (the two share round 1).
    Problems without a guided sample, or where SC has no sample there, are left out: a sample
    no bank reached says nothing about the bank. ``score``: each sample's score (default:
    graded right or wrong by the dataset)."""
    rate = score or (lambda problem, texts: graded(dataset, problem, texts))
    diffs: list[float] = []
    by_start: dict[int, list[float]] = {}
    for i in ids:
        r_texts, rounds = rse[i]["pool_texts"], rse[i].get("pool_rounds") or []
        guided = guided_rounds(rse[i])
        sc_texts = sc[i]["pool_texts"]
        pairs = [
            (text, sc_texts[j])
            for j, (text, rr) in enumerate(zip(r_texts, rounds, strict=False))
            if rr in guided and j < len(sc_texts)
        ]
        if not pairs:
            continue
        a = rate(by_id[i], [x for x, _ in pairs])
        b = rate(by_id[i], [y for _, y in pairs])
        d = (sum(a) - sum(b)) / len(pairs)
        diffs.append(d)
        first = int(sum(rate(by_id[i], r_texts[:k])))
        by_start.setdefault(first, []).append(d)
    mean, ci = paired_difference(diffs, [0.0] * len(diffs)) if diffs else (None, (None, None))
    return {
        "diff": mean,
        "ci95": list(ci),
        "problems": len(diffs),
        "by_round1_right": {
            str(n): {"diff": sum(v) / len(v), "problems": len(v)}
            for n, v in sorted(by_start.items())
        },
    }


def same_request_same_text_share(
    rse: dict[str, Any], sc: dict[str, Any], ids: list[str]
) -> dict[str, Any]:
    """How often RSE's sample j and SC's sample j, the same request (prompt, seed, settings)
    where no bank reached it, came back as the same text: the server's own repeatability."""
    same = total = 0
    for i in ids:
        guided = guided_rounds(rse[i])
        rounds = rse[i].get("pool_rounds") or []
        pairs = zip(rse[i]["pool_texts"], sc[i]["pool_texts"], rounds, strict=False)
        for mine, theirs, r in pairs:
            if r not in guided:
                same += mine == theirs
                total += 1
    return {"share": same / total if total else None, "samples": total}


def bank_reach(
    records: dict[str, Any], score: dict[str, float], sc_score: dict[str, float], ids: list[str]
) -> dict[str, Any]:
    """Where an accuracy difference comes from: RSE − SC on the problems whose prompts a bank
    reached and on those it never did (there RSE was plain sampling with fewer samples, so a
    gain is noise, not experience), and the share of problems that paid for a distillation
    no prompt ever showed."""
    groups: dict[str, list[float]] = {"shown": [], "not_shown": []}
    unshown = 0
    for i in ids:
        shown = bool(guided_rounds(records[i]))
        groups["shown" if shown else "not_shown"].append(score[i] - sc_score[i])
        unshown += not shown and bool(records[i].get("distilled_rounds"))
    out: dict[str, Any] = {
        g: {"diff": sum(v) / len(v) if v else None, "problems": len(v)} for g, v in groups.items()
    }
    out["distilled_never_shown_share"] = unshown / len(ids) if ids else None
    return out


def summarize_cell(name: str, cell: Cell) -> dict[str, Any] | None:
    folder = WORK / name
    if not (folder / "cell.json").exists():
        return None
    meta = json.loads((folder / "cell.json").read_text())
    dataset = load_dataset(cell.task, cell.problems, cell.seed)
    by_id = {p.id: p for p in dataset.problems}
    recs = CellRecords.read(folder, cell.methods)
    ids = recs.common(list(by_id))
    if not ids:
        return None
    score = {
        m: [float(dataset.grade(by_id[i], recs.by_method[m][i]["final_text"])) for i in ids]
        for m in cell.methods
    }
    unit = budget_unit(cell)
    out: dict[str, Any] = {
        "cell": name,
        "split": cell.split,
        "why": cell.why,
        "model": cell.model,
        "task": cell.task,
        "seed": cell.seed,
        # a cell's budget counts tokens unless its options name another unit (price: a
        # hosted API's per-token prices, cached input at its own)
        "budget_tokens": cell.budget if unit == "tokens" else None,
        "budget": cell.budget,
        "budget_unit": unit,
        "options": cell.options,
        "k": cell.k,
        "max_tokens": cell.max_tokens,
        "problems": len(ids),
        "planned_problems": cell.problems,
        "partial": len(ids) < cell.problems,
        "commit": meta["commit"],
        "repinned": meta.get("repinned", {}),
        "machine": meta["machine"],
        "accuracy": {m: sum(s) / len(s) for m, s in score.items()},
        "accuracy_ci95": {m: list(bootstrap_mean_ci(s)) for m, s in score.items()},
        "mean_tokens": {
            m: sum(recs.by_method[m][i]["tokens"] for i in ids) / len(ids) for m in cell.methods
        },
        # in the cell's unit where it is not tokens: what each method spent, as it booked it
        "mean_cost": {
            m: sum((recs.by_method[m][i].get("cost") or {}).get("spent", 0.0) for i in ids)
            / len(ids)
            for m in cell.methods
        }
        if unit != "tokens"
        else None,
        "tokens_by_role": {
            m: _mean_roles([recs.by_method[m][i] for i in ids]) for m in cell.methods
        },
        "samples_per_problem": {
            m: sum(len(recs.by_method[m][i]["pool_texts"]) for i in ids) / len(ids)
            for m in cell.methods
        },
        # each sample graded alone, averaged per problem: where the task sits for this model
        "single_sample_accuracy": {
            m: sum(graded_mean(dataset, by_id[i], recs.by_method[m][i]["pool_texts"]) for i in ids)
            / len(ids)
            for m in cell.methods
        },
        "settled_share": {
            m: sum(bool(recs.by_method[m][i].get("settled")) for i in ids) / len(ids)
            for m in cell.methods
            if m.startswith("rse")
        },
    }
    # every token ÷ every sample (RSE's include its distillations): what one sample costs
    out["tokens_per_sample"] = {
        m: out["mean_tokens"][m] / max(1e-9, out["samples_per_problem"][m]) for m in cell.methods
    }
    for m in cell.methods:
        if m != "sc" and "sc" in score:
            diff, ci = paired_difference(score[m], score["sc"])
            out[f"{slug(m)}_vs_sc"] = {"diff": diff, "ci95": list(ci)}
        if m.startswith("rse:") and "rse" in score:  # an ablation variant against the defaults
            diff, ci = paired_difference(score[m], score["rse"])
            out[f"{slug(m)}_vs_rse"] = {"diff": diff, "ci95": list(ci)}
    per_problem = {m: dict(zip(ids, score[m], strict=True)) for m in cell.methods}
    if "sc" not in cell.methods:
        # a cell of RSE and its variants only: each variant's guided samples against the
        # default's samples at the same positions (sample j is seeded alike in both)
        out["variants_vs_rse"] = {
            slug(m): {
                "overhead_share": overhead_share([recs.by_method[m][i] for i in ids]),
                "guided_vs_rse_sample": guided_vs_sc_samples(
                    dataset, by_id, recs.by_method[m], recs.by_method["rse"], ids, cell.k
                ),
            }
            for m in cell.methods
            if m.startswith("rse:") and "rse" in cell.methods
        }
        out["per_problem"] = per_problem
        return out
    # what each RSE method spent on experience and what its bank did to the samples it reached
    experience = {
        slug(m): {
            "overhead_share": overhead_share([recs.by_method[m][i] for i in ids]),
            "guided_vs_sc_sample": guided_vs_sc_samples(
                dataset, by_id, recs.by_method[m], recs.by_method["sc"], ids, cell.k
            ),
            "bank_reach": bank_reach(recs.by_method[m], per_problem[m], per_problem["sc"], ids),
            "same_request_same_text_share": same_request_same_text_share(
                recs.by_method[m], recs.by_method["sc"], ids
            ),
        }
        for m in cell.methods
        if m.startswith("rse")
    }
    if "rse" in cell.methods:
        # the default settle rule spends the rest of a settled problem on plain samples, which
        # is what SC does: SC under the same rule is SC itself, so the pair is the same
        out["rse_vs_sc_settle"] = {**out["rse_vs_sc"], "sc_settle_is_sc": True}
        out.update(experience["rse"])
    if len(experience) > 1:
        out["experience_by_method"] = experience
    out["per_problem"] = per_problem
    return out


def _mean_roles(rows: list[dict[str, Any]]) -> dict[str, float]:
    roles: dict[str, float] = {}
    for r in rows:
        for k, v in (r.get("roles") or {}).items():
            roles[k] = roles.get(k, 0.0) + v / len(rows)
    return roles


def with_confidence(cell: dict[str, Any]) -> bool:
    """Whether every method of a cell ran with the confidence rule (sc then is sc with the
    same signal): such cells answer RSE+confidence against SC+confidence, pooled apart."""
    return bool((cell.get("options") or {}).get("confidence"))


def paired_over(cells: list[dict[str, Any]], a: str, b: str) -> dict[str, Any]:
    """``a`` − ``b`` over the given cells' problems, paired by problem."""
    x: list[float] = []
    y: list[float] = []
    for c in cells:
        if a in c["per_problem"] and b in c["per_problem"]:
            ids = list(c["per_problem"][a])
            x += [c["per_problem"][a][i] for i in ids]
            y += [c["per_problem"][b][i] for i in ids]
    if not x:
        return {"diff": None, "ci95": [None, None], "problems": 0}
    diff, ci = paired_difference(x, y)
    return {"diff": diff, "ci95": list(ci), "problems": len(x)}


def pooled(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """RSE − SC over every plain test cell's problems, paired by problem; RSE − SC where both
    ran with the confidence rule, over those test cells apart (issue 40's
    ``rse_conf_vs_sc_conf``)."""
    tests = [c for c in cells if c["split"] == "test"]
    plain = [c for c in tests if not with_confidence(c)]
    conf_cells = [c for c in tests if with_confidence(c)]
    conf = paired_over(conf_cells, "rse", "sc")
    # a cell still running is pooled with what is in, and says so
    conf["planned_problems"] = sum(c["planned_problems"] for c in conf_cells)
    conf["partial"] = any(c["partial"] for c in conf_cells)
    both = paired_over(plain, "rse", "sc")
    if not both["problems"]:
        return {"rse_vs_sc": {"diff": None, "ci95": [None, None]}, "problems": 0,
                "rse_conf_vs_sc_conf": conf}  # fmt: skip
    reach: dict[str, Any] = {}
    for group in ("shown", "not_shown"):
        tests = [c for c in plain if "bank_reach" in c]
        parts = [c["bank_reach"][group] for c in tests]
        n = sum(x["problems"] for x in parts)
        total = sum(x["diff"] * x["problems"] for x in parts if x["problems"])
        reach[group] = {"diff": total / n if n else None, "problems": n}
    return {
        "rse_vs_sc": {"diff": both["diff"], "ci95": both["ci95"]},
        "problems": both["problems"],
        "bank_reach": reach,
        "rse_conf_vs_sc_conf": conf,
    }


def table(summary: dict[str, Any]) -> str:
    def pct(x: float | None) -> str:
        return "—" if x is None else f"{100 * x:.0f}%"

    def pts(d: dict[str, Any]) -> str:
        if d.get("diff") is None:
            return "—"
        lo, hi = d["ci95"]
        return f"{100 * d['diff']:+.1f} pts [{100 * lo:+.0f}, {100 * hi:+.0f}]"

    def split(d: dict[str, Any]) -> str:
        diff = "—" if d["diff"] is None else f"{100 * d['diff']:+.1f} pts"
        return f"{diff} ({d['problems']})"

    lines = [
        "| cell | problems | budget | method | accuracy | mean tokens | samples | vs SC |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in summary["cells"]:
        for m, acc in c["accuracy"].items():
            vs = pts(c.get(f"{slug(m)}_vs_sc", {})) if m != "sc" else ""
            part = f" (of {c['planned_problems']})" if c["partial"] else ""
            name = c["cell"] + (" (retired)" if c["split"] == "retired" else "")
            unit = c.get("budget_unit", "tokens")
            budget = f"{c.get('budget', c['budget_tokens']):,}"
            budget += "" if unit == "tokens" else f" {unit.partition(':')[0]}"
            lines.append(
                f"| {name} | {c['problems']}{part} | {budget} | {m} | "
                f"{pct(acc)} | {c['mean_tokens'][m]:,.0f} | "
                f"{c['samples_per_problem'][m]:.1f} | {vs} |"
            )
    if summary.get("probes"):
        lines += [
            "",
            "| probe | model | task | problems | one sample right | SC's vote right |",
            "|---|---|---|---|---|---|",
        ]
        for c in summary["probes"]:
            task = c["task"].removeprefix("gym:")
            lines.append(
                f"| {c['cell']} | {c['model']} | `{task}` | {c['problems']} | "
                f"{pct(c['single_sample_accuracy']['sc'])} | {pct(c['accuracy']['sc'])} |"
            )
    lines += [
        "",
        "| cell | experience share of RSE's tokens | guided − SC samples "
        "| RSE − SC, bank shown | RSE − SC, never shown | distilled, never shown |",
        "|---|---|---|---|---|---|",
    ]
    for c in summary["cells"]:
        if "overhead_share" not in c:
            continue
        for m, e in c.get("experience_by_method", {"rse": c}).items():
            g, share, reach = e["guided_vs_sc_sample"], pct(e["overhead_share"]), e["bank_reach"]
            name = c["cell"] + ("" if m == "rse" else f" {m.replace('_', ':', 1)}")
            lines.append(
                f"| {name} | {share} | {pts(g)} ({g['problems']} problems) | "
                f"{split(reach['shown'])} | {split(reach['not_shown'])} | "
                f"{pct(reach['distilled_never_shown_share'])} |"
            )
    p = summary["pooled"]
    lines += ["", f"Pooled over the test cells ({p['problems']} problems): RSE − SC "
              f"{pts(p['rse_vs_sc'])}."]  # fmt: skip
    if "bank_reach" in p:
        r = p["bank_reach"]
        lines[-1] += (
            f" Where a bank reached a prompt: {split(r['shown'])}; where none did (plain "
            f"sampling as in SC, less what distillation took): {split(r['not_shown'])}."
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cell", nargs="+", choices=sorted(CELLS), default=[],
        help="run (or resume) these cells, one after another (the summary follows each)",
    )  # fmt: skip
    parser.add_argument("--scripted", action="store_true", help="plumbing check, no model")
    parser.add_argument("--summarize-only", action="store_true")
    args = parser.parse_args()
    if args.scripted:
        small = Cell("scripted", CELLS["dev-easy-0.5b"].task, 3, 1, 1500, ("rse", "sc"), "dev")
        run_cell("scripted", small, scripted=True)
        return
    for name in [] if args.summarize_only else args.cell:
        cell = CELLS[name]
        shared = ["--options", json.dumps(cell.options)] if cell.options else []
        run_cell(name, cell, scripted=False, method_args={m: shared for m in cell.methods})
        summarize()
    if args.summarize_only or not args.cell:
        summarize()


def summarize() -> None:
    """rse_ablation.json and the bench README's table, from every cell's records."""
    done = [s for n, c in CELLS.items() if (s := summarize_cell(n, c)) is not None]
    cells = [c for c in done if c["split"] != "probe"]  # each compares RSE with SC
    probes = [c for c in done if c["split"] == "probe"]  # SC alone: where a task sits
    summary = {"cells": cells, "probes": probes, "pooled": pooled(cells)}
    write_result("rse_ablation", summary, measured_on(cells + probes))
    replace_readme_block(
        "rse_ablation", table(summary), "## RSE at equal tokens: dev and test cells"
    )
    print(table(summary))


if __name__ == "__main__":
    main()
