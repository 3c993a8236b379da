"""Every TTS family by name, and the factory that builds one."""

from __future__ import annotations

from typing import Any

from rse_fast.methods.base import Method
from rse_fast.methods.refine import Refinement
from rse_fast.methods.rse_method import VARIANTS, RSEMethod
from rse_fast.methods.sampling import BestOfN, Fusion, SelfConsistency
from rse_fast.methods.stepwise import BeamSearch, ParticleFilter

METHODS: dict[str, type[Method]] = {
    m.name: m
    for m in (SelfConsistency, BestOfN, BeamSearch, ParticleFilter, Refinement, Fusion, RSEMethod)
}


def make_method(name: str, **options: Any) -> Method:
    """A TTS family by name, with its options.

    Args:
        name: one of ``sc`` (majority vote), ``bon`` (best-of-N with a verifier), ``beam``,
            ``particle``, ``refine``, ``fusion``, ``rse``, or an RSE ablation variant
            ``rse:<variant>`` (``neg-only``, ``pos-only``, ``no-dedup``, ``replace-longer``,
            ``guided``, ``last``).
        options: the family's keyword options (``parallel``, ``max_tokens``, ``temperature``,
            ``seed`` for all; ``judge`` for bon/beam/particle; ``k``, ``encoder`` for rse, …).

    Raises:
        ValueError: an unknown name, or an option the family does not take (the message
            lists the valid ones).

    Example::

        method = make_method("sc", parallel=8, max_tokens=512)
        result = await method.run(Problem("p1", "What is 6 * 7?", gold="42"), 4000, client)
        result.final.answer, result.tokens
    """
    family, _, variant = name.partition(":")
    if family not in METHODS or (variant and family != "rse"):
        raise ValueError(
            f"unknown method {name!r}; choose from {', '.join(METHODS)} "
            f"(or rse:<variant> with a variant of {', '.join(VARIANTS)})"
        )
    if variant:
        return RSEMethod(variant=variant, **options)
    return METHODS[family](**options)
