"""Run one TTS method over a list of problems against one server, appending a JSONL record per
problem (resumable). ``bench.rse_ablation`` runs it from the exported tree of the commit a
cell started on (``python -m bench.rse_worker`` there), written against the API that tree and
the previous release share:

    python -m bench.rse_worker --problems P.json --out OUT.jsonl --url URL --model M \
        --method rse --budget 3000 [--variant neg-only]

``--dataset humaneval`` looks each problem up by id in that dataset (its stated examples and
hidden tests come with it); ``--options JSON`` adds the family's options (``checker``:
``visible`` or ``arithmetic``; ``execution_filter``; ``budget_mode``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from bench.common import read_jsonl
from rse_fast.eval.records import append_record


def _imports() -> tuple[Any, Any, Any, Any]:
    try:  # the current layout
        from rse_fast.encoder import Encoder
        from rse_fast.llm.client import LLMClient
        from rse_fast.methods import Problem, make_method
    except ImportError:  # the flat layout of the previous release
        from rse_fast.client import LLMClient  # type: ignore[no-redef]
        from rse_fast.encoder import Encoder  # type: ignore[no-redef]
        from rse_fast.methods import Problem, make_method  # type: ignore[no-redef]
    return Encoder, LLMClient, Problem, make_method


async def run(args: argparse.Namespace) -> None:
    Encoder, LLMClient, Problem, make_method = _imports()
    problems = json.loads(Path(args.problems).read_text())
    out = Path(args.out)
    done = {r["id"] for r in read_jsonl(out, repair=True)}
    todo = [p for p in problems if p["id"] not in done]
    if not todo:
        return
    options: dict[str, Any] = {"parallel": args.parallel, "max_tokens": args.max_tokens}
    options.update(json.loads(args.options) if args.options else {})
    full: dict[str, Any] = {}
    if args.dataset:
        from rse_fast.eval.datasets import load_dataset

        full = {p.id: p for p in load_dataset(args.dataset).problems}
    if args.method.startswith("rse"):
        options.update(max_rounds=args.max_rounds, encoder=Encoder(), k=args.k)
    name = (
        args.method
        if ":" in args.method
        else (f"rse:{args.variant}" if args.variant else args.method)
    )
    async with LLMClient(args.url, args.model) as client:
        for p in todo:
            method = make_method(name, seed=args.seed, **options)
            t0 = time.perf_counter()
            problem = full.get(p["id"]) or Problem(p["id"], p["prompt"], p["gold"])
            res = await method.run(problem, args.budget, client)
            rec = {
                "id": p["id"],
                "label": args.label,
                "tokens": res.tokens,
                # what it spent in the budget's unit where that is not tokens (price, time)
                "cost": res.meta.get("cost"),
                "wall_s": time.perf_counter() - t0,
                "final_text": res.final.text if res.final else "",
                "final_answer": res.final.answer if res.final else None,
                "pool_texts": [c.text for c in res.pool],
                "accuracy_per_round": res.meta.get("accuracy_per_round"),
                "rounds": res.meta.get("rounds"),
                "bank_sizes": res.meta.get("bank_sizes"),
                "roles": {k: v.total_tokens for k, v in res.ledger.by_role().items()},
                "pool_rounds": res.meta.get("pool_rounds"),
                "bank_prompt_tokens": res.meta.get("bank_prompt_tokens"),
                "settled": res.meta.get("settled"),
                "distilled_rounds": res.meta.get("distilled_rounds"),
                "guided_rounds": res.meta.get("guided_rounds"),
                # what each round added to the bank, so a reader can see what guided the next
                "accepted_per_round": [d["accepted"] for d in res.meta.get("rounds_detail", [])],
                # the checker's verdicts on what was distilled, the filter's and the retries'
                "checks": res.meta.get("checks"),
                "checks_by_kind": res.meta.get("checks_by_kind"),
                "execution_filter": res.meta.get("execution_filter"),
                "retries": res.meta.get("retries"),
                "pool_origins": [c.origin for c in res.pool],
            }
            with open(out, "a") as fh:
                append_record(fh, rec)  # the evaluation's writer: flushed and synced


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--method", required=True)
    parser.add_argument("--variant")
    parser.add_argument("--label", required=True)
    parser.add_argument("--budget", type=int, required=True)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--max-rounds", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=384)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dataset", help="look problems up by id in this dataset")
    parser.add_argument("--options", help="the family's options, as JSON")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
