"""The request body, checked before anything acts on it: valid JSON, an object, nested no
deeper than a limit, with ``messages`` and ``model`` of the right shape. Every failure is a
400 naming the problem (aiohttp's ``client_max_size`` bounds the size: a 413)."""

from __future__ import annotations

import json
from typing import Any

from rse_fast.errors import ServiceError

#: Deeper than any real chat request (messages → content parts → tool schemas). The parser
#: itself stops at Python's recursion limit (a RecursionError, also a 400 here).
MAX_DEPTH = 64


def deeper_than(value: Any, limit: int) -> bool:
    """Whether a parsed JSON value nests lists/objects deeper than ``limit`` (iterative)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        for child in children:
            if isinstance(child, (dict, list)):
                if depth + 1 > limit:
                    return True
                stack.append((child, depth + 1))
    return False


def parse_body(raw: bytes, max_depth: int = MAX_DEPTH) -> dict[str, Any]:
    deep = ServiceError(400, f"request body is nested deeper than {max_depth} levels")
    try:
        body = json.loads(raw)
    except RecursionError:
        raise deep from None
    except (ValueError, UnicodeDecodeError):
        raise ServiceError(400, "request body is not valid JSON") from None
    few_brackets = raw.count(b"[") + raw.count(b"{") <= max_depth  # cannot nest deeper
    if not few_brackets and isinstance(body, (dict, list)) and deeper_than(body, max_depth):
        raise deep
    if not isinstance(body, dict):
        raise ServiceError(400, "request body must be a JSON object")
    messages = body.get("messages")
    if (
        not isinstance(messages, list)
        or not messages
        or not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages)
    ):
        raise ServiceError(
            400, "'messages' must be a non-empty list of {role, content} objects",
            param="messages",
        )  # fmt: skip
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise ServiceError(400, "'model' must be a non-empty string", param="model")
    return body
