"""Running model-written code against its tests, so that nothing the code does can forge a
pass or outlive its run.

**The verdict never lives where the code runs.** The candidate runs in a sandboxed process
that only *serves calls*: the harness, in this (trusted) process, runs the problem's tests
with a stand-in ``candidate`` that sends each call's arguments over a pipe and gets back the
result as plain data (None, bool, int, float, str, bytes, list, tuple, set, dict: a tagged
JSON tree, so no object with a rigged ``__eq__``, no frame, no secret crosses). What the tests
compare is decided here. A candidate that exits, crashes, hangs, floods its output or breaks
the protocol simply fails its calls.

**Isolation** (``bubblewrap``, Debian's ``bwrap``): new pid, network, ipc and uts namespaces,
its own ``/proc`` (the parent's environment is not there to read), a read-only view of the
filesystem with a fresh ``/tmp`` and only the run's own directory writable, ``--die-with-parent``
and pid 1 of the namespace, so no process survives the run (a ``setsid`` child dies with it);
as root the code runs under a uid drawn for this run alone, so nothing of one run can signal
or write to another's. Inside: an empty environment, rlimits (CPU, memory, file size,
processes), and an audit hook that refuses process creation (``subprocess``, ``os.fork``,
``os.exec*``, ``os.posix_spawn`` and the import of ``_posixsubprocess``), sockets, ``ctypes``
and changes to the limits. Output is capped in bytes: past the cap the process is killed.

Where ``bwrap`` cannot run, ``run_tests`` refuses (``SandboxUnavailableError``) instead of
running a weaker sandbox silently, unless ``allow_weak=True`` (or
``RSE_FAST_ALLOW_WEAK_SANDBOX=1``): then the rlimits, the audit hook, the empty environment and
the call protocol still hold, and ``SandboxResult.isolation`` says ``weak``.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rse_fast.errors import SandboxUnavailableError

#: Where the run's directory appears inside the sandbox (on its private /tmp).
SANDBOX_DIR = "/tmp/work"

#: The sandboxed process: limits, the audit hook, the candidate's code, then a loop serving
#: calls on two inherited pipes (requests, replies). It knows nothing of the tests.
_SERVER = r"""
import json, os, resource, sys

def _main(cpu_s, memory, fsize, nproc, entry, req_fd, rep_fd):
    for limit, value in (
        (resource.RLIMIT_CPU, cpu_s), (resource.RLIMIT_AS, memory),
        (resource.RLIMIT_FSIZE, fsize), (resource.RLIMIT_NPROC, nproc),
        (resource.RLIMIT_CORE, 0),
    ):
        resource.setrlimit(limit, (value, value))
    root = os.path.realpath(os.getcwd())
    writes = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
    refused = ("socket.", "subprocess.", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
               "os.forkpty", "os.system", "os.kill", "os.killpg", "pty.", "ctypes.",
               "resource.setrlimit", "resource.prlimit", "sys.settrace", "sys.setprofile",
               "os.setuid", "os.chroot", "_posixsubprocess.")
    modules = ("_posixsubprocess", "_ctypes", "ctypes", "_socket", "socket", "subprocess",
               "multiprocessing", "_multiprocessing", "pty")
    changes = ("os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown",
               "os.link", "os.symlink", "os.truncate", "os.utime", "shutil.")

    def inside(path):
        if isinstance(path, int):
            return True
        try:
            real = os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return False
        return real == root or real.startswith(root + os.sep)

    def hook(event, args):
        if event.startswith(refused):
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "import" and args and str(args[0]).split(".")[0] in modules:
            raise PermissionError(f"sandbox: importing {args[0]} is not allowed")
        if event == "open":
            path, mode, flags = args
            wants_write = (mode is not None and any(c in mode for c in "wax+")) or (
                mode is None and flags & writes)
            if wants_write and not inside(path):
                raise PermissionError(f"sandbox: writing outside the work directory: {path}")
        elif event.startswith(changes) and args and not all(
                inside(a) for a in args if isinstance(a, (str, bytes, os.PathLike))):
            raise PermissionError(f"sandbox: {event} outside the work directory")

    requests = os.fdopen(req_fd, "rb", buffering=0)
    replies = os.fdopen(rep_fd, "wb", buffering=0)
    sys.addaudithook(hook)
    namespace = {"__name__": "candidate", "__builtins__": __builtins__}
    try:
        with open("candidate.py", encoding="utf-8") as fh:
            exec(compile(fh.read(), "candidate.py", "exec"), namespace)
        fn = namespace[entry]
    except BaseException as exc:
        replies.write((json.dumps({"load_error": type(exc).__name__ + ": " + str(exc)[:300]})
                       + "\n").encode())
        return
    replies.write(b'{"ready": true}\n')
    buf = b""
    while True:
        chunk = requests.read(65536)
        if not chunk:
            return
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            args = decode(json.loads(line))
            try:
                out = {"value": encode(fn(*args))}
            except RecursionError:
                out = {"raised": "RecursionError", "message": "maximum recursion depth"}
            except Exception as exc:
                out = {"raised": type(exc).__name__, "message": str(exc)[:300]}
            try:
                data = json.dumps(out)
            except (TypeError, ValueError) as exc:
                data = json.dumps({"raised": "TypeError", "message": str(exc)[:300]})
            replies.write(data.encode() + b"\n")
"""

#: Plain data as a tagged JSON tree, used on both sides of the pipe (the same source text).
_CODEC = r"""
def encode(v, depth=0):
    if depth > 100:
        raise ValueError("value nested too deeply")
    if v is None or isinstance(v, (bool, str)) or type(v) is int:
        return v
    if type(v) is float:
        return {"f": repr(v)}
    if type(v) is bytes:
        return {"b": v.hex()}
    if type(v) in (list, tuple, set, frozenset):
        tag = {list: "l", tuple: "t", set: "s", frozenset: "z"}[type(v)]
        return {tag: [encode(x, depth + 1) for x in v]}
    if type(v) is dict:
        return {"d": [[encode(k, depth + 1), encode(x, depth + 1)] for k, x in v.items()]}
    raise TypeError(f"a result of type {type(v).__name__} cannot cross the sandbox")

def decode(t):
    if t is None or isinstance(t, (bool, int, str)):
        return t
    if isinstance(t, list) or not isinstance(t, dict) or len(t) != 1:
        raise ValueError("not a tagged value")
    (tag, x), = t.items()
    if tag == "f":
        return float(x)
    if tag == "b":
        return bytes.fromhex(x)
    if tag == "l":
        return [decode(y) for y in x]
    if tag == "t":
        return tuple(decode(y) for y in x)
    if tag == "s":
        return {decode(y) for y in x}
    if tag == "z":
        return frozenset(decode(y) for y in x)
    if tag == "d":
        return {decode(k): decode(y) for k, y in x}
    raise ValueError(f"unknown tag {tag!r}")
"""
_codec: dict[str, Any] = {}
exec(_CODEC, _codec)  # the harness side of the same codec
encode, decode = _codec["encode"], _codec["decode"]


@dataclass(frozen=True, kw_only=True)
class Limits:
    timeout_s: float = 10.0
    memory_mb: int = 1024
    file_mb: int = 16
    processes: int = 64
    output_bytes: int = 1 << 20  # stdout + stderr of the candidate; past it, it is killed
    reply_bytes: int = 4 << 20  # one reply of one call


@dataclass(frozen=True, kw_only=True)
class SandboxResult:
    passed: bool
    reason: str  # passed | failed | timeout | load-error | output-limit
    detail: str
    output_tail: str
    isolation: str  # "bwrap" | "weak"
    calls: int = 0


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


def _bwrap(work: Path, uid: int) -> list[str]:
    """The read-only view of the machine, with the caller's home hidden behind an empty
    tmpfs (the interpreter's own tree bound back when it lives there)."""
    cmd = [
        "bwrap", "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net",
        "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--ro-bind", "/", "/",
        "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
    ]  # fmt: skip
    home = Path.home().resolve()
    if str(home) != "/" and home.is_dir():
        cmd += ["--tmpfs", str(home)]
        prefix = Path(sys.base_prefix).resolve()
        if home in prefix.parents:
            cmd += ["--ro-bind", str(prefix), str(prefix)]
    cmd += ["--bind", str(work), SANDBOX_DIR, "--chdir", SANDBOX_DIR, "--clearenv"]
    if os.geteuid() == 0 and shutil.which("setpriv"):
        cmd += ["--", "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                "--no-new-privs"]  # fmt: skip
    else:
        cmd += ["--"]
    return cmd


def allow_weak_from_env() -> bool:
    return os.environ.get("RSE_FAST_ALLOW_WEAK_SANDBOX", "") in ("1", "true", "yes")


class _Candidate:
    """The harness side: the sandboxed process, its pipes, and a callable stand-in."""

    def __init__(self, work: Path, entry: str, limits: Limits, strong: bool) -> None:
        self.limits = limits
        self.calls = 0
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
        args = [str(cpu), str(limits.memory_mb << 20), str(limits.file_mb << 20),
                str(limits.processes), entry, str(req_r), str(rep_w)]  # fmt: skip
        python = interpreter()
        if strong:
            cmd = [*_bwrap(work, uid), python, "-I", "-S", f"{SANDBOX_DIR}/server.py", *args]
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
            return None
        return str(first.get("load_error") or "the candidate did not start")

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        try:
            os.write(self._req_w, json.dumps(encode(list(args))).encode() + b"\n")
        except (OSError, TypeError, ValueError) as exc:
            raise CandidateGone(f"cannot send the call ({exc})") from None
        data = self._reply()
        if "value" in data:
            try:
                return decode(data["value"])
            except (ValueError, TypeError, RecursionError):
                raise CandidateGone("a reply that is not plain data") from None
        name = str(data.get("raised", "Exception"))
        kind = getattr(builtins, name, None)
        if not (isinstance(kind, type) and issubclass(kind, Exception)):
            kind = RuntimeError
        raise kind(str(data.get("message", "")))

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
) -> SandboxResult:
    """Run ``tests`` (which define ``check(candidate)``) here against ``entry_point`` of
    ``code`` served from the sandbox. ``helpers``: trusted code the tests need (e.g. the
    problem's own helper functions), run here, never in the sandbox."""
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
        start = "\n_main(*map(int, sys.argv[1:5]), sys.argv[5], *map(int, sys.argv[6:8]))\n"
        (work / "server.py").write_text(_CODEC + _SERVER + start)
        os.chmod(work, 0o755)
        cand = _Candidate(work, entry_point, limits, strong)
        timer = threading.Timer(limits.timeout_s, cand.kill)
        timer.start()
        reason, detail = "passed", ""
        try:
            why = cand.start()
            if why is not None:
                reason, detail = "load-error", why
            else:
                namespace: dict[str, Any] = {"__name__": "harness"}
                exec(compile(helpers, "helpers.py", "exec"), namespace)
                exec(compile(tests, "tests.py", "exec"), namespace)
                namespace["candidate"] = cand
                namespace["check"](cand)
        except CandidateGone as exc:
            reason, detail = "failed", str(exc)
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
        calls=cand.calls,
    )
