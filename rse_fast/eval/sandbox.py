"""A sandbox for running model-written code against its tests (HumanEval).

Layers, each because a wrong solution has got through without it:
- a pass needs a sentinel printed *after* ``check()`` returns, so ``sys.exit(0)`` before the
  tests, or a crash that exits 0, is a failure; the sentinel is a fresh secret read from a
  pipe and held in a local of the wrapper (not in any file the code can read: this stops
  early exits and accidents, not code written to hunt the secret through introspection);
- an empty environment (no API keys), stdin closed, a fresh temporary working directory;
- a new session, killed as a whole group on timeout;
- rlimits on CPU, address space, file size and processes;
- an audit hook (PEP 578) that refuses writes outside the temporary directory, sockets, new
  processes (fork bombs), ctypes and changes to the limits;
- a network namespace (``unshare --net``) and an unprivileged user (``setpriv``) where the
  machine allows them; ``SandboxResult`` says which layers were in force.
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

NOBODY = 65534

#: Runs inside the sandbox: limits, the audit hook, then the program; the secret is printed
#: only if the program (which ends by calling the tests) returns normally.
_WRAPPER = r"""
import os, resource, sys

def _main(secret_fd, cpu_s, memory, fsize, nproc):
    secret = os.read(secret_fd, 128).decode()
    os.close(secret_fd)
    for limit, value in (
        (resource.RLIMIT_CPU, cpu_s),
        (resource.RLIMIT_AS, memory),
        (resource.RLIMIT_FSIZE, fsize),
        (resource.RLIMIT_NPROC, nproc),
        (resource.RLIMIT_CORE, 0),
    ):
        resource.setrlimit(limit, (value, value))
    root = os.path.realpath(os.getcwd())
    writes = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
    refused = ("socket.", "subprocess.", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
               "os.forkpty", "os.system", "os.kill", "os.killpg", "pty.", "ctypes.",
               "resource.setrlimit", "resource.prlimit", "sys.settrace", "sys.setprofile",
               "os.setuid", "os.chroot")
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
        if event == "open":
            path, mode, flags = args
            wants_write = (mode is not None and any(c in mode for c in "wax+")) or (
                mode is None and flags & writes)
            if wants_write and not inside(path):
                raise PermissionError(f"sandbox: writing outside the work directory: {path}")
        elif event.startswith(changes) and args and not all(
                inside(a) for a in args if isinstance(a, (str, bytes, os.PathLike))):
            raise PermissionError(f"sandbox: {event} outside the work directory")

    sys.addaudithook(hook)
    with open("program.py", encoding="utf-8") as fh:
        code = compile(fh.read(), "program.py", "exec")
    exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
    sys.stdout.write("\n" + secret + "\n")
    sys.stdout.flush()

_main(*map(int, sys.argv[1:6]))
"""


@dataclass(frozen=True, kw_only=True)
class SandboxResult:
    passed: bool
    reason: str  # passed | failed | timeout | no-sentinel
    returncode: int | None
    stdout_tail: str
    stderr_tail: str
    network_isolated: bool
    unprivileged: bool


@dataclass(frozen=True, kw_only=True)
class Limits:
    timeout_s: float = 10.0
    memory_mb: int = 1024
    file_mb: int = 16
    processes: int = 64


@functools.cache
def _can_unshare_net() -> bool:
    if shutil.which("unshare") is None:
        return False
    try:
        probe = subprocess.run(
            ["unshare", "--net", "--", "true"], capture_output=True, timeout=10, env={}
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


@functools.cache
def _can_drop_to_nobody(python: str) -> bool:
    """Root only, and only if the interpreter is reachable by an unprivileged user."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return False
    try:
        probe = subprocess.run(
            [*_setpriv(), python, "-I", "-c", "pass"], capture_output=True, timeout=20, env={}
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


def _setpriv() -> list[str]:
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]


def run_python(program: str, limits: Limits = Limits()) -> SandboxResult:
    """Run ``program`` (code that ends by calling its tests) in the sandbox."""
    python = sys.executable
    isolated, drop = _can_unshare_net(), _can_drop_to_nobody(python)
    secret = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="rse-fast-sandbox-") as tmp:
        work = Path(tmp)
        (work / "program.py").write_text(program, encoding="utf-8")
        (work / "wrapper.py").write_text(_WRAPPER, encoding="utf-8")
        if drop:
            for p in (work, work / "program.py", work / "wrapper.py"):
                os.chown(p, NOBODY, NOBODY)
        read_end, write_end = os.pipe()
        os.write(write_end, secret.encode())
        os.close(write_end)
        cpu = max(1, int(limits.timeout_s + 0.999))
        args = [
            str(read_end),
            str(cpu),
            str(limits.memory_mb << 20),
            str(limits.file_mb << 20),
            str(limits.processes),
        ]
        cmd = [
            *(["unshare", "--net", "--"] if isolated else []),
            *(_setpriv() if drop else []),
            python,
            "-I",
            "-S",
            str(work / "wrapper.py"),
            *args,
        ]
        try:
            proc = subprocess.Popen(
                cmd,
                cwd=work,
                env={},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(read_end,),
                start_new_session=True,
            )
        finally:
            os.close(read_end)
        try:
            out, err = proc.communicate(timeout=limits.timeout_s)
            reason = None
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            out, err = proc.communicate()
            reason = "timeout"
        _kill_group(proc)  # anything the program left behind in its session
    text = out.decode("utf-8", "replace")
    sentinel_seen = text.rstrip().endswith(secret)
    if reason is None:
        if proc.returncode != 0:
            reason = "failed"
        elif not sentinel_seen:
            reason = "no-sentinel"
        else:
            reason = "passed"
    return SandboxResult(
        passed=reason == "passed",
        reason=reason,
        returncode=proc.returncode,
        stdout_tail=text.replace(secret, "<sentinel>")[-2000:],
        stderr_tail=err.decode("utf-8", "replace")[-2000:],
        network_isolated=isolated,
        unprivileged=drop,
    )


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
