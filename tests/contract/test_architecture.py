"""The layout's rules, checked on the source: every subpackage and top-level module states what
it may import (dependencies point one way), no import cycles, no module imports another
module's private names. Every import counts: absolute or relative, at module level, inside a
function, or under TYPE_CHECKING. The checks run on any source tree, and the planted-violation
tests prove each one catches what it is for."""

from __future__ import annotations

import ast
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: What each unit may import from the project (besides itself). A unit is a subpackage or a
#: top-level module; its submodules share its rule. Layers: kernels ← rse ← methods/eval ←
#: serve/cli; util and errors under everything; llm knows nothing of RSE.
# fmt: off
ALLOWED: dict[str, set[str]] = {
    "rse_fast.errors": set(),
    "rse_fast.util": {"rse_fast.errors"},
    "rse_fast.kernels": set(),
    "rse_fast.llm": {"rse_fast.errors", "rse_fast.util"},
    "rse_fast.prompts": {"rse_fast.llm"},
    "rse_fast.answers": {"rse_fast.errors", "rse_fast.util"},
    "rse_fast.registry": {"rse_fast.errors", "rse_fast.util"},
    "rse_fast.encoder": {"rse_fast.errors", "rse_fast.util", "rse_fast.registry"},
    "rse_fast.local": {"rse_fast.errors", "rse_fast.util", "rse_fast.registry"},
    "rse_fast.testing": {"rse_fast.errors", "rse_fast.util"},
    "rse_fast.rse": {
        "rse_fast.errors",
        "rse_fast.util",
        "rse_fast.kernels",
        "rse_fast.llm",
        "rse_fast.prompts",
        "rse_fast.answers",
        "rse_fast.encoder",
    },
    "rse_fast.methods": {
        "rse_fast.errors",
        "rse_fast.util",
        "rse_fast.llm",
        "rse_fast.prompts",
        "rse_fast.answers",
        "rse_fast.encoder",
        "rse_fast.rse",
    },
    "rse_fast.eval": {
        "rse_fast.errors",
        "rse_fast.util",
        "rse_fast.llm",
        "rse_fast.prompts",
        "rse_fast.answers",
        "rse_fast.encoder",
        "rse_fast.rse",
        "rse_fast.methods",
        "rse_fast.registry",
    },
    "rse_fast.serve": {
        "rse_fast.errors",
        "rse_fast.util",
        "rse_fast.llm",
        "rse_fast.answers",
        "rse_fast.encoder",
        "rse_fast.rse",
        "rse_fast.methods",
        "rse_fast.eval",  # a code problem a request poses: its stated examples, sandboxed
    },
    "rse_fast.cli": {
        "rse_fast.errors",
        "rse_fast.util",
        "rse_fast.llm",
        "rse_fast.encoder",
        "rse_fast.registry",
        "rse_fast.local",
        "rse_fast.rse",
        "rse_fast.methods",
        "rse_fast.eval",
        "rse_fast.serve",
    },
    # the package itself: its lazy exports name every public layer
    "rse_fast": {
        "rse_fast.errors",
        "rse_fast.util",
        "rse_fast.llm",
        "rse_fast.rse",
        "rse_fast.methods",
        "rse_fast.encoder",
        "rse_fast.eval",
        "rse_fast.serve",
        "rse_fast.testing",
        "rse_fast.answers",
        "rse_fast.registry",
        "rse_fast.kernels",
        "rse_fast.local",
        "rse_fast.prompts",
    },
}
# fmt: on


@dataclass(frozen=True)
class Import:
    module: str  # absolute, relative imports resolved
    names: tuple[str, ...]
    line: int
    runtime: bool  # runs when the module is imported (not in a function or TYPE_CHECKING)


@dataclass
class Tree:
    """The project's modules as parsed source, by dotted name."""

    root: Path
    modules: dict[str, ast.Module]
    packages: set[str]

    @classmethod
    def parse(cls, root: Path) -> Tree:
        modules: dict[str, ast.Module] = {}
        packages: set[str] = set()
        linked = root / "rse_fast" / "kernels"  # a link to kernels/, parsed from there
        files = [p for p in (root / "rse_fast").rglob("*.py") if linked not in p.parents]
        files += list((root / "kernels").rglob("*.py"))
        for path in files:
            rel = path.relative_to(root).with_suffix("")
            parts = list(rel.parts)
            if parts[0] == "kernels":
                parts = ["rse_fast", *parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
                packages.add(".".join(parts))
            modules[".".join(parts)] = ast.parse(path.read_text(), str(path))
        return cls(root, modules, packages)

    def imports(self, name: str) -> list[Import]:
        """Every import in module ``name``: module level, in functions, in TYPE_CHECKING."""
        package = name if name in self.packages else name.rpartition(".")[0]
        out: list[Import] = []

        def visit(body: list[ast.stmt], runtime: bool) -> None:
            for node in body:
                if isinstance(node, ast.Import):
                    out.extend(Import(a.name, (), node.lineno, runtime) for a in node.names)
                elif isinstance(node, ast.ImportFrom):
                    base = node.module or ""
                    if node.level:
                        parts = package.split(".")
                        keep = parts[: len(parts) - node.level + 1]
                        base = ".".join(keep + ([base] if base else []))
                    names = tuple(a.name for a in node.names)
                    out.append(Import(base, names, node.lineno, runtime))
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    visit(_body(node), False)
                elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                    visit(node.body, False)
                    visit(node.orelse, runtime)
                else:
                    for field in ("body", "orelse", "finalbody", "handlers"):
                        visit(getattr(node, field, []) or [], runtime)

        visit(self.modules[name].body, True)
        return out


def _body(node: ast.AST) -> list[ast.stmt]:
    body = getattr(node, "body", [])
    return body if isinstance(body, list) else []


def unit_of(module: str) -> str:
    """The rule that governs ``module``: its longest prefix in ALLOWED."""
    parts = module.split(".")
    for k in range(len(parts), 0, -1):
        prefix = ".".join(parts[:k])
        if prefix in ALLOWED:
            return prefix
    raise KeyError(module)


def layering_violations(tree: Tree) -> list[str]:
    bad = []
    for name in sorted(tree.modules):
        try:
            unit = unit_of(name)
        except KeyError:
            bad.append(f"{name}: no rule in ALLOWED says what it may import")
            continue
        for imp in tree.imports(name):
            if imp.module != "rse_fast" and not imp.module.startswith("rse_fast."):
                continue
            if imp.module == "rse_fast":  # `from rse_fast import sub` or a lazy root name
                targets = [f"rse_fast.{n}" for n in imp.names] or ["rse_fast"]
            else:
                targets = [imp.module]
                if imp.module in tree.packages:
                    targets += [f"{imp.module}.{n}" for n in imp.names]
                    targets = [t for t in targets if t == imp.module or t in tree.modules]
            for target in targets:
                if target not in tree.modules or target == "rse_fast":
                    if unit != "rse_fast":
                        bad.append(f"{name}:{imp.line} imports the package root rse_fast")
                    continue
                other = unit_of(target)
                if other != unit and other not in ALLOWED[unit]:
                    bad.append(f"{name}:{imp.line} imports {target} ({unit} may not use {other})")
    return bad


def private_name_violations(tree: Tree) -> list[str]:
    """``from module import _name`` (or ``import x._private``) across module boundaries."""
    bad = []
    for name in sorted(tree.modules):
        for imp in tree.imports(name):
            if not imp.module.startswith("rse_fast"):
                continue
            hidden = [n for n in imp.names if n.startswith("_") and not n.startswith("__")]
            parts = imp.module.split(".")
            for k, part in enumerate(parts):  # a private module is its own package's business
                owner = ".".join(parts[:k])
                inside = name == owner or name.startswith(owner + ".")
                if part.startswith("_") and not part.startswith("__") and not inside:
                    hidden.append(part)
            for n in hidden:
                bad.append(f"{name}:{imp.line} imports private {n} from {imp.module}")
    return bad


def import_cycles(tree: Tree) -> list[list[str]]:
    """Cycles among the imports that run at import time (a cycle through a function-local
    import is legal Python, so it is not a cycle here; the layering still governs it)."""
    graph: dict[str, set[str]] = {}
    for name in tree.modules:
        edges: set[str] = set()
        for imp in tree.imports(name):
            if not imp.runtime:
                continue
            subs = {f"{imp.module}.{n}" for n in imp.names} & set(tree.modules)
            if imp.module in tree.modules and (len(subs) < len(imp.names) or not imp.names):
                edges.add(imp.module)  # `from pkg import sub` alone needs only pkg.sub
            edges |= subs
        graph[name] = edges - {name}
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
    return cycles


#: The rooms inside ``rse_fast.methods``: the domain types at the bottom, then the wave
#: scheduler and the vote, the ``Method`` interface, sampling shared by the families, and one
#: module per family on top. A family never imports another family (the step-wise machinery
#: beam and particle share is its own room).
# fmt: off
METHOD_ROOMS: dict[str, set[str]] = {
    "types": set(), "priors": set(), "judge": {"types"}, "defaults": set(),
    "request_fields": {"defaults"}, "waves": {"types"}, "voting": {"types"},
    "base": {"types", "priors", "request_fields", "waves"},
    "sampling": {"base", "types", "voting", "waves"},
    "stepwise": {"base", "judge", "types", "voting", "waves"},
    "sc": {"base", "request_fields", "sampling", "types", "voting", "waves"},
    "bon": {"base", "judge", "request_fields", "sampling", "types", "voting", "waves"},
    "fusion": {"base", "sampling", "types", "voting", "waves"},
    "refine": {"base", "judge", "sampling", "types", "voting", "waves"},
    "reflexion": {"base", "sampling", "types", "voting", "waves"},
    "beam": {"stepwise", "types"}, "particle": {"stepwise", "types", "waves"},
    "rse_method": {"base", "request_fields", "types", "voting", "waves"},
    # families by name, imported lazily; the vote's ConfidenceRule for +conf-online
    "catalog": {"base", "defaults", "voting"},
}
# fmt: on


def room_violations(tree: Tree) -> list[str]:
    """Imports inside ``rse_fast.methods`` that break ``METHOD_ROOMS``."""
    bad = []
    prefix = "rse_fast.methods."
    for name in sorted(n for n in tree.modules if n.startswith(prefix)):
        room = name.removeprefix(prefix)
        if room not in METHOD_ROOMS:
            bad.append(f"{name}: no room in METHOD_ROOMS says what it may import")
            continue
        for imp in tree.imports(name):
            if imp.module.startswith(prefix):
                other = imp.module.removeprefix(prefix)
                if other != room and other not in METHOD_ROOMS[room]:
                    bad.append(f"{name}:{imp.line} imports {imp.module} ({room} may not)")
    return bad


TREE = Tree.parse(ROOT)


def test_every_unit_states_its_direction():
    units = {unit_of(n) for n in TREE.modules}
    top = {n.split(".")[1] for n in TREE.modules if n.count(".") >= 1}
    assert {f"rse_fast.{t}" for t in top} <= set(ALLOWED), "a subpackage or module has no rule"
    assert units <= set(ALLOWED)


def test_dependencies_point_one_way():
    bad = layering_violations(TREE)
    assert not bad, "\n".join(bad)


def test_no_module_imports_another_modules_private_names():
    bad = private_name_violations(TREE)
    assert not bad, "\n".join(bad)


def test_each_method_family_has_its_room_and_none_imports_another():
    bad = room_violations(TREE)
    assert not bad, "\n".join(bad)


def test_a_family_importing_another_is_caught(copy_root, tmp_path):
    code = "from rse_fast.methods.bon import BestOfN\n"
    tree = planted(copy_root, "rse_fast/methods/sc.py", code, tmp_path)
    assert any("sc may not" in b for b in room_violations(tree))


def test_no_import_cycles():
    cycles = import_cycles(TREE)
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


# -- each kind of violation, planted in a copy of the tree, is caught ---------------------------
@pytest.fixture(scope="module")
def copy_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("tree")
    shutil.copytree(ROOT / "rse_fast", dest / "rse_fast", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__", "kernels"))  # fmt: skip
    shutil.copytree(ROOT / "kernels", dest / "kernels",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    return dest


def planted(root: Path, relpath: str, code: str, tmp: Path) -> Tree:
    """A copy of the tree with ``code`` appended to one module."""
    dest = tmp / "planted"
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(root, dest, symlinks=True)
    target = dest / relpath
    target.write_text(target.read_text() + "\n" + code)
    return Tree.parse(dest)


PLANTS = {
    "relative": ("rse_fast/llm/parse.py", "from ..serve import app as _app_module\n"),
    "function_local": (
        "rse_fast/llm/parse.py",
        "def _late():\n    from rse_fast.serve.app import Service\n    return Service\n",
    ),
    "type_checking": (
        "rse_fast/rse/bank.py",
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from rse_fast.methods import base\n",
    ),
    "kernels_upward": ("kernels/greedy.py", "def _f():\n    import rse_fast.rse.bank\n"),
}


@pytest.mark.parametrize("kind", sorted(PLANTS))
def test_planted_layering_violation_is_caught(kind, copy_root, tmp_path):
    relpath, code = PLANTS[kind]
    assert not layering_violations(Tree.parse(copy_root))
    tree = planted(copy_root, relpath, code, tmp_path)
    assert layering_violations(tree), f"a {kind} import against the layering went unseen"


def test_planted_private_name_is_caught(copy_root, tmp_path):
    code = "def _peek():\n    from ..serve.errors import upstream_message as _m, error_body\n"
    tree = planted(copy_root, "rse_fast/serve/app.py", code, tmp_path)
    assert not private_name_violations(tree)  # public names, aliased: fine
    code = "def _peek():\n    from .errors import _hidden\n"
    tree = planted(copy_root, "rse_fast/serve/app.py", code, tmp_path)
    assert any("_hidden" in b for b in private_name_violations(tree))


def test_planted_cycle_is_caught(copy_root, tmp_path):
    # an import that does not close a loop is no cycle; one that does is
    tree = planted(copy_root, "rse_fast/util/sync.py", "from rse_fast.util import lazy\n", tmp_path)
    assert not import_cycles(tree)
    dest = tmp_path / "planted"
    lazy = dest / "rse_fast/util/lazy.py"
    lazy.write_text(lazy.read_text() + "\nfrom . import sync\n")
    cycles = import_cycles(Tree.parse(dest))
    assert any("rse_fast.util.sync" in c and "rse_fast.util.lazy" in c for c in cycles)


def test_the_old_checker_missed_what_this_one_catches(copy_root, tmp_path):
    """The case that passed before: a function-local relative import of a private name."""
    code = "def _late():\n    from ..serve.errors import _upstream_message\n"
    tree = planted(copy_root, "rse_fast/llm/parse.py", code, tmp_path)
    assert layering_violations(tree) and private_name_violations(tree)
