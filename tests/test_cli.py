"""The ``rse-fast solve`` command against the scripted server."""

from __future__ import annotations

import json

import pytest
from conftest import threaded_server

from rse_fast import cli

from fakes.scripted_model import GOLD, PROBLEM, reply


def test_solve_prints_summary_json_and_trace(capsys, tmp_path, monkeypatch):
    trace = tmp_path / "trace.jsonl"
    with threaded_server(default_reply=reply) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        code = cli.main(
            ["solve", PROBLEM, "--rounds", "3", "--k", "3", "--gold", GOLD, "--trace", str(trace)]
        )
        out = capsys.readouterr()
        assert code == 0
        assert "answer: 42" in out.out and "round 2: K=3" in out.out
        assert "round 1/3" in out.err  # progress, one line per round when not a terminal
        calls = [json.loads(line) for line in trace.read_text().splitlines()]
        assert len(calls) == 18 and all("request" in c and "texts" in c for c in calls)

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
            ]
        )
        data = json.loads(capsys.readouterr().out)
        assert data["rounds"][0]["k"] == 2 and data["ledger"]["roles"]["distill"]["calls"] == 2


def test_resume_needs_a_checkpoint_dir(capsys):
    with pytest.raises(SystemExit):
        cli.main(["solve", "x", "--base-url", "http://127.0.0.1:1", "--resume"])
    assert "--checkpoint" in capsys.readouterr().err


def test_bad_config_is_reported(capsys):
    with pytest.raises(ValueError, match="rounds"):
        cli.main(["solve", "x", "--base-url", "http://127.0.0.1:1", "--rounds", "0"])
