"""``oversubscription: auto | paper | number``: the pure rule of core.oversubscription."""
from __future__ import annotations

import pytest

from hypersack.core.oversubscription import (MAX_AUTO_RATIO, PROBE, SATURATED, Colocation,
                                             auto_ratio, colocation, fixed_ratio, paper_ratio,
                                             ratio_mode)
from hypersack.core.spec import StudySpec
from hypersack.errors import ConfigError

SPEC = {"name": "s", "space": {"x": {"type": "float", "low": 0, "high": 1}},
        "objective": {"metric": "loss", "mode": "min"}, "budget": {"trials": 2}}


def test_paper_table_and_cpu():
    assert paper_ratio("H100") == 2.5 and paper_ratio("A100") == 3.0
    assert paper_ratio("L4") == 2.0 and paper_ratio("cpu") == 1.0


def test_modes_and_fixed_values():
    assert ratio_mode(None) == "auto" and ratio_mode("paper") == "paper"
    assert ratio_mode(2) == "fixed" and ratio_mode({"A100": 2}) == "fixed"
    assert fixed_ratio(1.5, "H100") == 1.5
    assert fixed_ratio({"A100": 2}, "A100") == 2.0 and fixed_ratio({"A100": 2}, "H100") == 2.5
    with pytest.raises(ConfigError) as info:
        ratio_mode("max")
    assert info.value.field == "oversubscription"


@pytest.mark.parametrize("value", ["auto", "paper", 2.5, {"H100": 3}, None])
def test_spec_accepts_every_mode_and_keeps_it(value):
    spec = StudySpec.from_dict({**SPEC, "oversubscription": value})
    assert StudySpec.from_dict(spec.to_dict()).oversubscription == value


def test_spec_refuses_an_unknown_mode_naming_the_field():
    with pytest.raises(ConfigError) as info:
        StudySpec.from_dict({**SPEC, "oversubscription": "lots"})
    assert info.value.field == "oversubscription"


def test_without_measurements_auto_is_the_prior():
    assert auto_ratio("H100", []).ratio == 2.5
    assert auto_ratio("H100", [], prior=1.5).ratio == 1.5
    assert "no co-location" in auto_ratio("H100", []).reason
    assert auto_ratio("cpu", [Colocation(400, 1.0)]).ratio == 1.0


def test_saturated_measurements_give_demand_over_slowdown():
    # 4 trials of 80% (D = 320) each 1.6x slower: capacity 200% -> r = 2
    assert auto_ratio("H100", [Colocation(320, 1.6)]).ratio == pytest.approx(2.0)
    # the median of the estimates 150, 200, 400
    got = auto_ratio("H100", [Colocation(300, 2.0), Colocation(320, 1.6), Colocation(480, 1.2)])
    assert got.ratio == pytest.approx(2.0) and "3 saturated" in got.reason


def test_a_slowdown_just_below_saturation_is_only_a_lower_bound():
    below = auto_ratio("H100", [Colocation(300, SATURATED - 0.01)])
    assert below.ratio == pytest.approx(max(2.5, PROBE * 3.0))
    at = auto_ratio("H100", [Colocation(300, SATURATED)])
    assert at.ratio == pytest.approx(300 / SATURATED / 100, rel=1e-3)


def test_unsaturated_measurements_probe_further_but_not_below_the_prior():
    assert auto_ratio("H100", [Colocation(100, 1.0)]).ratio == 2.5           # prior kept
    assert auto_ratio("H100", [Colocation(400, 1.05)]).ratio == pytest.approx(4 * PROBE)
    # an estimate never falls below the largest demand that ran without slowdown
    mixed = [Colocation(380, 1.0), Colocation(300, 2.0)]
    assert auto_ratio("H100", mixed).ratio == pytest.approx(3.8)


def test_auto_is_clamped_and_ignores_broken_measurements():
    assert auto_ratio("H100", [Colocation(100, 4.0)]).ratio == 1.0
    assert auto_ratio("H100", [Colocation(5000, 1.0)]).ratio == MAX_AUTO_RATIO
    assert auto_ratio("H100", [Colocation(float("nan"), 2.0), Colocation(100, -1)]).ratio == 2.5


def test_a_colocation_measurement():
    m = colocation(0.1, 0.25, [40, 60, 50])
    assert m == Colocation(150.0, pytest.approx(2.5))
    assert colocation(0.1, 0.2, [40]) is None                 # alone: nothing learned
    assert colocation(0.0, 0.2, [40, 40]) is None
    assert colocation(0.1, float("inf"), [40, 40]) is None
    assert colocation(0.1, 0.2, [40, float("nan")]) is None


def test_scaled_compute_places_as_the_learned_ratio_would():
    from hypersack.core.oversubscription import scaled_compute
    # inventory at r0 = 2.5 (capacity 250), learned r = 5: a 40% job counts as 20%
    assert scaled_compute(40.0, 2.5, 5.0) == pytest.approx(20.0)
    assert scaled_compute(40.0, 2.5, 1.25) == pytest.approx(80.0)
    assert scaled_compute(40.0, 2.0, 2.0) == 40.0
    with pytest.raises(ConfigError):
        scaled_compute(40.0, 2.0, 0.5)
