"""``rse-fast`` command line: ``solve`` a problem with RSE; ``local setup|serve`` the embedded
llama.cpp server that ``solve`` uses when no server URL is configured."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rse_fast.rse.config import RSEConfig
    from rse_fast.rse.results import Progress, RSEResult


class ProgressDisplay:
    """Live ``rich`` bars on a terminal (per round: rollouts and distillations done of K,
    tokens and tokens/s, the bank's sizes by name); one plain line per round otherwise."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream or sys.stderr
        self.live = bool(self.stream.isatty())
        self._bars: Any = None
        self._round = 0
        self._tasks: tuple[Any, Any] = (None, None)
        self._since = (time.perf_counter(), 0)

    def _rate(self, p: Progress) -> float:
        t0, tokens0 = self._since
        return (p.tokens - tokens0) / max(1e-6, time.perf_counter() - t0)

    def __call__(self, p: Progress) -> None:
        if p.round != self._round:
            self._round, self._since = p.round, (time.perf_counter(), p.tokens)
            if self.live:
                self._new_round(p)
        info = f"{p.tokens:,} tokens, {self._rate(p):,.0f} tok/s"
        if not self.live:
            if p.round_done:
                self.stream.write(
                    f"round {p.round}/{p.rounds}: rollouts {p.rollouts_done}/{p.k}, distilled "
                    f"{p.distills_done}/{p.k}, failed {p.failures} | bank: "
                    f"{bank_words(p.bank_sizes)} | {info}\n"
                )
            return
        rollouts, distills = self._tasks
        self._bars.update(rollouts, completed=p.rollouts_done + p.failures,
                          info=f"failed {p.failures} · {info}")  # fmt: skip
        self._bars.update(distills, completed=p.distills_done,
                          info=f"bank: {bank_words(p.bank_sizes)}")  # fmt: skip

    def _new_round(self, p: Progress) -> None:
        if self._bars is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as Bars

            self._bars = Bars(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[info]}"), TimeElapsedColumn(),
                console=Console(file=self.stream),
            )  # fmt: skip
            self._bars.start()
        self._tasks = (
            self._bars.add_task(f"round {p.round}/{p.rounds} rollouts", total=p.k, info=""),
            self._bars.add_task(f"round {p.round}/{p.rounds} distilled", total=p.k, info=""),
        )

    def close(self) -> None:
        if self._bars is not None:
            self._bars.stop()
            self._bars = None


# -- argument types: a bad value is a usage error (exit 2) naming the valid range --------------
def int_in(lo: int, hi: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be an integer in [{lo}, {hi}], got {text!r}")
        return value

    return parse


def float_in(lo: float, hi: float, *, open_low: bool = False) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        ok = (lo < value if open_low else lo <= value) and value <= hi
        if not ok:
            low = "(" if open_low else "["
            raise argparse.ArgumentTypeError(f"must be a number in {low}{lo}, {hi}], got {text!r}")
        return value

    return parse


def k_list(text: str) -> str:
    """Rollouts per round: one integer >= 1, or a comma list of them."""
    parts = text.split(",")
    if not all(p.strip().isdigit() and 1 <= int(p) <= 4096 for p in parts):
        raise argparse.ArgumentTypeError(
            f"must be an integer in [1, 4096] or a comma list of them, got {text!r}"
        )
    return text


def demo_problem(problem_id: str) -> dict[str, str]:
    import importlib.resources

    data = json.loads(
        (importlib.resources.files("rse_fast") / "data" / "demo_problems.json").read_text()
    )
    for item in data:
        if item["id"] == problem_id:
            return {"problem": str(item["problem"]), "answer": str(item["answer"])}
    raise SystemExit(f"no demo problem {problem_id!r}; choose one of {[d['id'] for d in data]}")


def bank_words(sizes: dict[str, int]) -> str:
    """``{"negative": 3, "positive": 1}`` → "3 pitfalls, 1 proposition"."""
    neg, pos = sizes.get("negative", 0), sizes.get("positive", 0)
    return f"{neg} pitfall{'' if neg == 1 else 's'}, {pos} proposition{'' if pos == 1 else 's'}"


def top_experiences(bank: Any, per_kind: int = 3) -> dict[str, list[dict[str, Any]]]:
    """The best-ranked experiences of each type (support, then recency) with their support."""
    return {
        kind: [
            {"text": bank.texts(kind)[i], "support": bank.support(kind)[i]}
            for i in bank.ranked(kind)[:per_kind]
        ]
        for kind in ("negative", "positive")
    }


def format_summary(result: RSEResult, bank: Any = None) -> str:
    lines = [f"answer: {result.answer}  ({result.votes}/{result.total_votes} votes)"]
    if result.correct is not None:
        lines[0] += f"  correct: {result.correct}"
    for r in result.rounds:
        acc = f", accuracy {r.accuracy:.0%}" if r.accuracy is not None else ""
        lines.append(
            f"  round {r.round}: K={r.k}, majority {r.answer!r} ({r.votes}){acc}, bank: "
            f"{bank_words(r.bank_sizes)}, {r.tokens:,} tokens, "
            f"{r.wall_s:.1f}s, unparseable {r.unparseable}, failed {r.failed_rollouts}"
        )
    if bank is not None and len(bank):
        lines.append("what the bank learned (best first; support = rollouts that derived it):")
        for kind, name in (("negative", "pitfall"), ("positive", "proposition")):
            for item in top_experiences(bank)[kind]:
                lines.append(f"  {name} [support {item['support']}]: {item['text']}")
    roles = ", ".join(f"{k} {v['total_tokens']:,}" for k, v in result.ledger["roles"].items())
    lines.append(f"tokens: {result.ledger['total_tokens']:,} ({roles}); time {result.wall_s:.1f}s")
    return "\n".join(lines)


#: Settings for a remote server, and smaller ones sized for the embedded 2-core CPU server.
REMOTE_DEFAULTS = {"rounds": 4, "k": "8", "max_tokens": 2048}
LOCAL_DEFAULTS = {"rounds": 3, "k": "4", "max_tokens": 1024}


def _config(args: argparse.Namespace, local: bool) -> RSEConfig:
    from rse_fast.rse.config import RSEConfig

    for key, value in (LOCAL_DEFAULTS if local else REMOTE_DEFAULTS).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
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
        select_from=args.select_from,
        dedup_policy=args.dedup_policy,
        dedup_order=args.dedup_order,
        dedup=not args.no_dedup,
        use_positive=not args.no_positive,
        use_negative=not args.no_negative,
        bank_token_budget=args.bank_tokens,
        distill_model=args.distill_model,
        distill_max_tokens=args.distill_max_tokens,
        distill_retries=args.distill_retries,
        distill_extra=json.loads(args.distill_extra) if args.distill_extra else None,
    )


async def _connect(
    args: argparse.Namespace, stack: contextlib.AsyncExitStack, parallel: int, trace: Any = None
) -> Any:
    """A client for --base-url (or $OPENAI_BASE_URL), or for the embedded llama-server started
    here (and stopped with ``stack``) when no server is configured."""
    from rse_fast.llm.client import LLMClient

    base_url = args.base_url or os.environ.get("OPENAI_BASE_URL")
    model = args.model or os.environ.get("OPENAI_MODEL") or "default"
    if not base_url:
        from rse_fast.local.server import LocalServer

        server = LocalServer(
            args.local_model, gguf=args.gguf, llama_server=args.llama_server, parallel=parallel
        )
        if not args.quiet:
            print(f"starting local llama-server ({server.model_name})...", file=sys.stderr)
        await stack.enter_async_context(server)
        base_url, model = server.base_url, server.model_name
    api_key = args.api_key or os.environ.get("OPENAI_API_KEY")
    return await stack.enter_async_context(LLMClient(base_url, model, api_key=api_key, trace=trace))


async def _solve(args: argparse.Namespace) -> tuple[RSEResult, Any]:
    from rse_fast.encoder import Encoder
    from rse_fast.llm.trace import JsonlTrace
    from rse_fast.rse.engine import RSE

    cfg = _config(args, local=not (args.base_url or os.environ.get("OPENAI_BASE_URL")))
    async with contextlib.AsyncExitStack() as stack:
        trace = JsonlTrace(args.trace) if args.trace else None
        if trace is not None:
            stack.callback(trace.close)
        client = await _connect(args, stack, cfg.k_for_round(1), trace)
        distill_client = None
        if args.distill_base_url:
            from rse_fast.llm.client import LLMClient

            distill_client = await stack.enter_async_context(
                LLMClient(
                    args.distill_base_url,
                    cfg.distill_model or client.model,
                    api_key=args.api_key or os.environ.get("OPENAI_API_KEY"),
                )
            )
        progress = None if args.quiet else ProgressDisplay()
        if progress is not None:
            stack.callback(progress.close)
        encoder = Encoder()
        rse = RSE(
            client,
            encoder,
            cfg,
            checkpoint_dir=args.checkpoint,
            progress=progress,
            distill_client=distill_client,
        )
        bank = None
        if args.bank_in:
            from rse_fast.rse.bank import ExperienceBank

            bank = ExperienceBank.load(args.bank_in)
        result = await rse.solve(args.problem, gold=args.gold, resume=args.resume, bank=bank)
        if args.bank_out and rse.bank is not None:
            rse.bank.save(args.bank_out)
        if trace is not None:
            from rse_fast.rse.report import RESULT_RECORD

            trace({"kind": RESULT_RECORD, "result": result.to_dict()})
        return result, rse.bank
    raise AssertionError("unreachable")


def add_solve_parser(sub: Any) -> None:
    p = sub.add_parser("solve", help="solve one problem with RSE")
    p.add_argument("problem", nargs="?", help="the problem text (or use --demo)")
    p.add_argument(
        "--demo",
        nargs="?",
        const="change",
        metavar="ID",
        help="a bundled word problem with its answer (default 'change')",
    )
    p.add_argument(
        "--base-url",
        help="OpenAI-compatible server (default $OPENAI_BASE_URL; "
        "without either, the embedded local llama-server is started)",
    )
    p.add_argument("--model", help="model name on the server (default $OPENAI_MODEL)")
    p.add_argument("--api-key", help="default $OPENAI_API_KEY")
    add_local_arguments(p)
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
    p.add_argument("--checkpoint", help="directory for per-round checkpoints")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    p.add_argument("--json", action="store_true", help="print the full result as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    g = p.add_argument_group("experience bank and ablations")
    g.add_argument("--bank-in", metavar="PATH", help="start from a bank saved by --bank-out")
    g.add_argument("--bank-out", metavar="PATH", help="save the final bank (PATH.json/.npz)")
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
    d = p.add_argument_group("distillation")
    d.add_argument("--distill-base-url", help="another server for distillation")
    d.add_argument("--distill-model", help="model name for distillation")
    d.add_argument("--distill-max-tokens", type=int, default=4096)
    d.add_argument("--distill-retries", type=int, default=2)
    d.add_argument(
        "--distill-extra",
        metavar="JSON",
        help='extra body fields, e.g. \'{"chat_template_kwargs": {"enable_thinking": false}}\'',
    )


def add_local_arguments(p: Any) -> None:
    p.add_argument(
        "--local-model",
        help="catalogue model for the embedded server "
        "(smollm2-135m | qwen2.5-coder-0.5b | qwen2.5-coder-1.5b)",
    )
    p.add_argument("--gguf", help="your own GGUF file instead of a catalogue model")
    p.add_argument("--llama-server", help="your own llama-server binary")


def add_local_parser(sub: Any) -> None:
    p = sub.add_parser("local", help="the embedded llama.cpp server")
    lsub = p.add_subparsers(dest="local_command", required=True)
    setup = lsub.add_parser("setup", help="build llama-server and fetch a model (idempotent)")
    add_local_arguments(setup)
    setup.add_argument("--model", dest="local_model", help="same as --local-model")
    serve = lsub.add_parser("serve", help="run the local server until Ctrl-C")
    add_local_arguments(serve)
    serve.add_argument("--model", dest="local_model", help="same as --local-model")
    serve.add_argument("--port", type=int)
    serve.add_argument("--parallel", type=int, default=4)


def _announce_local(server: Any) -> None:
    print(
        f"llama-server ({server.model_name}) at {server.base_url}; Ctrl-C stops it",
        file=sys.stderr,
        flush=True,
    )


def _local(args: argparse.Namespace) -> int:
    import time

    from rse_fast.local.build import build_server
    from rse_fast.local.models import fetch_model
    from rse_fast.local.server import LocalServer, serve_forever, setup
    from rse_fast.registry import default_llm

    if args.local_command == "setup":
        t0 = time.perf_counter()
        if args.llama_server and args.gguf:
            print("nothing to set up: both --llama-server and --gguf were given")
        elif args.llama_server:
            print(f"model ready: {fetch_model(args.local_model or default_llm(), log=print)}")
        elif args.gguf:
            print(f"llama-server ready: {build_server(log=print)}")
        else:
            setup(args.local_model, log=print)
        print(f"setup done in {time.perf_counter() - t0:.0f}s")
        return 0
    server = LocalServer(
        args.local_model,
        gguf=args.gguf,
        llama_server=args.llama_server,
        parallel=args.parallel,
        port=args.port,
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve_forever(server, on_ready=_announce_local))
    return 0


def add_eval_parser(sub: Any) -> None:
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
    p.add_argument("--methods", default="sc,bon,beam,particle,refine,fusion,rse")
    p.add_argument(
        "--dataset",
        help="mmath:math500|competition, gym:<task>, humaneval, healthbench, "
        "writingbench, jsonl:<path>",
    )
    p.add_argument("--budgets", default="2000,8000,32000")
    p.add_argument("--limit", type=int_in(1, 1_000_000), default=20, help="problems (seeded)")
    p.add_argument("--seed", type=int, default=0)
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
    p.add_argument("--base-url")
    p.add_argument("--model")
    p.add_argument("--api-key")
    add_local_arguments(p)
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
    p.add_argument("--parallel", type=int_in(1, 1024), default=4)
    p.add_argument("--max-tokens", type=int_in(1, 1_000_000), default=1024)
    p.add_argument("--out", default="eval-results", help="directory; reruns resume from it")
    p.add_argument("--title", help="report title")
    p.add_argument("--quiet", action="store_true")


def _eval_report(args: argparse.Namespace) -> dict[str, Any]:
    from pathlib import Path

    from rse_fast.eval.report import write_report

    places = [Path(p) for p in (args.paths or [args.out])]
    out = Path(args.out) if args.paths else places[0]
    title = args.title or "evaluation: " + ", ".join(str(p) for p in places)
    return write_report(places, out, title)


async def _eval(args: argparse.Namespace) -> dict[str, Any]:
    from pathlib import Path

    from rse_fast.encoder import Encoder
    from rse_fast.eval.datasets import load_dataset
    from rse_fast.eval.grading import RubricGrader
    from rse_fast.eval.records import Shard
    from rse_fast.eval.report import write_report
    from rse_fast.eval.runner import EvalPlan, run_eval
    from rse_fast.llm.client import LLMClient
    from rse_fast.methods import HTTPRewardModel, LLMJudge, make_method

    shard = Shard.parse(args.shard) if args.shard else None
    ds = load_dataset(args.dataset, args.limit, args.seed)
    budgets = [int(b) for b in args.budgets.split(",")]
    async with contextlib.AsyncExitStack() as stack:
        client = await _connect(args, stack, args.parallel)
        model = client.model
        api_key = args.api_key or os.environ.get("OPENAI_API_KEY")
        judge_client = client
        if args.judge_url:
            judge_client = await stack.enter_async_context(
                LLMClient(args.judge_url, args.judge_model or model, api_key=api_key)
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
                        api_key=args.grader_api_key or api_key,
                    )
                )
            grader = RubricGrader(grader_client, temperature=args.grader_temperature)
        encoder = Encoder()
        common = dict(parallel=args.parallel, max_tokens=args.max_tokens, seed=args.seed)
        methods = []
        for name in args.methods.split(","):
            extra: dict[str, Any] = {}
            if name in ("bon", "beam", "particle", "refine"):
                extra["judge"] = (
                    HTTPRewardModel(args.reward_url) if name == "bon" and args.reward_url else judge
                )
            if name.startswith("rse"):
                extra["encoder"] = encoder
            methods.append(make_method(name.strip(), **common, **extra))
        out = Path(args.out)
        plan = EvalPlan(
            methods,
            budgets,
            out,
            grader=grader,
            verifier=judge_client.identity,
            single_samples=args.single_samples,
            shard=shard,
        )
        log = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
        await run_eval(ds, plan, client, encoder=encoder, progress=log)
    part = f", shard {shard.index}/{shard.count}" if shard else ""
    title = args.title or f"{ds.name}, {len(ds.problems)} problems{part}, model {model}"
    return write_report(plan.results_path, out, title)


def add_report_parser(sub: Any) -> None:
    p = sub.add_parser("report", help="write the report page of a run from its --trace file")
    p.add_argument("trace", help="JSONL written by `rse-fast solve --trace`")
    p.add_argument("--out", default="rse-fast-report.html", help="the HTML file to write")


def _report(args: argparse.Namespace) -> int:
    from rse_fast.rse.report import result_from_trace, write_report

    with open(args.trace, encoding="utf-8") as fh:
        result = result_from_trace(fh, args.trace)
    print(f"report page: {write_report(result, args.out)}")
    return 0


def add_serve_parser(sub: Any) -> None:
    p = sub.add_parser("serve", help="OpenAI-compatible service in front of upstream servers")
    p.add_argument(
        "--upstream",
        action="append",
        required=True,
        metavar="URL",
        help="upstream OpenAI-compatible server (repeat for several)",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-keys-file", help="accepted keys, one per line (also $RSE_FAST_API_KEYS)")
    p.add_argument("--upstream-api-key", default=os.environ.get("OPENAI_API_KEY"))
    p.add_argument("--max-body-bytes", type=int, default=1 << 20)
    p.add_argument("--per-key-concurrency", type=int, default=16)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes serving the port (SO_REUSEPORT; needs a fixed --port)",
    )
    caps = p.add_argument_group("caps on every method request")
    caps.add_argument("--max-rounds", type=int, default=16)
    caps.add_argument("--max-k", type=int, default=64)
    caps.add_argument("--max-tokens", type=int, default=32_768, help="per generation call")
    caps.add_argument(
        "--max-budget-tokens",
        type=int,
        default=1_000_000,
        help="per request; also the budget of requests that name none",
    )


def _serve(args: argparse.Namespace) -> int:
    from rse_fast.serve.app import ServeConfig, serve_workers
    from rse_fast.serve.requests import Caps

    config = ServeConfig(
        upstreams=args.upstream,
        api_keys=ServeConfig.keys_from(path=args.api_keys_file),
        max_body_bytes=args.max_body_bytes,
        per_key_concurrency=args.per_key_concurrency,
        request_timeout_s=args.timeout,
        upstream_api_key=args.upstream_api_key,
        caps=Caps(args.max_rounds, args.max_k, args.max_tokens, args.max_budget_tokens),
    )

    def ready(url: str, workers: int) -> None:
        plural = f" ({workers} workers)" if workers > 1 else ""
        print(f"rse-fast service on {url} -> {', '.join(config.upstreams)}{plural}", flush=True)

    serve_workers(config, args.host, args.port, args.workers, ready)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0 done, 1 a runtime failure (one or two lines on stderr saying what to do),
    2 a usage error, 130 interrupted. ``--debug`` shows tracebacks instead."""
    parser = argparse.ArgumentParser(prog="rse-fast", description=__doc__)
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    parser.add_argument(
        "--log-level",
        default="WARNING",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="what the library logs to stderr (default WARNING)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    add_solve_parser(sub)
    add_local_parser(sub)
    add_eval_parser(sub)
    add_serve_parser(sub)
    add_report_parser(sub)
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(levelname)s %(name)s: %(message)s")
    if args.command == "solve":
        if args.resume and not args.checkpoint:
            parser.error("--resume needs --checkpoint DIR")
        if args.demo:
            demo = demo_problem(args.demo)
            args.problem, args.gold = demo["problem"], args.gold or demo["answer"]
        if not args.problem:
            parser.error("give a problem, or --demo")
    if args.command == "eval":
        if args.action == "run" and not args.dataset:
            parser.error("eval needs --dataset (or `rse-fast eval report DIR…` to merge results)")
        if args.action == "run" and args.paths:
            parser.error(f"unexpected arguments {args.paths}: did you mean `eval report`?")
        if args.shard:
            from rse_fast.eval.records import Shard

            try:
                Shard.parse(args.shard)
            except ValueError as exc:
                parser.error(str(exc))
    try:
        return _run(args)
    except KeyboardInterrupt:
        hint = "; rerun with --resume to continue" if getattr(args, "checkpoint", None) else ""
        print(f"\ninterrupted{hint}", file=sys.stderr)
        return 130
    except Exception as exc:
        if args.debug:
            raise
        from rse_fast.cli_errors import describe

        print(f"rse-fast {args.command}: {describe(exc)}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    if args.command == "serve":
        return _serve(args)
    if args.command == "report":
        return _report(args)
    if args.command == "local":
        return _local(args)
    if args.command == "eval":
        report = _eval_report(args) if args.action == "report" else asyncio.run(_eval(args))
        print(report["table"])
        if report["plot"]:
            print(f"plot: {report['plot']}")
        return 0
    result, bank = asyncio.run(_solve(args))
    if args.json:
        data = result.to_dict()
        data["bank_top"] = top_experiences(bank) if bank is not None else None
        print(json.dumps(data, indent=1, default=str))
    else:
        print(format_summary(result, bank))
    page = args.report or ("rse-fast-demo-report.html" if args.demo else None)
    if page:
        from rse_fast.rse.report import write_report

        title = f"RSE run: {args.demo} (demo)" if args.demo else "RSE run"
        path = write_report(result.to_dict(), page, title)
        print(f"report page: {path}", file=sys.stderr if args.json else sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
