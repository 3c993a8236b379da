"""Lazy package exports (PEP 562): a name's module is imported the first time it is used.

Why: ``import rse_fast`` and ``rse-fast --help`` must not pay for numpy, numba, aiohttp or
onnxruntime. Each package's ``__init__`` maps its public names to the modules defining them
and imports those modules under ``TYPE_CHECKING`` only, so static tools see the real types.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any


def attach(
    package: str, exports: Mapping[str, str], namespace: MutableMapping[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``; a loaded name is cached in
    ``namespace`` (the package's globals), so later lookups are plain attribute reads."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
