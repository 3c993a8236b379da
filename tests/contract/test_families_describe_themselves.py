"""Each family says what it needs (a verifier, an encoder, a reward model in the verifier's
place), and what it says matches what its constructor takes: the evaluation and the service
lend it those from the declaration, never from its name."""

from __future__ import annotations

import inspect

import pytest

from rse_fast.methods.catalog import METHODS, make_method
from rse_fast.methods.defaults import STOP_EPSILON


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


@pytest.mark.parametrize("name", sorted(METHODS))
def test_a_familys_declared_request_fields_build_it(name):
    """The service builds a family from its declared fields alone: their defaults, through
    the family's ``request_options``, are options its constructor takes."""
    family = METHODS[name]
    request = {"k": 2, **{f.name: f.default for f in family.request_fields}}
    options = family.request_options(request, encoder=None, progress=None)
    method = make_method(name, **options)
    assert method.name == name


def test_the_service_refuses_a_field_only_another_family_declares():
    from rse_fast.errors import RequestError
    from rse_fast.serve.requests import Caps, parse_method_request

    msg = [{"role": "user", "content": "What is 6 * 7?"}]
    foreign = (
        ("sc:m", "rounds", 2, "rse"),
        ("bon:m", "tool_vote", "name", "sc"),
        ("fusion:m", "confidence", True, "sc"),
    )
    for model, field, value, taker in foreign:
        with pytest.raises(RequestError) as refused:
            parse_method_request({"model": model, "messages": msg, field: value})
        assert refused.value.param == field and taker in str(refused.value), model
    spec = parse_method_request({"model": "rse:m", "messages": msg, "rounds": 2})
    assert spec is not None and spec.options["rounds"] == 2
    assert spec.options["settle_margin"] == 1.0 and spec.options["stop_epsilon"] is None
    with pytest.raises(RequestError, match="--max-rounds"):
        parse_method_request({"model": "rse:m", "messages": msg, "rounds": 5}, Caps(max_rounds=4))
    sc = parse_method_request({"model": "sc:m", "messages": msg, "stop_epsilon": None})
    assert sc is not None and sc.options["stop_epsilon"] is None  # null turns the stop off
    default = parse_method_request({"model": "sc:m", "messages": msg})
    assert default is not None and default.options["stop_epsilon"] == STOP_EPSILON


def test_a_family_with_variants_takes_them_by_name_and_others_refuse_them():
    assert make_method("rse:no-settle").name == "rse:no-settle"
    with pytest.raises(ValueError, match="rse:<variant>"):
        make_method("bon:no-settle")
