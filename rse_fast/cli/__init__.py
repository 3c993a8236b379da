"""``rse-fast`` command line: one module per subcommand (solve, eval, serve, local, report),
shared argument types in ``args``, the live display in ``progress``, one-line errors in
``errors``; ``main`` parses and dispatches only."""

from __future__ import annotations

from rse_fast.cli.main import main

__all__ = ["main"]
