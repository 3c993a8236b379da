"""Build llama.cpp's ``llama-server`` from the source vendored in the llama-cpp-python sdist.

Portable flags (``GGML_NATIVE=OFF``, AVX2/FMA/F16C on, AVX-512/AMX off: a native build enables
AMX, which crashes on some VMs), static llama/ggml libraries, cached under the user cache
directory keyed by version and flags. Idempotent; an interrupted build resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tarfile
from collections import deque
from collections.abc import Callable
from pathlib import Path

from rse_fast.errors import BuildError
from rse_fast.registry import cache_dir, sha256_file

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
#: sha256 of each pinned sdist: the source we compile is checked like the models we run.
SDIST_SHA256 = {"0.3.36": "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"}
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_NATIVE=OFF",
    "-DGGML_AVX=ON",
    "-DGGML_AVX2=ON",
    "-DGGML_FMA=ON",
    "-DGGML_F16C=ON",
    "-DGGML_AVX512=OFF",
    "-DGGML_AMX_TILE=OFF",
    "-DGGML_AMX_INT8=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
)

Log = Callable[[str], None]
_log = logging.getLogger(__name__)


def build_key(version: str = LLAMA_CPP_PYTHON_VERSION, flags: tuple[str, ...] = CMAKE_FLAGS) -> str:
    digest = hashlib.sha256("\n".join(flags).encode()).hexdigest()[:10]
    return f"llama-cpp-python-{version}-{digest}"


def server_path(version: str = LLAMA_CPP_PYTHON_VERSION) -> Path:
    return cache_dir() / "bin" / build_key(version) / "llama-server"


def check_toolchain() -> None:
    missing = [t for t in ("cmake",) if shutil.which(t) is None]
    if not any(shutil.which(c) for c in ("c++", "g++", "clang++")):
        missing.append("a C++ compiler")
    if missing:
        raise BuildError(
            f"cannot build llama-server: {' and '.join(missing)} not found. Install them, e.g. "
            "`apt-get install cmake build-essential` (Debian/Ubuntu) or `pip install cmake`, "
            "or pass your own binary with --llama-server PATH."
        )


def build_log_path() -> Path:
    """Where the raw output of the last build is kept (errors name it)."""
    return cache_dir() / "logs" / "llama-build.log"


def run_build_step(cmd: list[str], log: Log, cwd: Path | None = None) -> None:
    """Run a build step: its raw output goes to :func:`build_log_path`, and ``log`` hears
    only the progress (percentage changes of cmake's ``[ NN%]`` lines)."""
    path = build_log_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    assert proc.stdout is not None
    tail: deque[str] = deque(maxlen=20)
    shown = -1
    with open(path, "a", encoding="utf-8") as raw:
        raw.write(f"$ {' '.join(cmd)}\n")
        for line in proc.stdout:
            raw.write(line)
            line = line.rstrip()
            tail.append(line)
            pct = build_percent(line)
            if pct is not None and pct != shown:
                shown = pct
                log(f"  build {pct:3d}%")
    if proc.wait() != 0:
        raise BuildError(
            f"{' '.join(cmd[:3])} ... failed; the whole log is {path}. Its end:\n" + "\n".join(tail)
        )


def build_percent(line: str) -> int | None:
    """The percentage of a cmake progress line (``[ 42%] Building ...``), else None."""
    if line.startswith("[") and "%]" in line[:8]:
        digits = line[1 : line.index("%]")].strip()
        return int(digits) if digits.isdigit() else None
    return None


def fetch_source(version: str, log: Log) -> Path:
    """The vendored llama.cpp tree of the llama-cpp-python sdist, downloaded once."""
    src_root = cache_dir() / "src"
    tree = src_root / f"llama.cpp-{version}"
    if (tree / "CMakeLists.txt").exists():
        return tree
    src_root.mkdir(parents=True, exist_ok=True)
    sdist = src_root / f"llama_cpp_python-{version}.tar.gz"
    if not sdist.exists():
        log(f"downloading llama-cpp-python {version} source from PyPI (~77 MB)")
        run_build_step(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--no-binary",
                ":all:",
                "--quiet",
                f"llama-cpp-python=={version}",
                "-d",
                str(src_root),
            ],
            log,
        )
    expected = SDIST_SHA256.get(version)
    if expected is not None:
        digest = sha256_file(sdist)
        if digest != expected:
            sdist.unlink()
            raise BuildError(
                f"{sdist.name}: sha256 {digest}, expected {expected}; removed it, "
                "run setup again to download it anew"
            )
    prefix = f"llama_cpp_python-{version}/vendor/llama.cpp/"
    partial = tree.with_name(tree.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
        for m in members:
            m.name = m.name[len(prefix) :]
        try:
            tar.extractall(partial, members=members, filter="data")
        except TypeError:  # Python without extraction filters (< 3.10.12 / 3.11.4)
            tar.extractall(partial, members=members)
    os.replace(partial, tree)
    return tree


def build_server(
    version: str = LLAMA_CPP_PYTHON_VERSION, log: Log = _log.info, jobs: int | None = None
) -> Path:
    """Path of a working cached ``llama-server``, building it first when needed."""
    target = server_path(version)
    if (
        target.exists()
        and subprocess.run([str(target), "--version"], capture_output=True, timeout=30).returncode
        == 0
    ):
        return target
    check_toolchain()
    src = fetch_source(version, log)
    build = cache_dir() / "build" / build_key(version)
    build.mkdir(parents=True, exist_ok=True)
    log(f"configuring llama.cpp ({version}) with portable flags")
    run_build_step(["cmake", "-S", str(src), "-B", str(build), *CMAKE_FLAGS], log)
    n = jobs or len(os.sched_getaffinity(0))
    log(f"building llama-server with {n} jobs (several minutes on 2 cores; cached afterwards)")
    run_build_step(["cmake", "--build", str(build), "--target", "llama-server", "-j", str(n)], log)
    built = next(
        (p for p in build.rglob("llama-server") if p.is_file() and os.access(p, os.X_OK)), None
    )
    if built is None:
        raise BuildError(f"build finished but no llama-server binary under {build}")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name("llama-server.tmp")
    shutil.copy2(built, tmp)
    os.replace(tmp, target)
    (target.parent / "build.json").write_text(
        json.dumps({"llama_cpp_python": version, "cmake_flags": list(CMAKE_FLAGS)}, indent=1)
    )
    return target
