"""Options checked by name: a misspelled option fails loudly instead of being ignored."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from rse_fast.errors import UnknownOptionError

T = TypeVar("T")


def reject_unknown(owner: str, given: Iterable[str], valid: Iterable[str]) -> None:
    """Raise :class:`UnknownOptionError` naming the options in ``given`` not in ``valid``."""
    valid = sorted(valid)
    unknown = [name for name in given if name not in valid]
    if unknown:
        raise UnknownOptionError(owner, unknown, valid)


def checked_options(cls: type[T]) -> type[T]:
    """Class decorator for a dataclass: an unknown keyword raises UnknownOptionError (a
    ValueError and TypeError) that lists the valid field names."""
    valid = [f.name for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]
    init: Callable[..., None] = cls.__init__

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        reject_unknown(cls.__name__, kwargs, valid)
        init(self, *args, **kwargs)

    setattr(cls, "__init__", __init__)  # noqa: B010 - mypy forbids assigning a method
    return cls


def keyword_names(cls: type) -> list[str]:
    """Keyword parameters of ``__init__`` along the class's MRO (what its options are)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        for p in inspect.signature(init).parameters.values():
            if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self":
                names.add(p.name)
    return sorted(names)
