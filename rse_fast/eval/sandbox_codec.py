"""Plain data as a tagged JSON tree: the one codec both sides of the sandbox's pipe use.

This module is imported by the harness and also read as text into the sandboxed call server
(``sandbox_server.py``), which runs with the standard library only: so it imports nothing.
Only exact built-in types cross; a subclass (with a rigged ``__eq__``) does not."""

from __future__ import annotations

from typing import Any

_SEQUENCE_TAGS: dict[type, str] = {list: "l", tuple: "t", set: "s", frozenset: "z"}


def encode(v: Any, depth: int = 0) -> Any:
    """``v`` as JSON-ready data, or TypeError for a value that is not plain data."""
    if depth > 100:
        raise ValueError("value nested too deeply")
    if v is None or isinstance(v, (bool, str)) or type(v) is int:
        return v
    if type(v) is float:
        return {"f": repr(v)}
    if type(v) is bytes:
        return {"b": v.hex()}
    if type(v) in _SEQUENCE_TAGS:
        return {_SEQUENCE_TAGS[type(v)]: [encode(x, depth + 1) for x in v]}
    if type(v) is dict:
        return {"d": [[encode(k, depth + 1), encode(x, depth + 1)] for k, x in v.items()]}
    raise TypeError(f"a result of type {type(v).__name__} cannot cross the sandbox")


def decode(t: Any) -> Any:
    """The value ``encode`` wrote; ValueError for anything else."""
    if t is None or isinstance(t, (bool, int, str)):
        return t
    if isinstance(t, list) or not isinstance(t, dict) or len(t) != 1:
        raise ValueError("not a tagged value")
    ((tag, x),) = t.items()
    if tag == "f":
        return float(x)
    if tag == "b":
        return bytes.fromhex(x)
    if tag == "l":
        return [decode(y) for y in x]
    if tag == "t":
        return tuple(decode(y) for y in x)
    if tag == "s":
        return {decode(y) for y in x}
    if tag == "z":
        return frozenset(decode(y) for y in x)
    if tag == "d":
        return {decode(k): decode(y) for k, y in x}
    raise ValueError(f"unknown tag {tag!r}")
