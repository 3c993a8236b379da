"""Answers: extraction, normalisation, equivalence (with killable symbolic checks), voting."""

from __future__ import annotations

from rse_fast.answers.checker import CheckerPool, Verdict
from rse_fast.answers.core import (
    Vote,
    answers_equivalent,
    check_equivalence,
    checker_stats,
    extract_answer,
    extract_boxed,
    majority_vote,
    normalize_answer,
    off_loop,
)

__all__ = [
    "CheckerPool", "Verdict", "Vote", "answers_equivalent", "check_equivalence", "checker_stats",
    "extract_answer", "extract_boxed", "majority_vote", "normalize_answer", "off_loop",
]  # fmt: skip
