"""Side by side with its_hub (PyPI ``its-hub``): the same families against the same server.

    python -m bench peers --quick      # < 60 s, scripted server only -> results/peers_quick.json
    python -m bench peers              # the overhead grid and the quality run -> results/peers.json

its_hub lives in its own virtual environment (``bench/requirements-peers.txt``; created here
when missing, under ``~/.cache/rse_fast/peers-venv`` or ``$RSE_FAST_PEERS_VENV``) and each side
runs in its own process (``peers_worker.py``), problems one after another, on one server.

*Overhead*: the scripted server with a fixed latency L; self-consistency and best-of-N at N
samples and C calls in flight. Each side's wall time is divided by the structural critical
path ⌈N/C⌉·L per problem (best-of-N adds ⌈D/C⌉·L for judging its D distinct candidates), its
CPU time by the HTTP calls the server counted. its_hub's budget is N generations; ours is the
token cost of N samples (and, for best-of-N, of their judging) measured once before the grid,
so our methods size their waves themselves. Each worker is a fresh process. ``ours`` reads the
cost priors an earlier process left in its store (``PriorStore``, as a user's second script
would: the store is primed once per method on other problems before the grid, then every
cell reads and updates it); ``ours_first_contact`` starts each cell with an empty store (a
server never seen: its first wave is sized from the completion cap, smaller, so that problem
takes an extra layer or two). The headline ratio is ``ours``; both are kept.
``bon-same`` is best-of-N on a server whose replies are all the same: no judge call is
needed, and each side's HTTP calls are counted.

*Quality at equal tokens* (full run): the local model on a seeded reasoning-gym task where
single samples are right 30-70%; its self-consistency at N samples (its documented boxed-answer
projection), ours at the tokens its run spent on the same problem; paired bootstrap interval on
the accuracy difference and the wall-time ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import read_result, replace_readme_block, write_result
from rse_fast.llm.client import LLMClient
from rse_fast.prompts import JUDGE_SYSTEM, solve_messages
from rse_fast.testing import ScriptedServer

HERE = Path(__file__).parent
WORKER = HERE / "peers_worker.py"
LATENCY_S = 0.2
MAX_TOKENS = 64


def peers_python() -> str:
    """The interpreter of the peers' environment, created on first use."""
    venv = Path(os.environ.get("RSE_FAST_PEERS_VENV", Path.home() / ".cache/rse_fast/peers-venv"))
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"creating {venv} for its_hub ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "-r", str(HERE / "requirements-peers.txt")],
            check=True,
        )
    return str(python)


def scripted_reply(distinct: int = 3) -> Any:
    """``distinct`` solutions in turn (so judging each distinct one once matters) and a
    judge that understands both libraries' judge prompts."""
    counter = iter(range(10**9))

    def reply(body: dict, index: int) -> str:
        first = str(body["messages"][0].get("content") or "")
        last = str(body["messages"][-1].get("content") or "")
        if first.startswith(JUDGE_SYSTEM[:40]) or last.startswith("Score the following"):
            return json.dumps({"score": 8 if "{42}" in last else 4, "reasoning": "checked"})
        k = next(counter) % distinct
        answer = ("42", "41", "42")[k]
        return f"Variant {k}: six times seven, checked twice, is \\boxed{{{answer}}}."

    return reply


def problems(count: int, first: int = 0) -> list[dict[str, Any]]:
    out = []
    for i in range(first, first + count):
        prompt = f"Problem {i}: what is 6 times 7?"
        out.append({"id": f"p{i}", "prompt": prompt, "messages": solve_messages(prompt)})
    return out


async def unit_costs(url: str) -> tuple[float, float]:
    """Tokens of one sample and of one judge call as the scripted server counts them."""
    from rse_fast.methods.judge import LLMJudge

    async with LLMClient(url, "m") as c:
        p = problems(1)[0]
        res = await c.chat(p["messages"], max_tokens=MAX_TOKENS, temperature=0.7)
        before = c.ledger.total_tokens
        await LLMJudge().score(c, p["prompt"], res.text)
        return float(res.usage.total_tokens), float(c.ledger.total_tokens - before)


async def run_worker(
    python: str,
    side: str,
    url: str,
    method: str,
    n: int,
    conc: int,
    probs: list,
    model: str = "m",
    max_tokens: int = MAX_TOKENS,
    priors: Path | None = None,
) -> dict:
    """One side in its own process; awaited, so a scripted server in this loop serves it."""
    with tempfile.TemporaryDirectory() as tmp:
        pfile, ofile = Path(tmp) / "p.json", Path(tmp) / "o.json"
        pfile.write_text(json.dumps(probs))
        cmd = [python, str(WORKER), "--side", side, "--url", url, "--model", model,
               "--method", method, "--n", str(n), "--concurrency", str(conc),
               "--max-tokens", str(max_tokens),
               "--problems", str(pfile), "--out", str(ofile)]  # fmt: skip
        if priors is not None:
            cmd += ["--priors", str(priors)]
        proc = await asyncio.create_subprocess_exec(*cmd)
        if await proc.wait() != 0:
            raise SystemExit(f"the {side} worker failed ({method}, N={n}, C={conc})")
        return json.loads(ofile.read_text())


#: (method, N, C, distinct replies) of the quick and full grids
QUICK_GRID = [("sc", 8, 4, 3), ("sc", 8, 32, 3), ("bon", 8, 4, 3), ("bon", 8, 32, 3),
              ("bon-same", 32, 4, 1)]  # fmt: skip
FULL_GRID = [(m, n, c, 3) for m in ("sc", "bon") for n in (8, 32) for c in (4, 32)] + [
    ("bon-same", 32, 4, 1),
    ("bon-same", 32, 32, 1),
]
SIDES = ("its_hub", "ours", "ours_first_contact")


async def overhead(grid: list[tuple[str, int, int, int]], count: int) -> list[dict[str, Any]]:
    python = peers_python()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "priors.json"
        for distinct in sorted({g[3] for g in grid}, reverse=True):
            reply = scripted_reply(distinct)
            async with ScriptedServer(default_reply=reply, latency=LATENCY_S) as srv:
                sample, judge = await unit_costs(srv.base_url)
                cells = [g for g in grid if g[3] == distinct]
                for method in sorted({m.removesuffix("-same") for m, *_ in cells}):
                    # an earlier process against this server: other problems, its priors kept
                    prime = [{**p, "budget": 8 * sample} for p in problems(2, first=1000)]
                    await run_worker(sys.executable, "ours", srv.base_url, method, 8, 4, prime,
                                     priors=store)  # fmt: skip
                for cell in cells:
                    rows.append(await _cell(python, srv, cell, count, sample, judge, store, tmp))
    return rows


async def _cell(
    python: str, srv: Any, cell: tuple[str, int, int, int], count: int, sample: float,
    judge: float, store: Path, tmp: str,
) -> dict[str, Any]:  # fmt: skip
    label, n, conc, distinct = cell
    method = label.removesuffix("-same")
    per = sample + (judge * distinct / n if method == "bon" and distinct > 1 else 0)
    probs = [{**p, "budget": n * per} for p in problems(count)]
    gen_layers = math.ceil(n / conc)
    judged = min(distinct, n) if method == "bon" and distinct > 1 else 0
    critical = count * (gen_layers + math.ceil(judged / conc)) * LATENCY_S
    row: dict[str, Any] = {
        "method": label, "n": n, "concurrency": conc, "problems": count,
        "distinct_replies": distinct, "critical_path_s": critical,
    }  # fmt: skip
    for side in SIDES:
        calls_before = len(srv.requests)
        interpreter = python if side == "its_hub" else sys.executable
        priors = {"ours": store, "ours_first_contact": Path(tmp) / f"empty-{label}-{n}-{conc}.json"}
        out = await run_worker(
            interpreter, side.removesuffix("_first_contact"), srv.base_url, method, n, conc,
            probs, priors=priors.get(side),
        )  # fmt: skip
        calls = len(srv.requests) - calls_before
        later = [r["wall_s"] for r in out["results"][1:]]
        row[side] = {
            "wall_s": out["wall_s"],
            "first_problem_wall_s": out["results"][0]["wall_s"],
            "later_problems_wall_s": sum(later),
            "wall_over_critical_path": out["wall_s"] / critical,
            "http_calls": calls,
            "cpu_us_per_call": 1e6 * out["cpu_s"] / max(1, calls),
            "tokens_per_problem": sum(r["tokens"] or 0 for r in out["results"]) / count,
        }
    ours, theirs = row["ours"], row["its_hub"]
    row["wall_ratio_vs_its_hub"] = ours["wall_s"] / theirs["wall_s"]
    row["calls_ratio_vs_its_hub"] = ours["http_calls"] / theirs["http_calls"]
    row["wall_ratio_first_contact"] = row["ours_first_contact"]["wall_s"] / theirs["wall_s"]
    row["wall_ratio_after_first_problem"] = (
        ours["later_problems_wall_s"] / theirs["later_problems_wall_s"]
    )
    row["cpu_ratio_vs_its_hub"] = ours["cpu_us_per_call"] / theirs["cpu_us_per_call"]
    print(
        f"{label} N={n} C={conc}: wall ours/its_hub {row['wall_ratio_vs_its_hub']:.3f} "
        f"(first contact {row['wall_ratio_first_contact']:.3f}), CPU/call "
        f"{row['cpu_ratio_vs_its_hub']:.2f}, calls {ours['http_calls']} vs {theirs['http_calls']}",
        file=sys.stderr,
    )
    return row


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    total_cpu = {
        side: sum(r[side]["cpu_us_per_call"] * r[side]["http_calls"] for r in rows)
        / sum(r[side]["http_calls"] for r in rows)
        for side in ("ours", "its_hub")
    }
    return {
        "latency_s": LATENCY_S,
        "grid": rows,
        "wall_ratio_vs_its_hub_max": max(r["wall_ratio_vs_its_hub"] for r in rows),
        "wall_ratio_first_contact_max": max(r["wall_ratio_first_contact"] for r in rows),
        "wall_ratio_after_first_problem_max": max(
            r["wall_ratio_after_first_problem"] for r in rows
        ),
        "bon_identical_wall_ratio_max": max(
            (r["wall_ratio_vs_its_hub"] for r in rows if r["distinct_replies"] == 1), default=None
        ),
        "bon_identical_calls_ratio_max": max(
            (r["calls_ratio_vs_its_hub"] for r in rows if r["distinct_replies"] == 1), default=None
        ),
        "cpu_ratio_vs_its_hub": total_cpu["ours"] / total_cpu["its_hub"],
    }


async def quality(count: int, n: int) -> dict[str, Any]:
    """Its self-consistency at n samples vs ours at the tokens it spent, on the local model."""
    from rse_fast.eval.datasets import load_dataset
    from rse_fast.eval.metrics import paired_difference
    from rse_fast.local.server import LocalServer

    task = "basic_arithmetic?min_terms=2&max_terms=3&min_digits=1&max_digits=2"
    ds = load_dataset(f"gym:{task}", count, 11)
    python = peers_python()
    async with LocalServer("qwen2.5-coder-0.5b", parallel=4) as server:
        url, model = server.base_url, server.model_name
        probs = [
            {"id": p.id, "prompt": p.prompt, "messages": solve_messages(p.prompt)}
            for p in ds.problems
        ]
        theirs = await run_worker(python, "its_hub", url, "sc", n, 4, probs, model, 384)
        for p, r in zip(probs, theirs["results"], strict=True):
            p["budget"] = r["tokens"]
        ours = await run_worker(sys.executable, "ours", url, "sc", n, 4, probs, model, 384)
    right = {
        side: [ds.grade(p, r["text"]) for p, r in zip(ds.problems, out["results"], strict=True)]
        for side, out in (("ours", ours), ("its_hub", theirs))
    }
    diff, ci = paired_difference(right["ours"], right["its_hub"])
    return {
        "task": f"gym:{task}",
        "seed": 11,
        "problems": count,
        "n": n,
        "accuracy_ours": sum(right["ours"]) / count,
        "accuracy_its_hub": sum(right["its_hub"]) / count,
        "accuracy_diff": diff,
        "ci95": list(ci),
        "tokens_ours": sum(r["tokens"] for r in ours["results"]),
        "tokens_its_hub": sum(r["tokens"] for r in theirs["results"]),
        "wall_ratio_vs_its_hub": ours["wall_s"] / theirs["wall_s"],
    }


def table(result: dict[str, Any]) -> str:
    """The grid and the quality run as the README shows them."""
    lines = [
        f"Overhead grid (scripted server, {int(result['latency_s'] * 1e3)} ms latency, "
        f"{result['grid'][0]['problems']} problems per cell; ``bon-same``: every reply "
        "the same):",
        "",
        "| family | N | C | critical path s | ours wall s | its_hub wall s | ours ÷ its_hub | "
        "first contact ÷ its_hub | after the first problem | HTTP calls ours / its_hub | "
        "client CPU µs/call ours / its_hub |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["grid"]:
        o, t = r["ours"], r["its_hub"]
        lines.append(
            f"| {r['method']} | {r['n']} | {r['concurrency']} | {r['critical_path_s']:.1f} | "
            f"{o['wall_s']:.2f} | {t['wall_s']:.2f} | {r['wall_ratio_vs_its_hub']:.3f} | "
            f"{r['wall_ratio_first_contact']:.3f} | "
            f"{r['wall_ratio_after_first_problem']:.3f} | {o['http_calls']} / {t['http_calls']} | "
            f"{o['cpu_us_per_call']:.0f} / {t['cpu_us_per_call']:.0f} |"
        )
    lines.append(
        f"\nWorst cell {result['wall_ratio_vs_its_hub_max']:.3f}× its_hub's wall time "
        f"({result['wall_ratio_first_contact_max']:.3f}× at first contact with the server, "
        f"{result['wall_ratio_after_first_problem_max']:.3f}× after the first problem); "
        f"client CPU per call {result['cpu_ratio_vs_its_hub']:.2f}× its_hub's."
    )
    q = result.get("quality")
    if q:
        lo, hi = q["ci95"]
        lines.append(
            f"\nQuality at equal tokens ({q['task']}, seed {q['seed']}, {q['problems']} problems, "
            f"local model): its self-consistency at N={q['n']} {q['accuracy_its_hub']:.0%}, ours "
            f"at its measured spend {q['accuracy_ours']:.0%}; difference "
            f"{100 * q['accuracy_diff']:+.1f} points [{100 * lo:+.1f}, {100 * hi:+.1f}] (paired "
            f"bootstrap); tokens ours / its_hub {q['tokens_ours']:,} / {q['tokens_its_hub']:,}; "
            f"wall time ours ÷ its_hub {q['wall_ratio_vs_its_hub']:.3f}."
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--skip-quality", action="store_true")
    ap.add_argument(
        "--quality-only",
        action="store_true",
        help="run only the quality part, keeping the grid already in results/peers.json",
    )
    ap.add_argument("--quality-problems", type=int, default=40)
    args = ap.parse_args()
    started = time.perf_counter()
    if args.quick:
        rows = asyncio.run(overhead(QUICK_GRID, 5))
        path = write_result("peers_quick", {**summary(rows), "quick": True})
    else:
        previous = read_result("peers")  # so one part can be re-run alone
        if args.quality_only:
            result = {k: v for k, v in previous.items() if k not in ("machine", "measured_at")}
        else:
            result = summary(asyncio.run(overhead(FULL_GRID, 20)))
        if args.skip_quality:
            if "quality" in previous:
                result["quality"] = previous["quality"]
        else:
            result["quality"] = asyncio.run(quality(args.quality_problems, 4))
        path = write_result("peers", result)
        replace_readme_block("peers", table(result), "## Side by side")
    print(f"wrote {path} in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
