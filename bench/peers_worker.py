"""One side of the side-by-side (run by bench/peers.py in that side's own interpreter).

    python peers_worker.py --side ours|its_hub --url URL --method sc|bon --n N \
        --concurrency C --problems FILE [--budgets FILE] --max-tokens M --out FILE

Runs the problems one after another, as a service would, and writes one JSON object: wall
time, this process's CPU time over the timed loop, and per problem the chosen text and tokens.
Imports only its own side's library (the its_hub side runs without rse_fast installed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

BOXED = r"\\boxed\{([^}]+)\}"  # its_hub's documented projection for boxed answers


async def its_hub_side(args: argparse.Namespace, problems: list[dict[str, Any]]) -> list[dict]:
    from its_hub import (
        BestOfN,
        LLMJudge,
        LMOrchestrator,
        OpenAICompatibleLanguageModel,
        SelfConsistency,
    )
    from its_hub.api.types import ChatMessage
    from its_hub.core.algorithms.self_consistency import create_regex_projection_function

    lm = OpenAICompatibleLanguageModel(
        endpoint=args.url,
        api_key="unused",
        model_name=args.model,
        max_completion_tokens=args.max_tokens,
        temperature=0.7,
        max_concurrency=args.concurrency,
    )
    # its calls in flight are bounded by the orchestrator (the LM's own cap is per batch)
    orchestrator = LMOrchestrator(max_concurrency=args.concurrency)
    if args.method == "sc":
        algo: Any = SelfConsistency(
            create_regex_projection_function(BOXED), orchestrator=orchestrator
        )
    else:
        algo = BestOfN(LLMJudge(lm), orchestrator=orchestrator)
    out = []
    for p in problems:
        started = time.perf_counter()
        messages = [ChatMessage(role=m["role"], content=m["content"]) for m in p["messages"]]
        result = await algo.ainfer(lm, messages, budget=args.n, return_response_only=False)
        usage = result.usage
        out.append(
            {
                "text": result.the_one.get("content") or "",
                "tokens": (usage.prompt_tokens + usage.completion_tokens) if usage else None,
                "wall_s": time.perf_counter() - started,
            }
        )
    return out


async def our_side(args: argparse.Namespace, problems: list[dict[str, Any]]) -> list[dict]:
    from rse_fast.llm.client import LLMClient
    from rse_fast.methods import PriorStore, Problem, make_method

    method = make_method(
        args.method, parallel=args.concurrency, max_tokens=args.max_tokens, temperature=0.7
    )
    if args.priors:  # a process that has run against this server before reads what it measured
        method.keep_priors(PriorStore(args.priors))
    out = []
    async with LLMClient(args.url, args.model, max_concurrency=args.concurrency) as client:
        for p in problems:
            started = time.perf_counter()
            problem = Problem(p["id"], p["prompt"], conversation=tuple(p["messages"]))
            res = await method.run(problem, int(p["budget"]), client)
            out.append(
                {
                    "text": res.final.text if res.final else "",
                    "tokens": res.tokens,
                    "wall_s": time.perf_counter() - started,
                }
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--side", choices=("ours", "its_hub"), required=True)
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", default="m")
    ap.add_argument("--method", choices=("sc", "bon"), required=True)
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--concurrency", type=int, required=True)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--problems", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--priors", help="ours: the cost-prior store (a JSON file)")
    args = ap.parse_args()
    problems = json.loads(Path(args.problems).read_text())
    side = its_hub_side if args.side == "its_hub" else our_side
    # imports happen before the clock starts, so each side is timed on its work alone
    if args.side == "its_hub":
        import its_hub
        import its_hub.core.algorithms.self_consistency  # noqa: F401
    else:
        import rse_fast.llm.client
        import rse_fast.methods  # noqa: F401
        from rse_fast.answers import answers_equivalent

        answers_equivalent("1", "1.0")  # loads math-verify (sympy): a one-time import cost
    cpu0, wall0 = time.process_time(), time.perf_counter()
    results = asyncio.run(side(args, problems))
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    Path(args.out).write_text(json.dumps({"wall_s": wall, "cpu_s": cpu, "results": results}))


if __name__ == "__main__":
    main()
