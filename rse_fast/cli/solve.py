"""``rse-fast solve``: one problem with RSE, against a server or the embedded llama-server."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from typing import TYPE_CHECKING, Any

from rse_fast.cli.args import (
    add_server_arguments,
    budget_amount,
    float_in,
    int_in,
    k_list,
    margin_or_off,
    price_model,
)
from rse_fast.cli.connect import api_key, configured_base_url, connect
from rse_fast.cli.progress import ProgressDisplay
from rse_fast.cli.solve_output import format_summary, top_experiences
from rse_fast.rse.checking import NAMED_CHECKERS

if TYPE_CHECKING:
    from rse_fast.rse.results import RSEResult

#: Settings for a remote server, and smaller ones sized for the embedded 2-core CPU server.
REMOTE_DEFAULTS = {"rounds": 4, "k": "8", "max_tokens": 2048}
LOCAL_DEFAULTS = {"rounds": 3, "k": "4", "max_tokens": 1024}


def add_parser(sub: Any) -> None:
    p = sub.add_parser("solve", help="solve one problem with RSE")
    p.add_argument("problem", nargs="?", help="the problem text (or use --demo)")
    p.add_argument(
        "--demo",
        nargs="?",
        const="change",
        metavar="ID",
        help="a bundled word problem with its answer (default 'change')",
    )
    add_server_arguments(p)
    p.add_argument("--rounds", type=int_in(1, 1000), help="default 4 (3 on the local server)")
    p.add_argument(
        "--k",
        type=k_list,
        help="rollouts per round, or a comma list per round (default 8; 4 on the local server)",
    )
    tau = float_in(-1.0, 1.0, open_low=True)
    p.add_argument("--tau", type=tau, default=0.85, help="dedup threshold for both types")
    p.add_argument("--tau-positive", type=tau)
    p.add_argument("--tau-negative", type=tau)
    p.add_argument("--temperature", type=float_in(0.0, 2.0), default=0.6)
    p.add_argument(
        "--max-tokens", type=int_in(1, 1_000_000), help="default 2048 (1024 on the local server)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gold", help="reference answer, to report per-round accuracy")
    p.add_argument("--trace", help="append every LLM call (and the result) to this JSONL file")
    p.add_argument(
        "--report",
        metavar="HTML",
        help="write a self-contained report page (default for --demo: rse-fast-demo-report.html)",
    )
    p.add_argument(
        "--budget",
        type=budget_amount,
        metavar="TOKENS|$DOLLARS",
        help="cap the whole run (rollouts and distillation): never spend past it; rounds and "
        "K are then the most it plans (as the library's make_method('rse') in cap mode); "
        "$ amounts are priced by --price",
    )
    p.add_argument(
        "--stop",
        nargs="?",
        const="default",
        type=stop_epsilon,
        metavar="EPSILON",
        help="with --budget: stop after a round once every round's answers are settled "
        "(Beta criterion at 1 - EPSILON; default the library's +stop), the rest unspent",
    )
    p.add_argument(
        "--check",
        choices=(*NAMED_CHECKERS, "none"),
        help="check every distilled statement: 'arithmetic' (the default on a problem with "
        "numbers) re-computes each equation between numbers it makes; a refuted proposition "
        "reaches no prompt (it is refiled as a pitfall stating the right value), and a pitfall "
        "whose arithmetic is right is dropped; 'none' turns checking off",
    )
    p.add_argument("--checkpoint", help="directory for per-round checkpoints")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    p.add_argument(
        "--price",
        type=price_model,
        metavar="input=…,cached=…,output=…",
        help="$ per million tokens: the summary (and --json's 'cost') then says what the run "
        "cost at these prices, the prompt tokens the server's cache served at the cached price",
    )
    p.add_argument("--json", action="store_true", help="print the full result as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    add_bank_arguments(p)
    add_distill_arguments(p)


def add_bank_arguments(p: argparse.ArgumentParser) -> None:
    """The experience bank's options and the ablations."""
    g = p.add_argument_group("experience bank and ablations")
    g.add_argument("--bank-in", metavar="PATH", help="start from a bank saved by --bank-out")
    g.add_argument(
        "--bank-out",
        metavar="PATH",
        help="save the final bank (PATH.json/.npz); the last round is then distilled too",
    )
    g.add_argument("--bank-tokens", type=int, default=1000, help="prompt tokens for the bank")
    g.add_argument(
        "--select-from",
        choices=("all", "guided", "last"),
        default="all",
        help="rounds whose answers the final vote counts",
    )
    g.add_argument("--dedup-policy", choices=("keep-first", "replace-longer"), default="keep-first")
    g.add_argument("--dedup-order", choices=("rollout", "longest", "shortest"), default="rollout")
    g.add_argument("--no-dedup", action="store_true", help="keep every distinct statement")
    g.add_argument("--no-positive", action="store_true", help="recycle pitfalls only")
    g.add_argument("--no-negative", action="store_true", help="recycle propositions only")
    g.add_argument(
        "--settle-margin",
        type=margin_or_off,
        default=1.0,
        help="stop guiding once round 1's vote margin reaches this (1 = unanimous; 'off')",
    )
    g.add_argument(
        "--min-support",
        type=int_in(1, 1000),
        default=2,
        help="rollouts that must find an experience before the prompt shows it (K >= 4)",
    )
    g.add_argument(
        "--guidance",
        choices=("short", "rules"),
        help="the bank block's framing: four rules on its use (the default, chosen on the dev "
        "set) or one line (an ablation)",
    )
    g.add_argument(
        "--distill-final-round",
        action="store_true",
        help="distill the last round too (implied by --bank-out)",
    )


def add_distill_arguments(p: argparse.ArgumentParser) -> None:
    """Where and how rollouts are distilled."""
    d = p.add_argument_group("distillation")
    d.add_argument("--distill-base-url", help="another server for distillation")
    d.add_argument("--distill-model", help="model name for distillation")
    d.add_argument(
        "--distill-max-tokens",
        type=int_in(1, 1_000_000),
        help="completion cap of a distillation (default: follows the rollout's length)",
    )
    d.add_argument("--distill-format", choices=("compact", "structured"), default="compact")
    d.add_argument("--distill-retries", type=int, default=2)
    d.add_argument(
        "--distill-extra",
        metavar="JSON",
        help='extra body fields, e.g. \'{"chat_template_kwargs": {"enable_thinking": false}}\'',
    )


def check(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Usage errors found after parsing (exit 2)."""
    if args.resume and not args.checkpoint:
        parser.error("--resume needs --checkpoint DIR")
    if args.demo:
        demo = demo_problem(args.demo)
        args.problem, args.gold = demo["problem"], args.gold or demo["answer"]
    if not args.problem:
        parser.error("give a problem, or --demo")
    args.check = default_check(args.problem, args.check)
    if args.stop is not None and args.budget is None:
        parser.error("--stop needs --budget: a stop hands back what is left of a budget")
    if args.budget is not None and args.budget[0] == "price" and args.price is None:
        parser.error("a budget in $ needs --price input=…,cached=…,output=… to price calls")


def default_check(problem: str, asked: str | None) -> str | None:
    """The checker a solve runs: the one asked for, none for ``none``, and by default the
    arithmetic checker wherever the problem has numbers (measured no worse on its test cell:
    docs/rse.md)."""
    if asked == "none":
        return None
    if asked is None:
        return "arithmetic" if any(ch.isdigit() for ch in problem) else None
    return asked


def run(args: argparse.Namespace) -> int:
    import asyncio  # here, not at the top: `rse-fast --help` never loads it

    result, bank = asyncio.run(solve(args))
    if args.json:
        data = result.to_dict()
        data["bank_top"] = top_experiences(bank) if bank is not None else None
        if args.price is not None:
            data["cost"] = {"unit": "$", "spent": args.price.of_spend(result.ledger)}
        print(json.dumps(data, indent=1, default=str))
    else:
        print(format_summary(result, bank, args.price))
    page = args.report or ("rse-fast-demo-report.html" if args.demo else None)
    if page:
        from rse_fast.rse.run_page import write_report

        title = f"RSE run: {args.demo} (demo)" if args.demo else "RSE run"
        path = write_report(result.to_dict(), page, title)
        print(f"report page: {path}", file=sys.stderr if args.json else sys.stdout)
    return 0


def demo_problem(problem_id: str) -> dict[str, str]:
    import importlib.resources

    data = json.loads(
        (importlib.resources.files("rse_fast") / "data" / "demo_problems.json").read_text()
    )
    for item in data:
        if item["id"] == problem_id:
            return {"problem": str(item["problem"]), "answer": str(item["answer"])}
    raise SystemExit(f"no demo problem {problem_id!r}; choose one of {[d['id'] for d in data]}")


#: What a budgeted run plans itself (``RSEMethod``), not taken from the command line.
PLANNED = ("rounds", "k", "temperature", "max_tokens", "seed")


def config_fields(args: argparse.Namespace, local: bool) -> dict[str, Any]:
    """The RSEConfig fields the command line sets (its defaults filled in for the server)."""
    for key, value in (LOCAL_DEFAULTS if local else REMOTE_DEFAULTS).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    ks = [int(x) for x in str(args.k).split(",")]
    tau_pos = args.tau_positive if args.tau_positive is not None else args.tau
    tau_neg = args.tau_negative if args.tau_negative is not None else args.tau
    extra: dict[str, Any] = {}
    if args.distill_max_tokens is not None:
        extra["distill_max_tokens"] = args.distill_max_tokens
    if args.guidance is not None:  # else RSEConfig's default
        extra["guidance"] = args.guidance
    return dict(
        rounds=args.rounds,
        k=ks[0] if len(ks) == 1 else ks,
        tau_positive=tau_pos,
        tau_negative=tau_neg,
        temperature=args.temperature,
        max_tokens=args.max_tokens,
        seed=args.seed,
        select_from=args.select_from,
        dedup_policy=args.dedup_policy,
        dedup_order=args.dedup_order,
        dedup=not args.no_dedup,
        use_positive=not args.no_positive,
        use_negative=not args.no_negative,
        bank_token_budget=args.bank_tokens,
        distill_model=args.distill_model,
        distill_retries=args.distill_retries,
        distill_extra=json.loads(args.distill_extra) if args.distill_extra else None,
        distill_final_round=bool(args.bank_out) or args.distill_final_round,
        distill_format=args.distill_format,
        settle_margin=args.settle_margin,
        min_support_shown=args.min_support,
        **extra,
    )


async def solve(args: argparse.Namespace) -> tuple[RSEResult, Any]:
    from rse_fast.encoder import Encoder
    from rse_fast.llm.trace import JsonlTrace
    from rse_fast.rse.config import RSEConfig
    from rse_fast.rse.engine import RSE

    fields = config_fields(args, local=not configured_base_url(args))
    cfg = RSEConfig(**fields)
    async with contextlib.AsyncExitStack() as stack:
        trace = JsonlTrace(args.trace) if args.trace else None
        if trace is not None:
            stack.callback(trace.close)
        client = await connect(args, stack, cfg.k_for_round(1), trace)
        distill_client = None
        if args.distill_base_url:
            from rse_fast.llm.client import LLMClient

            distill_client = await stack.enter_async_context(
                LLMClient(
                    args.distill_base_url, cfg.distill_model or client.model, api_key=api_key(args)
                )
            )
        progress = None if args.quiet else ProgressDisplay()
        if progress is not None:
            stack.callback(progress.close)
        bank = None
        if args.bank_in:
            from rse_fast.rse.bank import ExperienceBank

            bank = ExperienceBank.load(args.bank_in)
        keep_bank = bool(args.bank_out) or args.distill_final_round  # the CLI knows
        if args.budget is not None:
            result, kept = await solve_within(
                args, fields, client, Encoder(), progress, bank, keep_bank, distill_client
            )
        else:
            rse = RSE(
                client,
                Encoder(),
                cfg,
                checkpoint_dir=args.checkpoint,
                progress=progress,
                distill_client=distill_client,
                checker=NAMED_CHECKERS[args.check]() if args.check else None,
            )
            result = await rse.solve(
                args.problem, gold=args.gold, resume=args.resume, bank=bank, keep_bank=keep_bank
            )
            kept = rse.bank
        if args.bank_out and kept is not None:
            kept.save(args.bank_out)
        if trace is not None:
            from rse_fast.rse.run_page import RESULT_RECORD

            trace({"kind": RESULT_RECORD, "result": result.to_dict()})
        return result, kept
    raise AssertionError("unreachable")


def stop_epsilon(text: str) -> float | str:
    """``--stop``'s ε in (0, 1), or "default" (the library's ``+stop``, read at run time)."""
    if text == "default":
        return text
    return float_in(0.0, 1.0, open_low=True)(text)


async def solve_within(
    args: argparse.Namespace,
    fields: dict[str, Any],
    client: Any,
    encoder: Any,
    progress: Any,
    bank: Any = None,
    keep_bank: bool | None = None,
    distill_client: Any = None,
) -> tuple[RSEResult, Any]:
    """RSE under a cap (``--budget``): the same RSE loop as without one, planning how many
    rollouts and rounds fit, distilling only where a guided round still fits after, and never
    spending past the cap; with ``--stop`` it ends once the answers are settled. The result
    is the one ``solve`` prints, its ledger saying what the budget was and what was left, and
    the bank as the run left it."""
    import time

    from rse_fast.methods import Problem
    from rse_fast.methods.defaults import STOP_EPSILON
    from rse_fast.methods.rse_method import RSEMethod
    from rse_fast.rse.results import RSEResult

    unit, amount = args.budget
    epsilon = STOP_EPSILON if args.stop == "default" else args.stop
    ks = fields["k"] if isinstance(fields["k"], list) else [fields["k"]]
    method = RSEMethod(
        encoder=encoder,
        k=fields["k"],  # a list: K per round, as without a budget
        max_rounds=fields["rounds"],
        config={k: v for k, v in fields.items() if k not in PLANNED},
        progress=progress,
        stop_epsilon=epsilon,
        parallel=max(ks),
        max_tokens=fields["max_tokens"],
        temperature=fields["temperature"],
        seed=fields["seed"],
        budget_mode="cap",
        budget_unit=args.price if unit == "price" else "tokens",
        checkpoint_dir=args.checkpoint,
        resume=args.resume,
        checker=args.check,
        bank=bank,
        keep_bank=keep_bank,
        distill_client=distill_client,
    )
    t0 = time.perf_counter()
    problem = Problem("solve", args.problem, args.gold)
    run = await method.run(problem, amount, client)
    answer = run.final.answer if run.final is not None else None
    result = RSEResult(
        problem=args.problem,
        answer=answer,
        votes=int(run.meta.get("votes") or 0),
        total_votes=int(run.meta.get("voters") or 0),
        correct=problem.is_gold(answer),
        rounds=run.rounds,
        bank_sizes=run.meta["bank_sizes"],
        ledger=run.ledger.summary(),
        wall_s=time.perf_counter() - t0,
        distillation_unaffordable=run.meta.get("distillation_unaffordable"),
        checks=run.meta.get("checks", {}) if args.check else None,
    )
    return result, run.bank
