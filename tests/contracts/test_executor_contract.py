"""The Executor contract, run against every executor (local processes, the simulator, Ray on a
real local cluster of two raylets): what the loop may rely on, whatever carries the trials."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

from hypersack.placement import GPU, Cluster, Node
from hypersack.core.trial import (Cancel, Event, FailureCause, Launch, Preempt, ResultReported,
                                  Stop, TrialFailed, TrialFinished, TrialStarted)

from executor_helpers import ack_reports


@dataclass
class Backend:
    make: Callable[[], Any]
    config: dict
    steps: int

    def poll(self, ex: Any, ack: bool = True) -> list[Event]:
        from hypersack.sim.clock import SimulationStalled
        try:
            events = ex.poll(0.05)
        except SimulationStalled:
            events = []
        if ack:
            ack_reports(ex, events)
        return events

    def until(self, ex: Any, done: Callable[[list[Event]], bool], ack: bool = True,
              timeout: float = 60.0) -> list[Event]:
        events: list[Event] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            events += self.poll(ex, ack)
            if done(events):
                return events
        raise AssertionError(f"timed out; events so far: {events}")


def _local(tmp_path) -> Backend:
    from hypersack.runtime.devices.slots import default_slots
    from hypersack.runtime.executors.local import LocalExecutor
    from hypersack.runtime.worker.trainable import TrainableRef

    def make() -> Any:
        return LocalExecutor(default_slots(2, gpus=[]), TrainableRef.of("trainables:checkpointing"),
                             trial_dir=lambda t: tmp_path / f"trial-{t}", metric="score")
    return Backend(make, {"x": 0.5, "steps": 4, "sleep": 0.05}, 4)


def _sim(tmp_path) -> Backend:
    from hypersack.sim.curves import CurveParams, ParametricCurves
    from hypersack.sim.executor import SimExecutor
    from hypersack.sim.perf import PerfModel, PerfParams, ProfileTable, WorkloadKeys

    table = ProfileTable.from_list([{"arch": "A100", "batch_size": 64, "step_time_s": 10,
                                     "utilization": 60, "memory_gb": 4, "cpus": 2}])
    perf = PerfModel(table, WorkloadKeys(batch_size_key="bs"),
                     PerfParams.from_dict({"startup_s": 2.0, "checkpoint_s": 0.0}), ["A100"],
                     steps_for=lambda c: 4)

    def make() -> Any:
        cluster = Cluster([Node("n0", 16, tuple(GPU(str(i), "A100", 40) for i in range(2)))])
        return SimExecutor(cluster, perf, ParametricCurves("score", CurveParams(), noise=0.0),
                           steps_for=lambda c: 4)
    return Backend(make, {"bs": 64, "lr": 0.01}, 4)


def _ray_executor(trial_dirs: dict[str, Path]) -> Any:
    """One started RayExecutor on the session cluster; trials' folders under
    ``trial_dirs["now"]`` (the running test's)."""
    from hypersack.runtime.executors.ray import AgentSetup, RayExecutor, driver_paths
    from hypersack.runtime.worker.trainable import TrainableRef
    from hypersack.study import Study

    spec = Study({"x": 0.5}, ("score", "max"), n_trials=1).spec
    paths, cwd = driver_paths()
    setup = AgentSetup(spec, str(trial_dirs["now"]), TrainableRef.of("trainables:checkpointing"),
                       "score", profile=False, sys_path=paths, cwd=cwd)
    ex = RayExecutor(setup, trial_dir=lambda t: trial_dirs["now"] / f"trial-{t}")
    ex.start()
    return ex


@pytest.fixture(scope="module")
def shared_ray(request, tmp_path_factory):
    """The [ray] tests share one executor (its agents and warm workers start once): each test
    gets it with no trial in flight and the inventory it started with (asserted), and every
    trial a test left running is cancelled and seen to end before the next test."""
    request.getfixturevalue("ray_cluster")
    trial_dirs = {"now": tmp_path_factory.mktemp("ray-contract")}
    ex = _ray_executor(trial_dirs)
    devices = sorted((n.id, g.id) for n, g in ex.inventory().gpus())
    yield ex, trial_dirs, devices
    ex.shutdown(kill=True)


def _ray(tmp_path, shared: tuple[Any, dict, list]) -> Backend:
    ex, trial_dirs, devices = shared
    trial_dirs["now"] = tmp_path

    def make() -> Any:
        assert not ex.trials()                        # nothing left by an earlier test
        assert sorted((n.id, g.id) for n, g in ex.inventory().gpus()) == devices
        return ex
    return Backend(make, {"x": 0.5, "steps": 4, "sleep": 0.05}, 4)


def _end_every_trial(backend: Backend, ex: Any) -> None:
    """Cancel the trials a test left running on the shared executor; wait for their ends."""
    for trial_id in ex.trials():
        ex.submit(Cancel(trial_id, "the test is over"))
    backend.until(ex, lambda events: not ex.trials())


@pytest.fixture(params=["local", "sim", pytest.param("ray", marks=[pytest.mark.ray,
                                                                    pytest.mark.slow])])
def backend(request, tmp_path):
    if request.param == "ray":
        shared = request.getfixturevalue("shared_ray")
        factory = _ray(tmp_path, shared)
        yield factory
        _end_every_trial(factory, shared[0])
        return
    made: list[Any] = []
    factory = {"local": _local, "sim": _sim}[request.param](tmp_path)
    original = factory.make

    def make() -> Any:
        ex = original()
        ex.start()
        made.append(ex)
        return ex
    factory.make = make
    yield factory
    for ex in made:
        ex.shutdown(kill=True)


def _device(ex: Any, i: int = 0) -> tuple[str, str]:
    node, gpu = list(ex.inventory().gpus())[i]
    return (node.id if hasattr(node, "id") else node, gpu.id)


def _of(events: list[Event], trial_id: int, kind: type) -> list[Any]:
    return [e for e in events if isinstance(e, kind) and e.trial_id == trial_id]


def test_a_trial_starts_reports_increasing_steps_and_finishes(backend):
    ex = backend.make()
    ex.submit(Launch(0, backend.config, seed=1, attempt=1, devices=(_device(ex),)))
    events = backend.until(ex, lambda ev: bool(_of(ev, 0, TrialFinished)))
    mine = [e for e in events if getattr(e, "trial_id", None) == 0]
    assert isinstance(mine[0], TrialStarted) and isinstance(mine[-1], TrialFinished)
    steps = [e.step for e in mine if isinstance(e, ResultReported)]
    assert steps == list(range(1, backend.steps + 1))
    assert not _of(events, 0, TrialFailed)


def test_a_report_waits_for_its_acknowledgement(backend):
    ex = backend.make()
    ex.submit(Launch(0, backend.config, seed=1, attempt=1, devices=(_device(ex),)))
    events = backend.until(ex, lambda ev: bool(_of(ev, 0, ResultReported)), ack=False)
    for _ in range(10):
        events += backend.poll(ex, ack=False)
    assert len(_of(events, 0, ResultReported)) == 1       # blocked until acknowledged
    ack_reports(ex, events)
    events = backend.until(ex, lambda ev: len(_of(ev, 0, ResultReported)) >= 1, ack=False)
    # The next report, and only it (the next waits for its own acknowledgement). This case,
    # on local workers, was also tests/runtime/test_local_executor.py's, merged here.
    assert [e.step for e in _of(events, 0, ResultReported)] == [2]


def test_a_stop_ends_the_trial_at_its_next_report(backend):
    ex = backend.make()
    ex.submit(Launch(0, backend.config, seed=1, attempt=1, devices=(_device(ex),)))
    events = backend.until(ex, lambda ev: bool(_of(ev, 0, ResultReported)), ack=False)
    ex.submit(Stop(0, "paused"))
    ack_reports(ex, events)
    events = backend.until(ex, lambda ev: bool(_of(ev, 0, TrialFinished)))
    assert len(_of(events, 0, ResultReported)) <= 1 and not _of(events, 0, TrialFailed)


def test_a_preempted_trial_leaves_at_its_report_and_resumes_after_its_checkpoint(backend):
    ex = backend.make()
    device = _device(ex)
    ex.submit(Launch(0, backend.config, seed=1, attempt=1, devices=(device,)))
    events = backend.until(ex, lambda ev: bool(_of(ev, 0, ResultReported)), ack=False)
    ex.submit(Preempt(0))                 # it waits for its ack: it leaves at this report
    ack_reports(ex, events)
    events += backend.until(ex, lambda ev: bool(_of(ev, 0, TrialFinished)))
    assert not _of(events, 0, TrialFailed)
    (last,) = _of(events, 0, ResultReported)
    assert last.step == 1 and last.checkpoint is not None
    ex.submit(Launch(0, backend.config, seed=1, attempt=2, checkpoint=last.checkpoint,
                     devices=(device,)))
    again = backend.until(ex, lambda ev: bool(_of(ev, 0, TrialFinished)))
    assert [e.step for e in _of(again, 0, ResultReported)] == list(range(2, backend.steps + 1))


def test_a_cancel_fails_the_trial_as_cancelled_and_frees_its_device(backend):
    ex = backend.make()
    device = _device(ex)
    ex.submit(Launch(0, backend.config, seed=1, attempt=1, devices=(device,)))
    backend.until(ex, lambda ev: bool(_of(ev, 0, TrialStarted)))
    ex.submit(Cancel(0, "timed out"))
    events = backend.until(ex, lambda ev: bool(_of(ev, 0, TrialFailed)))
    (failed,) = _of(events, 0, TrialFailed)
    assert failed.cause is FailureCause.CANCELLED and failed.reason == "timed out"
    ex.submit(Launch(1, backend.config, seed=2, attempt=1, devices=(device,)))
    events = backend.until(ex, lambda ev: bool(_of(ev, 1, TrialFinished)))
    assert not _of(events, 1, TrialFailed) and not _of(events, 0, TrialFinished)


def test_the_inventory_names_the_devices_a_launch_may_use(backend):
    ex = backend.make()
    devices = [_device(ex, i) for i in range(2)]
    assert len(set(devices)) == 2
    for trial_id, device in enumerate(devices):
        ex.submit(Launch(trial_id, backend.config, seed=trial_id, attempt=1, devices=(device,)))
    events = backend.until(ex, lambda ev: all(_of(ev, t, TrialFinished) for t in (0, 1)))
    assert {_of(events, t, TrialStarted)[0].trial_id for t in (0, 1)} == {0, 1}


def test_an_acknowledgement_of_some_trials_lets_only_those_go_on(backend):
    ex = backend.make()
    for trial_id in (0, 1):
        ex.submit(Launch(trial_id, backend.config, seed=trial_id, attempt=1,
                         devices=(_device(ex, trial_id),)))
    first = backend.until(ex, lambda ev: all(_of(ev, t, ResultReported) for t in (0, 1)),
                          ack=False)
    ex.acknowledge([0], {0: 0})
    events = backend.until(ex, lambda ev: len(_of(ev, 0, ResultReported)) >= 1, ack=False)
    for _ in range(10):
        events += backend.poll(ex, ack=False)
    assert [e.step for e in _of(events, 0, ResultReported)] == [2]   # then waits for its ack
    assert _of(events, 1, ResultReported) == []                        # still waits for its own
    ack_reports(ex, first + events)
    events = backend.until(ex, lambda ev: len(_of(ev, 1, ResultReported)) >= 1, ack=False)
    assert _of(events, 1, ResultReported)[0].step == 2
