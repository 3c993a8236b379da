"""Small modules and short functions: no module in rse_fast over 450 lines, no function over
80 (the scripted server in rse_fast/testing included), so a newcomer's walk stays short."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MOST_LINES, MOST_FUNCTION_LINES = 450, 80


def sources() -> list[Path]:
    """Every module of the package (rse_fast/kernels links to kernels/: read once)."""
    return sorted({p.resolve() for p in (ROOT / "rse_fast").rglob("*.py")}
                  | {p.resolve() for p in (ROOT / "kernels").rglob("*.py")})  # fmt: skip


def test_no_module_is_longer_than_its_limit():
    long = {str(p): n for p in sources()
            if (n := p.read_text().count("\n")) > MOST_LINES}  # fmt: skip
    assert not long


def test_no_function_is_longer_than_its_limit():
    long = []
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MOST_FUNCTION_LINES:
                    long.append(f"{path}:{node.name} ({lines})")
    assert not long
