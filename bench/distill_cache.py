"""How much of a distillation's prompt the server's prefix cache serves, on the real
llama-server: a distillation that continues the rollout's conversation against one that
pastes the rollout into a fresh prompt, in the same run, on the same problems.

    python -m bench distill_cache            # -> results/distill_cache.json

RSE at its defaults but with every round-1 rollout distilled (settle rule off, two rounds),
four slots, on the 0.5B model. The share is the servers' own count: the prompt tokens of the
``distill`` calls that ``prompt_tokens_details.cached_tokens`` reports as cached, over their
prompt tokens, and the prefill milliseconds llama.cpp's ``timings`` report.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench.common import write_result
from rse_fast.encoder import Encoder
from rse_fast.eval.datasets import load_dataset
from rse_fast.llm import LLMClient
from rse_fast.local import LocalServer
from rse_fast.rse import RSE, RSEConfig

MODEL = "qwen2.5-coder-0.5b"
TASK = "gym:basic_arithmetic?min_terms=3&max_terms=3&min_digits=1&max_digits=2"
PROBLEMS, SEED = 3, 501


def distill_share(records: list[Any]) -> dict[str, Any]:
    distills = [r for r in records if r.role == "distill" and r.ok]
    prompt = sum(r.prompt_tokens for r in distills)
    cached = sum(r.cached_tokens or 0 for r in distills)
    prefill = [r.prefill_s for r in distills if r.prefill_s is not None]
    return {
        "distill_calls": len(distills),
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "cached_share": cached / prompt if prompt else None,
        "prefill_s": sum(prefill),
        "prefill_s_per_call": sum(prefill) / len(prefill) if prefill else None,
    }


async def measure() -> dict[str, Any]:
    dataset = load_dataset(TASK, PROBLEMS, SEED)
    encoder = Encoder(providers=["CPUExecutionProvider"])
    out: dict[str, Any] = {}
    async with LocalServer(MODEL, parallel=4) as server:
        for continues in (True, False):
            client = LLMClient(server.base_url, server.model_name)
            config = RSEConfig(
                rounds=2, k=4, max_tokens=384, settle_margin=None, distill_continues=continues
            )
            rse = RSE(client, encoder, config)
            records: list[Any] = []
            try:
                for problem in dataset.problems:
                    result = await rse.solve(problem.prompt, gold=problem.gold)
                    records += list(client.ledger.records)
                    client.ledger.records.clear()
                    del result
            finally:
                await client.close()
            out["continuing" if continues else "fresh"] = distill_share(records)
    return out


def main() -> None:
    t0 = time.perf_counter()
    shares = asyncio.run(measure())
    payload = {
        "model": MODEL,
        "task": TASK,
        "problems": PROBLEMS,
        "seed": SEED,
        **shares,
        "distill_cached_share": shares["continuing"]["cached_share"],
        "wall_s": time.perf_counter() - t0,
    }
    path = write_result("distill_cache", payload)
    for form in ("continuing", "fresh"):
        print(form, shares[form])
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
