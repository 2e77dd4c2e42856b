"""``execution: auto``'s rule (core.execution): fused, co-located or exclusive from profiles."""
from __future__ import annotations

import pytest

from hypersack.core.execution import (FILLS_DEVICE_PERCENT, MIN_FUSED_TRIALS, Group,
                                      choose_execution)


def test_enough_trials_of_a_fusable_architecture_fuse():
    got = choose_execution(Group("resnet", MIN_FUSED_TRIALS, True, 30.0))
    assert got.mode == "fused" and f"{MIN_FUSED_TRIALS} trials" in got.reason
    assert choose_execution(Group("resnet", MIN_FUSED_TRIALS - 1, True, 30.0)).mode == "co-located"


def test_a_trial_that_fills_the_gpu_alone_runs_exclusive():
    full = choose_execution(Group("big", 1, False, FILLS_DEVICE_PERCENT))
    assert full.mode == "exclusive" and "fills the GPU" in full.reason
    assert choose_execution(Group("big", 1, False, FILLS_DEVICE_PERCENT - 1)).mode == "co-located"
    # fusing wins over a heavy profile: a pack is one process on the device anyway
    assert choose_execution(Group("big", 8, True, 99.0)).mode == "fused"


def test_half_the_memory_is_exclusive_too():
    assert choose_execution(Group("m", 1, False, 20.0, 41.0, 80.0)).mode == "exclusive"
    assert choose_execution(Group("m", 1, False, 20.0, 40.0, 80.0)).mode == "co-located"
    assert choose_execution(Group("m", 1, False, 20.0, 41.0, None)).mode == "co-located"


@pytest.mark.parametrize("group, words", [
    (Group("lm", 2, False), "not fusable; not profiled yet"),
    (Group("lm", 2, True, 35.0), "only 2 trial(s) to fuse"),
    (Group("lm", 2, False, 35.0), "35% utilisation alone"),
])
def test_co_located_says_why_in_one_line(group, words):
    got = choose_execution(group)
    assert got.mode == "co-located" and words in got.reason and "\n" not in got.reason
