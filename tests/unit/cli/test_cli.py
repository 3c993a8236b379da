"""The ``rse-fast solve`` command against the scripted server."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from conftest import threaded_server

from rse_fast import cli
from rse_fast.prompts import PROPOSITIONS_HEADER

from fakes.scripted_model import GOLD, PROBLEM, is_distill, reply


def test_solve_prints_summary_json_and_trace(capsys, tmp_path, monkeypatch):
    trace = tmp_path / "trace.jsonl"
    with threaded_server(default_reply=reply) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        code = cli.main(
            [
                "solve",
                PROBLEM,
                "--rounds",
                "3",
                "--k",
                "3",
                "--gold",
                GOLD,
                "--trace",
                str(trace),
                "--settle-margin",
                "off",
            ]  # the fake's round 1 is unanimous (and wrong)
        )
        out = capsys.readouterr()
        assert code == 0
        assert "answer: 42" in out.out and "round 2: K=3" in out.out
        assert "round 1/3" in out.err  # progress, one line per round when not a terminal
        records = [json.loads(line) for line in trace.read_text().splitlines()]
        calls, last = records[:-1], records[-1]
        # 9 rollouts, 6 distillations: the last round is not distilled (no --bank-out)
        assert len(calls) == 15 and all("request" in c and "texts" in c for c in calls)
        assert last["kind"] == "rse_result" and last["result"]["answer"] == "42"

        code = cli.main(
            [
                "solve",
                PROBLEM,
                "--base-url",
                srv.base_url,
                "--rounds",
                "1",
                "--k",
                "2",
                "--json",
                "--quiet",
                "--distill-final-round",  # one round: its bank is wanted here
            ]
        )
        data = json.loads(capsys.readouterr().out)
        assert data["rounds"][0]["k"] == 2 and data["ledger"]["roles"]["distill"]["calls"] == 2
        assert data["bank_top"]["negative"][0]["support"] == 2
        # the documented, stable schema (README: "rse-fast solve --json")
        assert set(data) == {
            "problem", "answer", "votes", "total_votes", "correct", "accuracy_per_round",
            "bank_sizes", "bank_top", "ledger", "wall_s", "resumed_from_round", "rounds",
            "distillation_unaffordable", "checks",
        }  # fmt: skip
        assert {"round", "k", "experience_block", "answer", "votes", "accuracy", "tokens",
                "bank_sizes", "rollouts", "decisions"} <= set(data["rounds"][0])  # fmt: skip
        assert {"index", "text", "reasoning", "answer", "correct", "finish_reason", "truncated",
                "confidence", "error", "distill", "distill_tries", "echoes", "embedded_early",
                "positive", "negative"} == set(
            data["rounds"][0]["rollouts"][0]
        )  # fmt: skip


def test_resume_needs_a_checkpoint_dir(capsys):
    with pytest.raises(SystemExit):
        cli.main(["solve", "x", "--base-url", "http://127.0.0.1:1", "--resume"])
    assert "--checkpoint" in capsys.readouterr().err


def test_bad_config_is_a_usage_error_naming_the_range(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["solve", "x", "--base-url", "http://127.0.0.1:1", "--rounds", "0"])
    assert info.value.code == 2
    assert "--rounds: must be an integer in [1, 1000], got '0'" in capsys.readouterr().err


def test_bank_carried_across_problems_with_bank_out_and_bank_in(capsys, tmp_path):
    from rse_fast.prompts import GUIDED_RULES, ORIGIN_RELATED
    from rse_fast.rse.bank import ExperienceBank

    from fakes.scripted_model import PITFALL, is_solve, prompt_of

    bank = tmp_path / "bank"
    with threaded_server(default_reply=reply) as srv:
        base = ["--base-url", srv.base_url, "--rounds", "1", "--k", "2", "--quiet"]
        assert cli.main(["solve", PROBLEM, *base, "--bank-out", str(bank), "--no-positive"]) == 0
        saved = ExperienceBank.load(bank)
        assert saved.sizes() == {"negative": 1, "positive": 0}
        assert saved.texts("negative") == [PITFALL]
        n_before = len(srv.requests)
        other = "What is 38 + 27? Mind the carry."
        assert cli.main(["solve", other, *base, "--bank-in", str(bank)]) == 0
        first_prompts = [prompt_of(b) for b in srv.requests[n_before:] if is_solve(b)]
    capsys.readouterr()
    related = GUIDED_RULES.format(origin=ORIGIN_RELATED)  # the default framing, another problem
    assert first_prompts and all(related in p and PITFALL in p for p in first_prompts)


def test_a_budgeted_solve_takes_every_option_the_unbudgeted_one_does(capsys, tmp_path):
    """``--budget`` runs the same RSE loop as a solve without one, so it carries a bank in
    and out, distills on another endpoint, and takes K per round; the run stays under its
    cap, the distillations go to the other server, and the saved bank holds what was learnt
    (the last round is distilled, as ``--bank-out`` wants)."""
    from rse_fast.rse.bank import ExperienceBank

    from fakes.scripted_model import PITFALL, is_distill, is_solve, prompt_of

    bank_in, bank_out = tmp_path / "in", tmp_path / "out"
    with threaded_server(default_reply=reply) as srv, threaded_server(default_reply=reply) as dis:
        base = ["--base-url", srv.base_url, "--quiet"]
        assert cli.main(["solve", PROBLEM, *base, "--rounds", "1", "--k", "2",
                         "--bank-out", str(bank_in), "--no-positive"]) == 0  # fmt: skip
        capsys.readouterr()
        n_before = len(srv.requests)
        args = ["solve", "What is 38 + 27? Mind the carry.", *base, "--budget", "6000",
                "--rounds", "2", "--k", "1,2", "--settle-margin", "off",
                "--bank-in", str(bank_in), "--bank-out", str(bank_out),
                "--distill-base-url", dis.base_url, "--json"]  # fmt: skip
        assert cli.main(args) == 0
        data = json.loads(capsys.readouterr().out)
        ours = srv.requests[n_before:]
        first = [prompt_of(b) for b in ours if is_solve(b)][:1]
        spent = sum(u["total_tokens"] for u in srv.usages[n_before:] + dis.usages)
    assert [r["k"] for r in data["rounds"]] == [1, 2]
    assert first and PITFALL in first[0]  # the bank carried in guides round 1
    assert not any(is_distill(b) for b in ours) and any(is_distill(b) for b in dis.requests)
    assert spent <= 6000 and data["ledger"]["budget"]["spent"] == spent
    saved = ExperienceBank.load(bank_out)
    assert PITFALL in saved.texts("negative") and sum(saved.sizes().values()) >= 1


def test_terminal_gets_live_progress_bars_with_rates_and_bank_names():
    import os
    import pty
    import subprocess
    import sys

    with threaded_server(default_reply=reply) as srv:
        leader, follower = pty.openpty()
        env = {k: v for k, v in os.environ.items() if k != "OPENAI_BASE_URL"}
        proc = subprocess.Popen(
            [sys.executable, "-m", "rse_fast.cli", "solve", PROBLEM, "--base-url", srv.base_url,
             "--rounds", "2", "--k", "2", "--settle-margin", "off"],  # the fake is unanimous
            stdin=follower, stdout=subprocess.PIPE, stderr=follower, env={**env, "COLUMNS": "160"},
        )  # fmt: skip
        os.close(follower)
        screen = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            screen += chunk
        out = proc.communicate(timeout=60)[0].decode()
        os.close(leader)
    text = screen.decode(errors="replace")
    assert proc.returncode == 0 and out.startswith("answer: ")
    for words in ("round 1/2 rollouts", "round 2/2 distilled", "tok/s", "bank: 1 pitfall"):
        assert words in text, words


def _round(r: int, block: str) -> Any:
    from rse_fast.rse.results import RoundResult

    return RoundResult(
        round=r, k=2, experience_block=block, rollouts=[], decisions=[],
        bank_sizes={"negative": 1, "positive": 0}, answer="7", votes=2, accuracy=None,
        unparseable=0, failed_rollouts=0, failed_distills=0, tokens=300, wall_s=1.0,
        tail_ms=0.0, tail_encoder_ms=0.0,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("blocks", "distill", "says_unguided"),
    [
        (["", ""], 250, True),  # distillation paid for, nothing shown: plain sampling
        (["", "Pitfalls:\n- x"], 250, False),  # round 2 saw the bank
        (["", ""], 0, False),  # nothing distilled: nothing to explain
        ([""], 250, False),  # one round (a bank wanted for --bank-out): no prompt could see it
    ],
)
def test_summary_says_when_no_prompt_saw_the_bank(blocks, distill, says_unguided):
    from rse_fast.cli.solve_output import format_summary
    from rse_fast.rse.results import RSEResult

    roles = {"explore": {"total_tokens": 600}, "distill": {"total_tokens": distill}}
    result = RSEResult(
        problem="p", answer="7", votes=4, total_votes=4, correct=None,
        rounds=[_round(i + 1, b) for i, b in enumerate(blocks)], bank_sizes={},
        ledger={"total_tokens": 600 + distill, "roles": roles}, wall_s=2.0,
    )  # fmt: skip
    text = format_summary(result)
    assert ("no bank item reached a prompt" in text) is says_unguided
    if says_unguided:
        assert "distillation cost 250 tokens" in text
    guided = [f"round {i + 1}: K=2, guided by the bank" in text for i in range(len(blocks))]
    assert guided == [bool(b) for b in blocks]


def test_solve_says_what_the_run_cost_as_it_is_paid(capsys, tmp_path):
    """The summary, the report page and --json read the cache and timings the server
    reported, and price them: cached prompt tokens at the cached price, the rest at the input
    and output prices."""
    price = "input=2,cached=0.5,output=8"
    page = tmp_path / "run.html"
    with threaded_server(default_reply=reply, prefix_cache="llama.cpp") as srv:
        base = ["solve", PROBLEM, "--base-url", srv.base_url, "--rounds", "2", "--k", "2"]
        assert cli.main([*base, "--quiet", "--price", price, "--report", str(page)]) == 0
        text = capsys.readouterr().out
        sent = list(srv.usages)
        assert cli.main([*base, "--quiet", "--json", "--price", price]) == 0
        data = json.loads(capsys.readouterr().out)
        sent_json = srv.usages[len(sent) :]
    prompt = sum(u["prompt_tokens"] for u in sent)
    cached = sum(u["prompt_tokens_details"]["cached_tokens"] for u in sent)
    completion = sum(u["completion_tokens"] for u in sent)
    assert 0 < cached < prompt
    assert f"served from the server's cache: {cached:,} of {prompt:,}" in text
    row = f"<td>prompt tokens served from the server&#x27;s cache</td><td>{cached:,} of {prompt:,}"
    assert row in page.read_text()
    dollars = ((prompt - cached) * 2 + cached * 0.5 + completion * 8) / 1e6
    assert f"cost at the given prices: ${dollars:.4g}" in text
    decode = completion * 0.049  # the fixture's decode rate, as its timings report it
    assert f"decode {decode:.1f} s, summed over {len(sent)} of {len(sent)} calls" in text
    ledger = data["ledger"]
    assert ledger["cached_prompt_tokens"] == sum(
        u["prompt_tokens_details"]["cached_tokens"] for u in sent_json
    )
    assert ledger["server_time_s"]["calls"] == len(sent_json) and ledger["reasoning_tokens"] is None
    assert data["cost"]["unit"] == "$" and data["cost"]["spent"] == pytest.approx(
        (
            (ledger["prompt_tokens"] - ledger["cached_prompt_tokens"]) * 2
            + ledger["cached_prompt_tokens"] * 0.5
            + ledger["completion_tokens"] * 8
        )
        / 1e6
    )


def test_solve_without_cache_reports_says_nothing_of_a_cache(capsys):
    with threaded_server(default_reply=reply) as srv:
        args = ["solve", PROBLEM, "--base-url", srv.base_url, "--rounds", "1", "--k", "2"]
        assert cli.main([*args, "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "cache" not in text and "server time" not in text and "cost at" not in text


def test_solve_refuses_a_price_without_its_output_price(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["solve", "x", "--base-url", "http://127.0.0.1:1", "--price", "input=1"])
    assert exc.value.code == 2 and "output= missing" in capsys.readouterr().err


def test_solve_within_a_budget_never_spends_past_it_and_says_what_was_left(capsys):
    """``--budget`` runs the library's budgeted RSE in cap mode: the server's own usage stays
    under the cap, the summary and --json say what was spent and left; ``--stop`` ends once
    the answers are settled (the fake's rounds agree) and leaves more of it."""
    with threaded_server(default_reply=reply) as srv:
        base = ["solve", PROBLEM, "--base-url", srv.base_url, "--k", "3", "--gold", GOLD]
        assert cli.main([*base, "--budget", "3000", "--quiet"]) == 0
        text = capsys.readouterr().out
        spent = sum(u["total_tokens"] for u in srv.usages)
        before = len(srv.usages)
        assert cli.main([*base, "--budget", "3,000", "--stop", "--quiet", "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        stopped = sum(u["total_tokens"] for u in srv.usages[before:])
    assert 0 < stopped < spent <= 3000
    assert f"budget: spent {spent:,} of 3,000 tokens; {3000 - spent:,} left unspent" in text
    assert "correct: False" in text and "round 1: K=3" in text  # the fake's majority is 32
    budget = data["ledger"]["budget"]
    assert budget == {"amount": 3000, "unit": "tokens", "spent": stopped,
                      "unspent": 3000 - stopped}  # fmt: skip
    assert data["ledger"]["total_tokens"] == stopped and len(data["rounds"]) >= 1


def claims_reply(body: dict, index: int) -> str:
    """The scripted model, its distiller claiming one wrong and one right equation."""
    if is_distill(body):
        return json.dumps({"positive": ["Adding the units gives 27 + 15 = 32.",
                                        "The units give 7 + 5 = 12."], "negative": []})  # fmt: skip
    return reply(body, index)


@pytest.mark.parametrize("budgeted", [False, True])
def test_solve_check_arithmetic_recomputes_claims_and_says_what_it_found(capsys, budgeted):
    """``--check arithmetic`` re-computes every equation a distilled statement makes, with or
    without a budget: the summary and ``--json`` say what the checker found, and the wrong
    claim never reaches a prompt as a proposition."""
    with threaded_server(default_reply=claims_reply) as srv:
        args = ["solve", PROBLEM, "--base-url", srv.base_url, "--k", "2", "--rounds", "2",
                "--quiet", "--settle-margin", "off", "--check", "arithmetic"]  # fmt: skip
        if budgeted:
            args += ["--budget", "20000", "--max-tokens", "256"]
        assert cli.main(args) == 0
        summary = capsys.readouterr().out
        assert cli.main([*args, "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        prompts = [json.dumps(b["messages"]) for b in srv.requests if not is_distill(b)]
    assert data["checks"] == {"refuted": 2, "verified": 2}  # a claim of each kind per rollout
    line = next(x for x in summary.splitlines() if x.startswith("checked statements: "))
    assert line.startswith("checked statements: 2 refuted, 2 verified (a refuted proposition")
    guided = [p for p in prompts if PROPOSITIONS_HEADER in p]
    shown = [p.split(PROPOSITIONS_HEADER)[-1] for p in guided]
    assert guided and all("7 + 5 = 12" in x and "27 + 15 = 32" not in x for x in shown)
    assert all("27 + 15 = 42, not 32" in p for p in guided)  # as a pitfall, with its evidence


def test_solve_checks_arithmetic_by_default_on_a_problem_with_numbers(capsys):
    with threaded_server(default_reply=claims_reply) as srv:
        base = ["solve", PROBLEM, "--base-url", srv.base_url, "--k", "2", "--rounds", "2",
                "--quiet", "--settle-margin", "off", "--json"]  # fmt: skip
        assert cli.main(base) == 0
        checked = json.loads(capsys.readouterr().out)
        assert cli.main([*base, "--check", "none"]) == 0
        unchecked = json.loads(capsys.readouterr().out)
        assert cli.main([*base[:1], "Name a colour.", *base[2:]]) == 0
        wordy = json.loads(capsys.readouterr().out)
    assert any(ch.isdigit() for ch in PROBLEM)
    assert checked["checks"] == {"refuted": 2, "verified": 2}
    assert unchecked["checks"] is None and wordy["checks"] is None


def test_a_budget_that_buys_no_distillation_says_so_and_what_it_lacked(capsys):
    """Under a cap each guided call holds its ``max_tokens`` until it ends, so a small budget
    with a large ``--max-tokens`` buys round 1 no distillation: RSE is then majority vote in
    rounds, and the summary says so with the tokens it lacked and what to change, rather than
    leave a user to credit experience no prompt saw. A budget that fits one says nothing."""
    with threaded_server(default_reply=reply) as srv:
        base = ["solve", PROBLEM, "--base-url", srv.base_url, "--k", "3", "--quiet",
                "--settle-margin", "off"]  # fmt: skip
        assert cli.main([*base, "--budget", "3000", "--max-tokens", "1024"]) == 0
        short = capsys.readouterr().out
        assert cli.main([*base, "--budget", "3000", "--max-tokens", "128", "--json"]) == 0
        fits = json.loads(capsys.readouterr().out)
    note = next(x for x in short.splitlines() if x.startswith("no distillation was bought"))
    assert note.startswith("no distillation was bought: round 1, its distillations and a guided")
    assert note.endswith("raise --budget or lower --max-tokens")
    needed, left = (int(x.replace(",", "")) for x in re.findall(r"([\d,]+) (?:tokens|were)", note))
    assert needed > left > 0
    paid = next(x for x in short.splitlines() if x.startswith("tokens: "))
    assert "explore" in paid and "distill" not in paid
    assert fits["distillation_unaffordable"] is None
    assert fits["ledger"]["roles"]["distill"]["total_tokens"] > 0


def test_solve_within_a_budget_checkpoints_and_a_finished_run_resumes_to_its_answer(
    capsys, tmp_path
):
    """``--budget`` with ``--checkpoint``: resuming a finished run asks the server for no
    more completions and reports the same answer and spend; another budget is refused with
    a message that says what to do."""
    ckpt = str(tmp_path / "ckpt")
    with threaded_server(default_reply=reply) as srv:
        base = ["solve", PROBLEM, "--base-url", srv.base_url, "--k", "3", "--quiet", "--json",
                "--checkpoint", ckpt]  # fmt: skip
        assert cli.main([*base, "--budget", "3000"]) == 0
        first = json.loads(capsys.readouterr().out)
        calls = len(srv.usages)
        assert cli.main([*base, "--budget", "3000", "--resume"]) == 0
        again = json.loads(capsys.readouterr().out)
        assert len(srv.usages) == calls
        assert cli.main([*base, "--budget", "2000", "--resume"]) == 1
        err = capsys.readouterr().err
    assert (
        again["answer"] == first["answer"]
        and again["ledger"]["budget"] == first["ledger"]["budget"]
    )
    assert "made under a budget of 3000 tokens" in err and "resume with the same budget" in err


def test_a_dollar_budget_resumed_at_other_prices_is_refused(capsys, tmp_path):
    """The same $ amount at other prices is another budget: the spent part reads differently."""
    ckpt = str(tmp_path / "ckpt")
    with threaded_server(default_reply=reply) as srv:
        base = ["solve", PROBLEM, "--base-url", srv.base_url, "--k", "2", "--quiet", "--json",
                "--checkpoint", ckpt, "--budget", "$0.01"]  # fmt: skip
        assert cli.main([*base, "--price", "input=2,cached=0.5,output=8"]) == 0
        capsys.readouterr()
        assert cli.main([*base, "--price", "input=2,output=8", "--resume"]) == 1
        err = capsys.readouterr().err
        assert cli.main([*base, "--price", "input=2,cached=0.5,output=8", "--resume"]) == 0
    assert "price:input=2.0,cached=0.5,output=8.0" in err and "same prices" in err


def test_solve_prices_a_dollar_budget_by_the_given_prices(capsys):
    with threaded_server(default_reply=reply) as srv:
        args = ["solve", PROBLEM, "--base-url", srv.base_url, "--k", "2", "--quiet", "--json"]
        price = ["--price", "input=2,cached=0.5,output=8"]
        assert cli.main([*args, *price, "--budget", "$0.01"]) == 0
    data = json.loads(capsys.readouterr().out)
    budget = data["ledger"]["budget"]
    assert budget["unit"] == "$" and budget["amount"] == 0.01
    assert 0 < budget["spent"] <= 0.01 and data["cost"]["spent"] == pytest.approx(budget["spent"])


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--stop"], "--stop needs --budget"),
        (["--budget", "1.5"], "positive whole number of tokens"),
        (["--budget", "$-1"], "positive whole number of tokens"),
        (["--budget", "$0.01"], "a budget in \\$ needs --price"),
    ],
)
def test_solve_refuses_a_budget_it_cannot_keep(capsys, extra, says):
    with pytest.raises(SystemExit) as exc:
        cli.main(["solve", "x", "--base-url", "http://127.0.0.1:1", *extra])
    assert exc.value.code == 2
    assert said(says, capsys.readouterr().err)


def said(pattern: str, text: str) -> bool:
    import re

    return re.search(pattern, " ".join(text.split())) is not None
