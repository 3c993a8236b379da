"""Every TTS family by name, and the factory that builds one.

Families are imported on first use: a program that only votes never loads RSE's kernels
(numba) or the encoder.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Any

from rse_fast.errors import UnknownOptionError
from rse_fast.methods.base import Method
from rse_fast.methods.defaults import ONLINE_KEEP, STOP_EPSILON

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


def _modifier_options(modifier: str) -> dict[str, Any]:
    """What ``+modifier`` in a method's name sets: the names the reports use."""
    from rse_fast.methods.voting import ConfidenceRule

    table: dict[str, dict[str, Any]] = {
        # stop once the vote is settled (the Beta criterion at 1 - STOP_EPSILON)
        "stop": {"stop_epsilon": STOP_EPSILON},
        # vote weighted by the model's own token confidence (asks for logprobs)
        "conf": {"confidence": True},
        # DeepConf online: a sample whose confidence falls below the first wave's is stopped
        "conf-online": {"confidence": ConfidenceRule(keep=ONLINE_KEEP, online=True)},
        # the pick among candidates that pass the examples the problem states (code tasks)
        "filter": {"execution_filter": True},
        # RSE: each rollout's code run on the stated examples, failures banked as pitfalls
        "check": {"checker": "visible"},
        # RSE: every equation between numbers a distilled statement makes is re-computed
        "arith": {"checker": "arithmetic"},
        # code: the pick by behaviour, programs grouped by their outputs on probe inputs
        "cluster": {"behaviour_vote": True},
    }
    return table[modifier]


MODIFIERS = ("stop", "conf", "conf-online", "filter", "check", "arith", "cluster")


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
            (distillation as a fresh prompt pasting the rollout), ``brief`` (a distillation
            ask under half as long, the schema giving the reply its shape: more is cached),
            ``primed`` (the ask in every rollout's system turn, a one-line cue after it: the
            cache serves nearly all of a distillation, every rollout reads the ask),
            ``grounded`` (no model distillation: with ``checker="visible"``, the bank holds
            what running the code showed), ``passing`` (with ``checker="visible"``: a
            passing rollout's code is filed as a verified proposition), ``checked`` (with
            ``checker="visible"``: the bank framed as what running the code showed, not as
            unchecked notes), ``conf-distill`` (only the more confident half of a round is
            distilled, by the model's own token probabilities), ``conf-split``
            (propositions only from confident rollouts that side with the round's
            confidence-weighted vote, pitfalls from the rest), ``conf-agree`` (a proposition
            is shown only while its rollouts side with the running confidence-weighted vote).
            Each name may add ``+`` modifiers, as the reports name methods: ``+stop`` (stop
            once the vote is settled, ε = :data:`STOP_EPSILON`), ``+conf`` (the vote weighted
            by the model's token confidence), ``+conf-online`` (unsure samples stopped
            mid-stream), ``+filter`` (sc, bon: the pick among candidates that pass the
            examples a code problem states), ``+check`` (rse: rollouts' code run on them),
            ``+arith`` (rse: the equations its statements make re-computed),
            ``+cluster`` (sc, rse on code: programs vote by what they give back on inputs
            near the stated examples');
            ``make_method("sc+stop+conf")``. An option given by keyword wins over one a
            modifier sets; a modifier the family cannot take is refused as an unknown option.
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
    base, *modifiers = name.split("+")
    family, _, variant = base.partition(":")
    if family not in FAMILIES or (variant and not METHODS[family].variants):
        varied = [
            f"{f}:<variant> with a variant of {', '.join(METHODS[f].variants)}"
            for f in FAMILIES
            if METHODS[f].variants
        ]
        raise ValueError(
            f"unknown method {name!r}; choose from {', '.join(FAMILIES)} "
            f"(or {'; or '.join(varied)}), each optionally with +{', +'.join(MODIFIERS)}"
        )
    implied: dict[str, Any] = {"variant": variant} if variant else {}
    for modifier in modifiers:
        if modifier not in MODIFIERS:
            raise ValueError(
                f"unknown modifier +{modifier} in method {name!r}; one of +{', +'.join(MODIFIERS)}"
            )
        implied.update(_modifier_options(modifier))
    try:
        method = METHODS[family](**{**implied, **options})
    except UnknownOptionError as exc:
        by_modifier = [u for u in exc.unknown if u in implied and u not in options]
        if not by_modifier:
            raise
        raise UnknownOptionError(
            f"method {name!r} (a modifier sets what {family} does not take)", exc.unknown, exc.valid
        ) from None
    method.name = name  # records and reports tell sc from sc+stop by it
    return method
