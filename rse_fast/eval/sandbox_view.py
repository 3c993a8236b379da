"""What a sandboxed candidate can see of the machine: the interpreter, its standard library
and the shared libraries they load, read-only, and nothing else (not the project, not the
evaluation data, not any site-packages, not /etc or /home), plus what a task declares.

The view is built once per interpreter from ``ldd`` (the libraries the interpreter, its
``lib-dynload`` modules and ``setpriv`` load); where ``ldd`` is missing, the system's library
folders are bound whole. Top-level links of a merged ``/usr`` (``/lib -> usr/lib``) are
recreated so the paths the loader knows resolve inside.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sysconfig
from collections.abc import Sequence
from pathlib import Path

_MERGED_USR = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_SYSTEM_LIBRARY_DIRS = ("/usr/lib", "/usr/lib64", "/lib", "/lib64")
_LDD_PATH = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x[0-9a-f]+\)")


def _linked_libraries(binaries: Sequence[str]) -> list[str] | None:
    """Every library path ``ldd`` resolves for ``binaries``; None when ldd cannot tell."""
    ldd = shutil.which("ldd")
    if ldd is None or not binaries:
        return None
    try:
        out = subprocess.run(
            [ldd, *binaries], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = [m.group(1) for m in _LDD_PATH.finditer(out)]
    return found or None


def _stdlib_dirs() -> list[Path]:
    paths = sysconfig.get_paths()
    return sorted({Path(paths["stdlib"]).resolve(), Path(paths["platstdlib"]).resolve()})


@functools.cache
def _base_view(python: str, setpriv: str | None) -> tuple[str, ...]:
    args: list[str] = []
    for name in _MERGED_USR:
        top = Path("/", name)
        if top.is_symlink():
            args += ["--symlink", os.readlink(top), str(top)]
    stdlib = _stdlib_dirs()
    programs = [python] + ([setpriv] if setpriv else [])
    modules = [str(p) for d in stdlib for p in sorted(d.glob("lib-dynload/*.so"))]
    libraries = _linked_libraries(programs + modules)
    files = dict.fromkeys(programs)
    if libraries is None:
        for folder in _SYSTEM_LIBRARY_DIRS:
            if Path(folder).is_dir() and not Path(folder).is_symlink():
                args += ["--ro-bind", folder, folder]
    else:
        files.update(dict.fromkeys(libraries))
    if Path("/etc/ld.so.cache").is_file():
        files["/etc/ld.so.cache"] = None
    binds: dict[str, str] = {}
    for path in files:
        # the file's content, at the path the loader asks for (its folder resolved, so a
        # link such as /lib64/ld-linux.so -> ../lib/... lands where it is looked up)
        target = str(Path(path).parent.resolve() / Path(path).name)
        if os.path.exists(path):
            binds.setdefault(target, os.path.realpath(path))
    binds.update({str(lib): str(lib) for lib in stdlib})
    args += _readonly_binds(binds)
    for lib in stdlib:
        for packages in ("site-packages", "dist-packages"):
            if (lib / packages).is_dir():
                args += ["--tmpfs", str(lib / packages)]
    return tuple(args)


def _readonly_binds(binds: dict[str, str]) -> list[str]:
    """``--ro-bind`` each source at its target. bwrap would make the folders above a target
    with the host folder's mode (/root: 0700), which the run's uid cannot enter: they are
    made first, readable by all."""
    args: list[str] = []
    above = {str(p) for target in binds for p in Path(target).parents if str(p) != "/"}
    for folder in sorted(above, key=lambda f: (f.count("/"), f)):
        args += ["--perms", "0755", "--dir", folder]
    for target, source in binds.items():
        args += ["--ro-bind", source, target]
    return args


def readonly_view(python: str, setpriv: str | None) -> list[str]:
    """bwrap arguments that show ``python`` (and ``setpriv`` when the run drops to another
    uid) with what they load, read-only."""
    return list(_base_view(python, setpriv))


def declared_view(readable: Sequence[Path]) -> list[str]:
    """bwrap arguments that show the paths a task declares, read-only, at their own paths
    (given after the sandbox's fresh /tmp, so a path under /tmp is not hidden by it)."""
    return _readonly_binds({str(Path(p).resolve()): str(Path(p).resolve()) for p in readable})
