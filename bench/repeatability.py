"""Does llama-server answer the same request with the same text? The same seeded requests,
sent alone (one at a time) and among others (four at once, the slots busy), twice each.

    python -m bench repeatability           # -> results/repeatability.json

RSE's sample j carries SC's request j (same prompt, seed and settings), yet came back as SC's
text on only about half of the never-guided problems of the ablation's test cells. Sampling is
seeded, so the difference is the server's arithmetic: a slot's logits depend on what else is
in the batch. This measures the share of identical texts for a request sent alone twice, sent
among others twice, and alone against among others, at the cells' temperature and greedy.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from bench.common import machine, write_result
from rse_fast.eval.datasets import load_dataset
from rse_fast.llm import LLMClient
from rse_fast.local import LocalServer

MODEL = "qwen2.5-coder-0.5b"
TASK = "gym:basic_arithmetic?min_terms=3&max_terms=3&min_digits=1&max_digits=2"
SEED, MAX_TOKENS, SLOTS = 601, 256, 4


async def texts(
    client: LLMClient, prompts: list[str], temperature: float, together: bool
) -> list[str]:
    async def one(i: int, prompt: str) -> str:
        res = await client.chat(
            [{"role": "user", "content": prompt}],
            temperature=temperature, seed=1000 + i, max_tokens=MAX_TOKENS,
        )  # fmt: skip
        return res.choices[0].text

    if together:
        out: list[str] = []
        for start in range(0, len(prompts), SLOTS):
            batch = prompts[start : start + SLOTS]
            out += await asyncio.gather(*(one(start + j, p) for j, p in enumerate(batch)))
        return out
    return [await one(i, p) for i, p in enumerate(prompts)]


def same(a: list[str], b: list[str]) -> float:
    return sum(x == y for x, y in zip(a, b, strict=True)) / len(a)


async def measure(problems: int) -> dict[str, Any]:
    prompts = [p.prompt for p in load_dataset(TASK, problems, SEED).problems]
    out: dict[str, Any] = {}
    async with (
        LocalServer(MODEL, parallel=SLOTS) as server,
        LLMClient(server.base_url, server.model_name) as client,
    ):
        for name, temperature in (("sampled", 0.7), ("greedy", 0.0)):
            alone = [await texts(client, prompts, temperature, False) for _ in range(2)]
            among = [await texts(client, prompts, temperature, True) for _ in range(2)]
            out[name] = {
                "temperature": temperature,
                "alone_twice": same(*alone),
                "among_others_twice": same(*among),
                "alone_vs_among_others": same(alone[0], among[0]),
            }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=16)
    args = parser.parse_args()
    t0 = time.perf_counter()
    shares = asyncio.run(measure(args.problems))
    payload = {
        "model": MODEL, "task": TASK, "seed": SEED, "requests": args.problems,
        "max_tokens": MAX_TOKENS, "slots": SLOTS, **shares,
        "wall_s": time.perf_counter() - t0, "machine": machine(),
    }  # fmt: skip
    write_result("repeatability", payload)
    print(payload)
