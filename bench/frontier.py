"""Accuracy per unit of cost: stopping, confidence and cost as users pay it, at >= 4 budgets.

    python -m bench frontier --cell dev-easy-0.5b     # collect (or resume) one cell's pools
    python -m bench frontier --summarize             # frontier.json + the README table

A *pool* is ``samples`` independent rollouts per problem from the real llama-server, each
with its per-token confidences (top-5 logprobs), its answer, its grade, and what the server
said it cost: prompt, cached and completion tokens, prefill and decode milliseconds. The
offline rules (plain SC at a budget, SC that stops once its vote is settled, SC over the
most confident rollouts, SC weighted by confidence, and the stop with either; a weighted
rule's stop counts votes by confidence, as ``sc`` does) are replayed from the pools by
drawing sample orders, as the published methods evaluate them; each is charged the cost of
the samples it drew, in ``tokens`` (every token alike, as the study counts) and in ``time``
(the server's own prefill + decode seconds). The online rule (DeepConf's: the first wave
sets a threshold, a later sample is stopped once its window confidence falls below it) only
cuts samples short, so it replays too: the library's own gate finds where each stored sample
would have been stopped, and the sample is charged up to there (its prompt, the tokens
before the stop and that share of its decode time). RSE changes what is sampled and runs
live (rse_ablation). Cells get their own seeds (no problem is shared); dev cells choose
every rule's setting, test cells report once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.common import (
    load_cells,
    machine,
    measured_on,
    read_jsonl,
    read_result,
    replace_readme_block,
    write_result,
)
from rse_fast.answers import extract_answer, majority_vote
from rse_fast.answers.confidence import (
    keep_most_confident,
    rollout_confidence,
    token_confidences,
    window_means,
)
from rse_fast.eval.datasets import load_dataset
from rse_fast.eval.metrics import bootstrap_mean_ci, paired_difference
from rse_fast.llm import LLMClient
from rse_fast.methods import Candidate
from rse_fast.methods.voting import ConfidenceRule, OnlineGate, beta_settled

HERE = Path(__file__).parent
WORK = HERE / "results" / "frontier"
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
    why: str = ""  # what the cell is for


CELLS = load_cells("frontier", Cell)


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
    if not sample["confidence"]:
        return None
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
    online: bool = False  # DeepConf's online rule: later samples stopped once unsure
    #: when the stop is asked (see ``SCHEDULES``): the library's is the default
    schedule: str = "waves"


#: the online rule's warm-up: the first wave, as sc sends it on the server's four slots
WARMUP = 4


def stopped_where(conf: list[float] | None, gate: OnlineGate) -> int | None:
    """The token at which the library's online gate stops a streaming sample (None: never):
    the first ``t`` at which ``gate.unsure(conf[:t])`` holds, found in one pass over the
    sample's window means (the same test: the last ``window`` tokens' mean below the
    threshold). Online termination only cuts a sample short: up to the stop it streams what
    it would have streamed, so a stored sample replays it."""
    w, threshold = gate.rule.window, gate.threshold
    if not conf or threshold is None or len(conf) < w:
        return None
    means = window_means(conf, w)
    return next((i + w for i, m in enumerate(means) if m < threshold), None)


def cut_at(sample: dict[str, Any], t: int) -> dict[str, Any]:
    """A sample stopped after ``t`` generated tokens: paid up to there, no answer."""
    share = t / max(1, sample["completion_tokens"])
    return {**sample, "answer": None, "correct": 0.0, "completion_tokens": t, "confidence": None,
            "decode_s": (sample["decode_s"] or 0.0) * share, "stopped": True}  # fmt: skip


def paid_in_order(rule: Rule, order: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first ``rule.k`` samples as the rule pays for them: whole, or for the online rule
    the warm-up whole (it sets the threshold, as ``OnlineGate`` sets it from the first wave)
    and each later one cut where the gate stops it."""
    if not rule.online:
        return list(order[: rule.k])
    gate = OnlineGate(ConfidenceRule(keep=rule.keep, window=rule.window, online=True))
    drawn = list(order[: min(WARMUP, rule.k)])
    for s in drawn:
        summary = rollout_confidence(s["confidence"], rule.window, 1) if s["confidence"] else None
        if summary is not None:
            gate.warmup.append(summary.lowest_window)
    gate.ready()
    for s in order[len(drawn) : rule.k]:
        t = stopped_where(s["confidence"], gate)
        drawn.append(s if t is None else cut_at(s, t))
    return drawn


#: How a stopped vote runs on the server's slots, and so what its stop costs:
#: ``sequential``: one sample at a time, the stop asked after each (nothing is ever in flight:
#: the cheapest, and no live run does it); ``waves``: the library's ``sc``: waves of
#: ``PARALLEL`` samples, the stop asked after each sample that finishes, the next wave sent
#: once the last one is in; ``sliding``: a slot is refilled as soon as its sample finishes.
#: Under the last two a stop cancels the samples still running, and they are charged what
#: they had generated by then (their prompt, and their completion in proportion to the time
#: they ran: decode time follows completion length).
SCHEDULES = ("sequential", "waves", "sliding")
PARALLEL = 4


def settles(rule: Rule, done: list[dict[str, Any]]) -> bool:
    """Whether the library's stop settles on the finished samples ``done`` (a weighted rule's
    stop counts votes by confidence, as ``sc`` with a confidence rule does; a sample the
    online gate cut has no answer and casts no vote, as in ``sc``)."""
    if rule.stop_epsilon is None or len(done) < 2:
        return False
    pool = [Candidate(text=d["text"], answer=d["answer"], scores=confidence_score(d, rule))
            for d in done]  # fmt: skip
    return bool(beta_settled(rule.stop_epsilon, rule.weighted)(pool, rule.k - len(done)))


def cancelled_after(sample: dict[str, Any], ran: float) -> dict[str, Any]:
    """A sample cancelled after running ``ran`` of its ``completion_tokens`` time units."""
    t = min(sample["completion_tokens"], max(0, int(ran)))
    return {**cut_at(sample, t), "cancelled": True}


def stopping_draws(
    rule: Rule, order: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The samples that finished (they vote) and every sample paid for (the finished ones and
    those the stop cancelled, cut where they were), under ``rule.schedule``."""
    paid = paid_in_order(rule, order)
    if rule.stop_epsilon is None:
        return paid, paid
    if rule.schedule == "sequential":
        done: list[dict[str, Any]] = []
        for s in paid:
            done.append(s)
            if settles(rule, done):
                break
        return done, done
    if rule.schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {rule.schedule!r}: one of {SCHEDULES}")
    return _in_flight(rule, paid)


def _in_flight(
    rule: Rule, paid: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``PARALLEL`` slots; a sample runs ``completion_tokens`` time units. Waves start when
    the wave before is done; sliding starts the next sample when a slot frees (after the stop
    was asked)."""
    running: list[tuple[float, int, float]] = []  # (end, index, start)
    done: list[dict[str, Any]] = []
    nxt = 0

    def launch(at: float) -> None:
        nonlocal nxt
        running.append((at + paid[nxt]["completion_tokens"], nxt, at))
        nxt += 1

    while nxt < min(PARALLEL, len(paid)):
        launch(0.0)
    while running:
        running.sort()
        end, j, _ = running.pop(0)
        done.append(paid[j])
        if settles(rule, done):
            cut = [cancelled_after(paid[i], end - start) for _, i, start in running]
            return done, done + cut
        if nxt < len(paid) and (rule.schedule == "sliding" or not running):
            launch(end)
            while rule.schedule == "waves" and nxt < len(paid) and len(running) < PARALLEL:
                launch(end)
    return done, done


def confidence_score(sample: dict[str, Any], rule: Rule) -> dict[str, float]:
    """A sample's confidence as a candidate carries it, where the rule weighs by it."""
    conf = confidence_of(sample, rule.measure, rule.window) if rule.weighted else None
    return {} if conf is None else {"confidence": conf}


def play(rule: Rule, order: list[dict[str, Any]]) -> tuple[float, list[dict[str, Any]]]:
    """The grade the rule ends with on one drawn order, and the samples it paid for. The stop
    is the library's (``methods.voting.beta_settled``): the Beta criterion, or no vote left
    can change the winner. The online rule's final vote keeps the same share of the samples
    that ran to the end, as ``sc`` with an online confidence rule does."""
    drawn, paid = stopping_draws(rule, order)
    scores = [confidence_of(s, rule.measure, rule.window) for s in drawn]
    keeps = keep_most_confident(scores, rule.keep)
    kept = [s for s, keep in zip(drawn, keeps, strict=True) if keep]
    weights = None
    if rule.weighted:
        weights = [confidence_of(s, rule.measure, rule.window) or 0.0 for s in kept]
    return vote(kept, weights), paid


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
        "per_problem_time": [p[2] for p in per_problem],
    }


#: rules added after the test pools had been read (their settings come from the dev cell,
#: but the choice to add them did not): marked in every table that shows them
ADDED_AFTER_TEST_LOOK = ("sc+conf-online", "sc+stop+conf-weight", "sc+stop+conf-online")
BUDGETS = (2, 4, 8, 16)
EPSILONS = (0.02, 0.05, 0.1, 0.2)
KEEPS = (0.25, 0.5, 0.75)
ONLINE_KEEPS = (0.25, 0.5, 0.75, 0.9)  # DeepConf's online rule keeps 10% or 90%
MEASURE_NAMES = ("mean", "lowest_window", "tail", "bottom10")


def choose_on_dev(pools: list[dict[str, Any]]) -> dict[str, Any]:
    """Every rule's setting, from the dev pools alone, fixed before a test pool is read:
    the stop's epsilon is the largest (cheapest) whose accuracy at the largest budget stays
    within 1 point of SC's (the confidence-weighted stop's likewise, with the weighting's
    measure); the filter's measure and share and the weighting's measure are the most
    accurate at the largest budget (ties: the first in the grid)."""
    k = BUDGETS[-1]
    sc = replay(Rule("sc", k), pools)["accuracy"]
    weights = {m: replay(Rule("w", k, weighted=True, measure=m), pools)["accuracy"]
               for m in MEASURE_NAMES}  # fmt: skip
    weight_measure = max(weights, key=lambda m: weights[m])

    def keeps_up(epsilon: float, weighted: bool) -> bool:
        rule = Rule("s", k, stop_epsilon=epsilon, weighted=weighted, measure=weight_measure)
        return replay(rule, pools)["accuracy"] >= sc - 0.01

    stops = [e for e in EPSILONS if keeps_up(e, weighted=False)]
    weighted_stops = [e for e in EPSILONS if keeps_up(e, weighted=True)]
    filters = {
        (m, keep): replay(Rule("f", k, keep=keep, measure=m), pools)["accuracy"]
        for m in MEASURE_NAMES
        for keep in KEEPS
    }
    measure, keep = max(filters, key=lambda key: filters[key])
    online = {kp: replay(Rule("o", k, keep=kp, online=True), pools) for kp in ONLINE_KEEPS}
    within = [kp for kp, r in online.items() if r["accuracy"] >= sc - 0.01]
    # the online rule's share: the cheapest within 1 point of SC at the largest budget (none
    # within: the most accurate)
    online_keep = (
        min(within, key=lambda kp: online[kp]["cost_tokens"])
        if within
        else max(online, key=lambda kp: online[kp]["accuracy"])
    )
    # DeepConf's online rule in full, the cut and the stop together: its share and epsilon
    # chosen together, the cheapest pair within 1 point of SC (none within: the most accurate)
    both = {(kp, e): replay(Rule("os", k, stop_epsilon=e, keep=kp, online=True), pools)
            for kp in ONLINE_KEEPS for e in EPSILONS}  # fmt: skip
    both_within = [key for key, r in both.items() if r["accuracy"] >= sc - 0.01]
    online_stop = (
        min(both_within, key=lambda key: both[key]["cost_tokens"])
        if both_within
        else max(both, key=lambda key: both[key]["accuracy"])
    )
    return {
        "epsilon": max(stops) if stops else min(EPSILONS),
        "weighted_epsilon": max(weighted_stops) if weighted_stops else min(EPSILONS),
        "online_keep": online_keep,
        "online_stop_keep": online_stop[0],
        "online_stop_epsilon": online_stop[1],
        "keep": keep,
        "measure": measure,
        "weight_measure": weight_measure,
        "dev_accuracy_at_k16": {"sc": sc, "filters": {f"{m}@{kp}": v for (m, kp), v in
                                                     filters.items()}, "weights": weights},
    }  # fmt: skip


def rules_for(k: int, chosen: dict[str, Any]) -> dict[str, Rule]:
    """The rules at ``k`` samples, with the dev cell's settings."""
    return {
        "sc": Rule("sc", k),
        "sc+stop": Rule("sc+stop", k, stop_epsilon=chosen["epsilon"]),
        "sc+conf-filter": Rule("sc+conf-filter", k, keep=chosen["keep"], measure=chosen["measure"]),
        "sc+conf-weight": Rule(
            "sc+conf-weight", k, weighted=True, measure=chosen["weight_measure"]
        ),
        "sc+conf-online": Rule("sc+conf-online", k, keep=chosen["online_keep"], online=True),
        "sc+stop+conf-weight": Rule(
            "sc+stop+conf-weight",
            k,
            stop_epsilon=chosen["weighted_epsilon"],
            weighted=True,
            measure=chosen["weight_measure"],
        ),
        "sc+stop+conf-filter": Rule(
            "sc+stop+conf-filter",
            k,
            stop_epsilon=chosen["epsilon"],
            keep=chosen["keep"],
            measure=chosen["measure"],
        ),
        "sc+stop+conf-online": Rule(
            "sc+stop+conf-online",
            k,
            stop_epsilon=chosen["online_stop_epsilon"],
            keep=chosen["online_stop_keep"],
            online=True,
        ),
    }


def ratio_ci(cost: list[float], base: list[float], rng: random.Random) -> list[float]:
    """A bootstrap interval (problems resampled, 2,000 draws) of sum(cost) / sum(base)."""
    ratios = []
    for _ in range(2000):
        idx = [rng.randrange(len(cost)) for _ in cost]
        ratios.append(sum(cost[i] for i in idx) / sum(base[i] for i in idx))
    ratios.sort()
    return [ratios[50], ratios[1949]]


class Pooled:
    """The cells' per-problem values of one (method, budget), concatenated in cell order."""

    def __init__(self, cells: list[dict[str, Any]], unit: str) -> None:
        self.cells, self.cost_key = cells, f"per_problem_{unit}"

    def grades(self, method: str, k: str) -> list[float]:
        return [x for c in self.cells for x in c["methods"][method][k]["per_problem"]]

    def costs(self, method: str, k: str) -> list[float]:
        return [x for c in self.cells for x in c["methods"][method][k][self.cost_key]]

    def options(self) -> list[tuple[str, str]]:
        return [(m, k) for m, by_k in self.cells[0]["methods"].items() for k in by_k]

    def best_within(self, spend: float) -> tuple[str, str]:
        """The most accurate (method, budget) whose pooled cost is at most ``spend``."""
        fits = [(sum(self.grades(m, b)), m, b) for m, b in self.options()
                if sum(self.costs(m, b)) <= spend]  # fmt: skip
        _, m, b = max(fits)
        return m, b


def pooled_targets(cells: list[dict[str, Any]], unit: str = "tokens") -> dict[str, Any]:
    """The issue's targets over the test cells, paired by problem, in ``unit`` (tokens or
    time). The best rule at each budget is picked twice: on the test pools, as the target
    defines it (optimistic), and on the dev pools alone, then read once on the test pools."""
    # a cell still collecting is reported on its own and pooled once complete
    test_cells = [c for c in cells if c["split"] == "test" and not c.get("partial")]
    dev_cells = [c for c in cells if c["split"] == "dev" and not c.get("partial")]
    if not test_cells:
        return {}
    tests = Pooled(test_cells, unit)
    top = str(BUDGETS[-1])
    sc_acc, sc_cost = tests.grades("sc", top), tests.costs("sc", top)
    target = sum(sc_acc) / len(sc_acc)
    rng = random.Random(0)
    # the cheapest (method, budget) whose pooled accuracy reaches SC's at its largest budget
    _, method, k = min((sum(tests.costs(m, b)), m, b) for m, b in tests.options()
                       if sum(tests.grades(m, b)) / len(sc_acc) >= target)  # fmt: skip
    cost = tests.costs(method, k)
    savings = {"method": method, "budget_samples": int(k), "ratio": sum(cost) / sum(sc_cost),
               "ci95": ratio_ci(cost, sc_cost, rng)}  # fmt: skip

    def against_sc(picker: Pooled) -> dict[str, Any]:
        """At each SC budget, the rule ``picker`` finds most accurate within SC's spend there,
        against SC on the test pools, paired by problem; and pooled over the budgets, each
        problem's mean difference one draw of the bootstrap (a problem's budgets are not
        independent samples)."""
        diffs = [0.0] * len(sc_acc)
        per_budget = {}
        for kk in map(str, BUDGETS):
            m, b = picker.best_within(sum(picker.costs("sc", kk)))
            best, sc_k = tests.grades(m, b), tests.grades("sc", kk)
            d, ci = paired_difference(best, sc_k)
            per_budget[kk] = {"method": m, "budget_samples": int(b), "diff": d,
                              "ci95": list(ci), "cost_ratio": sum(tests.costs(m, b))
                              / sum(tests.costs("sc", kk))}  # fmt: skip
            for i, (x, y) in enumerate(zip(best, sc_k, strict=True)):
                diffs[i] += (x - y) / len(BUDGETS)
        diff, ci = paired_difference(diffs, [0.0] * len(diffs))
        return {"diff": diff, "ci95": list(ci), "by_budget": per_budget}

    # the stop at SC's largest budget, against SC there: what it loses and what it saves
    stop_acc, stop_cost = tests.grades("sc+stop", top), tests.costs("sc+stop", top)
    acc_diff, acc_ci = paired_difference(stop_acc, sc_acc)
    # what the confidence filter adds on top of the stop (it asks for logprobs, which cost
    # decode speed): the default keeps it only if it pays
    conf_on_stop: dict[str, Any] = {}
    if "sc+stop+conf-filter" in test_cells[0]["methods"]:
        filtered = tests.grades("sc+stop+conf-filter", top)
        conf_diff, conf_ci = paired_difference(filtered, stop_acc)
        conf_on_stop = {
            "accuracy_diff": conf_diff,
            "accuracy_ci95": list(conf_ci),
            "cost_ratio": sum(tests.costs("sc+stop+conf-filter", top)) / sum(stop_cost),
        }
    found: dict[str, Any] = {
        "unit": unit,
        "stop_at_largest_budget": {
            "accuracy_diff": acc_diff,
            "accuracy_ci95": list(acc_ci),
            "cost_ratio": sum(stop_cost) / sum(sc_cost),
            "cost_ratio_ci95": ratio_ci(stop_cost, sc_cost, rng),
        },
        "conf_filter_on_stop": conf_on_stop,
        "best_picked_on_test": "best_vs_sc_equal_cost picks each budget's best rule on the "
        "test pools, as the target defines it: an optimistic choice; "
        "best_picked_on_dev_vs_sc_equal_cost picks it on the dev cells and reads it once here",
        "problems": len(sc_acc),
        "cells": [c["cell"] for c in test_cells],
        "savings_at_sc_accuracy": savings,
        "best_vs_sc_equal_cost": against_sc(tests),
    }
    if dev_cells:
        found["best_picked_on_dev_vs_sc_equal_cost"] = {
            **against_sc(Pooled(dev_cells, unit)),
            "dev_cells": [c["cell"] for c in dev_cells],
        }
    return found


def schedule_comparison(
    test_pools: list[list[dict[str, Any]]], chosen: dict[str, Any]
) -> dict[str, Any]:
    """The stop (the dev cell's epsilon) at SC's largest budget under each schedule, against
    SC there on the test pools, paired by problem: what the live schedule keeps of the
    saving the sequential replay shows (the library's schedule is chosen on it)."""
    k = BUDGETS[-1]
    rng = random.Random(0)
    sc = [replay(Rule("sc", k), pools) for pools in test_pools]
    sc_acc = [x for r in sc for x in r["per_problem"]]
    out: dict[str, Any] = {"budget_samples": k, "epsilon": chosen["epsilon"]}
    for schedule in SCHEDULES:
        rule = Rule("sc+stop", k, stop_epsilon=chosen["epsilon"], schedule=schedule)
        runs = [replay(rule, pools) for pools in test_pools]
        acc = [x for r in runs for x in r["per_problem"]]
        diff, ci = paired_difference(acc, sc_acc)
        by_unit = {}
        for unit in ("tokens", "time"):
            cost = [x for r in runs for x in r[f"per_problem_{unit}"]]
            base = [x for r in sc for x in r[f"per_problem_{unit}"]]
            by_unit[unit] = {"ratio": sum(cost) / sum(base), "ci95": ratio_ci(cost, base, rng)}
        out[schedule] = {"accuracy_diff": diff, "accuracy_ci95": list(ci), **by_unit}
    return out


def rse_conf_vs_sc_conf() -> dict[str, Any]:
    """RSE with the confidence signal against SC with the same signal: RSE changes what is
    sampled, so it runs live (rse_ablation's cells with ``options.confidence``), not from
    these pools; read from rse_ablation.json's test cells."""
    found = ((read_result("rse_ablation") or {}).get("pooled") or {}).get("rse_conf_vs_sc_conf")
    if found and found.get("problems"):
        return {**found, "from": "rse_ablation.json, test cells run with the confidence rule"}
    why = ("not run yet: the live cells are rse_ablation's dev-conf-three-0.5b (dev), then "
           "test-conf-three-0.5b (test, fresh seed)")  # fmt: skip
    return {"diff": None, "ci95": None, "why": why}


def summarize() -> None:
    dev_path = WORK / "dev-easy-0.5b" / "pools.jsonl"
    dev_pools = read_jsonl(dev_path) if dev_path.exists() else []
    if len(dev_pools) < CELLS["dev-easy-0.5b"].problems:
        print("the dev cell is not complete: no rule is chosen, nothing is summarized")
        return
    chosen = choose_on_dev(dev_pools)
    cells = []
    test_pools: list[list[dict[str, Any]]] = []
    for name, cell in CELLS.items():
        path = WORK / name / "pools.jsonl"
        pools = read_jsonl(path) if path.exists() else []
        if not pools:
            continue
        if cell.split == "test" and len(pools) >= cell.problems:
            test_pools.append(pools)
        methods: dict[str, dict[str, Any]] = {}
        for k in BUDGETS:
            for rule in rules_for(k, chosen).values():
                methods.setdefault(rule.name, {})[str(k)] = replay(rule, pools)
        samples = [s for r in pools for s in r["samples"]]
        cached = sum(s["cached_tokens"] or 0 for s in samples)
        prompt = sum(s["prompt_tokens"] for s in samples)
        meta = json.loads((WORK / name / "cell.json").read_text())
        cells.append({
            "cell": name, "split": cell.split, "model": cell.model, "task": cell.task,
            "seed": cell.seed, "problems": len(pools), "planned_problems": cell.problems,
            "partial": len(pools) < cell.problems, "samples_per_problem": cell.samples,
            "machine": meta["machine"],
            "single_sample_accuracy": sum(s["correct"] for s in samples) / len(samples),
            "confidence_share": sum(s["confidence"] is not None for s in samples) / len(samples),
            "cached_prompt_share": cached / prompt if prompt else None,
            "methods": methods,
        })  # fmt: skip
    cache = read_result("distill_cache") or {}
    payload = {
        "chosen_on_dev": chosen,
        "added_after_test_look": list(ADDED_AFTER_TEST_LOOK),
        "budgets_samples": list(BUDGETS),
        "cost_units": ["tokens", "time"],
        "cells": cells,
        "pooled": {**pooled_targets(cells), "rse_conf_vs_sc_conf": rse_conf_vs_sc_conf()},
        "pooled_time": pooled_targets(cells, "time"),
        "schedule": {
            "replayed": "waves",
            "why": "the library's sc sends waves of the server's slots and asks the stop "
            "after each sample that finishes; samples the stop cancels are charged what they "
            "had generated (SCHEDULES in bench/frontier.py)",
            "stop_by_schedule": schedule_comparison(test_pools, chosen),
        },
        "distill_cached_share": cache.get("distill_cached_share"),
        # the lowest task's above; each task's here (the share follows the rollout's length)
        "distill_cached_share_by_task": cache.get("distill_cached_share_by_task"),
    }
    write_result("frontier", payload, measured_on(cells))
    replace_readme_block("frontier", table(cells), "## Accuracy per cost: stopping, confidence")
    print(table(cells))


def table(cells: list[dict[str, Any]]) -> str:
    lines = [
        "| cell | method | " + " | ".join(f"k={k}: acc (tokens, server s)" for k in BUDGETS) + " |",
        "|---|---|" + "---|" * len(BUDGETS),
    ]
    for c in cells:
        for m, by_k in c["methods"].items():
            row = " | ".join(
                f"{by_k[str(k)]['accuracy']:.0%} ({by_k[str(k)]['cost_tokens']:,.0f}, "
                f"{by_k[str(k)]['cost_time']:.0f})"
                for k in BUDGETS
            )
            mark = " †" if m in ADDED_AFTER_TEST_LOOK else ""
            lines.append(f"| {c['cell']} ({c['problems']}) | {m}{mark} | {row} |")
    lines.append(
        "\n† added after the test pools had been read (settings from the dev cell). Stops "
        "replayed on the library's schedule: waves of four, the stop asked as each sample "
        "finishes, the samples it cancels charged what they had generated."
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cell", nargs="+", choices=sorted(CELLS), default=[])
    parser.add_argument("--summarize", action="store_true")
    args = parser.parse_args()
    for name in args.cell:
        asyncio.run(collect(name, CELLS[name]))
    if args.summarize or args.cell:
        summarize()


if __name__ == "__main__":
    main()
