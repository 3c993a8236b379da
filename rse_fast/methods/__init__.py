"""The TTS families behind one interface (:class:`~rse_fast.methods.base.Method`):
``make_method(name, **options)`` builds one by name."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rse_fast.util.lazy import attach

_LAZY = {
    "METHODS": "rse_fast.methods.catalog",
    "make_method": "rse_fast.methods.catalog",
    "Method": "rse_fast.methods.base",
    "MethodResult": "rse_fast.methods.types",
    "Problem": "rse_fast.methods.types",
    "VisibleResult": "rse_fast.methods.types",
    "PriorStore": "rse_fast.methods.priors",
    "Candidate": "rse_fast.methods.types",
    "LLMJudge": "rse_fast.methods.judge",
    "HTTPRewardModel": "rse_fast.methods.judge",
    "SelfConsistency": "rse_fast.methods.sc",
    "BestOfN": "rse_fast.methods.bon",
    "Fusion": "rse_fast.methods.fusion",
    "BeamSearch": "rse_fast.methods.beam",
    "ParticleFilter": "rse_fast.methods.particle",
    "Refinement": "rse_fast.methods.refine",
    "RSEMethod": "rse_fast.methods.rse_method",
}
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
    "PriorStore",
    "Problem",
    "RSEMethod",
    "Refinement",
    "SelfConsistency",
    "VisibleResult",
    "make_method",
]

if TYPE_CHECKING:
    from rse_fast.methods.base import Method
    from rse_fast.methods.beam import BeamSearch
    from rse_fast.methods.bon import BestOfN
    from rse_fast.methods.catalog import METHODS, make_method
    from rse_fast.methods.fusion import Fusion
    from rse_fast.methods.judge import HTTPRewardModel, LLMJudge
    from rse_fast.methods.particle import ParticleFilter
    from rse_fast.methods.priors import PriorStore
    from rse_fast.methods.refine import Refinement
    from rse_fast.methods.rse_method import RSEMethod
    from rse_fast.methods.sc import SelfConsistency
    from rse_fast.methods.types import Candidate, MethodResult, Problem, VisibleResult

__getattr__, __dir__ = attach(__name__, _LAZY, globals())
