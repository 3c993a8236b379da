"""Tolerant parsing of distiller output into short, clean experience statements.

Servers with JSON-schema decoding return clean JSON; others wrap it in prose or code fences, or
use other key names (the reference code's ``verified_propositions`` / ``critical_pitfalls``).
Anything that still yields no lists is *unparseable*: counted by the caller, never fatal.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

POSITIVE_KEYS = ("positive", "positives", "verified_propositions", "propositions", "lemmas")
NEGATIVE_KEYS = ("negative", "negatives", "critical_pitfalls", "pitfalls", "mistakes", "errors")


@dataclass(frozen=True)
class Distilled:
    positive: list[str]
    negative: list[str]


def _first_json_object(text: str) -> Any:
    """The first balanced ``{...}`` block that parses as JSON (prose and fences around it)."""
    for m in re.finditer(r"\{", text):
        depth, in_str, esc = 0, False, False
        for i in range(m.start(), len(text)):
            ch = text[i]
            if in_str:
                esc = (ch == "\\") and not esc
                in_str = not (ch == '"' and not esc)
            elif ch == '"':
                in_str = True
            elif ch in "{}":
                depth += 1 if ch == "{" else -1
                if depth == 0:
                    try:
                        return json.loads(text[m.start() : i + 1])
                    except ValueError:
                        break
    return None


def _as_texts(value: Any) -> list[str] | None:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        return None
    out = []
    for item in value:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            text = item.get("text") or item.get("statement") or item.get("content")
            if isinstance(text, str):
                out.append(text)
    return out


def clean_statement(text: str, max_chars: int) -> str:
    """One line, no bullet or numbering, at most ``max_chars`` (cut at a word, marked …)."""
    s = re.sub(r"\s+", " ", text).strip()
    s = re.sub(r"^(?:[-*•]|\d+[.)])\s*", "", s)
    if len(s) > max_chars:
        cut = s[: max_chars - 1]
        if " " in cut[max_chars // 2 :]:
            cut = cut[: cut.rfind(" ")]
        s = cut.rstrip(" ,;:") + "…"
    return s


def parse_distillation(text: str, max_items: int, max_chars: int) -> Distilled | None:
    """``{"positive": [...], "negative": [...]}`` from a distiller reply, or None if unparseable."""
    try:
        data: Any = json.loads(text)
    except ValueError:
        data = _first_json_object(text)
    if not isinstance(data, dict):
        return None
    lowered = {str(k).lower(): v for k, v in data.items()}
    pos = next((_as_texts(lowered[k]) for k in POSITIVE_KEYS if k in lowered), None)
    neg = next((_as_texts(lowered[k]) for k in NEGATIVE_KEYS if k in lowered), None)
    if pos is None and neg is None:
        return None

    def tidy(items: list[str] | None) -> list[str]:
        out: list[str] = []
        for t in items or []:
            c = clean_statement(t, max_chars)
            if c and c not in out:
                out.append(c)
        return out[:max_items]

    return Distilled(tidy(pos), tidy(neg))
