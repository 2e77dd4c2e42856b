"""When a trial has run too long (core.timeouts)."""
import math

import pytest

from hypersack.core.timeouts import deadline, timed_out


def test_a_trial_times_out_strictly_after_its_limit():
    assert not timed_out(10.0, 15.0, 5.0)
    assert timed_out(10.0, math.nextafter(15.0, math.inf), 5.0)
    assert not timed_out(10.0, 1e9, None)
    assert not timed_out(None, 1e9, 5.0)


@pytest.mark.parametrize("start,limit", [(0.0, 5.0), (0.1, 0.2), (1e6 + 0.3, 7.7), (3.0, 1e-9)])
def test_the_deadline_is_the_first_moment_it_has_timed_out(start, limit):
    t = deadline(start, limit)
    assert timed_out(start, t, limit)
    assert not timed_out(start, math.nextafter(t, -math.inf), limit)
    assert t - (start + limit) < 1e-6


def test_no_limit_no_deadline():
    assert deadline(3.0, None) is None


def test_ranks_straggle_strictly_after_the_grace_past_rank_zero():
    from hypersack.core.timeouts import RANK_GRACE_S, straggling
    assert RANK_GRACE_S == 60.0
    assert not straggling(None, 1e9)
    assert not straggling(100.0, 160.0)
    assert straggling(100.0, math.nextafter(160.0, math.inf))
    assert straggling(0.0, 2.5, grace=2.0) and not straggling(0.0, 1.5, grace=2.0)


def test_silence_counts_from_the_first_heartbeat_half_the_limit_is_not_responding():
    from hypersack.core.timeouts import Silence, silence
    assert silence(None, 1e9, 10.0) is Silence.HEARD            # no heartbeat yet
    assert silence(0.0, 1e9, None) is Silence.HEARD             # not watched
    assert silence(0.0, 5.0, 10.0) is Silence.HEARD
    assert silence(0.0, math.nextafter(5.0, math.inf), 10.0) is Silence.NOT_RESPONDING
    assert silence(0.0, 10.0, 10.0) is Silence.NOT_RESPONDING
    assert silence(0.0, math.nextafter(10.0, math.inf), 10.0) is Silence.GONE
