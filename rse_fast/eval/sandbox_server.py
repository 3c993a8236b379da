"""The sandboxed call server: the only code that runs beside a candidate.

It is not imported by the library: ``sandbox.py`` reads this file and ``sandbox_codec.py`` as
text into one script that runs with ``python -I -S`` (standard library only). It sets the
limits, installs a seccomp filter (the kernel refuses new processes, signals to other
processes, sockets, tracing, raising limits and memory the limits do not count, whatever route
the code takes to the syscall; without it the candidate is not loaded, unless the caller asked
for the weak mode), then an audit hook (a clear error for the common routes, and writes only
inside the work directory), loads the candidate and serves calls on two inherited pipes. It
knows nothing of the tests.
"""

from __future__ import annotations

import errno
import json
import os
import platform
import resource
import signal
import struct
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # in the sandbox these come from the codec's text, read in ahead of this
    from rse_fast.eval.sandbox_codec import decode, encode

# Classic BPF, as the kernel's seccomp takes it (linux/filter.h, linux/seccomp.h).
_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _KILL = 0x7FFF0000, 0x80000000
_SECCOMP_ERRNO = 0x00050000
_NR, _ARCH, _ARG0, _ARG1_LO, _ARG2_LO, _ARG2_HI = 0, 4, 16, 24, 32, 36
#: fcntl commands that aim the kernel's I/O signals at a process (any process the user owns):
#: F_SETOWN, F_SETSIG, F_SETOWN_EX
_SIGNAL_OWNER_CMDS = (8, 10, 15)
_CLONE_THREAD = 0x00010000

#: Syscalls the candidate never needs: new programs and processes (``clone`` is handled
#: apart: threads stay allowed), signals by every route (``kill``, the thread and queued
#: forms, a pidfd), sockets, tracing, limits, namespaces and mounts; memory the address-space
#: limit does not count (memfd, SysV and POSIX shared memory and queues, userfaultfd); and the
#: interfaces that run work the filter never sees (io_uring's operations, BPF, perf).
_REFUSED = (
    "fork", "vfork", "execve", "execveat", "kill", "tkill", "tgkill", "rt_sigqueueinfo",
    "rt_tgsigqueueinfo", "pidfd_open", "pidfd_send_signal", "ptrace", "socket", "setrlimit",
    "process_vm_readv", "process_vm_writev", "unshare", "setns", "mount", "memfd_create",
    "memfd_secret", "shmget", "msgget", "mq_open", "userfaultfd", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "bpf", "perf_event_open",
)  # fmt: skip

#: Per architecture: its audit value and syscall numbers (a name it lacks is left out).
_ARCHES: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (0xC000003E, {
        "fork": 57, "vfork": 58, "execve": 59, "execveat": 322, "kill": 62, "tkill": 200,
        "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297, "pidfd_open": 434,
        "ptrace": 101, "socket": 41, "setrlimit": 160, "pidfd_send_signal": 424,
        "process_vm_readv": 310, "process_vm_writev": 311, "unshare": 272, "setns": 308,
        "mount": 165, "memfd_create": 319, "memfd_secret": 447, "shmget": 29, "msgget": 68,
        "mq_open": 240, "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "bpf": 321, "perf_event_open": 298,
        "clone": 56, "clone3": 435, "prlimit64": 302, "fcntl": 72,
    }),
    "aarch64": (0xC00000B7, {
        "execve": 221, "execveat": 281, "kill": 129, "tkill": 130, "tgkill": 131,
        "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240, "pidfd_open": 434, "ptrace": 117,
        "socket": 198, "setrlimit": 164, "pidfd_send_signal": 424, "process_vm_readv": 270,
        "process_vm_writev": 271, "unshare": 97, "setns": 268, "mount": 40,
        "memfd_create": 279, "memfd_secret": 447, "shmget": 194, "msgget": 186, "mq_open": 180,
        "userfaultfd": 282, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "bpf": 280, "perf_event_open": 241,
        "clone": 220, "clone3": 435, "prlimit64": 261, "fcntl": 25,
    }),
}  # fmt: skip


def _filter_program(machine: str) -> list[tuple[int, int, int, int]]:
    """The filter for ``machine``: refused syscalls answer EPERM; ``fcntl`` may not set a
    signal owner; ``clone`` only makes threads; ``clone3`` answers ENOSYS (the C library
    falls back to ``clone``); ``prlimit64`` only reads; a foreign ABI is killed."""
    arch, numbers = _ARCHES[machine]
    refused = [numbers[name] for name in _REFUSED if name in numbers]
    clone, clone3, prlimit = numbers["clone"], numbers["clone3"], numbers["prlimit64"]
    eperm = _SECCOMP_ERRNO | errno.EPERM
    prog: list[tuple[int, int, int, int]] = [
        (_LD_W_ABS, 0, 0, _ARCH),
        (_JEQ, 1, 0, arch),
        (_RET, 0, 0, _KILL),
        (_LD_W_ABS, 0, 0, _NR),
    ]
    if machine == "x86_64":  # the x32 ABI shares the arch value: refuse its numbers
        prog += [(_JGE, 0, 1, 0x40000000), (_RET, 0, 0, eperm)]
    for nr in refused:
        prog += [(_JEQ, 0, 1, nr), (_RET, 0, 0, eperm)]
    setown, setsig, setown_ex = _SIGNAL_OWNER_CMDS
    prog += [  # fcntl may not aim I/O signals at a process (a route to signal another)
        (_JEQ, 0, 6, numbers["fcntl"]),
        (_LD_W_ABS, 0, 0, _ARG1_LO),
        (_JEQ, 2, 0, setown),
        (_JEQ, 1, 0, setsig),
        (_JEQ, 0, 1, setown_ex),
        (_RET, 0, 0, eperm),
        (_LD_W_ABS, 0, 0, _NR),  # reload: the check replaced it
    ]
    prog += [
        (_JEQ, 0, 1, clone3),
        (_RET, 0, 0, _SECCOMP_ERRNO | errno.ENOSYS),
        (_JEQ, 0, 3, clone),
        (_LD_W_ABS, 0, 0, _ARG0),
        (_JSET, 1, 0, _CLONE_THREAD),
        (_RET, 0, 0, eperm),
        (_LD_W_ABS, 0, 0, _NR),  # reload: the clone branch replaced it
        (_JEQ, 0, 5, prlimit),
        (_LD_W_ABS, 0, 0, _ARG2_LO),
        (_JEQ, 0, 2, 0),
        (_LD_W_ABS, 0, 0, _ARG2_HI),
        (_JEQ, 1, 0, 0),
        (_RET, 0, 0, eperm),
        (_RET, 0, 0, _ALLOW),
    ]
    return prog


def install_seccomp() -> str:
    """Install the filter on this process (and all it may start); returns the mode
    ("seccomp", or why the kernel filter is absent). The ctypes module is dropped after use,
    and its calls are refused by the audit hook from then on."""
    machine = platform.machine()
    if machine not in _ARCHES:
        return f"no seccomp filter for {machine}"
    import ctypes

    prog = _filter_program(machine)
    raw = b"".join(struct.pack("HBBI", *ins) for ins in prog)
    buf = ctypes.create_string_buffer(raw)

    class Fprog(ctypes.Structure):
        _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))

    fprog = Fprog(len(prog), ctypes.addressof(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    zero = ctypes.c_ulong(0)  # prctl reads whole registers: no int with stray upper bits
    pr_set_no_new_privs, pr_set_seccomp, seccomp_mode_filter = 38, 22, 2
    if libc.prctl(pr_set_no_new_privs, ctypes.c_ulong(1), zero, zero, zero) != 0:
        return f"prctl(NO_NEW_PRIVS) failed: errno {ctypes.get_errno()}"
    mode = ctypes.c_ulong(seccomp_mode_filter)
    if libc.prctl(pr_set_seccomp, mode, ctypes.byref(fprog), zero, zero) != 0:
        return f"prctl(SECCOMP) failed: errno {ctypes.get_errno()}"
    for name in [m for m in sys.modules if m == "ctypes" or m.startswith(("ctypes.", "_ctypes"))]:
        del sys.modules[name]
    return "seccomp"


_REFUSED_EVENTS = (
    "socket.", "subprocess.", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
    "os.system", "os.kill", "os.killpg", "pty.", "ctypes.", "resource.setrlimit",
    "resource.prlimit", "sys.settrace", "sys.setprofile", "os.setuid", "os.chroot",
    "_posixsubprocess.",
)  # fmt: skip
_REFUSED_MODULES = ("_posixsubprocess", "_ctypes", "ctypes", "_socket", "socket", "subprocess",
                    "multiprocessing", "_multiprocessing", "pty")  # fmt: skip
_PATH_CHANGES = ("os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown",
                 "os.link", "os.symlink", "os.truncate", "os.utime", "shutil.")  # fmt: skip
_WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _audit_hook(root: str) -> Any:
    def inside(path: object) -> bool:
        if isinstance(path, int):
            return True
        try:
            real = os.path.realpath(os.fsdecode(path))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return False
        return real == root or real.startswith(root + os.sep)

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event.startswith(_REFUSED_EVENTS):
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "import" and args and str(args[0]).split(".")[0] in _REFUSED_MODULES:
            raise PermissionError(f"sandbox: importing {args[0]} is not allowed")
        if event == "open":
            path, mode, flags = args
            wants_write = (mode is not None and any(c in mode for c in "wax+")) or (
                mode is None and flags & _WRITES
            )
            if wants_write and not inside(path):
                raise PermissionError(f"sandbox: writing outside the work directory: {path}")
        elif (
            event.startswith(_PATH_CHANGES)
            and args
            and not all(inside(a) for a in args if isinstance(a, (str, bytes, os.PathLike)))
        ):
            raise PermissionError(f"sandbox: {event} outside the work directory")

    return hook


def candidate_line(exc: BaseException) -> int | None:
    """The line of candidate.py an exception came from (its deepest frame there; a syntax
    error's own line), so a failure can name the step that produced it."""
    if isinstance(exc, SyntaxError) and exc.filename == "candidate.py":
        return exc.lineno
    line = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "candidate.py":
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


class _CallTimeout(BaseException):
    """A call ran past its own time limit (a BaseException, so ``except Exception`` in the
    candidate does not swallow it; a bare ``except`` can, and the run's timeout still holds)."""


#: a call that waits without computing (a sleep) is stopped at this many times its CPU limit
WAIT_FACTOR = 4.0


def _timed(fn: Any, args: list[Any], limit_s: float) -> Any:
    """``fn(*args)`` stopped once it has used ``limit_s`` seconds of CPU (SIGPROF), or waited
    ``WAIT_FACTOR`` times that on the wall clock (SIGALRM); 0: no limit. CPU time, because a
    verdict must not flip with the machine's load (a probe that fits on a quiet machine ran
    over on a busy one when the wall clock was the limit). An alarm raises only while armed,
    so one that lands after the call returned does nothing."""
    if limit_s <= 0:
        return fn(*args)
    armed = [True]

    def on_limit(signum: int, frame: Any) -> None:
        if armed[0]:
            armed[0] = False
            raise _CallTimeout(
                f"the call used over {limit_s} s of CPU"
                if signum == signal.SIGPROF
                else f"the call waited over {limit_s * WAIT_FACTOR:g} s"
            )

    signal.signal(signal.SIGPROF, on_limit)
    signal.signal(signal.SIGALRM, on_limit)
    signal.setitimer(signal.ITIMER_PROF, limit_s)
    signal.setitimer(signal.ITIMER_REAL, limit_s * WAIT_FACTOR)
    try:
        return fn(*args)
    finally:
        armed[0] = False
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)


def unfiltered_refusal(kernel_filter: str, allow_unfiltered: bool) -> dict[str, str] | None:
    """The reply that refuses to run a candidate without the kernel's process filter (None:
    it is in place, or the caller asked for the weak mode, which may run without it)."""
    if kernel_filter == "seccomp" or allow_unfiltered:
        return None
    return {"unfiltered": kernel_filter}


def serve(
    cpu_s: int, memory: int, fsize: int, nproc: int, entry: str, req: int, rep: int,
    call_s: float = 0.0, nofile: int = 64, allow_unfiltered: bool = False,
) -> None:  # fmt: skip
    """Limit, filter, load ``entry`` from candidate.py, then answer one call per line, each
    within ``call_s`` seconds when it is set (a call past it answers TimeoutError). Without
    the process filter nothing is loaded unless ``allow_unfiltered`` (the weak mode)."""
    for limit, value in (
        (resource.RLIMIT_CPU, cpu_s),
        (resource.RLIMIT_AS, memory),
        (resource.RLIMIT_FSIZE, fsize),
        (resource.RLIMIT_NPROC, nproc),
        (resource.RLIMIT_NOFILE, nofile),
        (resource.RLIMIT_CORE, 0),
    ):
        resource.setrlimit(limit, (value, value))
    requests = os.fdopen(req, "rb", buffering=0)
    replies = os.fdopen(rep, "wb", buffering=0)
    kernel_filter = install_seccomp()
    refusal = unfiltered_refusal(kernel_filter, allow_unfiltered)
    if refusal is not None:
        replies.write((json.dumps(refusal) + "\n").encode())
        return
    sys.addaudithook(_audit_hook(os.path.realpath(os.getcwd())))
    namespace: dict[str, Any] = {"__name__": "candidate", "__builtins__": __builtins__}
    try:
        with open("candidate.py", encoding="utf-8") as fh:
            exec(compile(fh.read(), "candidate.py", "exec"), namespace)
        fn = namespace[entry]
    except BaseException as exc:
        load_error = type(exc).__name__ + ": " + str(exc)[:300]
        reply = {"load_error": load_error, "line": candidate_line(exc)}
        replies.write((json.dumps(reply) + "\n").encode())
        return
    replies.write((json.dumps({"ready": True, "filter": kernel_filter}) + "\n").encode())
    buf = b""
    while True:
        chunk = requests.read(65536)
        if not chunk:
            return
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            args = decode(json.loads(line))
            out: dict[str, Any]
            try:
                out = {"value": encode(_timed(fn, args, call_s))}
            except _CallTimeout as exc:
                out = {"raised": "TimeoutError", "message": str(exc),
                       "line": candidate_line(exc)}  # fmt: skip
            except RecursionError as exc:
                out = {"raised": "RecursionError", "message": "maximum recursion depth",
                       "line": candidate_line(exc)}  # fmt: skip
            except Exception as exc:
                out = {"raised": type(exc).__name__, "message": str(exc)[:300],
                       "line": candidate_line(exc)}  # fmt: skip
            try:
                data = json.dumps(out)
            except (TypeError, ValueError) as exc:
                data = json.dumps({"raised": "TypeError", "message": str(exc)[:300]})
            replies.write(data.encode() + b"\n")


def main(argv: list[str]) -> None:
    cpu_s, memory, fsize, nproc = map(int, argv[0:4])
    serve(cpu_s, memory, fsize, nproc, argv[4], int(argv[5]), int(argv[6]), float(argv[7]),
          int(argv[8]), argv[9] == "1")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
