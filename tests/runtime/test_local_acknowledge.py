"""The local executor's acknowledgement of named trials (the seam the Ray agents use: a node acks
exactly the results its driver has received, with the driver's decision points)."""
from __future__ import annotations

import time

from hypersack.core.trial import Launch, ResultReported
from hypersack.runtime.devices.slots import default_slots
from hypersack.runtime.executors.local import LocalExecutor
from hypersack.runtime.worker.trainable import TrainableRef


def _steps(events: list, trial_id: int) -> list[int]:
    return [e.step for e in events if isinstance(e, ResultReported) and e.trial_id == trial_id]


def _collect(ex: LocalExecutor, until, timeout: float = 30.0) -> list:
    events, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        events += ex.poll(0.05)
        if until(events):
            return events
    raise AssertionError(f"timed out; events so far: {events}")


def test_only_the_named_trials_go_on(tmp_path):
    ex = LocalExecutor(default_slots(2, gpus=[]), TrainableRef.of("trainables:quick"),
                       trial_dir=lambda t: tmp_path / f"trial-{t}", metric="score")
    ex.start()
    try:
        for t in (0, 1):
            ex.submit(Launch(t, {"x": 0.5}, seed=t, attempt=1))
        _collect(ex, lambda ev: _steps(ev, 0) and _steps(ev, 1))
        ex.acknowledge([0, 7], {0: 0})          # 7: not waiting, ignored
        events = _collect(ex, lambda ev: bool(_steps(ev, 0)))
        time.sleep(0.3)
        events += ex.poll(0.05)
        assert _steps(events, 0) and not _steps(events, 1)     # trial 1 still waits
        ex.acknowledge([1], {})                 # a trial free_below leaves out: 0
        assert _steps(_collect(ex, lambda ev: bool(_steps(ev, 1))), 1) == [2]
    finally:
        ex.shutdown(kill=True)
