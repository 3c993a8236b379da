"""The code sandbox against hostile solutions: a pass needs the sentinel printed after the
tests ran, and nothing escapes the temporary directory, the environment or the time limit."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from rse_fast.eval.datasets import load_dataset, run_humaneval
from rse_fast.eval.sandbox import Limits, run_python

TESTS = "def check(f):\n    assert f(2) == 4\n\ncheck(double)\n"
FAST = Limits(timeout_s=3)


def program(body: str) -> str:
    return body + "\n\n" + TESTS


def test_right_code_passes_and_wrong_code_fails():
    assert run_python(program("def double(x):\n    return 2 * x"), FAST).passed
    wrong = run_python(program("def double(x):\n    return x"), FAST)
    assert not wrong.passed and wrong.reason == "failed"


@pytest.mark.parametrize(
    "body",
    [
        "import sys\nsys.exit(0)\ndef double(x):\n    return x",  # exits before the tests
        "import os\ndef double(x):\n    os._exit(0)",  # exits 0 inside the tests
        "def double(x):\n    raise SystemExit(0)",
    ],
)
def test_exiting_zero_early_is_not_a_pass(body):
    result = run_python(program(body), FAST)
    assert not result.passed and result.reason == "no-sentinel" and result.returncode == 0


def test_the_environment_is_empty(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-very-secret")
    body = (
        "import os\nleak = os.environ.get('OPENAI_API_KEY')\nprint('key:', leak)\n"
        "def double(x):\n    return 2 * x"
    )
    result = run_python(program(body), FAST)
    assert result.passed and "sk-very-secret" not in result.stdout_tail
    assert "key: None" in result.stdout_tail


def test_stdin_is_closed():
    body = (
        "import sys\ndata = sys.stdin.read()\ndef double(x):\n    return 2 * x if data == '' else 0"
    )
    assert run_python(program(body), FAST).passed


def test_writing_outside_the_work_directory_is_refused(tmp_path):
    target = tmp_path / "escaped.txt"
    body = f"open({str(target)!r}, 'w').write('x')\ndef double(x):\n    return 2 * x"
    result = run_python(program(body), FAST)
    assert not result.passed and "outside the work directory" in result.stderr_tail
    assert not target.exists()
    inside = "open('scratch.txt', 'w').write('ok')\ndef double(x):\n    return 2 * x"
    assert run_python(program(inside), FAST).passed  # the temp dir itself is writable


def test_a_fork_bomb_is_stopped():
    body = "import os\nwhile True:\n    os.fork()\ndef double(x):\n    return 2 * x"
    started = time.perf_counter()
    result = run_python(program(body), FAST)
    assert not result.passed and time.perf_counter() - started < 3


def test_sleeping_past_the_timeout_kills_the_whole_group():
    body = "import time\ntime.sleep(60)\ndef double(x):\n    return 2 * x"
    started = time.perf_counter()
    result = run_python(program(body), Limits(timeout_s=1))
    assert result.reason == "timeout" and not result.passed
    assert time.perf_counter() - started < 5


def test_no_network():
    body = (
        "import socket\ns = socket.socket()\ns.settimeout(1)\ns.connect(('127.0.0.1', 9))\n"
        "def double(x):\n    return 2 * x"
    )
    result = run_python(program(body), FAST)
    assert not result.passed


def test_memory_and_file_size_are_limited():
    big = "x = bytearray(4 << 30)\ndef double(x):\n    return 2 * x"
    assert not run_python(program(big), Limits(timeout_s=3, memory_mb=512)).passed
    huge = "open('f', 'wb').write(b'x' * (64 << 20))\ndef double(x):\n    return 2 * x"
    result = run_python(program(huge), Limits(timeout_s=5, file_mb=8))
    assert not result.passed and "too large" in result.stderr_tail.lower()


def test_layers_in_force_here_are_reported():
    result = run_python(program("def double(x):\n    return 2 * x"), FAST)
    if Path("/usr/bin/unshare").exists() and os.geteuid() == 0:
        assert result.network_isolated


def test_humaneval_goes_through_the_sandbox():
    ds = load_dataset("humaneval", limit=None)
    p = next(x for x in ds.problems if x.id == "HumanEval/0")
    good = (
        "```python\ndef has_close_elements(numbers, threshold):\n"
        "    return any(abs(a - b) < threshold for i, a in enumerate(numbers)"
        " for b in numbers[i + 1:])\n```"
    )
    assert run_humaneval(p, good) == 1.0
    cheat = "```python\nimport sys\ndef has_close_elements(n, t):\n    sys.exit(0)\n```"
    assert run_humaneval(p, cheat) == 0.0
    loop = "```python\ndef has_close_elements(n, t):\n    while True: pass\n```"
    assert run_humaneval(p, loop, timeout_s=2) == 0.0
