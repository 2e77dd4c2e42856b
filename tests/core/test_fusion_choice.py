"""``execution: auto``'s fused-or-separate rule (``core.packs.choose_fusion``) and the pack width
a probe measures (``core.packs.planned_width``): pure, from the probe's figures."""
from __future__ import annotations

import math

import pytest

from hypersack.core.packs import (FUSED_MARGIN, FusionProbe, choose_fusion, planned_width)
from hypersack.errors import ConfigError


def _probe(fused_rate: float, separate_rate: float, width: int = 16) -> FusionProbe:
    return FusionProbe("cpu", width, 5, width / fused_rate, 1.0 / separate_rate)


def test_fused_is_chosen_at_the_margin_and_not_below_it():
    assert FUSED_MARGIN == 1.1
    assert choose_fusion("m", _probe(110.5, 100.0)).fused
    assert not choose_fusion("m", _probe(109.5, 100.0)).fused        # faster, within the margin
    exact = FusionProbe("cpu", 1, 5, fused_step_s=0.25, alone_step_s=0.5)    # 4/s against 2/s
    assert choose_fusion("m", exact, margin=2.0).fused                # at the margin: fused
    assert not choose_fusion("m", _probe(100.0, 100.0)).fused
    assert not choose_fusion("m", _probe(50.0, 100.0)).fused


def test_the_margin_is_a_parameter_and_must_be_at_least_one():
    assert choose_fusion("m", _probe(130.0, 100.0), margin=1.25).fused
    assert not choose_fusion("m", _probe(120.0, 100.0), margin=1.25).fused
    assert choose_fusion("m", _probe(101.0, 100.0), margin=1.0).fused
    with pytest.raises(ConfigError, match="execution.margin"):
        choose_fusion("m", _probe(200.0, 100.0), margin=0.9)


def test_rates_are_member_steps_per_second():
    probe = FusionProbe("cpu", 8, 5, fused_step_s=0.02, alone_step_s=0.004)
    assert math.isclose(probe.fused_rate, 400.0) and math.isclose(probe.separate_rate, 250.0)
    assert choose_fusion("m", probe).fused
    # the same times at width 2: 100 member-steps/s fused against 250 alone
    assert not choose_fusion("m", FusionProbe("cpu", 2, 5, 0.02, 0.004)).fused


def test_no_valid_probe_is_separate():
    assert not choose_fusion("m", None).fused
    for bad in (0.0, -1.0, math.nan, math.inf):
        choice = choose_fusion("m", FusionProbe("cpu", 4, 5, bad, 0.01))
        assert not choice.fused and "no valid fusion probe" in choice.reason
        assert not choose_fusion("m", FusionProbe("cpu", 4, 5, 0.01, bad)).fused


def test_the_reason_names_the_figures_and_the_outcome():
    choice = choose_fusion("hidden=64", FusionProbe("cpu", 16, 5, 16 / 812, 1 / 540))
    assert choice.mode == "fused"
    assert choice.reason.startswith("hidden=64 fused x16: 812 member-steps/s vs separate 540/s")
    assert choice.reason.endswith("-> fused (fused needs >= 1.1x)")
    data = choice.to_dict()
    assert data["mode"] == "fused" and data["width"] == 16 and data["device"] == "cpu"
    assert data["fused_rate"] == pytest.approx(812) and data["separate_rate"] == pytest.approx(540)
    assert FusionProbe.from_dict(data) == choice.probe


def test_the_planned_width_is_a_devices_share_of_the_trials():
    assert planned_width(16, 32, 2) == 16
    assert planned_width(16, 12, 2) == 6
    assert planned_width(16, 13, 2) == 7
    assert planned_width(16, None, 2) == 16
    assert planned_width(4, 1, 8) == 1
    with pytest.raises(ConfigError, match="pack.max_members"):
        planned_width(0, 4, 1)
