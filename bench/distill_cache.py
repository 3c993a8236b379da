"""How much of a distillation's prompt the server's prefix cache serves, on the real
llama-server: a distillation that continues the rollout's conversation against one that
pastes the rollout into a fresh prompt, in the same run, on the same problems.

    python -m bench distill_cache            # -> results/distill_cache.json

RSE at its defaults but with every round-1 rollout distilled (settle rule off), in up to
four forms (``FORMS``: the default, the brief ask, the ask primed in every rollout's system
turn, the pasted prompt), four slots, on three
tasks: three-term sums (0.5B, rollouts of ~100 tokens), grade-school word problems (0.5B,
longer) and MATH-500 on the 1.5B (the long-rollout task of the frontier, rollouts of ~700
tokens; the default form only). The share is the server's own count: the prompt
tokens of the ``distill`` calls that ``prompt_tokens_details.cached_tokens`` reports as cached,
over their prompt tokens, and the prefill seconds llama.cpp's ``timings`` report. The ask that
follows the rollout is new text no cache can hold, so the share is bounded by the rollout's
length; ``prefix_served_share`` is the part of what a cache could serve (the distillation's
prompt up to its ask, as the server tokenizes it) that it did serve. Each form also reports
``run``: every call's prompt tokens, cached and not, and prefill seconds, rollouts included
(the primed form's rollouts read the ask: its distillations' share alone would flatter it).

    python -m bench distill_cache --task "long rollouts"   # one task, merged into the JSON
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass
from typing import Any

from bench.common import machine, read_result, write_result
from rse_fast.encoder import Encoder
from rse_fast.eval.datasets import load_dataset
from rse_fast.llm import LLMClient
from rse_fast.llm.prompt_count import server_prompt_ids
from rse_fast.local import LocalServer
from rse_fast.prompts.rse import is_distillation
from rse_fast.rse import RSE, RSEConfig


@dataclass(frozen=True)
class Task:
    name: str
    spec: str
    model: str = "qwen2.5-coder-0.5b"
    max_tokens: int = 384
    forms: tuple[str, ...] = ("continuing", "continuing-brief", "continuing-primed", "fresh")


TASKS = (
    Task("three-term sums",
         "gym:basic_arithmetic?min_terms=3&max_terms=3&min_digits=1&max_digits=2"),
    Task("word problems", "gym:gsm_symbolic"),
    # the frontier's long-rollout task and model, at its rollout length (test-math-1.5b)
    Task("long rollouts", "mmath:math500", "qwen2.5-coder-1.5b", 1024, ("continuing",)),
)  # fmt: skip
PROBLEMS, SEED = 3, 501


def common_prefix(a: list[int], b: list[int]) -> int:
    """How many leading ids two token lists share: what one prompt's cache can serve the other."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def prompt_counts(calls: list[dict[str, Any]]) -> tuple[int, int, list[float]]:
    """Traced calls' prompt tokens, the part the server reported cached, and each call's
    prefill seconds (where llama.cpp's ``timings`` came)."""
    usage = [c["usage"] for c in calls]
    prompt = sum(u["prompt_tokens"] for u in usage)
    cached = sum(u.get("cached_tokens") or 0 for u in usage)
    return prompt, cached, [u["timings"]["prompt_ms"] / 1000 for u in usage if u.get("timings")]


def distill_share(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """The server's counts over one form's distillations (each a traced call with
    ``prefix_tokens`` added where it was measured)."""
    prompt, cached, prefill = prompt_counts(calls)
    with_prefix = [c for c in calls if c.get("prefix_tokens")]
    prefix = sum(c["prefix_tokens"] for c in with_prefix)
    served = sum(min(c["usage"].get("cached_tokens") or 0, c["prefix_tokens"]) for c in with_prefix)
    return {
        "distill_calls": len(calls),
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "cached_share": cached / prompt if prompt else None,
        "prompt_tokens_per_call": prompt / len(calls) if calls else None,
        "prefix_tokens": prefix or None,
        "ask_tokens_per_call": (
            sum(c["usage"]["prompt_tokens"] - c["prefix_tokens"] for c in with_prefix)
            / len(with_prefix)
            if with_prefix
            else None
        ),
        "prefix_served_share": served / prefix if prefix else None,
        "prefill_s": sum(prefill),
        "prefill_s_per_call": sum(prefill) / len(prefill) if prefill else None,
    }


async def prefix_tokens(client: LLMClient, messages: list[Any]) -> int | None:
    """The tokens a continuing distillation shares with the conversation before its ask:
    the most any cache could serve it."""
    full = await server_prompt_ids(client.transport, client.build_body(messages))
    before = await server_prompt_ids(client.transport, client.build_body(messages[:-1]))
    return common_prefix(full, before) if full and before else None


#: The distillation forms, each the RSEConfig fields it sets: the default (continuing the
#: rollout's conversation with the full ask), the short ask ``rse:brief`` uses, the full ask
#: moved into every rollout's system turn (``rse:primed``), and the pasted fresh prompt of
#: before 2026-12-03.
FORMS: dict[str, dict[str, Any]] = {
    "continuing": {"distill_continues": True},
    "continuing-brief": {"distill_continues": True, "distill_ask": "brief"},
    "continuing-primed": {"distill_continues": True, "distill_ask": "primed"},
    "fresh": {"distill_continues": False},
}


def run_totals(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """What the whole run's calls (rollouts and distillations) cost in prompt tokens, as the
    server counts them: a form that moves text into the rollouts' prompts (``primed``) is
    judged by these, not by its distillations' share alone."""
    prompt, cached, prefill = prompt_counts(calls)
    return {
        "calls": len(calls),
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "uncached_prompt_tokens": prompt - cached,
        "completion_tokens": sum(c["usage"]["completion_tokens"] for c in calls),
        "prefill_s": sum(prefill),
    }


async def run_form(
    server: LocalServer, encoder: Encoder, task: Task, fields: dict[str, Any]
) -> dict[str, Any]:
    """RSE on the task's problems with one distillation form; its distillations' counts."""
    calls: list[dict[str, Any]] = []
    every: list[dict[str, Any]] = []

    def keep(record: dict[str, Any]) -> None:
        if "usage" in record:
            every.append(record)
            if is_distillation(record["request"].get("messages") or []):
                calls.append(record)

    client = LLMClient(server.base_url, server.model_name, trace=keep)
    # one round, distilled: the distillations of round 1 are all that is measured
    config = RSEConfig(rounds=1, k=4, max_tokens=task.max_tokens, settle_margin=None,
                       distill_final_round=True, **fields)  # fmt: skip
    rse = RSE(client, encoder, config)
    try:
        for problem in load_dataset(task.spec, PROBLEMS, SEED).problems:
            await rse.solve(problem.prompt, gold=problem.gold)
        if fields["distill_continues"]:
            for call in calls:
                call["prefix_tokens"] = await prefix_tokens(client, call["request"]["messages"])
    finally:
        await client.close()
    return {**distill_share(calls), "run": run_totals(every)}


async def measure(tasks: list[Task]) -> dict[str, Any]:
    encoder = Encoder(providers=["CPUExecutionProvider"])
    found: dict[str, Any] = {}
    for model in dict.fromkeys(t.model for t in tasks):
        async with LocalServer(model, parallel=4) as server:
            for task in (t for t in tasks if t.model == model):
                t0 = time.perf_counter()
                forms = {f: await run_form(server, encoder, task, FORMS[f]) for f in task.forms}
                found[task.name] = {"task": task.spec, "model": model,
                                    "max_tokens": task.max_tokens, **forms,
                                    "machine": machine(), "wall_s": time.perf_counter() - t0,
                                    "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                 time.gmtime())}  # fmt: skip
    return found


def headline(tasks: dict[str, Any]) -> dict[str, Any]:
    """The targets' numbers over every task measured: the lowest share (the task whose
    rollouts are shortest, where the ask weighs most) and each task's."""
    continuing = [t["continuing"] for t in tasks.values()]
    briefs = [t["continuing-brief"] for t in tasks.values() if "continuing-brief" in t]
    primed = [t["continuing-primed"] for t in tasks.values() if "continuing-primed" in t]
    return {
        "distill_cached_share": min(c["cached_share"] for c in continuing),
        "distill_cached_share_by_task": {
            name: t["continuing"]["cached_share"] for name, t in tasks.items()
        },
        "distill_prefix_served_share": min(c["prefix_served_share"] for c in continuing),
        # the short ask (rse:brief, opt-in: it lost its dev cell, dev-brief-three-0.5b)
        "distill_cached_share_brief": min(b["cached_share"] for b in briefs) if briefs else None,
        # the ask in every rollout's prompt (rse:primed, opt-in until a dev cell rules), and
        # what the whole run then left uncached against the default's, task by task
        "distill_cached_share_primed": min(p["cached_share"] for p in primed) if primed else None,
        "primed_run_uncached_ratio": {
            name: t["continuing-primed"]["run"]["uncached_prompt_tokens"]
            / t["continuing"]["run"]["uncached_prompt_tokens"]
            for name, t in tasks.items()
            if "run" in t.get("continuing-primed", {}) and "run" in t["continuing"]
        },
    }


def stamped(result: dict[str, Any]) -> dict[str, Any]:
    """A result's tasks, each with the machine and time it was measured on: a task kept from
    an earlier run keeps that run's, not the file's next stamp."""
    return {
        name: {"machine": result.get("machine"), "measured_at": result.get("measured_at"), **task}
        for name, task in result.get("tasks", {}).items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=[t.name for t in TASKS],
                        help="measure this task alone and keep the others' results")  # fmt: skip
    args = parser.parse_args()
    chosen = [t for t in TASKS if args.task in (None, t.name)]
    earlier = stamped(read_result("distill_cache")) if args.task else {}
    tasks = {**earlier, **asyncio.run(measure(chosen))}
    tasks = {t.name: tasks[t.name] for t in TASKS if t.name in tasks}
    payload = {"problems": PROBLEMS, "seed": SEED, "tasks": tasks, **headline(tasks)}
    path = write_result("distill_cache", payload)
    for name, task in tasks.items():
        print(name, {f: task[f]["cached_share"] for f in FORMS if f in task})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
