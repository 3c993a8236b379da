"""Errors a person can act on: each failure of ``rse-fast`` as a subprocess ends in one or two
lines on stderr naming what failed and what to do, exit 1 (runtime) or 2 (usage), and no
traceback unless ``--debug``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import threaded_server

from rse_fast.testing import Fault

from fakes.scripted_model import reply


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, **(env or {})}
    environment.pop("OPENAI_BASE_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "rse_fast.cli", *args],
        capture_output=True, text=True, timeout=120, env=environment, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def assert_short(proc: subprocess.CompletedProcess[str], code: int, *words: str) -> str:
    err = proc.stderr.strip()
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    assert 1 <= len(err.splitlines()) <= 2, err
    for w in words:
        assert w in err, err
    return err


def test_server_down():
    proc = run_cli("solve", "What is 2+2?", "--base-url", "http://127.0.0.1:1/v1",
                   "--rounds", "1", "--k", "1", "--quiet")  # fmt: skip
    assert_short(proc, 1, "cannot reach http://127.0.0.1:1/v1 (connection refused)",
                 "is the server running? set --base-url or OPENAI_BASE_URL")  # fmt: skip


def test_every_call_failing():
    with threaded_server(faults=lambda i, b: Fault("status", status=503)) as srv:
        proc = run_cli("solve", "What is 2+2?", "--base-url", srv.base_url,
                       "--rounds", "1", "--k", "2", "--quiet")  # fmt: skip
    assert_short(proc, 1, "round 1: all 2 rollouts failed", "status 503", "server's log")


def test_unknown_model():
    with threaded_server(default_reply=reply, known_models=["real-model"]) as srv:
        proc = run_cli("solve", "What is 2+2?", "--base-url", srv.base_url, "--model", "typo",
                       "--rounds", "1", "--k", "1", "--quiet")  # fmt: skip
    assert_short(proc, 1, "does not know that model", "typo", "check --model")


@pytest.mark.parametrize(
    ("flag", "value", "words"),
    [
        ("--k", "0", "--k: must be an integer in [1, 4096]"),
        ("--k", "2,x", "--k: must be an integer in [1, 4096] or a comma list"),
        ("--tau", "5", "--tau: must be a number in (-1.0, 1.0], got '5'"),
        ("--rounds", "-1", "--rounds: must be an integer in [1, 1000], got '-1'"),
        ("--temperature", "hot", "--temperature: must be a number in [0.0, 2.0]"),
    ],
)
def test_bad_argument_values_are_usage_errors(flag, value, words):
    proc = run_cli("solve", "x", "--base-url", "http://127.0.0.1:1/v1", flag, value)
    assert proc.returncode == 2 and words in proc.stderr and "Traceback" not in proc.stderr


def test_unknown_local_model_and_missing_local_setup(tmp_path):
    proc = run_cli("solve", "x", "--local-model", "no-such-model", "--quiet",
                   env={"RSE_FAST_CACHE": str(tmp_path)})  # fmt: skip
    assert_short(proc, 1, "unknown local model 'no-such-model'", "smollm2-135m")
    proc = run_cli("solve", "--demo", "--quiet", env={"RSE_FAST_CACHE": str(tmp_path)})
    assert_short(proc, 1, "not set up", "rse-fast local setup")


def test_bad_checkpoint_names_the_file(tmp_path):
    (tmp_path / "latest.json").write_text(json.dumps({"round": 1, "problem_id": "x"})[:10])
    with threaded_server(default_reply=reply) as srv:
        proc = run_cli("solve", "What is 2+2?", "--base-url", srv.base_url, "--quiet",
                       "--checkpoint", str(tmp_path), "--resume")  # fmt: skip
    assert_short(proc, 1, str(tmp_path / "latest.json"), "not valid JSON", "start over")


def test_debug_shows_the_traceback():
    proc = run_cli("--debug", "solve", "x", "--base-url", "http://127.0.0.1:1/v1",
                   "--rounds", "1", "--k", "1", "--quiet")  # fmt: skip
    assert proc.returncode == 1 and "Traceback" in proc.stderr
