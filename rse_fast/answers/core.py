"""Final-answer extraction, normalisation, equivalence and majority vote.

``math-verify`` decides equivalence of differently written answers when it is installed. It
runs in killable worker processes (``checker``): its own timeouts use signals (main thread
only), and a thread cannot be stopped once a symbolic check runs away.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from rse_fast.answers.checker import POOL, Verdict

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
#: Each run of spaces sits between required tokens and none crosses a line, so a reply of
#: nothing but blank lines is read in linear time (``\s*\**\s*`` took cubic time on it).
_ANSWER_LINE = re.compile(
    r"^[ \t]*(?:\*+[ \t]*)?(?:final[ \t]+answer|answer)(?:[ \t]+is)?[ \t]*(?:\*+[ \t]*)?[:：]"
    r"[ \t]*(?:\*+[ \t]*)?(\S.*)$",
    re.IGNORECASE | re.MULTILINE,
)
#: The last resort: "the (final) answer is X" in prose, X a ``$...$`` or ``\\(...\\)`` span or
#: one word (trailing punctuation dropped), as models write when they box nothing.
_ANSWER_IS = re.compile(
    r"\b(?:final[ \t]+answer|the[ \t]+answer)[ \t]+is(?:[ \t]*[:：])?[ \t]*(?:\*+[ \t]*)?"
    r"(\$[^$\n]+\$|\\\([^\n]*?\\\)|[^\s$*]+)",
    re.IGNORECASE,
)
#: Where async code runs equivalence checks and votes: bounded, and off the event loop (a
#: check can wait up to its timeout for a worker process; the thread holds no GIL meanwhile).
_ANSWER_POOL = ThreadPoolExecutor(2, thread_name_prefix="answers")
T = TypeVar("T")


async def off_loop(fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn(*args)`` (an equivalence check, a vote) on the answers pool."""
    return await asyncio.get_running_loop().run_in_executor(_ANSWER_POOL, fn, *args)


def extract_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (balanced braces), or None."""
    last = None
    for m in _BOXED.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            last = text[m.end() : i - 1]
    return last


def extract_answer(text: str) -> str | None:
    """The final answer of a completion: the last ``\\boxed{}``, else the last "Answer:" line,
    else the last "the answer is X"."""
    if not text:
        return None
    boxed = extract_boxed(text)
    if boxed is not None and boxed.strip():
        return boxed.strip()
    lines = _ANSWER_LINE.findall(text)
    if lines:
        inner = extract_boxed(lines[-1])
        return (inner or lines[-1]).strip().strip("$").strip().rstrip(".").strip() or None
    phrases = _ANSWER_IS.findall(text)
    if phrases:
        last = phrases[-1]
        if last.startswith("\\("):
            last = last[2:-2]
        return last.strip("$").rstrip(".,;:!").strip() or None
    return None


_TEXT_CMD = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")


def normalize_answer(answer: str | None) -> str | None:
    """Canonical string form: no $, spaces, \\left/\\right, \\text{}, thousands separators;
    the Unicode minus sign as "-"."""
    if answer is None:
        return None
    s = answer.replace("\u2212", "-").strip().strip("$").strip()  # U+2212 is a minus sign
    s = _TEXT_CMD.sub(r"\1", s)
    s = re.sub(r"\\[dt]frac", r"\\frac", s)
    s = re.sub(r"\\left|\\right|\\!|\\,|\\;|\\ ", "", s)
    s = re.sub(r"^[a-zA-Z]\s*=\s*", "", s)  # "x = 5" → "5"
    s = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", s)  # 1,000 → 1000
    s = re.sub(r"\s+", "", s).rstrip(".").lower()
    s = re.sub(r"\^\{?\\circ\}?|°", "", s)
    if re.fullmatch(r"-?\d+\.\d*", s):
        s = s.rstrip("0").rstrip(".") or "0"
    return s or None


def check_equivalence(a: str | None, b: str | None, timeout_s: float | None = None) -> Verdict:
    """EQUAL for the same normalised string or number, else math-verify's verdict in a worker
    process within ``timeout_s``: UNDECIDED when it overran (the worker is killed) or the
    guard refused the expressions (counted in ``checker_stats``)."""
    na, nb = normalize_answer(a), normalize_answer(b)
    if na is None or nb is None:
        return Verdict.DIFFERENT
    if na == nb:
        return Verdict.EQUAL
    try:
        same = abs(float(na) - float(nb)) <= 1e-9 * max(1.0, abs(float(na)))
        return Verdict.EQUAL if same else Verdict.DIFFERENT
    except (ValueError, OverflowError):
        pass
    return POOL.check(na, nb, timeout_s)


def answers_equivalent(a: str | None, b: str | None, timeout_s: float | None = None) -> bool:
    """Whether two answers are the same (``check_equivalence`` is EQUAL); an undecided check
    clusters apart, and is counted in ``checker_stats``."""
    return check_equivalence(a, b, timeout_s) is Verdict.EQUAL


def checker_stats() -> dict[str, int]:
    """Symbolic checks so far in this process: checks, undecided, refused, killed."""
    return POOL.stats.as_dict()


@dataclass
class Vote:
    """Majority-vote outcome: the winning answer (as first written), its share, the clusters."""

    answer: str | None
    count: int
    total: int
    clusters: list[tuple[str, int]] = field(default_factory=list)
    weight: float = 0.0  # summed weight of the winning cluster (its count when unweighted)
    masses: list[float] = field(default_factory=list)  # each cluster's summed weight

    @property
    def share(self) -> float:
        return self.count / self.total if self.total else 0.0


def majority_vote(
    answers: Sequence[str | None],
    equivalent: Callable[[str | None, str | None], bool] = answers_equivalent,
    weights: Sequence[float] | None = None,
) -> Vote:
    """Cluster equivalent answers; the cluster with the most votes (or, with ``weights``, the
    largest summed weight; NaN weighs nothing) wins, ties go to the earliest cluster."""
    if weights is not None and len(weights) != len(answers):
        raise ValueError(f"{len(weights)} weights for {len(answers)} answers")
    reps: list[str] = []
    counts: list[int] = []
    mass: list[float] = []
    by_key: dict[str, int] = {}
    total = 0
    for i, ans in enumerate(answers):
        key = normalize_answer(ans)
        if key is None:
            continue
        total += 1
        slot = by_key.get(key)
        if slot is None:
            slot = next((j for j, r in enumerate(reps) if equivalent(r, ans)), None)
            if slot is None:
                slot = len(reps)
                reps.append(ans)  # type: ignore[arg-type]
                counts.append(0)
                mass.append(0.0)
            by_key[key] = slot
        counts[slot] += 1
        w = 1.0 if weights is None else float(weights[i])
        mass[slot] += w if w == w else 0.0
    if not reps:
        return Vote(None, 0, total)
    best = max(range(len(reps)), key=lambda j: (mass[j], counts[j], -j))
    return Vote(
        reps[best],
        counts[best],
        total,
        list(zip(reps, counts, strict=True)),
        weight=mass[best],
        masses=mass,
    )
