"""Which code wrote a result: the package version, and the git commit where the package runs
from a checkout (``-dirty`` when its files differ from that commit), so a record can be told
apart from one an older or edited tree wrote."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

import rse_fast


@functools.cache
def code_version() -> str:
    """``<version>`` or ``<version>+g<commit>[-dirty]``."""
    root = Path(rse_fast.__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return rse_fast.__version__
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True, timeout=10)  # fmt: skip
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--",
             "rse_fast"],
            capture_output=True, text=True, check=True, timeout=10,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return rse_fast.__version__
    mark = "-dirty" if dirty.stdout.strip() else ""
    return f"{rse_fast.__version__}+g{head.stdout.strip()}{mark}"
