"""``rse-fast eval``: compare TTS methods at equal token budgets on a dataset; ``eval report
DIR…`` merges results (shards) into one table and plot."""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any

from rse_fast.cli.args import add_server_arguments, cost_model, float_in, int_in
from rse_fast.cli.connect import api_key, connect


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "eval",
        help="compare TTS methods at equal token budgets (`eval report DIR…` merges shards)",
    )
    p.add_argument(
        "action",
        nargs="?",
        choices=("run", "report"),
        default="run",
        help="run (default) the evaluation, or report: merge results (shards) into a table",
    )
    p.add_argument("paths", nargs="*", help="report: results directories or files to merge")
    p.add_argument(
        "--methods",
        default="sc,sc+stop,bon,beam,particle,refine,fusion,rse",
        help="comma-separated families (default: every family, and sc+stop, the vote the "
        "service and the README use by default, beside plain sc) (sc, bon, beam, particle, "
        "refine, fusion, rse, "
        "reflexion, rse:<variant>), each optionally with +stop (stop once the vote is "
        "settled), +conf (vote weighted by token confidence), +conf-online, +filter (sc, bon: "
        "pick among candidates passing a code problem's stated examples), +check (rse: run "
        "each rollout's code on them), +cluster (sc, rse on code: programs vote by their "
        "outputs on inputs near the stated examples'), e.g. "
        "sc,sc+stop+conf,rse+conf,rse+check,bon+filter,sc+filter+cluster",
    )
    p.add_argument(
        "--dataset",
        help="mmath:math500|competition, gym:<task>, humaneval, healthbench, "
        "writingbench, jsonl:<path> (rows with 'answer', 'rubric', or code rows: 'prompt' "
        "stub, 'entry_point', hidden 'test', optional 'visible_tests')",
    )
    p.add_argument(
        "--budgets",
        default="2000,8000,32000",
        help="comma-separated, in --budget-unit (default 2000,8000,32000 tokens)",
    )
    p.add_argument(
        "--budget-unit",
        type=cost_model,
        default="tokens",
        help="what --budgets count: tokens (default), "
        "price:input=0.15,cached=0.075,output=0.6 (dollars at these per-million prices), or "
        "time (the server's seconds; measured on each problem's single samples first)",
    )
    p.add_argument("--limit", type=int_in(1, 1_000_000), default=20, help="problems (seeded)")
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="the problem sample's seed; a gym: task draws problem i from seed + i, so runs "
        "meant to share no problem need seeds further apart than --limit",
    )
    p.add_argument(
        "--shard",
        help="i/N: run only shard i of N (problems split by a hash of their id), writing "
        "results.shard-i-of-N.jsonl; merge with `rse-fast eval report DIR`",
    )
    p.add_argument(
        "--single-samples",
        type=int_in(0, 1000),
        default=4,
        help="independent plain samples per problem for the single-sample baseline μ",
    )
    add_server_arguments(p)
    add_model_arguments(p)
    add_run_arguments(p)


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """The verifier, reward and grader models beside the policy's server."""
    p.add_argument("--judge-url", help="the methods' verifier (default: the policy model)")
    p.add_argument("--judge-model")
    p.add_argument("--reward-url", help="scoring API for best-of-N instead of the LLM judge")
    p.add_argument(
        "--grader-url",
        help="open-ended tasks: the grader of true quality, distinct from the verifier "
        "(default: the verifier, and the report then says self-agreement, not ρ_v)",
    )
    p.add_argument("--grader-model")
    p.add_argument("--grader-api-key")
    p.add_argument(
        "--grader-temperature",
        type=float_in(0.0, 2.0),
        default=0.7,
        help="sampling temperature of the two independent grader readings",
    )
    p.add_argument(
        "--grader-parallel",
        type=int_in(1, 1024),
        default=8,
        help="grader readings in flight; give the grader server's slot count so each reading "
        "keeps its slot and its prompt cache",
    )
    p.add_argument(
        "--grader-reads",
        choices=("criterion", "rubric"),
        default="criterion",
        help="criterion: one grader call per rubric criterion (the benchmarks' way); rubric: "
        "the whole rubric in one call (the prompt is read once; the run then reports its "
        "agreement with criterion-by-criterion readings on one sample a problem)",
    )


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """How the run goes: parallelism, token caps, its report and output."""
    p.add_argument("--parallel", type=int_in(1, 1024), default=4)
    p.add_argument("--max-tokens", type=int_in(1, 1_000_000), default=1024)
    p.add_argument(
        "--out",
        help="directory; reruns resume from it (default eval-results; for `eval report`: the "
        "first directory merged, so the merged table and plot land beside the shards)",
    )
    p.add_argument(
        "--no-sample-pool",
        action="store_true",
        help="sample every method on its own; by default methods whose requests are the same "
        "(sc's and best-of-N's samples, a first round or draft that asks what they ask) share "
        "one stored reply, each charged what the server reported for it (OUT/sample_pool.jsonl)",
    )
    p.add_argument("--title", help="report title")
    p.add_argument(
        "--cost",
        type=cost_model,
        help="the unit methods are paired in at matched actual spend (default: --budget-unit): "
        "tokens, time "
        "(the server's prefill + decode seconds, else latency), or "
        "price:input=0.15,cached=0.075,output=0.6 ($ per million tokens; cached = prompt "
        "tokens the server's prefix cache served)",
    )
    p.add_argument("--quiet", action="store_true")


def check(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Usage errors found after parsing (exit 2)."""
    if args.action == "run" and not args.dataset:
        parser.error("eval needs --dataset (or `rse-fast eval report DIR…` to merge results)")
    if args.action == "run" and args.paths:
        parser.error(f"unexpected arguments {args.paths}: did you mean `eval report`?")
    if args.action == "run":
        try:
            budgets(args)
        except ValueError as exc:
            parser.error(str(exc))
        from rse_fast.methods import make_method

        for name in args.methods.split(","):
            try:  # refused here, before a server starts, naming what is wrong
                make_method(name.strip())
            except ValueError as exc:
                parser.error(f"--methods: {exc}")
        if args.budget_unit.unit == "time" and args.single_samples == 0:
            parser.error(
                "a time budget is turned into tokens at the server's measured speed, which the "
                "single samples measure first: keep --single-samples above 0"
            )
    if args.shard:
        from rse_fast.eval.records import Shard

        try:
            Shard.parse(args.shard)
        except ValueError as exc:
            parser.error(str(exc))


def run(args: argparse.Namespace) -> int:
    import asyncio  # here, not at the top: `rse-fast --help` never loads it

    report = merge_report(args) if args.action == "report" else asyncio.run(evaluate(args))
    print(report["table"])
    print(f"table: {report['table_path']}")
    if report["plot"]:
        print(f"plot: {report['plot']}")
    print(f"page: {report['page']} ({len(report['figures'])} figures beside it)")
    return 0


def merge_report(args: argparse.Namespace) -> dict[str, Any]:
    from pathlib import Path

    from rse_fast.eval.summary import write_report

    places = [Path(p) for p in (args.paths or [args.out or "eval-results"])]
    first = places[0] if places[0].is_dir() else places[0].parent
    out = Path(args.out) if args.out else first
    title = args.title or "evaluation: " + ", ".join(str(p) for p in places)
    return write_report(places, out, title, cost=args.cost or cost_model("tokens"))


async def check_grader_once(grader: Any, out: Any) -> None:
    """The rubric grader's agreement with hand verdicts on bundled criteria, read once per
    results directory (``grader_check.json``; the report shows it beside the table)."""
    import json

    from rse_fast.eval.grader_check import GRADER_CHECK_FILE, grader_agreement
    from rse_fast.util.files import write_atomic

    path = out / GRADER_CHECK_FILE
    if path.exists():
        return
    seen = await grader_agreement(grader, readings=2)
    if grader.reads != "criterion":  # beside it, the benchmarks' way on the same endpoint
        seen["per_criterion"] = await grader_agreement(grader.reading_as("criterion"), readings=2)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(seen, indent=1) + "\n")  # shards may share the folder


def budgets(args: argparse.Namespace) -> list[float]:
    """``--budgets`` as numbers in ``--budget-unit`` (whole tokens; dollars or seconds may
    be fractions); a ``ValueError`` names the first that is not a positive number."""
    out: list[float] = []
    for text in args.budgets.split(","):
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"--budgets: {text.strip()!r} is not a number") from None
        if not value > 0 or value != value or value == float("inf"):
            raise ValueError(f"--budgets: {text.strip()!r} must be a positive number")
        if args.budget_unit.unit == "tokens" and not value.is_integer():
            raise ValueError(f"--budgets: {text.strip()!r} tokens must be a whole number")
        out.append(int(value) if args.budget_unit.unit == "tokens" else value)
    return out


def build_methods(
    names: str, common: dict[str, Any], judge: Any, reward: Any, encoder: Any
) -> list[Any]:
    """The methods of ``--methods``, each lent what its family says it needs: the run's
    judge (or the reward model, where the family takes one) and the encoder."""
    from rse_fast.methods import make_method
    from rse_fast.methods.catalog import METHODS

    methods = []
    for name in (n.strip() for n in names.split(",")):
        family = METHODS.get(name.split("+")[0].partition(":")[0])
        extra: dict[str, Any] = {}
        if family is not None and family.needs_judge:
            use_reward = family.takes_reward_model and reward is not None
            extra["judge"] = reward if use_reward else judge
        if family is not None and family.needs_encoder:
            extra["encoder"] = encoder
        methods.append(make_method(name, **common, **extra))  # an unknown name: its error
    return methods


async def evaluate(args: argparse.Namespace) -> dict[str, Any]:
    from pathlib import Path

    from rse_fast.encoder import Encoder
    from rse_fast.eval.datasets import load_dataset
    from rse_fast.eval.grading import RubricGrader
    from rse_fast.eval.records import Shard
    from rse_fast.eval.runner import EvalPlan, run_eval
    from rse_fast.eval.summary import write_report
    from rse_fast.llm.client import LLMClient
    from rse_fast.llm.sample_pool import SamplePool
    from rse_fast.methods import HTTPRewardModel, LLMJudge

    shard = Shard.parse(args.shard) if args.shard else None
    ds = load_dataset(args.dataset, args.limit, args.seed)
    grid = budgets(args)
    async with contextlib.AsyncExitStack() as stack:
        client = await connect(args, stack, args.parallel)
        model = client.model
        key = api_key(args)
        judge_client = client
        if args.judge_url:
            judge_client = await stack.enter_async_context(
                LLMClient(args.judge_url, args.judge_model or model, api_key=key)
            )
        judge = LLMJudge(client=judge_client if args.judge_url else None)
        grader = None
        if ds.kind == "rubric":
            grader_client = judge_client
            if args.grader_url:
                grader_client = await stack.enter_async_context(
                    LLMClient(
                        args.grader_url,
                        args.grader_model or model,
                        api_key=args.grader_api_key or key,
                    )
                )
            grader = RubricGrader(
                grader_client,
                temperature=args.grader_temperature,
                reads=args.grader_reads,
                parallel=args.grader_parallel,
            )
        encoder = Encoder()
        common = dict(
            parallel=args.parallel,
            max_tokens=args.max_tokens,
            seed=args.seed,
            budget_unit=args.budget_unit,
        )
        reward = None
        if args.reward_url:
            reward = HTTPRewardModel(args.reward_url)
            stack.push_async_callback(reward.close)
        methods = build_methods(args.methods, common, judge, reward, encoder)
        out = Path(args.out or "eval-results")
        plan = EvalPlan(
            methods,
            grid,
            out,
            grader=grader,
            verifier=judge_client.identity,
            single_samples=args.single_samples,
            shard=shard,
        )
        log = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
        if grader is not None:
            await check_grader_once(grader, out)
        pool = None if args.no_sample_pool else SamplePool(out / "sample_pool.jsonl")
        await run_eval(ds, plan, client.with_options(samples=pool), encoder=encoder,
                       progress=log)  # fmt: skip
        if pool is not None and log is not None:
            log(f"sample pool: {pool.hits} of {pool.hits + pool.misses} whole-reply calls "
                "answered from it (model time not paid again)")  # fmt: skip
    part = f", shard {shard.index}/{shard.count}" if shard else ""
    title = args.title or f"{ds.name}, {len(ds.problems)} problems{part}, model {model}"
    return write_report(plan.results_path, out, title, cost=args.cost or args.budget_unit)
