"""Every TTS family by name, and the factory that builds one.

Families are imported on first use: a service that only votes never loads RSE's kernels
(numba) or the encoder.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Any

from rse_fast.methods.base import Method

#: name -> (module, class) of each family.
FAMILIES: dict[str, tuple[str, str]] = {
    "sc": ("rse_fast.methods.sc", "SelfConsistency"),
    "bon": ("rse_fast.methods.bon", "BestOfN"),
    "beam": ("rse_fast.methods.beam", "BeamSearch"),
    "particle": ("rse_fast.methods.particle", "ParticleFilter"),
    "refine": ("rse_fast.methods.refine", "Refinement"),
    "fusion": ("rse_fast.methods.fusion", "Fusion"),
    "rse": ("rse_fast.methods.rse_method", "RSEMethod"),
    "reflexion": ("rse_fast.methods.reflexion", "Reflexion"),
}


class _Families(Mapping[str, type[Method]]):
    """The families as a read-only mapping whose classes are imported when looked up."""

    def __getitem__(self, name: str) -> type[Method]:
        module, attr = FAMILIES[name]
        cls: type[Method] = getattr(importlib.import_module(module), attr)
        return cls

    def __iter__(self) -> Iterator[str]:
        return iter(FAMILIES)

    def __len__(self) -> int:
        return len(FAMILIES)


METHODS: Mapping[str, type[Method]] = _Families()


def make_method(name: str, **options: Any) -> Method:
    """A TTS family by name, with its options.

    Args:
        name: one of ``sc`` (majority vote), ``bon`` (best-of-N with a verifier), ``beam``,
            ``particle``, ``refine``, ``fusion``, ``rse``, ``reflexion`` (one retry per
            sample that fails an example its problem states), or an RSE ablation variant
            ``rse:<variant>``, each one change to the defaults: ``support-1`` (items seen once
            are shown), ``no-settle`` (never stop guiding), ``rules`` (the rules framing),
            ``short`` (the one-line framing), ``structured`` (the structured item format),
            ``votes`` (the distiller sees the round's answer split), ``batch`` (one
            distillation per round), ``neg-only``, ``pos-only``, ``no-dedup``,
            ``replace-longer`` (a longer new item replaces the kept one), ``guided`` and
            ``last`` (the answer from guided rounds, or the last round, only), ``pasted``
            (distillation as a fresh prompt pasting the rollout), ``grounded`` (no model
            distillation: with ``checker="visible"``, the bank holds what running the code
            showed), ``passing`` (with ``checker="visible"``: a passing rollout's code is
            filed as a verified proposition), ``conf-distill`` (only the more confident half
            of a round is distilled, by the model's own token probabilities), ``conf-split``
            (propositions only from confident rollouts that side with the round's
            confidence-weighted vote, pitfalls from the rest), ``conf-agree`` (a proposition
            is shown only while its rollouts side with the running confidence-weighted vote).
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
    if family not in FAMILIES or (variant and family != "rse"):
        from rse_fast.methods.rse_method import VARIANTS

        raise ValueError(
            f"unknown method {name!r}; choose from {', '.join(FAMILIES)} "
            f"(or rse:<variant> with a variant of {', '.join(VARIANTS)})"
        )
    if variant:
        return METHODS["rse"](variant=variant, **options)
    return METHODS[family](**options)
