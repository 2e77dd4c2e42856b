"""``execution: auto``'s fused-or-separate rule (``core.packs.choose_fusion``) and the pack width
a probe measures (``core.packs.planned_width``): pure, from the probe's figures."""
from __future__ import annotations

import math

import pytest

from hypersack.core.packs import (FUSED_MARGIN, FusionProbe, choose_fusion, expected_occupancy,
                                  planned_width, study_rates, study_waves, wave_occupancy)
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


# ---- the study's real cost: fixed costs, trial length, occupancy -------------------------------

def _study_probe(**over) -> FusionProbe:
    """x16: steady 160 member-steps/s fused against 100/s alone (a 1.6x steady lead)."""
    base = dict(device="cpu", width=16, steps=2, fused_step_s=0.1, alone_step_s=0.01,
                fused_fixed_s=0.0, alone_fixed_s=0.0, trial_steps=20.0, pack_steps=20.0)
    return FusionProbe(**{**base, **over})


def test_without_fixed_costs_and_equal_trials_the_study_rates_are_the_steady_rates():
    fused, separate = study_rates(_study_probe())
    assert fused == pytest.approx(160.0) and separate == pytest.approx(100.0)
    assert choose_fusion("m", _study_probe()).fused


def test_a_packs_start_weighs_on_short_trials_only():
    """A pack's fixed 2 s over 16 members of 20 steps: 16*20 / (2 + 20*0.1) = 80/s, against
    100/s alone: separate; the same pack over trials of 400 steps: 16*400 / 42 = 152/s."""
    short = _study_probe(fused_fixed_s=2.0)
    fused, separate = study_rates(short)
    assert fused == pytest.approx(80.0) and separate == pytest.approx(100.0)
    assert not choose_fusion("m", short).fused
    long = _study_probe(fused_fixed_s=2.0, trial_steps=400.0, pack_steps=400.0)
    assert study_rates(long)[0] == pytest.approx(16 * 400 / 42)
    assert choose_fusion("m", long).fused


def test_a_trials_fixed_cost_alone_weighs_on_separate():
    """Steady, fused loses (60/s against 100/s); a trial alone that pays 0.3 s of fixed costs
    over 20 steps makes 20 / 0.5 = 40/s, and 60 >= 1.1 * 40: fused."""
    slow_pack = _study_probe(fused_step_s=16 / 60)
    assert not choose_fusion("m", slow_pack).fused
    costly_alone = _study_probe(fused_step_s=16 / 60, alone_fixed_s=0.3)
    fused, separate = study_rates(costly_alone)
    assert separate == pytest.approx(40.0) and fused == pytest.approx(60.0)
    assert choose_fusion("m", costly_alone).fused


def test_members_of_unequal_lengths_leave_seats_empty_unless_queued_trials_refill_them():
    """Trials of 20 steps on average in a pack that steps 40 (its longest member): half the
    seat-steps train, 80/s against 100/s; with 4 waves of trials per seat the seats refill,
    only the last wave drains: 4*20 / (3*20 + 40) = 80%, 128/s; no trial budget: 100%."""
    uneven = _study_probe(pack_steps=40.0)
    assert expected_occupancy(20, 40, 1) == pytest.approx(0.5)
    assert study_rates(uneven)[0] == pytest.approx(80.0)
    assert not choose_fusion("m", uneven).fused
    assert expected_occupancy(20, 40, 4) == pytest.approx(0.8)
    assert study_rates(uneven, waves=4)[0] == pytest.approx(128.0)
    assert choose_fusion("m", uneven, waves=4).fused
    assert expected_occupancy(20, 40, math.inf) == 1.0
    assert expected_occupancy(20, 10, 1) == 1.0         # the longest is never shorter than the mean
    assert expected_occupancy(0, 40, 1) == 1.0          # no trial length: steady rates


def test_study_waves_are_trials_per_seat():
    assert study_waves(32, 16, 2) == 1.0
    assert study_waves(128, 16, 2) == 4.0
    assert study_waves(8, 16, 2) == 1.0                 # never below one wave
    assert study_waves(None, 16, 2) == math.inf
    with pytest.raises(ConfigError, match="execution.waves"):
        choose_fusion("m", _study_probe(), waves=0.5)


def test_the_reason_and_the_figures_name_the_study_rates():
    choice = choose_fusion("hidden=64", _study_probe(fused_fixed_s=2.0, alone_fixed_s=0.05,
                                                     pack_steps=40.0))
    assert choice.reason.startswith("hidden=64 fused x16: ")
    assert "over trials of 20 steps (fixed 2.00 s / 0.05 s, occupancy 50%)" in choice.reason
    data = choice.to_dict()
    fused, separate = study_rates(choice.probe)
    assert data["fused_rate"] == pytest.approx(fused, abs=1e-3)
    assert data["separate_rate"] == pytest.approx(separate, abs=1e-3)
    assert data["steady_fused_rate"] == pytest.approx(160.0)
    assert FusionProbe.from_dict(data) == choice.probe


def test_a_probe_kept_before_fixed_costs_reads_them_as_zero():
    old = {"device": "cpu", "width": 4, "steps": 3, "fused_step_s": 0.01, "alone_step_s": 0.02}
    probe = FusionProbe.from_dict(old)
    assert (probe.fused_fixed_s, probe.trial_steps) == (0.0, 0.0)
    assert study_rates(probe) == (probe.fused_rate, probe.separate_rate)
    for bad in (-1.0, math.nan, math.inf):
        assert not _study_probe(fused_fixed_s=bad).valid
        assert not _study_probe(trial_steps=bad).valid


def test_a_pack_is_compacted_as_its_members_leave():
    """Members of 8, 8, 16 and 16 steps in 4 slots: 8 steps x 4 slots, then the 2 left fill
    half the slots: compacted to 2, 8 steps x 2: 48 member-steps over 48 slot-steps; without
    compaction (3 long of 4) the last 8 steps compute all 4 slots."""
    assert wave_occupancy([8, 8, 16, 16], 4) == pytest.approx(1.0)
    assert wave_occupancy([8, 16, 16, 16], 4) == pytest.approx(56 / 64)
    assert wave_occupancy([10, 10, 40], 4) == pytest.approx(60 / (10 * 4 + 30 * 1))
    assert wave_occupancy([5], 1) == 1.0 and wave_occupancy([], 4) == 1.0


def test_the_members_lengths_decide_the_occupancy_when_the_probe_has_them():
    """The same mean and longest trial (20 and 40 steps), with compaction: 16 members, half of
    10 steps and half of 30: 8 leave at step 10, the pack is compacted to 8: occupancy 320 /
    (10*16 + 20*8) = 100%; the mean/longest estimate says 50%; refilled seats blend in."""
    lengths = (10.0,) * 8 + (30.0,) * 8
    probe = _study_probe(trial_steps=20.0, pack_steps=30.0, member_steps=lengths)
    assert study_rates(probe)[0] == pytest.approx(160.0)
    assert study_rates(_study_probe(trial_steps=20.0, pack_steps=30.0))[0] < 120.0
    # 10, 30 and 14 x 20: 16 slots for 20 steps, then 1 for 10: 320 over 330
    uneven = _study_probe(member_steps=(10.0, 30.0) + (20.0,) * 14)
    assert study_rates(uneven)[0] == pytest.approx(160.0 * 320 / 330)
    assert study_rates(uneven, waves=2)[0] == pytest.approx(160.0 * 2 / (1 + 330 / 320))
    assert FusionProbe.from_dict(uneven.to_dict()) == uneven
    assert not _study_probe(member_steps=(10.0, math.nan)).valid
