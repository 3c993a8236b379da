"""The embedded llama.cpp server: its process, its build from source, GGUF model fetch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rse_fast.util.lazy import attach

_LAZY = {
    "LocalServer": "rse_fast.local.server",
    "setup": "rse_fast.local.server",
    "build_server": "rse_fast.local.build",
    "fetch_model": "rse_fast.local.models",
    "resolve_gguf": "rse_fast.local.models",
}
__all__ = ["LocalServer", "build_server", "fetch_model", "resolve_gguf", "setup"]

if TYPE_CHECKING:
    from rse_fast.local.build import build_server
    from rse_fast.local.models import fetch_model, resolve_gguf
    from rse_fast.local.server import LocalServer, setup

__getattr__, __dir__ = attach(__name__, _LAZY, globals())
