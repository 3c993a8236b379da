"""Each family says what it needs (a verifier, an encoder, a reward model in the verifier's
place), and what it says matches what its constructor takes: the evaluation and the service
lend it those from the declaration, never from its name."""

from __future__ import annotations

import inspect

import pytest

from rse_fast.methods.catalog import METHODS


def takes(cls: type, name: str) -> bool:
    return any(name in inspect.signature(k.__init__).parameters for k in cls.__mro__
               if "__init__" in vars(k))  # fmt: skip


@pytest.mark.parametrize("name", sorted(METHODS))
def test_a_family_declares_what_it_takes(name):
    cls = METHODS[name]
    assert cls.needs_judge == takes(cls, "judge")
    assert cls.needs_encoder == takes(cls, "encoder")
    assert not cls.takes_reward_model or cls.needs_judge  # a reward model is a verifier


def test_the_verifier_families_are_the_ones_the_study_scores_with_one():
    assert {n for n in METHODS if METHODS[n].needs_judge} == {"bon", "beam", "particle",
                                                              "refine"}  # fmt: skip
    assert {n for n in METHODS if METHODS[n].takes_reward_model} == {"bon"}
