"""The prebuilt llama.cpp server: the ``xllamacpp`` wheel from PyPI (llama.cpp's own HTTP server
behind a Python API, compiled for AVX2/FMA/F16C without AVX-512 or AMX), pinned by version and
sha256 like the source we would otherwise compile, unpacked into the user cache rather than
installed into the caller's environment, and started by :mod:`rse_fast.local.launcher`.

It spares a newcomer the source build (minutes of compiling on 2 cores); the build stays as
the fallback where the wheel cannot run (another platform, a CPU without AVX2) and on request."""

from __future__ import annotations

import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rse_fast.errors import BuildError
from rse_fast.registry import cache_dir, sha256_file

XLLAMACPP_VERSION = "2026.10.11549"
WHEEL_NAME = (
    f"xllamacpp-{XLLAMACPP_VERSION}-cp310-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
)
WHEEL_SHA256 = "c54e7d13520ecc989c63dc99d55de3065e2f343a91f43f053d16b5e62077c261"
#: what the wheel's kernels were compiled for; a CPU without one of them dies on an illegal
#: instruction, so the wheel is not offered there
CPU_FLAGS = ("avx2", "fma", "f16c")

Log = Callable[[str], None]
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerChoice:
    """Which llama.cpp server ``local setup`` provides, and why (it says so to the user)."""

    backend: str  # "prebuilt" | "build"
    reason: str


def site_dir() -> Path:
    """Where the verified wheel is unpacked: the launcher puts it first on ``sys.path``."""
    return cache_dir() / "prebuilt" / f"xllamacpp-{XLLAMACPP_VERSION}"


def _stamp() -> Path:
    return site_dir() / "rse_fast_verified.json"


def is_installed() -> bool:
    try:
        stamp = json.loads(_stamp().read_text())
    except (OSError, ValueError):
        return False
    return bool(stamp.get("sha256") == WHEEL_SHA256)


def cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def unsupported_reason(
    system: str | None = None, machine: str | None = None, flags: set[str] | None = None
) -> str | None:
    """Why the pinned wheel cannot run here, or None when it can."""
    system = system or platform.system()
    machine = machine or platform.machine()
    if (system, machine) != ("Linux", "x86_64"):
        return f"the prebuilt wheel is for Linux x86_64, this is {system} {machine}"
    have = cpu_flags() if flags is None else flags
    missing = [f for f in CPU_FLAGS if f not in have]
    if missing:
        return f"this CPU lacks {', '.join(missing).upper()}, which the prebuilt wheel needs"
    return None


def choose(build: bool = False) -> ServerChoice:
    """The prebuilt server unless the user asked for the build or the wheel cannot run here."""
    if build:
        return ServerChoice("build", "--build was asked for")
    reason = unsupported_reason()
    if reason is not None:
        return ServerChoice("build", reason)
    return ServerChoice(
        "prebuilt", f"xllamacpp {XLLAMACPP_VERSION} runs on this CPU (AVX2/FMA/F16C)"
    )


def _download(dest: Path, log: Log) -> Path:
    wheel = dest / WHEEL_NAME
    if wheel.exists():
        return wheel
    log(f"downloading xllamacpp {XLLAMACPP_VERSION} from PyPI (~34 MB)")
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:"]
    proc = subprocess.run(
        [*pip, "--quiet", f"xllamacpp=={XLLAMACPP_VERSION}", "-d", str(dest)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0 or not wheel.exists():
        raise BuildError(
            f"could not download xllamacpp {XLLAMACPP_VERSION}: {proc.stderr.strip()[-500:]}"
        )
    return wheel


def install(log: Log = _log.info) -> Path:
    """Download, verify and unpack the pinned wheel (idempotent); the folder to import from.

    Raises BuildError when the download fails, the file's sha256 differs (the file is removed),
    or the unpacked module does not import here (a missing system library, say)."""
    site = site_dir()
    if is_installed():
        return site
    downloads = cache_dir() / "downloads" / "xllamacpp"
    downloads.mkdir(parents=True, exist_ok=True)
    wheel = _download(downloads, log)
    digest = sha256_file(wheel)
    if digest != WHEEL_SHA256:
        wheel.unlink()
        raise BuildError(
            f"{wheel.name}: sha256 {digest}, expected {WHEEL_SHA256}; removed it, "
            "run setup again to download it anew"
        )
    partial = site.with_name(site.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(partial)
    for so in partial.rglob("*.so"):
        so.chmod(0o755)
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys; sys.path.insert(0, {str(partial)!r}); import xllamacpp",
        ],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise BuildError(f"the prebuilt xllamacpp does not load here: {probe.stderr[-500:]}")
    shutil.rmtree(site, ignore_errors=True)
    os.replace(partial, site)
    _stamp().write_text(json.dumps({"version": XLLAMACPP_VERSION, "sha256": WHEEL_SHA256}))
    wheel.unlink(missing_ok=True)
    log(f"prebuilt llama.cpp server ready: xllamacpp {XLLAMACPP_VERSION} in {site}")
    return site


def launcher_command(site: Path) -> list[str]:
    """The start of the command line that runs the prebuilt server (llama-server's flags follow)."""
    return [sys.executable, "-m", "rse_fast.local.launcher", "--site", str(site)]
