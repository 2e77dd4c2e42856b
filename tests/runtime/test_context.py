"""The trainable's context: reports, stops, checkpoints that ride with reports, restores."""
from __future__ import annotations

import os
import stat

import numpy as np
import pytest

from hypersack.errors import TrialStopped
from hypersack.runtime.worker.context import TrialContext
from hypersack.runtime.worker.messages import encode


class FakeChannel:
    """Records requests; a request is 'durable' (acknowledged) as soon as it is made."""

    def __init__(self, stop_after: int | None = None, stop_now: bool = False):
        self.sent, self.requests = [], []
        self.stop_after = stop_after
        self.stop_now = stop_now

    def send(self, message):
        self.sent.append(message)

    def request(self, message):
        self.requests.append(encode(message))      # the wire form: (tag, fields...)

    def stop_requested(self):
        return self.stop_now or (self.stop_after is not None and len(self.requests) >= self.stop_after)


def ctx_for(tmp_path, channel, committed=None, attempt=1) -> TrialContext:
    return TrialContext(trial_id=3, seed=11, device="cpu", attempt=attempt, trial_dir=tmp_path / "t",
                        channel=channel, committed_checkpoint=committed)


def test_report_converts_numbers_and_waits_for_ack(tmp_path):
    channel = FakeChannel()
    ctx = ctx_for(tmp_path, channel)
    ctx.report(1, loss=np.float32(0.5), acc=np.int64(3))
    assert channel.requests == [("report", 3, 1, {"loss": 0.5, "acc": 3}, None)]
    assert type(channel.requests[0][3]["loss"]) is float
    with pytest.raises(TypeError, match="at least one metric"):
        ctx.report(2)


def test_a_stop_decided_on_a_report_is_raised_by_that_report_once_it_is_durable(tmp_path):
    channel = FakeChannel(stop_after=2)
    ctx = ctx_for(tmp_path, channel)
    ctx.report(1, loss=1.0)
    assert not ctx.should_stop()
    with pytest.raises(TrialStopped):
        ctx.report(2, loss=1.0)
    assert len(channel.requests) == 2          # the result was sent (and acknowledged) first
    assert ctx.should_stop()
    with pytest.raises(TrialStopped):
        ctx.report(3, loss=1.0)
    assert len(channel.requests) == 2


def test_a_step_finished_after_a_stop_was_asked_is_still_stored_with_its_checkpoint(tmp_path):
    # Ctrl-C (or the time budget) asks for a stop while step 4 computes: its result and its
    # checkpoint are stored, then the trial stops. Nothing computed is lost, nothing skipped.
    channel = FakeChannel(stop_now=True)
    ctx = ctx_for(tmp_path, channel)
    assert ctx.should_stop()
    with pytest.raises(TrialStopped):
        ctx.report(4, checkpoint={"epoch": 4}, loss=0.5)
    (request,) = channel.requests
    assert request[:4] == ("report", 3, 4, {"loss": 0.5}) and request[4] is not None
    assert ctx.restore() == {"epoch": 4}


def test_a_checkpoint_rides_with_its_report_and_only_the_committed_one_is_restored(tmp_path):
    channel = FakeChannel()
    ctx = ctx_for(tmp_path, channel)
    assert ctx.restore() is None
    ctx.report(1, checkpoint={"epoch": 1}, loss=1.0)
    committed = channel.requests[-1][4]
    assert committed and ctx.restore() == {"epoch": 1}
    # Written, then the worker is killed before the report of step 2 is durable:
    ctx.checkpoint({"epoch": 2})
    again = ctx_for(tmp_path, FakeChannel(), committed=committed, attempt=2)
    assert again.restore() == {"epoch": 1}          # never the newer, uncommitted state


def test_checkpoint_before_report_rides_with_that_report_and_old_files_go(tmp_path):
    channel = FakeChannel()
    ctx = ctx_for(tmp_path, channel)
    first = ctx.checkpoint({"epoch": 1, "w": [1, 2]})
    second = ctx.checkpoint({"epoch": 1, "w": [3]})       # rewritten before its report
    assert not first.exists() and second.exists()
    ctx.report(1, loss=0.5)
    assert channel.requests[-1][4] == second.name
    assert ctx.restore() == {"epoch": 1, "w": [3]}
    ctx.report(2, checkpoint={"epoch": 2}, loss=0.4)
    names = sorted(p.name for p in second.parent.iterdir())
    assert names == [channel.requests[-1][4]]             # the committed file alone, no temp file
    mode = stat.S_IMODE(os.stat(second.parent / names[0]).st_mode)
    assert mode == 0o600 and stat.S_IMODE(os.stat(second.parent).st_mode) == 0o700


def test_a_fresh_trial_ignores_checkpoint_files_the_store_does_not_name(tmp_path):
    ctx = ctx_for(tmp_path, FakeChannel())
    ctx.report(1, checkpoint={"foreign": True}, loss=1.0)   # another study's file, same folder
    fresh = ctx_for(tmp_path, FakeChannel(), committed=None)
    assert fresh.restore() is None


def test_only_rank_zero_writes_and_sends_a_checkpoint(tmp_path):
    from hypersack.runtime.worker.context import World
    channel = FakeChannel()
    ctx = TrialContext(trial_id=3, seed=11, device="cpu", attempt=1, trial_dir=tmp_path / "t",
                       channel=channel, world=World(1, 2), sync_stop=lambda flag: False)
    ctx.report(1, checkpoint={"epoch": 1}, loss=1.0)
    assert channel.requests == [] and not (tmp_path / "t").exists()
