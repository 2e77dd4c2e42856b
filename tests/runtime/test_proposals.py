"""The proposal thread: model fits at most a share of the time, cut short when waited for."""
from __future__ import annotations

import pytest

import hypersack.runtime.loop.proposals as proposals
from hypersack.runtime.loop.proposals import ProposalThread


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_after_a_job_the_thread_rests_until_its_share_is_kept_unless_a_caller_waits():
    clock = _Clock()
    thread = ProposalThread(share=0.25, clock=clock)

    def fit(took):
        def job():
            clock.now += took                 # the fit "takes" this long
            return took
        return job
    assert thread.submit(fit(100.0)).result() == 100.0
    assert thread._rest_until == pytest.approx(100.0 + 300.0)   # 25%: 3x the fit's time
    second = thread.submit(fit(1.0))
    third = thread.submit(fit(1.0))
    assert not second.done() and not third.done()          # resting: 300 s of the clock
    assert second.result(timeout=10) == 1.0                # waited for: it runs at once
    assert thread.busy_s == pytest.approx(101.0)
    thread.shutdown(cancel=True)
    assert third.cancelled()


def test_an_error_reaches_whoever_collects_the_proposal():
    thread = ProposalThread()

    def bad():
        raise ValueError("no fit")
    with pytest.raises(ValueError, match="no fit"):
        thread.submit(bad).result(timeout=10)
    thread.shutdown()
    with pytest.raises(RuntimeError):
        thread.submit(lambda: 1)


def test_an_idle_thread_ends_and_the_next_job_starts_another(monkeypatch):
    monkeypatch.setattr(proposals, "IDLE_S", 0.01)
    thread = ProposalThread(share=1.0)
    assert thread.submit(lambda: 1).result(timeout=10) == 1
    first = thread._thread
    assert first is not None
    first.join(timeout=10)
    assert not first.is_alive() and thread._thread is None
    assert thread.submit(lambda: 2).result(timeout=10) == 2


def test_the_share_is_checked():
    with pytest.raises(ValueError):
        ProposalThread(share=0.0)


def test_eager_jobs_never_rest():
    clock = _Clock()
    thread = ProposalThread(share=0.25, clock=clock)

    def fit():
        clock.now += 100.0
    thread.submit(fit).result(timeout=10)
    eager = thread.eager.submit(lambda: "now")
    assert eager.waited                                   # marked so that it never rests
    assert eager.result(timeout=10) == "now"
    thread.shutdown()
