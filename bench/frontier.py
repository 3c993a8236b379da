"""Accuracy per unit of cost: stopping, confidence and cost as users pay it, at >= 4 budgets.

    python bench/frontier.py --cell dev-easy-0.5b     # collect (or resume) one cell's pools
    python bench/frontier.py --summarise             # frontier.json + the README table

A *pool* is ``samples`` independent rollouts per problem from the real llama-server, each with
its per-token confidences (top-5 logprobs), its answer, its grade, and what the server said it
cost: prompt, cached and completion tokens, prefill and decode milliseconds. The offline
rules (plain SC at a budget, SC that stops once its vote is settled, SC over the most
confident rollouts, SC weighted by confidence) are replayed from the pools by drawing sample
orders, as the published methods evaluate them; each is charged the cost of the samples it
drew, in ``tokens`` (every token alike, as the study counts) and in ``time`` (the server's
own prefill + decode seconds). Methods that change what is sampled (online termination, RSE)
need live runs and are not in these cells. Cells get their own seeds (no problem is shared);
dev cells choose every rule's setting, test cells report once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from rse_fast.answers import extract_answer, majority_vote
from rse_fast.answers.confidence import (
    keep_most_confident,
    rollout_confidence,
    statistically_settled,
    token_confidences,
)
from rse_fast.eval.datasets import load_dataset
from rse_fast.eval.metrics import bootstrap_mean_ci
from rse_fast.llm import LLMClient

from common import machine, read_jsonl, replace_readme_block, write_result

HERE = Path(__file__).parent
WORK = HERE / "results" / "frontier"
EASY = "gym:basic_arithmetic?min_terms=2&max_terms=3&min_digits=1&max_digits=2"
THREE = "gym:basic_arithmetic?min_terms=3&max_terms=3&min_digits=1&max_digits=2"
MID = "gym:basic_arithmetic?min_terms=3&max_terms=4&min_digits=1&max_digits=2"
TEMPERATURE = 0.7  # the methods' default
TOP_LOGPROBS = 5


@dataclass(frozen=True)
class Cell:
    model: str
    task: str
    problems: int
    seed: int
    split: str  # "dev" chooses, "test" reports once
    samples: int = 16
    max_tokens: int = 384


# fmt: off
CELLS = {
    "dev-easy-0.5b": Cell("qwen2.5-coder-0.5b", EASY, 12, 401, "dev"),
    "test-easy-0.5b": Cell("qwen2.5-coder-0.5b", EASY, 60, 411, "test"),
    "test-three-0.5b": Cell("qwen2.5-coder-0.5b", THREE, 40, 412, "test", max_tokens=1024),
    "test-mid-1.5b": Cell("qwen2.5-coder-1.5b", MID, 30, 413, "test", max_tokens=1024),
}
# fmt: on


def sample_record(choice: Any, usage: Any, grade: float) -> dict[str, Any]:
    conf = token_confidences(choice.logprobs)
    timings = usage.timings
    return {
        "text": choice.text,
        "answer": extract_answer(choice.text),
        "correct": grade,
        "prompt_tokens": usage.prompt_tokens,
        "cached_tokens": usage.cached_tokens,
        "completion_tokens": usage.completion_tokens,
        "prefill_s": timings.prompt_ms / 1e3 if timings else None,
        "decode_s": timings.predicted_ms / 1e3 if timings else None,
        "confidence": [round(c, 4) for c in conf] if conf else None,
    }


async def collect(name: str, cell: Cell) -> None:
    from rse_fast.local import LocalServer

    folder = WORK / name
    folder.mkdir(parents=True, exist_ok=True)
    meta = folder / "cell.json"
    if not meta.exists():
        meta.write_text(json.dumps({"cell": asdict(cell), "machine": machine()}, indent=1))
    out = folder / "pools.jsonl"
    done = {r["id"] for r in read_jsonl(out)} if out.exists() else set()
    dataset = load_dataset(cell.task, cell.problems, cell.seed)
    async with LocalServer(cell.model, parallel=4) as server:
        client = LLMClient(server.base_url, server.model_name)
        try:
            for k, problem in enumerate(dataset.problems):
                if problem.id not in done:
                    pool = await problem_pool(client, cell, dataset, problem)
                    row = {"id": problem.id, "gold": problem.gold, "samples": pool}
                    with out.open("a") as fh:
                        fh.write(json.dumps(row) + "\n")
                print(f"{name}: {k + 1}/{len(dataset.problems)}", flush=True)
        finally:
            await client.close()


async def problem_pool(
    client: LLMClient, cell: Cell, dataset: Any, problem: Any
) -> list[dict[str, Any]]:
    """``cell.samples`` rollouts of one problem, four in flight (the server's slots)."""
    gate = asyncio.Semaphore(4)

    async def one(j: int) -> dict[str, Any]:
        async with gate:
            result = await client.chat(
                problem.messages(), temperature=TEMPERATURE, max_tokens=cell.max_tokens,
                seed=cell.seed * 1000 + j, logprobs=True, top_logprobs=TOP_LOGPROBS,
            )  # fmt: skip
        choice = result.choices[0]
        return sample_record(choice, result.usage, float(dataset.grade(problem, choice.text)))

    return list(await asyncio.gather(*(one(j) for j in range(cell.samples))))


# -- replaying the offline rules -----------------------------------------------------------
def cost(sample: dict[str, Any], unit: str) -> float:
    if unit == "tokens":
        return float(sample["prompt_tokens"] + sample["completion_tokens"])
    return float((sample["prefill_s"] or 0.0) + (sample["decode_s"] or 0.0))


def vote(samples: list[dict[str, Any]], weights: list[float] | None = None) -> float:
    """The grade of the weighted majority answer of ``samples`` (0 when none answered)."""
    if not samples:
        return 0.0
    result = majority_vote([s["answer"] for s in samples], weights=weights)
    if result.answer is None:
        return 0.0
    return next(s["correct"] for s in samples if s["answer"] == result.answer)


def confidence_of(sample: dict[str, Any], measure: str, window: int) -> float | None:
    summary = rollout_confidence(sample["confidence"], window=window, tail=window)
    return summary.measure(measure) if summary else None


@dataclass(frozen=True)
class Rule:
    """An offline rule: how many samples it may draw, and what it does with them."""

    name: str
    k: int
    stop_epsilon: float | None = None  # stop once the vote is settled at 1 - epsilon
    keep: float = 1.0  # the most confident share voted
    weighted: bool = False  # votes weighted by confidence
    measure: str = "lowest_window"
    window: int = 32


def play(rule: Rule, order: list[dict[str, Any]]) -> tuple[float, list[dict[str, Any]]]:
    """The grade the rule ends with on one drawn order, and the samples it paid for."""
    drawn: list[dict[str, Any]] = []
    for s in order[: rule.k]:
        drawn.append(s)
        if rule.stop_epsilon is not None and len(drawn) >= 2:
            counts: dict[str, float] = {}
            for d in drawn:
                if d["answer"] is not None:
                    counts[d["answer"]] = counts.get(d["answer"], 0.0) + 1.0
            if statistically_settled(list(counts.values()), rule.stop_epsilon):
                break
    scores = [confidence_of(s, rule.measure, rule.window) for s in drawn]
    keeps = keep_most_confident(scores, rule.keep)
    kept = [s for s, keep in zip(drawn, keeps, strict=True) if keep]
    weights = None
    if rule.weighted:
        weights = [confidence_of(s, rule.measure, rule.window) or 0.0 for s in kept]
    return vote(kept, weights), drawn


def replay(rule: Rule, pools: list[dict[str, Any]], draws: int = 20, seed: int = 0) -> dict:
    """Per problem, the rule's mean grade and cost over ``draws`` sample orders."""
    rng = random.Random(seed)
    per_problem = []
    for row in pools:
        grades, tokens, secs = [], [], []
        for _ in range(draws):
            order = list(row["samples"])
            rng.shuffle(order)
            grade, paid = play(rule, order)
            grades.append(grade)
            tokens.append(sum(cost(s, "tokens") for s in paid))
            secs.append(sum(cost(s, "time") for s in paid))
        per_problem.append((sum(grades) / draws, sum(tokens) / draws, sum(secs) / draws))
    return {
        "accuracy": sum(p[0] for p in per_problem) / len(per_problem),
        "ci95": list(bootstrap_mean_ci([p[0] for p in per_problem])),
        "cost_tokens": sum(p[1] for p in per_problem) / len(per_problem),
        "cost_time": sum(p[2] for p in per_problem) / len(per_problem),
        "per_problem": [p[0] for p in per_problem],
        "per_problem_tokens": [p[1] for p in per_problem],
    }


BUDGETS = (2, 4, 8, 16)


def rules_for(k: int, dev: dict[str, Any] | None) -> dict[str, Rule]:
    """The rules at ``k`` samples: settings chosen on the dev cell (defaults before it ran)."""
    chosen = dev or {}
    return {
        "sc": Rule("sc", k),
        "sc+stop": Rule("sc+stop", k, stop_epsilon=chosen.get("epsilon", 0.1)),
        "sc+conf-filter": Rule(
            "sc+conf-filter",
            k,
            keep=chosen.get("keep", 0.5),
            measure=chosen.get("measure", "lowest_window"),
        ),
        "sc+conf-weight": Rule(
            "sc+conf-weight", k, weighted=True, measure=chosen.get("measure", "lowest_window")
        ),
    }


def summarise() -> None:
    cells = []
    for name, cell in CELLS.items():
        path = WORK / name / "pools.jsonl"
        if not path.exists():
            continue
        pools = [r for r in read_jsonl(path)]
        if not pools:
            continue
        methods: dict[str, dict[str, Any]] = {}
        for k in BUDGETS:
            for rule in rules_for(k, None).values():
                methods.setdefault(rule.name, {})[str(k)] = replay(rule, pools)
        samples = [s for r in pools for s in r["samples"]]
        with_conf = sum(s["confidence"] is not None for s in samples)
        cached = sum(s["cached_tokens"] or 0 for s in samples)
        prompt = sum(s["prompt_tokens"] for s in samples)
        cells.append({
            "cell": name, "split": cell.split, "model": cell.model, "task": cell.task,
            "seed": cell.seed, "problems": len(pools), "samples_per_problem": cell.samples,
            "single_sample_accuracy": sum(s["correct"] for s in samples) / len(samples),
            "confidence_share": with_conf / len(samples),
            "cached_prompt_share": cached / prompt if prompt else None,
            "methods": methods,
        })  # fmt: skip
    write_result("frontier", {"cells": cells, "budgets_samples": list(BUDGETS)})
    replace_readme_block("frontier", table(cells), "## Accuracy per cost: stopping, confidence")
    print(table(cells))


def table(cells: list[dict[str, Any]]) -> str:
    lines = [
        "| cell | method | " + " | ".join(f"k={k}: acc (tokens)" for k in BUDGETS) + " |",
        "|---|---|" + "---|" * len(BUDGETS),
    ]
    for c in cells:
        for m, by_k in c["methods"].items():
            row = " | ".join(
                f"{by_k[str(k)]['accuracy']:.0%} ({by_k[str(k)]['cost_tokens']:,.0f})"
                for k in BUDGETS
            )
            lines.append(f"| {c['cell']} ({c['problems']}) | {m} | {row} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cell", nargs="+", choices=sorted(CELLS), default=[])
    parser.add_argument("--summarise", action="store_true")
    args = parser.parse_args()
    for name in args.cell:
        asyncio.run(collect(name, CELLS[name]))
    if args.summarise or args.cell:
        summarise()


if __name__ == "__main__":
    main()
