"""The config's fields by concern and its named presets."""

from __future__ import annotations

import dataclasses

import pytest

from rse_fast.rse.config import GROUPS, PRESETS, RSEConfig


def test_every_field_belongs_to_exactly_one_concern():
    names = [f.name for f in dataclasses.fields(RSEConfig)]
    grouped = [name for group in GROUPS.values() for name in group]
    assert sorted(grouped) == sorted(names)
    assert len(grouped) == len(set(grouped))
    assert set(GROUPS) == {"sampling", "distillation", "bank", "planner"}


def test_grouped_view_holds_the_values_set():
    cfg = RSEConfig(rounds=2, k=3, tau_positive=0.7, settle_margin=None, distill_batch=5)
    view = cfg.grouped()
    assert view["sampling"]["rounds"] == 2 and view["sampling"]["k"] == 3
    assert view["bank"]["tau_positive"] == 0.7
    assert view["planner"]["settle_margin"] is None
    assert view["distillation"]["distill_batch"] == 5


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_each_preset_is_a_valid_config_with_its_fields(name):
    cfg = RSEConfig.preset(name, rounds=3)
    assert cfg.rounds == 3
    for field, value in PRESETS[name].items():
        assert getattr(cfg, field) == value


def test_an_unknown_preset_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown RSE preset 'nope'; choose from"):
        RSEConfig.preset("nope")
