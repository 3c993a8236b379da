"""How much of a distillation's prompt the server's prefix cache serves, on the real
llama-server: a distillation that continues the rollout's conversation against one that
pastes the rollout into a fresh prompt, in the same run, on the same problems.

    python -m bench distill_cache            # -> results/distill_cache.json

RSE at its defaults but with every round-1 rollout distilled (settle rule off, two rounds),
in three forms (``FORMS``: the default, the brief ask, the pasted prompt), four slots, on the
0.5B model, on two tasks: three-term sums (rollouts of ~100 tokens) and grade-school word
problems (longer rollouts). The share is the server's own count: the prompt
tokens of the ``distill`` calls that ``prompt_tokens_details.cached_tokens`` reports as cached,
over their prompt tokens, and the prefill seconds llama.cpp's ``timings`` report. The ask that
follows the rollout is new text no cache can hold, so the share is bounded by the rollout's
length; ``prefix_served_share`` is the part of what a cache could serve (the distillation's
prompt up to its ask, as the server tokenizes it) that it did serve.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench.common import write_result
from rse_fast.encoder import Encoder
from rse_fast.eval.datasets import load_dataset
from rse_fast.llm import LLMClient
from rse_fast.llm.prompt_count import server_prompt_ids
from rse_fast.local import LocalServer
from rse_fast.prompts.rse import is_distillation
from rse_fast.rse import RSE, RSEConfig

MODEL = "qwen2.5-coder-0.5b"
#: (name, dataset spec), each run on PROBLEMS problems of SEED
TASKS = (
    ("three-term sums", "gym:basic_arithmetic?min_terms=3&max_terms=3&min_digits=1&max_digits=2"),
    ("word problems", "gym:gsm_symbolic"),
)
PROBLEMS, SEED = 3, 501


def common_prefix(a: list[int], b: list[int]) -> int:
    """How many leading ids two token lists share: what one prompt's cache can serve the other."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def distill_share(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """The server's counts over one form's distillations (each a traced call with
    ``prefix_tokens`` added where it was measured)."""
    usage = [c["usage"] for c in calls]
    prompt = sum(u["prompt_tokens"] for u in usage)
    cached = sum(u.get("cached_tokens") or 0 for u in usage)
    prefill = [u["timings"]["prompt_ms"] / 1000 for u in usage if u.get("timings")]
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
#: rollout's conversation with the full ask), the short ask ``rse:brief`` uses, and the
#: pasted fresh prompt of before 2026-12-03.
FORMS: dict[str, dict[str, Any]] = {
    "continuing": {"distill_continues": True},
    "continuing-brief": {"distill_continues": True, "distill_ask": "brief"},
    "fresh": {"distill_continues": False},
}


async def run_form(
    server: LocalServer, encoder: Encoder, spec: str, fields: dict[str, Any]
) -> dict[str, Any]:
    """RSE on the task's problems with one distillation form; its distillations' counts."""
    calls: list[dict[str, Any]] = []

    def keep(record: dict[str, Any]) -> None:
        if "usage" in record and is_distillation(record["request"].get("messages") or []):
            calls.append(record)

    client = LLMClient(server.base_url, server.model_name, trace=keep)
    config = RSEConfig(rounds=2, k=4, max_tokens=384, settle_margin=None, **fields)
    rse = RSE(client, encoder, config)
    try:
        for problem in load_dataset(spec, PROBLEMS, SEED).problems:
            await rse.solve(problem.prompt, gold=problem.gold)
        if fields["distill_continues"]:
            for call in calls:
                call["prefix_tokens"] = await prefix_tokens(client, call["request"]["messages"])
    finally:
        await client.close()
    return distill_share(calls)


async def measure() -> dict[str, Any]:
    encoder = Encoder(providers=["CPUExecutionProvider"])
    tasks: dict[str, Any] = {}
    async with LocalServer(MODEL, parallel=4) as server:
        for name, spec in TASKS:
            forms = {
                form: await run_form(server, encoder, spec, fields)
                for form, fields in FORMS.items()
            }
            tasks[name] = {"task": spec, **forms}
    return tasks


def main() -> None:
    t0 = time.perf_counter()
    tasks = asyncio.run(measure())
    continuing = [t["continuing"] for t in tasks.values()]
    payload = {
        "model": MODEL,
        "problems": PROBLEMS,
        "seed": SEED,
        "tasks": tasks,
        # the headline is the task with the shortest rollouts, where the ask weighs most
        "distill_cached_share": min(c["cached_share"] for c in continuing),
        "distill_prefix_served_share": min(c["prefix_served_share"] for c in continuing),
        # the short ask (rse:brief, opt-in: it lost its dev cell, dev-brief-three-0.5b)
        "distill_cached_share_brief": min(
            t["continuing-brief"]["cached_share"] for t in tasks.values()
        ),
        "wall_s": time.perf_counter() - t0,
    }
    path = write_result("distill_cache", payload)
    for name, task in tasks.items():
        for form in ("continuing", "fresh"):
            print(name, form, task[form])
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
