"""A checker worker that takes far longer than any timeout on one input (a stand-in for a
symbolic check that runs away), and answers the others as the real worker does."""

from __future__ import annotations

import time
from multiprocessing.connection import Connection

from rse_fast.answers.checker import serve_checks

SLOW = "\\sqrt{2}^{\\pi}"


def serve_slowly(conn: Connection) -> None:
    conn.send("ready")
    while True:
        try:
            a, b = conn.recv()
        except (EOFError, OSError):
            return
        if SLOW in (a, b):
            time.sleep(3600)
        conn.send(a == b)


def serve_without_math_verify(conn: Connection) -> None:
    """The real worker on a machine where the ``math`` extra is not installed."""
    import sys

    sys.modules["math_verify"] = None  # type: ignore[assignment]  # makes its import fail
    serve_checks(conn)


__all__ = ["SLOW", "serve_checks", "serve_slowly", "serve_without_math_verify"]
