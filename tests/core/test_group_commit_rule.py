"""The group commit rule: a turn waits for more reports only while enough running trials may
still report in it (PostgreSQL's commit_delay / commit_siblings)."""
from __future__ import annotations

import math

import pytest

from hypersack.core.group_commit import GROUP_SIBLINGS, GROUP_WINDOW_S, GroupCommit
from hypersack.errors import ConfigError


def test_enough_trials_may_still_report_the_turn_waits_the_rest_of_the_window():
    rule = GroupCommit(0.002, siblings=2)
    assert rule.wait_s(running=5, settled=1, waited_s=0.0) == pytest.approx(0.002)
    assert rule.wait_s(running=5, settled=1, waited_s=0.0005) == pytest.approx(0.0015)


def test_the_turn_waits_while_exactly_siblings_trials_may_still_report_and_not_with_one_fewer():
    rule = GroupCommit(0.010, siblings=3)
    assert rule.wait_s(running=4, settled=1, waited_s=0.0) == pytest.approx(0.010)   # 3 may
    assert rule.wait_s(running=4, settled=2, waited_s=0.0) == 0.0                    # 2 may
    assert rule.wait_s(running=2, settled=0, waited_s=0.0) == 0.0


def test_a_spent_window_commits_now_never_a_negative_wait():
    rule = GroupCommit(0.002, siblings=1)
    assert rule.wait_s(running=100, settled=0, waited_s=0.002) == 0.0
    assert rule.wait_s(running=100, settled=0, waited_s=0.5) == 0.0


def test_no_window_never_waits():
    assert GroupCommit(0.0, siblings=1).wait_s(running=10_000, settled=0, waited_s=0.0) == 0.0


def test_siblings_one_waits_until_every_running_trial_has_settled():
    rule = GroupCommit(0.002, siblings=1)
    assert rule.wait_s(running=3, settled=2, waited_s=0.0) > 0
    assert rule.wait_s(running=3, settled=3, waited_s=0.0) == 0.0
    assert rule.wait_s(running=3, settled=4, waited_s=0.0) == 0.0   # more settled than running


def test_defaults_two_workers_never_wait_ten_thousand_trials_do():
    rule = GroupCommit()
    assert (rule.window_s, rule.siblings) == (GROUP_WINDOW_S, GROUP_SIBLINGS) == (0.002, 5)
    assert rule.wait_s(running=2, settled=1, waited_s=0.0) == 0.0
    assert rule.wait_s(running=2, settled=0, waited_s=0.0) == 0.0
    assert rule.wait_s(running=10_240, settled=1, waited_s=0.0) == pytest.approx(0.002)


@pytest.mark.parametrize("window", [-0.001, math.nan, math.inf, True, "0.002", None])
def test_a_bad_window_names_the_field_and_value(window):
    with pytest.raises(ConfigError) as err:
        GroupCommit(window, 1)
    assert err.value.field == "group_window_s"
    assert err.value.value is window


@pytest.mark.parametrize("siblings", [0, -1, 1.5, True, "5", None])
def test_bad_siblings_name_the_field_and_value(siblings):
    with pytest.raises(ConfigError) as err:
        GroupCommit(0.002, siblings)
    assert err.value.field == "group_siblings"
    assert err.value.value is siblings
