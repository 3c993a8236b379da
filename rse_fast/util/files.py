"""Writing a file so a reader never sees half of it: the text goes to a temporary file beside
it (named by process, so writers on a shared folder do not collide), then replaces the file
in one rename."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
