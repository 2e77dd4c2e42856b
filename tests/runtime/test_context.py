"""The trainable's context: reports, stops, checkpoints, restores."""
from __future__ import annotations

import numpy as np
import pytest

from hypersack.errors import TrialStopped
from hypersack.runtime.context import TrialContext


class FakeChannel:
    def __init__(self, stop_after: int | None = None):
        self.sent, self.requests = [], []
        self.stop_after = stop_after

    def send(self, message):
        self.sent.append(message)

    def request(self, message):
        self.requests.append(message)

    def stop_requested(self):
        return self.stop_after is not None and len(self.requests) >= self.stop_after


def ctx_for(tmp_path, channel) -> TrialContext:
    return TrialContext(trial_id=3, seed=11, device="cpu", attempt=1, trial_dir=tmp_path / "t",
                        channel=channel)


def test_report_converts_numbers_and_waits_for_ack(tmp_path):
    channel = FakeChannel()
    ctx = ctx_for(tmp_path, channel)
    ctx.report(1, loss=np.float32(0.5), acc=np.int64(3))
    assert channel.requests == [("report", 3, 1, {"loss": 0.5, "acc": 3})]
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


def test_checkpoint_is_atomic_and_restored(tmp_path):
    channel = FakeChannel()
    ctx = ctx_for(tmp_path, channel)
    assert ctx.restore() is None
    ctx.report(4, loss=1.0)
    path = ctx.checkpoint({"epoch": 4, "w": [1, 2]})
    ctx.checkpoint({"epoch": 5, "w": [3]})
    assert ctx.restore() == {"epoch": 5, "w": [3]}
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]   # no temp file left
    assert channel.sent[-1] == ("checkpoint", 3, str(path), 4)
    fresh = ctx_for(tmp_path, FakeChannel())        # a later attempt of the same trial
    assert fresh.restore() == {"epoch": 5, "w": [3]}
