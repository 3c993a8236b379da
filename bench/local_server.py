"""Prefill and decode speed of the two local llama.cpp servers on the same model, in one run.

    python -m bench local_server [--model qwen2.5-coder-0.5b] [--repeats 3]

Both must be set up (`rse-fast local setup` and `rse-fast local setup --build`). Each server is
started alone (four slots, all cores), warmed up, then timed by the server's own ``timings``:
prefill on a ~1,000-token prompt with the prompt cache off, decode of 128 tokens with the end of
sequence ignored (also with top-5 logprobs asked: what a confidence rule costs decoding); a
4-stream decode adds what the service sees with parallel slots. Servers
alternate repeat by repeat so a drift in the machine's speed hits both; the median is kept.
Writes results/local_server.json; the README says so when the wheel is slower by > 10%.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from typing import Any

import aiohttp

from bench.common import write_result
from rse_fast.local.server import LocalServer

BACKENDS = ("prebuilt", "build")
PREFILL_TEXT = " ".join(f"Item {i} costs {i % 17} dollars." for i in range(160))
DECODE_TOKENS = 128
#: the wheel is "slower" past this share; the README then says so and how to choose
SLOWER_BY = 0.10


async def completion(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> Any:
    async with session.post(f"{url}/chat/completions", json=body) as r:
        r.raise_for_status()
        return await r.json()


async def measure(backend: str, model: str) -> dict[str, float]:
    prefill_body = {
        "messages": [{"role": "user", "content": PREFILL_TEXT + " Which item is dearest?"}],
        "max_tokens": 1, "cache_prompt": False, "temperature": 0.0,
    }  # fmt: skip
    decode_body = {
        "messages": [{"role": "user", "content": "Write a long story about a lighthouse."}],
        "max_tokens": DECODE_TOKENS, "ignore_eos": True, "temperature": 0.0,
    }  # fmt: skip
    async with (
        LocalServer(model, parallel=4, backend=backend) as srv,
        aiohttp.ClientSession() as session,
    ):
        await completion(session, srv.base_url, {**decode_body, "max_tokens": 8})  # warm-up
        pre = (await completion(session, srv.base_url, prefill_body))["timings"]
        one = (await completion(session, srv.base_url, decode_body))["timings"]
        asks = {**decode_body, "logprobs": True, "top_logprobs": 5}  # what a confidence rule asks
        with_logprobs = (await completion(session, srv.base_url, asks))["timings"]
        many = await asyncio.gather(
            *(completion(session, srv.base_url, {**decode_body, "seed": i}) for i in range(4))
        )
    return {
        "prefill_tok_s": float(pre["prompt_per_second"]),
        "prefill_tokens": float(pre["prompt_n"]),
        "decode_tok_s": float(one["predicted_per_second"]),
        "decode_top5_logprobs_tok_s": float(with_logprobs["predicted_per_second"]),
        "decode_4_streams_tok_s": sum(float(r["timings"]["predicted_per_second"]) for r in many),
    }


async def run(model: str, repeats: int) -> dict[str, Any]:
    samples: dict[str, list[dict[str, float]]] = {b: [] for b in BACKENDS}
    for _ in range(repeats):
        for backend in BACKENDS:
            samples[backend].append(await measure(backend, model))
    medians = {
        b: {k: statistics.median(s[k] for s in runs) for k in runs[0]}
        for b, runs in samples.items()
    }
    ratio = {
        k: medians["prebuilt"][k] / medians["build"][k]
        for k in ("prefill_tok_s", "decode_tok_s", "decode_4_streams_tok_s")
    }
    # what asking for top-5 logprobs costs decoding (a confidence rule asks for them)
    logprobs_cost = {
        b: 1 - medians[b]["decode_top5_logprobs_tok_s"] / medians[b]["decode_tok_s"]
        for b in BACKENDS
    }
    return {
        "model": model,
        "repeats": repeats,
        "median": medians,
        "samples": samples,
        "prebuilt_over_build": ratio,
        "decode_slowdown_with_top5_logprobs": logprobs_cost,
        "prebuilt_slower_by_over_10pct": [k for k, r in ratio.items() if r < 1 - SLOWER_BY],
    }


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench local_server", description=__doc__)
    p.add_argument("--model", default="qwen2.5-coder-0.5b")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    payload = asyncio.run(run(args.model, args.repeats))
    path = write_result("local_server", payload)
    print(json.dumps({k: payload[k] for k in ("median", "prebuilt_over_build")}, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
