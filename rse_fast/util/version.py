"""Which code wrote a result: the package version, and the git commit where the package runs
from a checkout (``-dirty`` when its files differ from that commit), so a record can be told
apart from one an older or edited tree wrote."""

from __future__ import annotations

import functools
import importlib.metadata
import subprocess
from pathlib import Path


@functools.cache
def code_version() -> str:
    """``<version>`` or ``<version>+g<commit>[-dirty]``."""
    try:
        version = importlib.metadata.version("rse-fast")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return version
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True, timeout=10)  # fmt: skip
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--",
             "rse_fast"],
            capture_output=True, text=True, check=True, timeout=10,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return version
    mark = "-dirty" if dirty.stdout.strip() else ""
    return f"{version}+g{head.stdout.strip()}{mark}"
