"""Does checked experience pay? RSE with execution-grounded experience on code, against the
baselines that get the same check (issue 41's protocol; dev seeds choose, test seeds once).

    python -m bench rse_grounded --cell dev-he-0.5b dev-he-1.5b   # calibration
    python -m bench rse_grounded --cell test-he-0.5b              # run (or resume) a cell
    python -m bench rse_grounded --summarize-only                 # rse_grounded.json

HumanEval problems that state examples (126 of 164) are shuffled once (``PARTITION_SEED``)
and split into disjoint parts, fixed before any ran: 16 dev problems (calibration), 60 for
the 0.5B's test cell, 40 for the 1.5B's. Hidden tests (``check()``) only grade; the stated
examples are the check every method may use while solving.

Methods (labels): ``sc`` (plain; on code a vote over final answers has nothing to count,
so its pick is its first sample), ``sc+filter`` (the same pool, the pick among samples that
pass the stated examples: a function of sc's pool, replayed through the library's own
filter, no second sampling), ``bon+filter`` (best-of-N with the model as verifier, the pick
among passing samples), ``reflexion`` (one retry per failing sample, its failure shown),
``rse`` (plain), ``rse+check`` (failures on the stated examples filed as grounded pitfalls,
the final pick filtered as sc+filter's), ``rse+check:passing`` (also a passing rollout's
code filed as a verified proposition). All in cap mode: no run spends past its budget.
Runs use ``bench/rse_ablation.py``'s cells, exported trees and resumable chunks.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from bench.common import load_cells, measured_on, write_result
from bench.rse_ablation import Cell, CellRecords, guided_vs_sc_samples, run_cell
from rse_fast.eval.datasets import Dataset, load_dataset
from rse_fast.eval.metrics import bootstrap_mean_ci, paired_difference
from rse_fast.eval.summary import sum_verdicts, sum_verdicts_by_kind
from rse_fast.methods.types import Candidate
from rse_fast.methods.voting import behaviour_vote, passing_visible, vote_final

HERE = Path(__file__).parent
WORK = HERE / "results" / "rse_grounded"
HE = "humaneval"
PARTITION_SEED = 41
PARTS = {"dev": (0, 16), "test-0.5b": (16, 76), "test-1.5b": (76, 116)}
CAP = {"budget_mode": "cap"}
#: label → (family, options); every label runs live except ``sc+filter`` (sc's pool, filtered)
FAMILIES: dict[str, tuple[str, dict[str, Any]]] = {
    "sc": ("sc", CAP),
    "bon+filter": ("bon", {**CAP, "execution_filter": True}),
    "reflexion": ("reflexion", CAP),
    "rse": ("rse", CAP),
    "rse+check": ("rse", {**CAP, "checker": "visible"}),
    "rse+check:passing": ("rse:passing", {**CAP, "checker": "visible"}),
    "rse+check:checked": ("rse:checked", {**CAP, "checker": "visible"}),
    "rse+arith": ("rse", {**CAP, "checker": "arithmetic"}),
}


CELLS = load_cells("rse_grounded", Cell)
CELL_PART = {
    "dev-he-0.5b": "dev",
    "dev-he-1.5b": "dev",
    "dev-he-passing-0.5b": "dev",
    "dev-he-checked-0.5b": "dev",
    "test-he-0.5b": "test-0.5b",
    "test-he-1.5b": "test-1.5b",
}


@cache
def humaneval() -> Dataset:
    """HumanEval, each problem's sandbox checks remembered by text: a summary asks for one
    sample's verdict several times (sc+filter and its stop, the behaviour vote, the guided
    comparison), and each is a sandbox run."""
    ds = load_dataset(HE)
    for p in ds.problems:
        if p.visible_check is not None:
            p.visible_check = lru_cache(maxsize=None)(p.visible_check)
        if p.behaviour is not None:
            p.behaviour = lru_cache(maxsize=None)(p.behaviour)
    return ds


_GRADES: dict[tuple[str, str, str], float] = {}


def grade(ds: Dataset, problem: Any, text: str) -> float:
    """``ds.grade``, once per sample (a code sample's grade is a sandbox run of its tests)."""
    key = (ds.name, problem.id, text)
    if key not in _GRADES:
        _GRADES[key] = float(ds.grade(problem, text))
    return _GRADES[key]


def partition() -> dict[str, list[str]]:
    """The HumanEval problems that state examples, shuffled once and split into parts."""
    ids = [p.id for p in humaneval().problems if p.meta.get("visible_tests")]
    random.Random(PARTITION_SEED).shuffle(ids)
    return {part: ids[a:b] for part, (a, b) in PARTS.items()}


def cell_problems(name: str, cell: Cell) -> tuple[Dataset, list[Any]]:
    """A cell's dataset and problems, in their order."""
    if cell.task != HE:
        ds = load_dataset(cell.task, cell.problems, cell.seed)
        return ds, list(ds.problems)
    by_id = {p.id: p for p in humaneval().problems}
    ids = partition()[CELL_PART[name]][: cell.problems]
    return humaneval(), [by_id[i] for i in ids]


def method_args(cell: Cell) -> dict[str, list[str]]:
    """Each label's worker arguments: its family and options, the cell's ``options`` over
    them (a cell may run in ``target`` mode where a cap buys RSE no distillation)."""
    dataset = ["--dataset", HE] if cell.task == HE else []
    return {
        label: ["--method", family, "--options", json.dumps({**options, **cell.options}),
                *dataset]
        for label, (family, options) in FAMILIES.items()
    }  # fmt: skip


def run(name: str, methods: list[str] | None = None) -> None:
    """Run (or resume) a cell; ``methods``: only these of its methods (the others keep their
    records and wait)."""
    cell = CELLS[name]
    if methods:
        unknown = sorted(set(methods) - set(cell.methods))
        if unknown:
            raise SystemExit(
                f"{name} has no method {', '.join(unknown)}: {', '.join(cell.methods)}"
            )
        cell = replace(cell, methods=tuple(m for m in cell.methods if m in methods))
    _, problems = cell_problems(name, cell)
    rows = [{"id": p.id, "prompt": p.prompt, "gold": p.gold} for p in problems]
    run_cell(name, cell, False, work=WORK, problems=rows, method_args=method_args(cell))


# -- analysis ---------------------------------------------------------------------------------
def filtered_pick(problem: Any, texts: list[str], boxed_answers: bool = False) -> str:
    """sc+filter's pick from sc's pool: the library's filter and vote, as sc runs them;
    ``boxed_answers``: as sc ran before a code reply had no answer (a boxed value was one)."""
    pool = [
        Candidate.of(t, cost=0) if boxed_answers else problem.candidate(t, cost=0) for t in texts
    ]
    voters, _ = asyncio.run(passing_visible(pool, problem.visible_check))
    final, _ = vote_final(voters)
    return final.text if final is not None else ""


def clustered_pick(problem: Any, texts: list[str]) -> str:
    """The pick of ``+cluster`` from a stored pool: among the samples that pass the stated
    examples, the largest group of programs that give back the same on the probe inputs (the
    library's filter and behaviour vote, as a live run calls them)."""
    pool = [problem.candidate(t, cost=0) for t in texts]
    voters, _ = asyncio.run(passing_visible(pool, problem.visible_check))
    final, _ = asyncio.run(behaviour_vote(voters, problem.behaviour))
    return final.text if final is not None else ""


def stop_share(problem: Any, texts: list[str], wave: int) -> float:
    """The share of sc's pool sc+filter+stop would have paid for: on code its pick is the
    earliest sample that passes the stated examples, and it stops in that sample's wave (a
    live stop cancels the rest of the wave mid-way; charged here to the wave's end, each
    sample at the pool's mean cost: an upper bound). No passer: the whole pool."""
    passes = visible_passes(problem, texts)
    first = next((j for j, ok in enumerate(passes) if ok), None)
    if first is None or not texts:
        return 1.0
    return min(len(texts), (first // wave + 1) * wave) / len(texts)


def visible_passes(problem: Any, texts: list[str]) -> list[float]:
    out = []
    for t in texts:
        v = problem.visible_check(t) if problem.visible_check else None
        out.append(float(bool(v and v.passed)))
    return out


#: the methods whose pools the summary runs on the stated examples (and, among the samples
#: that pass, on the probes): the filters' and the behaviour vote's, and the guided comparison's
CHECKED_POOLS = ("sc", "rse+check", "rse+check:passing", "rse+check:checked")


def warm_checks(problems: list[Any], recs: dict[str, dict[str, Any]], first: str) -> None:
    """Run every sandbox check the summary will ask for, on all cores at once (each is a
    subprocess; the summary then reads the remembered verdicts, as it would have computed
    them one by one)."""
    pools = [(p, recs[m][p.id]["pool_texts"]) for m in {*CHECKED_POOLS, first} if m in recs
             for p in problems]  # fmt: skip
    ds = humaneval()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        visible = [(p, t, pool.submit(p.visible_check, t)) for p, texts in pools for t in texts]
        graded = [
            pool.submit(grade, ds, p, t) for p in problems for t in recs[first][p.id]["pool_texts"]
        ]
        passing = [(p, t) for p, t, v in visible if (r := v.result()) is not None and r.passed]
        probed = [pool.submit(p.behaviour, t) for p, t in passing if p.behaviour is not None]
        for f in [*graded, *probed]:
            f.result()


def summarize_cell(name: str, cell: Cell) -> dict[str, Any] | None:
    folder = WORK / name
    if not (folder / "cell.json").exists():
        return None
    meta = json.loads((folder / "cell.json").read_text())
    ds, problems = cell_problems(name, cell)
    recs = CellRecords.read(folder, cell.methods).by_method
    done = set.intersection(*(set(v) for v in recs.values()))
    chosen = [p for p in problems if p.id in done]
    if not chosen:
        return None
    if cell.task == HE:
        warm_checks(chosen, recs, cell.methods[0])
    finals = {m: {p.id: recs[m][p.id]["final_text"] for p in chosen} for m in cell.methods}
    if cell.task == HE and "sc" in cell.methods:
        boxed = cell.boxed_code_answers
        finals["sc+filter"] = {p.id: filtered_pick(p, recs["sc"][p.id]["pool_texts"], boxed)
                               for p in chosen}  # fmt: skip
        # replayed: the stop the library runs live on code, with code's no-answer pick
        finals[STOPPED] = {p.id: filtered_pick(p, recs["sc"][p.id]["pool_texts"])
                           for p in chosen}  # fmt: skip
    if cell.task == HE:
        for label, source in CLUSTERED.items():
            if source in recs:
                finals[label] = {p.id: clustered_pick(p, recs[source][p.id]["pool_texts"])
                                 for p in chosen}  # fmt: skip
        if cell.boxed_code_answers and "rse+check" in recs:
            # rse+check's pick under the later rule (the earliest passer), which the cluster
            # vote is measured against where the cell ran under the boxed one
            finals[EARLIEST_RSE] = {p.id: filtered_pick(p, recs["rse+check"][p.id]["pool_texts"])
                                    for p in chosen}  # fmt: skip
    score = {m: [grade(ds, p, f[p.id]) for p in chosen] for m, f in finals.items()}
    tokens = {m: [float(recs[m][p.id]["tokens"]) for p in chosen] for m in cell.methods}
    tokens.setdefault("sc+filter", tokens.get("sc", []))
    walls = {m: [float(recs[m][p.id]["wall_s"]) for p in chosen] for m in cell.methods}
    walls.setdefault("sc+filter", walls.get("sc", []))
    for label, source in {**CLUSTERED, EARLIEST_RSE: "rse+check"}.items():
        if label in finals:
            tokens[label], walls[label] = tokens[source], walls[source]
    if STOPPED in finals:
        share = [stop_share(p, recs["sc"][p.id]["pool_texts"], cell.k) for p in chosen]
        tokens[STOPPED] = [t * s for t, s in zip(tokens["sc"], share, strict=True)]
        walls[STOPPED] = [w * s for w, s in zip(walls["sc"], share, strict=True)]
    samples = [t for p in chosen for t in recs[cell.methods[0]][p.id]["pool_texts"]]
    out: dict[str, Any] = {
        "cell": name, "split": cell.split, "why": cell.why, "model": cell.model, "task": cell.task,
        "seed": cell.seed, "budget_tokens": cell.budget, "problems": len(chosen),
        "planned_problems": cell.problems, "partial": len(chosen) < cell.problems,
        "commit": meta["commit"], "repinned": meta.get("repinned", {}),
        "machine": meta["machine"],
        "methods": {
            m: {"pass_rate": sum(s) / len(s), "ci95": list(bootstrap_mean_ci(s)),
                "cost_tokens": sum(tokens[m]) / len(tokens[m]),
                # a problem's wall time on this machine (sc+filter: sc's, whose pool it reads)
                "wall_s": sum(walls[m]) / len(walls[m])}
            for m, s in score.items()
        },
        "single_sample_hidden_pass": sum(grade(ds, p, t) for p in chosen
                                         for t in recs[cell.methods[0]][p.id]["pool_texts"])
        / max(1, len(samples)),
    }  # fmt: skip
    # an RSE arm whose planner bought no distillation measures no distilled experience: say
    # on how many problems each arm's bank was fed by the model
    out["distilled_problems"] = {
        m: sum(recs[m][p.id].get("distilled_rounds", 0) > 0 for p in chosen)
        for m in cell.methods
        if FAMILIES[m][0].startswith("rse")
    }
    if cell.task == HE:
        vis = [
            v for p in chosen for v in visible_passes(p, recs[cell.methods[0]][p.id]["pool_texts"])
        ]
        out["single_sample_visible_pass"] = sum(vis) / max(1, len(vis))
    for key, (a, b) in PAIRS.items():
        if a in score and b in score:
            diff, ci = paired_difference(score[a], score[b])
            out[key] = {"diff": diff, "ci95": list(ci)}
    base = "sc" if cell.task == HE else "rse"
    guided = {  # on code a guided sample is scored by the stated examples it passes, the
        # check it was guided by; on arithmetic by its answer
        m: {
            **guided_vs_sc_samples(
                ds, {p.id: p for p in chosen}, recs[m], recs[base], [p.id for p in chosen],
                cell.k, visible_passes if cell.task == HE else None,
            ),
            "measure": "stated examples passed" if cell.task == HE else "answer right",
            "against": base,
        }
        for m in ("rse+check", "rse+check:passing", "rse+check:checked", "rse+arith")
        if m in recs and base in recs
    }  # fmt: skip
    checked = next(iter(guided), None)
    if checked is not None:
        out["guided_vs_baseline_sample"] = guided[checked]
        out["guided_by_method"] = guided
        out["checks"] = verdicts([recs[checked][p.id] for p in chosen])
        out["refuted_share"] = out["checks"]["refuted_share"]
        if by_kind := verdicts_by_kind([recs[checked][p.id] for p in chosen]):
            # records from 2026-12-06 on: how often the propositions alone were wrong
            out["checks_by_kind"] = by_kind
    out["per_problem"] = {m: dict(zip([p.id for p in chosen], s, strict=True))
                          for m, s in score.items()}  # fmt: skip
    return out


#: sc+filter+stop, replayed from sc's pool (see :func:`stop_share`)
STOPPED = "sc+filter+stop-replayed"
#: the behaviour vote replayed on a live method's pool (see :func:`clustered_pick`): label →
#: the method whose pool (and so whose cost) it reads
CLUSTERED = {"sc+filter+cluster-replayed": "sc", "rse+check+cluster-replayed": "rse+check"}
#: rse+check's pool picked as the library picks on code now (a cell run under the boxed rule)
EARLIEST_RSE = "rse+check-earliest-replayed"

#: the issue's names for the comparisons a cell reports, paired by problem
PAIRS = {
    "rse_checked_vs_sc_filtered": ("rse+check", "sc+filter"),
    "rse_checked_vs_rse": ("rse+check", "rse"),
    "rse_vs_sc": ("rse", "sc"),
    "rse_recomputed_vs_rse": ("rse+arith", "rse"),
    "rse_passing_vs_rse_checked": ("rse+check:passing", "rse+check"),
    "rse_checked_framing_vs_rse_checked": ("rse+check:checked", "rse+check"),
    # the behaviour vote against the earliest passer of the same pool (the pick without it;
    # sc's is the stop's, whose pick is that of the whole pool)
    "sc_clustered_vs_earliest": ("sc+filter+cluster-replayed", STOPPED),
    "rse_clustered_vs_earliest": ("rse+check+cluster-replayed", EARLIEST_RSE),
    "rse_clustered_vs_rse_checked": ("rse+check+cluster-replayed", "rse+check"),
}


def verdicts(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What the checker said of the distilled statements, summed over a cell's problems."""
    return sum_verdicts(r.get("checks") for r in rows) or {"refuted_share": None}


def verdicts_by_kind(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The same by the kind of statement, where the records carry it."""
    return sum_verdicts_by_kind(r.get("checks_by_kind") for r in rows)


def pooled(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Over the test cells: rse+check − sc+filter paired by problem (the code cells), the
    guided-sample measure cell by cell (the target asks for one code cell above 0), and the
    share of checked statements refuted (every cell with a checker)."""
    tests = [c for c in cells if c["split"] == "test"]
    a: list[float] = []
    b: list[float] = []
    for c in tests:
        if "rse+check" in c["per_problem"]:
            ids = list(c["per_problem"]["rse+check"])
            a += [c["per_problem"]["rse+check"][i] for i in ids]
            b += [c["per_problem"]["sc+filter"][i] for i in ids]
    keep = ("diff", "ci95", "problems", "measure")
    guided = {
        c["cell"]: {k: c["guided_vs_baseline_sample"][k] for k in keep}
        for c in tests
        if c.get("guided_vs_baseline_sample")
    }
    code = [n for n, g in guided.items() if g["measure"] == "stated examples passed"]
    checks = [c["checks"] for c in tests if c.get("checks")]
    refuted = sum(k.get("refuted", 0) for k in checks)
    judged = sum(v for k in checks for v in k.values() if isinstance(v, int))
    out: dict[str, Any] = {
        "guided_vs_baseline_sample": {
            "by_cell": guided,
            "code_cells_above_zero": [n for n in code if guided[n]["ci95"][0] > 0],
        },
        "refuted_share": refuted / judged if judged else None,
        "checked_statements": judged,
    }
    if not a:
        return {"rse_checked_vs_sc_filtered": {"diff": None, "ci95": [None, None]},
                "problems": 0, **out}  # fmt: skip
    diff, ci = paired_difference(a, b)
    return {"rse_checked_vs_sc_filtered": {"diff": diff, "ci95": list(ci)}, "problems": len(a),
            "rse_checked_vs_sc_filtered_current_rule": current_rule_pair(tests),
            **out}  # fmt: skip


def current_rule_pair(tests: list[dict[str, Any]]) -> dict[str, Any]:
    """rse+check − sc+filter paired by problem under the library's current pick on code (a
    code reply has no answer to vote on: the earliest candidate that passes). A cell run
    under the old boxed-answer vote is read through its replayed picks of the same pools
    (``EARLIEST_RSE`` and ``STOPPED``, the earliest passer of sc's pool)."""
    a: list[float] = []
    b: list[float] = []
    cells = []
    for c in tests:
        scores = c["per_problem"]
        if "rse+check" not in scores:
            continue
        old_rule = EARLIEST_RSE in scores
        rse, sc = (EARLIEST_RSE, STOPPED) if old_rule else ("rse+check", "sc+filter")
        ids = list(scores[rse])
        a += [scores[rse][i] for i in ids]
        b += [scores[sc][i] for i in ids]
        cells.append({"cell": c["cell"], "rse": rse, "sc": sc})
    if not a:
        return {"diff": None, "ci95": [None, None], "problems": 0, "read_as": cells}
    diff, ci = paired_difference(a, b)
    return {"diff": diff, "ci95": list(ci), "problems": len(a), "read_as": cells}


def summarize() -> dict[str, Any]:
    done = [s for n, c in CELLS.items() if (s := summarize_cell(n, c)) is not None]
    summary = {
        "cells": [c for c in done if c["split"] != "probe"],
        "calibration": [c for c in done if c["split"] == "probe"],
    }
    summary["pooled"] = pooled(summary["cells"])
    write_result("rse_grounded", summary, measured_on(done))
    return summary


def table(summary: dict[str, Any]) -> str:
    """bench/README's table: each cell's methods (hidden-test pass rate, its interval, mean
    tokens a problem), then what the cell says of checked experience. (Wall times stay in
    the JSON: records from runs beside other work are not a speed.)"""
    lines = [
        "| cell (problems) | method | pass rate [95% CI] | tokens |",
        "|---|---|---|---|",
    ]
    notes = []
    for c in summary["cells"]:
        name = f"{c['cell']} ({c['problems']}" + (
            f" of {c['planned_problems']})" if c["partial"] else ")"
        )
        for m, v in c["methods"].items():
            lo, hi = v["ci95"]
            lines.append(
                f"| {name} | {m} | {v['pass_rate']:.0%} [{lo:.0%}, {hi:.0%}] | "
                f"{v['cost_tokens']:,.0f} |"
            )
        for key, (a, b) in PAIRS.items():
            pair = c.get(key)
            if pair and pair["diff"] is not None:
                lo, hi = pair["ci95"]
                notes.append(f"- {c['cell']}: {a} − {b} {pair['diff']:+.1%} "
                             f"[{lo:+.1%}, {hi:+.1%}]")  # fmt: skip
        guided_by = c.get("guided_by_method") or {
            "rse+check": c.get("guided_vs_baseline_sample") or {}
        }
        for m, guided in guided_by.items():
            if guided.get("diff") is None:
                continue
            lo, hi = guided["ci95"]
            notes.append(
                f"- {c['cell']}: {m}'s guided samples − {guided.get('against', 'sc')}'s at the "
                f"same positions ({guided['measure']}) {guided['diff']:+.1%} "
                f"[{lo:+.1%}, {hi:+.1%}], {guided['problems']} problems"
            )
        for m, n in (c.get("distilled_problems") or {}).items():
            notes.append(f"- {c['cell']}: {m} distilled with the model on {n} of "
                         f"{c['problems']} problems")  # fmt: skip
        checks = c.get("checks") or {}
        if checks.get("refuted_share") is not None:
            counts = ", ".join(f"{v} {k}" for k, v in checks.items() if k != "refuted_share")
            notes.append(f"- {c['cell']}: refuted share {fmt_share(checks['refuted_share'])} "
                         f"of the checked statements ({counts})")  # fmt: skip
    return "\n".join(lines + (["", *notes] if notes else []))


def fmt_share(x: float | None) -> str:
    return "–" if x is None else f"{x:.0%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cell", nargs="+", choices=sorted(CELLS), default=[])
    parser.add_argument("--methods", nargs="+", help="only these of each cell's methods")
    parser.add_argument("--summarize-only", action="store_true")
    args = parser.parse_args()
    for name in [] if args.summarize_only else args.cell:
        run(name, args.methods)
        summarize()
    if args.summarize_only or not args.cell:
        print(json.dumps(summarize()["pooled"], indent=1))


if __name__ == "__main__":
    main()
