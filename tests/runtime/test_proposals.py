"""The proposal runner: model fits run on the loop's thread when looked at, at most a share of
the time; a fit that is waited for runs at once."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from hypersack.runtime.loop.proposals import ProposalRunner


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _fit(clock, took, value=None):
    def job():
        clock.now += took                     # the fit "takes" this long
        return took if value is None else value
    return job


def test_fits_run_when_looked_at_within_their_share_of_the_time():
    clock = _Clock()
    runner = ProposalRunner(share=0.25, clock=clock)
    first = runner.submit(_fit(clock, 1.0))
    assert first.done() and first.result() == 1.0         # nothing spent yet: it runs
    second = runner.submit(_fit(clock, 1.0))
    assert not second.done()                               # 1 s of fits in 1 s: over 25%
    clock.now = 7.9
    assert not second.done()               # 1 s, and 1 s more (as long as the last), in 7.9 s
    clock.now = 8.0                                        # 2 s in 8 s: 25%
    assert second.done() and runner.busy_s == pytest.approx(2.0)
    assert runner.busy_s / clock.now <= 0.25               # within the share once it ran


def test_a_fit_that_is_waited_for_runs_at_once_and_errors_reach_the_caller():
    clock = _Clock()
    runner = ProposalRunner(share=0.1, clock=clock)
    runner.submit(_fit(clock, 5.0)).result()
    assert runner.submit(_fit(clock, 1.0, "now")).result() == "now"

    def bad():
        raise ValueError("no fit")
    with pytest.raises(ValueError, match="no fit"):
        runner.submit(bad).result()


def test_plain_samplers_get_a_thread_and_the_share_is_checked():
    runner = ProposalRunner()
    assert isinstance(runner.eager, ThreadPoolExecutor) and runner.eager is runner.eager
    assert runner.eager.submit(lambda: 3).result(timeout=10) == 3
    runner.eager.shutdown()
    with pytest.raises(ValueError):
        ProposalRunner(share=0.0)
