"""The TTS families behind one interface (see ``base.Method``)."""

from __future__ import annotations

from typing import Any

from rse_fast.methods.base import Candidate, Method, MethodResult, Problem
from rse_fast.methods.judge import HTTPRewardModel, LLMJudge
from rse_fast.methods.refine import Refinement
from rse_fast.methods.rse_method import RSEMethod
from rse_fast.methods.sampling import BestOfN, Fusion, SelfConsistency
from rse_fast.methods.stepwise import BeamSearch, ParticleFilter

METHODS: dict[str, type[Method]] = {
    m.name: m
    for m in (SelfConsistency, BestOfN, BeamSearch, ParticleFilter, Refinement, Fusion, RSEMethod)
}


def make_method(name: str, **options: Any) -> Method:
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; choose from {', '.join(METHODS)}")
    return METHODS[name](**options)


__all__ = [
    "METHODS",
    "BeamSearch",
    "BestOfN",
    "Candidate",
    "Fusion",
    "HTTPRewardModel",
    "LLMJudge",
    "Method",
    "MethodResult",
    "ParticleFilter",
    "Problem",
    "RSEMethod",
    "Refinement",
    "SelfConsistency",
    "make_method",
]
