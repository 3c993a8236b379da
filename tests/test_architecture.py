"""The layout's rules, checked on the source: dependencies point one way, no import cycles,
no module imports another module's private names."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "rse_fast"
#: What each layer may not import (kernels ← rse ← methods/eval ← serve/cli; llm knows no RSE).
FORBIDDEN = {
    "rse_fast.kernels": ("rse_fast",),
    "rse_fast.llm": (
        "rse_fast.rse",
        "rse_fast.methods",
        "rse_fast.eval",
        "rse_fast.serve",
        "rse_fast.cli",
        "rse_fast.local",
        "rse_fast.encoder",
    ),
    "rse_fast.rse": ("rse_fast.methods", "rse_fast.eval", "rse_fast.serve", "rse_fast.cli"),
    "rse_fast.methods": ("rse_fast.eval", "rse_fast.serve", "rse_fast.cli"),
    "rse_fast.eval": ("rse_fast.serve", "rse_fast.cli"),
    "rse_fast.errors": ("rse_fast",),
}


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[0] == "kernels":
        parts = ["rse_fast", *parts]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def sources() -> dict[str, ast.Module]:
    files = [p for p in PACKAGE.rglob("*.py") if "kernels" not in p.relative_to(PACKAGE).parts]
    files += list((ROOT / "kernels").rglob("*.py"))
    return {module_name(p): ast.parse(p.read_text(), str(p)) for p in files}


def runtime_imports(name: str, tree: ast.Module) -> list[tuple[str, list[str]]]:
    """(module, imported names) of the module-level imports that run at import time
    (TYPE_CHECKING blocks and function bodies excluded)."""
    out: list[tuple[str, list[str]]] = []
    package = name if tree_is_package(name) else name.rpartition(".")[0]

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, ast.Import):
                out.extend((a.name, []) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                out.append((base, [a.name for a in node.names]))
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(getattr(node, "orelse", []))

    visit(tree.body)
    return out


def tree_is_package(name: str) -> bool:
    return name in PACKAGES


TREES = sources()
PACKAGES = {
    n for n in TREES if (ROOT / "rse_fast").joinpath(*n.split(".")[1:], "__init__.py").exists()
}


def all_imports(tree: ast.Module) -> list[tuple[str, list[str]]]:
    """Every import anywhere in the module (function-local and TYPE_CHECKING included)."""
    out: list[tuple[str, list[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out.extend((a.name, []) for a in node.names)
    return out


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_dependencies_point_one_way(layer):
    bad = []
    for name, tree in TREES.items():
        if name != layer and not name.startswith(layer + "."):
            continue
        for module, _ in all_imports(tree):
            if module.startswith("rse_fast.kernels") and layer != "rse_fast.kernels":
                continue
            for banned in FORBIDDEN[layer]:
                hit = module == banned or module.startswith(banned + ".")
                if hit and (layer == "rse_fast.errors" or not module.startswith(layer)):
                    bad.append(f"{name} imports {module}")
    assert not bad, "\n".join(bad)


def test_no_module_imports_another_modules_private_names():
    bad = [
        f"{name}: from {module} import {n}"
        for name, tree in TREES.items()
        for module, names in all_imports(tree)
        if module.startswith("rse_fast")
        for n in names
        if n.startswith("_") and not n.startswith("__")
    ]
    assert not bad, "\n".join(bad)


def test_no_import_cycles():
    graph = {
        name: {m for m, _ in runtime_imports(name, tree) if m in TREES and m != name}
        for name, tree in TREES.items()
    }
    # `from pkg import sub` imports the submodule too
    for name, tree in TREES.items():
        for module, names in runtime_imports(name, tree):
            graph[name] |= {f"{module}.{n}" for n in names if f"{module}.{n}" in TREES}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def dfs(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                dfs(nxt, [*stack, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            dfs(node, [node])
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)
