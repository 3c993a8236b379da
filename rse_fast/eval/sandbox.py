"""Running model-written code against its tests, so that nothing the code does can forge a
pass or outlive its run.

**The verdict never lives where the code runs.** The candidate runs in a sandboxed process
that only *serves calls*: the harness, in this (trusted) process, runs the problem's tests
with a stand-in ``candidate`` that sends each call's arguments over a pipe and gets back the
result as plain data (None, bool, int, float, str, bytes, list, tuple, set, dict: a tagged
JSON tree, so no object with a rigged ``__eq__``, no frame, no secret crosses). What the tests
compare is decided here. A candidate that exits, crashes, hangs, floods its output or breaks
the protocol simply fails its calls.

Exceptions cross as data too: the harness re-raises only ordinary built-in exceptions; a
control-flow one (``StopIteration``, which would silently end a ``map`` in the tests) or any
other arrives as ``RuntimeError``, as PEP 479 does for generators.

**Isolation** (``bubblewrap``, Debian's ``bwrap``): new pid, network, ipc and uts namespaces,
its own ``/proc`` (the parent's environment is not there to read), and a minimal read-only
view (``sandbox_view``: the interpreter, its standard library and their shared libraries; not
the project, the evaluation data or any site-packages); one writable place, a tmpfs of
``disk_mb`` at ``/tmp`` holding the run's directory, so all it writes shares one cap, and a
read-only ``/dev``; ``--die-with-parent`` and pid 1 of the namespace, so no process survives
the run; as root the code runs under a uid drawn for this run alone. Inside
(``sandbox_server``): an empty environment, rlimits (CPU, memory, file size, open files,
processes), a **seccomp filter** by which the kernel refuses new processes (``fork``,
``vfork``, ``execve``, ``clone`` without ``CLONE_THREAD``), every route to signal another
process, sockets, ``ptrace``, raising limits, memory the limits do not count (memfd, shared
memory) and io_uring, whatever route the code finds to the syscall (a filter the kernel does
not take means no run: ``SandboxUnavailableError``); then an audit hook that names the common
routes in a clear error and refuses writes outside the work directory. Output is capped in
bytes: past the cap the process is killed.

Where ``bwrap`` cannot run, ``run_tests`` refuses (``SandboxUnavailableError``) instead of
running a weaker sandbox silently, unless ``allow_weak=True`` (or
``RSE_FAST_ALLOW_WEAK_SANDBOX=1``): then ``SandboxResult.isolation`` says ``weak``, and what
still holds is the call protocol, the empty environment, the rlimits, the seccomp filter
(``SandboxResult.process_filter`` says whether the kernel took it: the weak mode runs without
it) and the audit hook. What the weak mode does **not** stop: reading any file the harness's
user can read (the project, the evaluation data, secrets in files), writes through routes the
audit hook does not see (each file capped, their total not), and a process left behind if the
filter could not be installed; and as root the rlimit on processes does not apply. Use it
only for code you would run anyway.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rse_fast.errors import SandboxUnavailableError
from rse_fast.eval.sandbox_codec import decode, encode
from rse_fast.eval.sandbox_view import declared_view, readonly_view

#: Where the run's directory appears inside the sandbox (on its private /tmp).
SANDBOX_DIR = "/tmp/work"

_HERE = Path(__file__).resolve().parent

#: The sandboxed process's whole script: the codec, then the call server (real modules, read
#: in as text, so they are linted and typed like the rest).
_SCRIPT = (_HERE / "sandbox_codec.py").read_text(encoding="utf-8") + (
    _HERE / "sandbox_server.py"
).read_text(encoding="utf-8").replace("from __future__ import annotations\n", "")

#: Exceptions the tests may see as what the candidate raised; any other (a control-flow one
#: such as StopIteration, which would silently end a ``map`` or a loop in the tests) arrives
#: as RuntimeError, as PEP 479 does for generators.
_CONTROL_FLOW = (StopIteration, StopAsyncIteration)


@dataclass(frozen=True, kw_only=True)
class Limits:
    timeout_s: float = 10.0
    memory_mb: int = 1024
    file_mb: int = 16
    #: all the candidate may write, together (in bubblewrap its only writable place, the
    #: run's directory and /tmp, is one tmpfs of this size: files there are memory too)
    disk_mb: int = 64
    open_files: int = 64
    processes: int = 64
    output_bytes: int = 1 << 20  # stdout + stderr of the candidate; past it, it is killed
    reply_bytes: int = 4 << 20  # one reply of one call
    #: one call's own limit in CPU seconds (0: none; a call that waits is stopped at 4 times
    #: it): a call past it answers TimeoutError and the next call runs, so one slow input
    #: does not cost the rest (the run's ``timeout_s`` still holds)
    call_timeout_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError(f"Limits.timeout_s must be above 0 seconds, got {self.timeout_s}")
        for name in ("memory_mb", "file_mb", "disk_mb", "open_files"):
            if getattr(self, name) < 1:
                raise ValueError(f"Limits.{name} must be at least 1, got {getattr(self, name)}")
        if not self.call_timeout_s >= 0:
            raise ValueError(
                f"Limits.call_timeout_s must be 0 (no limit) or more, got {self.call_timeout_s}"
            )


@dataclass(frozen=True, kw_only=True)
class SandboxResult:
    passed: bool
    reason: str  # passed | failed | timeout | load-error | output-limit
    detail: str
    output_tail: str
    isolation: str  # "bwrap" | "weak"
    calls: int = 0
    #: "seccomp" when the kernel refused process creation to the candidate, else why not
    process_filter: str = ""
    #: the line of the candidate's code the failure was raised at, when it raised there (a
    #: load error, or the last call, if it raised); None for a wrong value, a kill or a pass
    line: int | None = None
    #: what the tests' ``check`` returned when it ran through (harness-side data, e.g. a
    #: program's outputs on probe inputs); None otherwise
    value: Any = None


def _line(reply: dict[str, Any]) -> int | None:
    """A reply's candidate line, if it names a plausible one (the candidate writes replies)."""
    line = reply.get("line")
    return line if isinstance(line, int) and not isinstance(line, bool) and line > 0 else None


class CandidateGone(Exception):
    """The sandboxed candidate stopped answering (exited, killed, or broke the protocol)."""


def _uid_for_run() -> int:
    """A uid of no user, drawn for one run (as root): no two runs share one."""
    return 200_000 + secrets.randbelow(800_000)


@functools.cache
def bwrap_works(python: str) -> bool:
    """Whether ``bwrap`` runs ``python`` here with the namespaces the sandbox asks for."""
    if shutil.which("bwrap") is None:
        return False
    with tempfile.TemporaryDirectory(prefix="rse-fast-probe-") as tmp:
        os.chmod(tmp, 0o777)
        cmd = [*_bwrap(Path(tmp), _uid_for_run()), python, "-I", "-S", "-c", "import json"]
        try:
            probe = subprocess.run(cmd, capture_output=True, timeout=20, env={})
        except (OSError, subprocess.SubprocessError):
            return False
    return probe.returncode == 0


def interpreter() -> str:
    """The base interpreter (not a venv's link to it): the sandbox runs it with ``-I -S``,
    standard library only."""
    return os.path.realpath(sys.executable)


def _bwrap(
    work: Path, uid: int, readable: Sequence[Path] = (), disk_bytes: int = 64 << 20
) -> list[str]:
    """The namespaces and the minimal read-only view (``sandbox_view``); one writable place,
    a tmpfs of ``disk_bytes`` at /tmp holding the run's directory (the run's files bound into
    it read-only), so everything written counts against one cap; /dev read-only (no
    /dev/shm to fill); and (as root) a uid of no user for this run alone."""
    drop_uid = os.geteuid() == 0 and shutil.which("setpriv") is not None
    setpriv = shutil.which("setpriv") if drop_uid else None
    files = [
        a for f in sorted(work.iterdir()) for a in ("--ro-bind", str(f), f"{SANDBOX_DIR}/{f.name}")
    ]
    cmd = [
        "bwrap", "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net",
        "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
        *readonly_view(interpreter(), setpriv),
        "--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev",
        "--perms", "1777", "--size", str(disk_bytes), "--tmpfs", "/tmp",
        "--perms", "1777", "--dir", SANDBOX_DIR, *files, *declared_view(readable),
        "--chdir", SANDBOX_DIR, "--clearenv",
    ]  # fmt: skip
    if setpriv is not None:
        cmd += ["--", setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                "--no-new-privs"]  # fmt: skip
    else:
        cmd += ["--"]
    return cmd


def allow_weak_from_env() -> bool:
    return os.environ.get("RSE_FAST_ALLOW_WEAK_SANDBOX", "") in ("1", "true", "yes")


class _Candidate:
    """The harness side: the sandboxed process, its pipes, and a callable stand-in."""

    def __init__(
        self, work: Path, entry: str, limits: Limits, strong: bool, readable: Sequence[Path]
    ) -> None:
        self.limits = limits
        self.calls = 0
        self.process_filter = ""
        #: where the candidate's last failure was raised (see ``SandboxResult.line``)
        self.failed_line: int | None = None
        self.output = bytearray()
        self.over_output = False
        self._lock = threading.Lock()
        req_r, self._req_w = os.pipe()
        self._rep_r, rep_w = os.pipe()
        uid = _uid_for_run()
        if strong and os.geteuid() == 0:
            os.chown(work, uid, uid)
            for p in work.iterdir():
                os.chown(p, uid, uid)
        cpu = max(1, int(limits.timeout_s + 0.999))
        # the weak mode is the caller's explicit choice: it may run without the filter
        unfiltered_ok = "0" if strong else "1"
        args = [str(cpu), str(limits.memory_mb << 20), str(limits.file_mb << 20),
                str(limits.processes), entry, str(req_r), str(rep_w),
                str(limits.call_timeout_s), str(limits.open_files), unfiltered_ok]  # fmt: skip
        python = interpreter()
        if strong:
            script = f"{SANDBOX_DIR}/server.py"
            jail = _bwrap(work, uid, readable, limits.disk_mb << 20)
            cmd = [*jail, python, "-I", "-S", script, *args]
        else:
            cmd = [python, "-I", "-S", str(work / "server.py"), *args]
        self.proc = subprocess.Popen(
            cmd,
            cwd=work,
            env={},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            pass_fds=(req_r, rep_w),  # the request and reply pipes, named in argv
            start_new_session=True,
        )
        os.close(req_r)
        os.close(rep_w)
        self._replies = os.fdopen(self._rep_r, "rb", buffering=0)
        self._drain = threading.Thread(target=self._read_output, daemon=True)
        self._drain.start()
        self._buf = b""

    def _read_output(self) -> None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                return
            if not chunk:
                return
            with self._lock:
                room = self.limits.output_bytes - len(self.output)
                self.output += chunk[: max(0, room)]
                if len(chunk) > room:
                    self.over_output = True
            if self.over_output:
                self.kill()
                return

    def _reply(self) -> dict[str, Any]:
        while b"\n" not in self._buf:
            chunk = self._replies.read(65536)
            if not chunk:
                raise CandidateGone("the candidate stopped answering")
            self._buf += chunk
            if len(self._buf) > self.limits.reply_bytes:
                self.kill()
                raise CandidateGone("a reply over the size limit")
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            data = json.loads(line)
        except ValueError:
            raise CandidateGone("a reply that is not JSON") from None
        if not isinstance(data, dict):
            raise CandidateGone("a reply that is not an object")
        return data

    def start(self) -> str | None:
        """None when the candidate loaded; else why it did not."""
        try:
            first = self._reply()
        except CandidateGone as exc:
            return str(exc)
        if first.get("ready") is True:
            self.process_filter = str(first.get("filter", ""))
            return None
        if "unfiltered" in first:
            raise SandboxUnavailableError(
                f"the sandbox's process filter could not be installed ({first['unfiltered']}): "
                "the candidate was not run. The weak mode (allow_weak=True) runs without it."
            )
        self.failed_line = _line(first)
        return str(first.get("load_error") or "the candidate did not start")

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        try:
            os.write(self._req_w, json.dumps(encode(list(args))).encode() + b"\n")
        except (OSError, TypeError, ValueError) as exc:
            raise CandidateGone(f"cannot send the call ({exc})") from None
        data = self._reply()
        self.failed_line = _line(data)
        if "value" in data:
            try:
                return decode(data["value"])
            except (ValueError, TypeError, RecursionError):
                raise CandidateGone("a reply that is not plain data") from None
        name = str(data.get("raised", "Exception"))
        message = str(data.get("message", ""))
        kind = getattr(builtins, name, None)
        if (
            isinstance(kind, type)
            and issubclass(kind, Exception)
            and not issubclass(kind, _CONTROL_FLOW)
        ):
            raise kind(message)
        raise RuntimeError(f"the candidate raised {name}: {message}")

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()

    def close(self) -> None:
        self.kill()
        self.proc.wait()
        with contextlib.suppress(OSError):
            os.close(self._req_w)
        self._replies.close()
        self._drain.join(2)


def run_tests(
    code: str,
    tests: str,
    entry_point: str,
    *,
    helpers: str = "",
    limits: Limits = Limits(),
    allow_weak: bool | None = None,
    readable: Sequence[Path] = (),
) -> SandboxResult:
    """Run ``tests`` (which define ``check(candidate)``) here against ``entry_point`` of
    ``code`` served from the sandbox. ``helpers``: trusted code the tests need (e.g. the
    problem's own helper functions), run here, never in the sandbox. ``readable``: files or
    folders the task declares the candidate may read (nothing else of the machine is shown
    beyond the interpreter and its standard library)."""
    weak_ok = allow_weak_from_env() if allow_weak is None else allow_weak
    strong = bwrap_works(interpreter())
    if not strong and not weak_ok:
        raise SandboxUnavailableError(
            "no process isolation here: bubblewrap (bwrap) is missing or cannot create "
            "namespaces; install it (apt-get install bubblewrap), or accept a weaker "
            "sandbox with allow_weak=True or RSE_FAST_ALLOW_WEAK_SANDBOX=1"
        )
    isolation = "bwrap" if strong else "weak"
    with tempfile.TemporaryDirectory(prefix="rse-fast-sandbox-") as tmp:
        work = Path(tmp)
        (work / "candidate.py").write_text(code, encoding="utf-8")
        (work / "server.py").write_text(_SCRIPT, encoding="utf-8")
        os.chmod(work, 0o755)
        cand = _Candidate(work, entry_point, limits, strong, readable)
        timer = threading.Timer(limits.timeout_s, cand.kill)
        timer.start()
        reason, detail = "passed", ""
        value: Any = None
        try:
            why = cand.start()
            if why is not None:
                reason, detail = "load-error", why
            else:
                namespace: dict[str, Any] = {"__name__": "harness"}
                exec(compile(helpers, "helpers.py", "exec"), namespace)
                exec(compile(tests, "tests.py", "exec"), namespace)
                namespace["candidate"] = cand
                value = namespace["check"](cand)
        except CandidateGone as exc:
            reason, detail = "failed", str(exc)
        except SandboxUnavailableError:
            raise  # the sandbox could not hold the candidate: no verdict, an error
        except BaseException as exc:  # an assertion, or the candidate's raised error
            reason, detail = "failed", f"{type(exc).__name__}: {str(exc)[:300]}"
        finally:
            timed_out = not timer.is_alive() and timer.finished.is_set()
            timer.cancel()
            cand.close()
        if cand.over_output:
            reason, detail = "output-limit", f"output over {limits.output_bytes} bytes"
        elif timed_out and reason != "passed":
            reason, detail = "timeout", f"over {limits.timeout_s} s"
    return SandboxResult(
        passed=reason == "passed",
        reason=reason,
        detail=detail,
        output_tail=bytes(cand.output[-2000:]).decode("utf-8", "replace"),
        isolation=isolation,
        line=cand.failed_line if reason in ("failed", "load-error") else None,
        calls=cand.calls,
        process_filter=cand.process_filter,
        value=value if reason == "passed" else None,
    )
