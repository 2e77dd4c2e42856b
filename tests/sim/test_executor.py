"""The simulated executor alone: timing, stop semantics, failures, additions (no controller)."""
from __future__ import annotations

import dataclasses

import pytest

from hypersack.placement import GPU, Cluster, Node
from hypersack.core.trial import (DeviceAdded, DeviceLost, Launch, Preempt, ResultReported,
                                  Stop, TrialFailed, TrialFinished, TrialStarted)
from hypersack.sim.clock import SimulationStalled
from hypersack.sim.curves import CurveParams, ParametricCurves
from hypersack.sim.executor import DeviceChange, SimExecutor
from hypersack.sim.perf import PerfModel, PerfParams, ProfileTable, WorkloadKeys

from executor_helpers import ack_reports
from sim_helpers import drain


def _perf(**params) -> PerfModel:
    table = ProfileTable.from_list([
        {"arch": "A100", "batch_size": 64, "step_time_s": 10, "utilization": 60, "memory_gb": 4, "cpus": 2},
        {"arch": "A100", "batch_size": 128, "step_time_s": 8, "utilization": 90, "memory_gb": 30, "cpus": 2}])
    defaults = {"startup_s": 2.0, "checkpoint_s": 0.0, "restore_s": 1.0, "interference": 0.1,
                "saturation": {"A100": 1.0}}
    return PerfModel(table, WorkloadKeys(batch_size_key="bs"), PerfParams.from_dict({**defaults, **params}),
                     ["A100"], steps_for=lambda c: 3)


def _executor(gpus: int = 2, changes=(), **params) -> SimExecutor:
    cluster = Cluster([Node("n0", 16, tuple(GPU(str(i), "A100", 40, oversubscription=2) for i in range(gpus)))])
    curves = ParametricCurves("accuracy", CurveParams(), noise=0.01)
    return SimExecutor(cluster, _perf(**params), curves, steps_for=lambda c: 3, changes=changes)


def _launch(trial_id: int, gpu: str = "0", bs: int = 64, checkpoint: str | None = None, attempt: int = 1):
    return Launch(trial_id, {"bs": bs, "lr": 0.01}, seed=trial_id, attempt=attempt,
                  checkpoint=checkpoint, devices=(("n0", gpu),))




def test_a_lone_trial_takes_startup_plus_its_steps():
    ex = _executor()
    ex.submit(_launch(0))
    events = drain(ex)
    reports = [(t, e.step) for t, e in events if isinstance(e, ResultReported)]
    assert reports == [(12.0, 1), (22.0, 2), (32.0, 3)]
    assert isinstance(events[0][1], TrialStarted) and events[0][0] == 0.0
    assert [type(e) for t, e in events if t == 32.0] == [ResultReported, TrialFinished]
    assert all(e.checkpoint for _, e in events if isinstance(e, ResultReported))


def test_sharing_a_gpu_slows_both_by_the_formula():
    # two trials of 60% on a device with saturation 1: min(1, 100/120) / (1 + 0.1) each
    ex = _executor()
    ex.submit(_launch(0))
    ex.submit(_launch(1))
    events = drain(ex)
    factor = (100 / 120) / 1.1
    first = [t for t, e in events if isinstance(e, ResultReported) and e.step == 1]
    assert first == pytest.approx([12.0 / factor] * 2)


def test_a_neighbour_leaving_speeds_the_other_up():
    ex = _executor()
    ex.submit(_launch(0))
    ex.submit(_launch(1))
    out = drain(ex, until=lambda ev: any(isinstance(e, ResultReported) for _, e in ev))
    t1 = out[-1][0]
    ex.submit(Stop(1, "pruned"))       # waits for its ack: ends at once, at t1
    ack_reports(ex, [e for _, e in out])
    rest = drain(ex)
    assert (t1, TrialFinished) in [(t, type(e)) for t, e in rest if getattr(e, "trial_id", None) == 1]
    second = [t for t, e in rest if isinstance(e, ResultReported) and e.trial_id == 0 and e.step == 2]
    assert second == pytest.approx([t1 + 10.0])          # alone again: full speed


def test_a_stop_mid_step_is_honoured_at_the_next_report():
    ex = _executor()
    ex.submit(_launch(0))
    ex.poll()                           # TrialStarted at 0
    ex.submit(Stop(0, "time budget"))
    events = drain(ex)
    assert [(t, type(e).__name__) for t, e in events] == [
        (12.0, "ResultReported"), (12.0, "TrialFinished")]


@pytest.mark.parametrize("stop", [Stop(0, "pruned"), Preempt(0)], ids=["stop", "preempt"])
def test_a_report_below_free_below_still_waits_and_a_stop_of_its_turn_ends_the_trial_there(stop):
    """Every simulated report carries its step's checkpoint, and the local worker waits for the
    ack of such a report whatever ``free_below`` says (it posts only reports without one): so
    neither the launch's nor an ack's ``free_below`` lets a simulated trial go on unacked, and a
    Stop (or a Preempt) of the turn that read a report below it ends the trial at that report."""
    ex = _executor(suspend_s=0.25)
    ex.submit(dataclasses.replace(_launch(0), free_below=10))
    first = drain(ex, until=lambda ev: any(isinstance(e, ResultReported) for _, e in ev))
    assert ex.poll() == [] and ex.running() == 1          # step 1 waits despite the launch's 10
    ack_reports(ex, [e for _, e in first], free_below={0: 10})
    second = drain(ex, until=lambda ev: any(isinstance(e, ResultReported) for _, e in ev))
    (report,) = [(t, e) for t, e in second if isinstance(e, ResultReported)]
    assert report[1].step == 2 and report[1].checkpoint is not None
    assert ex.poll() == [] and ex.running() == 1          # step 2 waits despite the ack's 10
    ex.submit(stop)
    ack_reports(ex, [report[1]], free_below={0: 10})
    rest = drain(ex)
    assert [e for _, e in rest if isinstance(e, ResultReported)] == []
    suspend_s = ex.perf.params.suspend_s if isinstance(stop, Preempt) else 0.0
    assert [(t, type(e)) for t, e in rest] == [(report[0] + suspend_s, TrialFinished)]


def test_a_failed_gpu_fails_its_trials_retryably_and_a_relaunch_resumes_from_the_checkpoint():
    ex = _executor(changes=[DeviceChange(15.0, "n0", gpu_id="0")])
    ex.submit(_launch(0))
    events = drain(ex)
    at15 = [e for t, e in events if t == 15.0]
    assert isinstance(at15[0], DeviceLost) and at15[0].gpu_id == "0"
    assert isinstance(at15[1], TrialFailed) and at15[1].cause.value == "device_lost"
    checkpoint = [e for _, e in events if isinstance(e, ResultReported)][-1]
    assert checkpoint.step == 1
    assert ("n0", "0") not in {(n.id, g.id) for n in ex.inventory().nodes for g in n.gpus}
    ex.submit(_launch(0, gpu="1", checkpoint=checkpoint.checkpoint, attempt=2))
    again = drain(ex)
    steps = [(t, e.step) for t, e in again if isinstance(e, ResultReported)]
    assert steps == [(15.0 + 2.0 + 1.0 + 10.0, 2), (38.0, 3)]   # startup + restore, then step 2


def test_an_added_gpu_is_announced_and_usable():
    gpu = GPU("9", "A100", 40)
    ex = _executor(gpus=1, changes=[DeviceChange(5.0, "n1", gpu=gpu, cpus=8)])
    events = drain(ex)
    assert [(t, type(e)) for t, e in events] == [(5.0, DeviceAdded)]
    assert ("n1", "9") in {(n.id, g.id) for n in ex.inventory().nodes for g in n.gpus}
    ex.submit(Launch(0, {"bs": 64}, 0, 1, devices=(("n1", "9"),)))
    assert any(isinstance(e, TrialFinished) for _, e in drain(ex))


def test_a_launch_that_overflows_memory_fails_like_an_out_of_memory():
    ex = _executor()
    ex.submit(_launch(0, bs=128))      # 30 GB
    ex.submit(_launch(1, bs=128))      # 30 more on a 40 GB device
    failed = [e for _, e in drain(ex) if isinstance(e, TrialFailed)]
    assert [e.trial_id for e in failed] == [1] and "out of memory" in failed[0].reason
    assert failed[0].cause.value == "oom"


def test_waiting_with_nothing_to_wait_for_raises():
    ex = _executor()
    assert ex.poll() == []
    with pytest.raises(SimulationStalled):
        ex.poll()


def test_data_parallel_steps_scale_with_the_efficiency_formula():
    ex = _executor(dp_beta=0.1)
    ex.submit(Launch(0, {"bs": 64}, 0, 1, devices=(("n0", "0"), ("n0", "1"))))
    reports = [t for t, e in drain(ex) if isinstance(e, ResultReported)]
    step = 10.0 / (2 * (1 / 1.1))
    assert reports == pytest.approx([2.0 + step, 2.0 + 2 * step, 2.0 + 3 * step])
