"""JSON in a model's reply, read leniently: LaTeX backslashes the model left unescaped,
the first object in prose or a code fence, a Python literal where JSON was asked for, the
complete items of a reply cut off mid-JSON, and items as they stream in."""

from __future__ import annotations

import ast
import contextlib
import json
import re
from typing import Any

_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|[a-zA-Z]+|.)", re.S)
#: LaTeX commands that begin with ``n`` or ``t``: after a backslash they are LaTeX, any other
#: word is a newline or a tab before it ("\\neq" is not-equal, "\\nThe" a line break). After
#: ``\\b``, ``\\f`` or ``\\r`` any letters are LaTeX: nobody means a backspace, a form feed
#: or a bare carriage return before a word.
_LATEX_N_T = frozenset(
    "ne neq neg nabla nu not notin ni nmid nleq ngeq nless ngtr newline nexists nparallel "
    "nsubseteq nsupseteq ncong nsim napprox natural times text textbf textit textrm texttt "
    "textsf textstyle theta tan tanh to top tau tfrac tbinom tilde triangle therefore tt "
    "thinspace".split()
)


def _read_escape(m: re.Match[str]) -> str:
    tail = m.group(1)
    is_escape = (
        tail in ('"', "\\", "/", "n", "t", "r", "b", "f")
        or re.fullmatch(r"u[0-9a-fA-F]{4}", tail) is not None
        or (tail[0] in "nt" and tail not in _LATEX_N_T)  # a newline or a tab before a word
    )
    return m.group(0) if is_escape else "\\" + m.group(0)


def repair_escapes(text: str) -> str:
    """``text`` with every backslash that is not a JSON escape doubled, so that LaTeX a model
    wrote into a JSON string survives ``json.loads``: ``\\(`` or ``\\cdot`` would make the whole
    reply invalid, ``\\frac`` and ``\\boxed`` would decode to a form feed and a backspace."""
    return _ESCAPE.sub(_read_escape, text)


#: How many times over a reply the search for its JSON object may read it: each brace it
#: tries is scanned to its block's end, so a reply of unclosed braces would cost one scan per
#: brace (quadratic), while the short blocks of LaTeX before the object cost little.
_SCAN_PASSES = 32
#: What ``json.loads`` raises on a reply that is not JSON, or nested past the parser's stack.
NOT_JSON = (ValueError, RecursionError)


def first_json_object(text: str) -> Any:
    """The first balanced ``{...}`` block that parses as JSON (prose and fences around it),
    found within ``_SCAN_PASSES`` readings of the reply."""
    work = _SCAN_PASSES * len(text)
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
                    except NOT_JSON:
                        break
        work -= i - m.start() + 1
        if work <= 0:
            return None
    return None


def python_literal(text: str) -> Any:
    """The outermost ``{...}`` of ``text`` read as a Python literal: small models sometimes
    answer with a Python dict (single quotes, ``None``) instead of JSON. ``literal_eval``
    evaluates no code."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return None
    try:
        return ast.literal_eval(text[start : end + 1])
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def salvage(text: str) -> dict[str, list[Any]] | None:
    """The complete items of a reply cut off mid-JSON (a distillation that ran into its
    ``max_tokens``): what was written in full is kept; None when no list was begun."""
    scanner = ItemScanner()
    items = scanner.feed(text)
    if not items and not scanner.began_list:
        return None
    out: dict[str, list[Any]] = {}
    for key, item in items:
        out.setdefault(key, []).append(item)
    if not out and scanner.list_key:
        out[scanner.list_key] = []
    return out


class ItemScanner:
    """Reads a JSON object as it streams in and returns each item of its top-level lists
    (``{"propositions": [{...}, ...], ...}``) as soon as the item's closing brace or quote
    arrives. Text before the object (prose, a code fence) is skipped; an item that does not
    parse is skipped too (the final parse of the whole reply decides)."""

    def __init__(self) -> None:
        self._text = ""  # from the start of the open item or string on (the rest is read)
        self._pos = 0  # characters of ``_text`` consumed so far
        self._stack: list[str] = []
        self._in_str = self._escaped = False
        self._str_start = -1
        self._last_key = ""  # the last string closed at the object's top level
        self._list_key = ""  # the key of the list being read
        self._item_start = -1

    @property
    def began_list(self) -> bool:
        """Whether a top-level list of the object has been opened."""
        return bool(self._list_key)

    @property
    def list_key(self) -> str:
        return self._list_key

    def feed(self, chunk: str) -> list[tuple[str, Any]]:
        """Consume ``chunk``; the (list key, item) pairs it completed, in order."""
        text = self._text + chunk
        done: list[tuple[str, Any]] = []
        stack = self._stack
        for i in range(self._pos, len(text)):
            ch = text[i]
            if self._in_str:
                if self._escaped:
                    self._escaped = False
                elif ch == "\\":
                    self._escaped = True
                elif ch == '"':
                    self._in_str = False
                    if len(stack) == 1:
                        self._last_key = text[self._str_start + 1 : i]
                    elif stack == ["{", "["] and self._item_start == self._str_start:
                        self._emit(text, i, done)
                continue
            if ch == '"':
                if not stack:
                    continue  # prose before the object
                self._in_str, self._str_start = True, i
                if stack == ["{", "["]:
                    self._item_start = i
            elif ch in "{[":
                if not stack and ch == "[":
                    continue
                if stack == ["{", "["]:
                    self._item_start = i
                elif stack == ["{"] and ch == "[":
                    self._list_key = self._last_key
                stack.append(ch)
            elif ch in "}]" and stack:
                stack.pop()
                if stack == ["{", "["] and self._item_start >= 0:
                    self._emit(text, i, done)
        opened = [k for k in (self._item_start, self._str_start if self._in_str else -1) if k >= 0]
        keep = min(opened, default=len(text))
        self._text, self._pos = text[keep:], len(text) - keep
        if self._item_start >= 0:
            self._item_start -= keep
        self._str_start -= keep
        return done

    def _emit(self, text: str, end: int, done: list[tuple[str, Any]]) -> None:
        with contextlib.suppress(*NOT_JSON):  # the final parse of the whole reply decides
            item = repair_escapes(text[self._item_start : end + 1])
            done.append((self._list_key, json.loads(item)))
        self._item_start = -1
