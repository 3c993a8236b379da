"""``rse-fast`` command line: solve a problem with RSE (more subcommands join as they land)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

from rse_fast.rse_types import RSEConfig, RSEResult


def _progress_printer(stream: Any = None):
    """Live one-line progress on a terminal; one line per round otherwise."""
    stream = stream or sys.stderr
    live = stream.isatty()

    def show(p: Any) -> None:
        line = (
            f"round {p.round}/{p.rounds}: rollouts {p.rollouts_done}/{p.k}, "
            f"distilled {p.distills_done}/{p.k}, failed {p.failures} | bank "
            f"+{p.bank_sizes.get('positive', 0)} -{p.bank_sizes.get('negative', 0)} | "
            f"{p.tokens:,} tokens"
        )
        if live:
            stream.write("\r\033[K" + line)
            stream.flush()
        elif p.round_done:
            stream.write(line + "\n")

    return show


def format_summary(result: RSEResult) -> str:
    lines = [f"answer: {result.answer}  ({result.votes}/{result.total_votes} votes)"]
    if result.correct is not None:
        lines[0] += f"  correct: {result.correct}"
    for r in result.rounds:
        acc = f", accuracy {r.accuracy:.0%}" if r.accuracy is not None else ""
        lines.append(
            f"  round {r.round}: K={r.k}, majority {r.answer!r} ({r.votes}){acc}, bank "
            f"+{r.bank_sizes['positive']} -{r.bank_sizes['negative']}, {r.tokens:,} tokens, "
            f"{r.wall_s:.1f}s, unparseable {r.unparseable}, failed {r.failed_rollouts}"
        )
    roles = ", ".join(f"{k} {v['total_tokens']:,}" for k, v in result.ledger["roles"].items())
    lines.append(f"tokens: {result.ledger['total_tokens']:,} ({roles}); time {result.wall_s:.1f}s")
    return "\n".join(lines)


def _config(args: argparse.Namespace) -> RSEConfig:
    ks = [int(x) for x in str(args.k).split(",")]
    tau_pos = args.tau_positive if args.tau_positive is not None else args.tau
    tau_neg = args.tau_negative if args.tau_negative is not None else args.tau
    return RSEConfig(
        rounds=args.rounds,
        k=ks[0] if len(ks) == 1 else ks,
        tau_positive=tau_pos,
        tau_negative=tau_neg,
        temperature=args.temperature,
        max_tokens=args.max_tokens,
        seed=args.seed,
    )


async def _solve(args: argparse.Namespace) -> RSEResult:
    from rse_fast.client import LLMClient
    from rse_fast.encoder import Encoder
    from rse_fast.rse import RSE
    from rse_fast.trace import JsonlTrace

    base_url = args.base_url or os.environ.get("OPENAI_BASE_URL")
    api_key = args.api_key or os.environ.get("OPENAI_API_KEY")
    if not base_url:
        raise SystemExit(
            "no server: pass --base-url URL (or set OPENAI_BASE_URL) for an OpenAI-compatible "
            "server"
        )
    trace = JsonlTrace(args.trace) if args.trace else None
    try:
        async with LLMClient(base_url, args.model, api_key=api_key, trace=trace) as client:
            rse = RSE(
                client,
                Encoder(),
                _config(args),
                checkpoint_dir=args.checkpoint,
                progress=None if args.quiet else _progress_printer(),
            )
            return await rse.solve(args.problem, gold=args.gold, resume=args.resume)
    finally:
        if trace is not None:
            trace.close()


def add_solve_parser(sub: Any) -> None:
    p = sub.add_parser("solve", help="solve one problem with RSE")
    p.add_argument("problem")
    p.add_argument("--base-url", help="OpenAI-compatible server (default $OPENAI_BASE_URL)")
    p.add_argument("--model", default=os.environ.get("OPENAI_MODEL", "default"))
    p.add_argument("--api-key", help="default $OPENAI_API_KEY")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--k", default="8", help="rollouts per round, or a comma list per round")
    p.add_argument("--tau", type=float, default=0.85, help="dedup threshold for both types")
    p.add_argument("--tau-positive", type=float)
    p.add_argument("--tau-negative", type=float)
    p.add_argument("--temperature", type=float, default=0.6)
    p.add_argument("--max-tokens", type=int, default=2048)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gold", help="reference answer, to report per-round accuracy")
    p.add_argument("--trace", help="append every LLM call to this JSONL file")
    p.add_argument("--checkpoint", help="directory for per-round checkpoints")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    p.add_argument("--json", action="store_true", help="print the full result as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress display")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rse-fast", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    add_solve_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "solve":
        if args.resume and not args.checkpoint:
            parser.error("--resume needs --checkpoint DIR")
        try:
            result = asyncio.run(_solve(args))
        except KeyboardInterrupt:
            print("\ninterrupted; rerun with --resume to continue", file=sys.stderr)
            return 130
        if not args.quiet and sys.stderr.isatty():
            sys.stderr.write("\n")
        print(
            json.dumps(result.to_dict(), indent=1, default=str)
            if args.json
            else format_summary(result)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
