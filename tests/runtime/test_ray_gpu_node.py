"""GPU nodes of a Ray cluster, with fake GPUs (the GPUs a raylet declares; CUDA_VISIBLE_DEVICES
set by Ray, as on a real GPU node; no NVML, no CUDA): the node agent's inventory, and trials
placed on them with the right device while CPU trials go to the CPU nodes."""
from __future__ import annotations

import time
from typing import Any

import pytest

from hypersack.core.allocator import Allocator, Demand
from hypersack.core.trial import (DeviceAdded, Launch, ResultReported, TrialFinished, TrialRecord,
                                  TrialStarted)

from executor_helpers import ack_reports


def _setup(tmp_path, profile: bool = False) -> Any:
    from hypersack.runtime.executors.ray import AgentSetup, driver_paths
    from hypersack.runtime.worker.trainable import TrainableRef
    from hypersack.study import Study
    spec = Study({"x": 0.5}, ("score", "max"), n_trials=1).spec
    paths, cwd = driver_paths()
    return AgentSetup(spec, str(tmp_path), TrainableRef.of("ray_helpers:reports_its_device"),
                      "score", profile=profile, sys_path=paths, cwd=cwd)


def test_a_gpu_nodes_cores_are_the_ones_ray_declares(tmp_path, monkeypatch):
    """The agent of a node Ray gave one GPU and four CPUs (in this process: Ray's
    CUDA_VISIBLE_DEVICES, no NVML) offers that GPU on a node of four cores, so a trial wanting
    two cores and more memory than a CPU slot fits there (the local detection alone says one
    core per GPU: such a trial never ran on a joining GPU node)."""
    pytest.importorskip("ray", reason="ray is not installed (pip install 'hypersack[ray]')")
    from hypersack.runtime.executors.ray_agent import NodeAgent
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    agent = NodeAgent(_setup(tmp_path), "gpunode", [0], 4.0)
    try:
        assert agent.describe()["error"] is None
        (node,) = agent.describe()["cluster"].nodes
        assert node.id == "gpunode" and node.cpus == 4
        assert [(g.id, g.arch) for g in node.gpus] == [("gpu0", "gpu")]
        record = TrialRecord(0, {"x": 0.5}, seed=0)
        placed = Allocator(agent.describe()["cluster"],
                           demand=Demand(100, 30, cpus=2).job).place([record])
        assert placed == {0: (("gpunode", "gpu0"),)}
    finally:
        agent.shutdown(kill=True)


def test_a_cpu_nodes_cores_are_its_slots(tmp_path, monkeypatch):
    pytest.importorskip("ray", reason="ray is not installed (pip install 'hypersack[ray]')")
    from hypersack.runtime.executors.ray_agent import NodeAgent
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    agent = NodeAgent(_setup(tmp_path), "cpunode", [], 2.0)
    try:
        (node,) = agent.describe()["cluster"].nodes
        assert node.cpus == 2 and [g.id for g in node.gpus] == ["cpu0", "cpu1"]
    finally:
        agent.shutdown(kill=True)


def _until(ex: Any, done, timeout: float = 120.0) -> list:
    """Poll (acknowledging every report) until ``done(events)``; a guard, not a pace."""
    events: list = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        polled = ex.poll(0.2)
        events += polled
        ack_reports(ex, polled)
        if done(events):
            return events
    raise AssertionError(f"timed out; events so far: {events}")


@pytest.fixture
def gpu_node(ray_cluster):
    """A node with two fake GPUs and three CPUs that joins the session cluster during the test,
    and leaves it (gracefully) afterwards."""
    import ray
    holder: list = []

    def join() -> Any:
        holder.append(ray_cluster.add_node(num_cpus=3, num_gpus=2))
        return holder[-1]
    yield join
    for node in holder:
        ray_cluster.remove_node(node)
        deadline = time.monotonic() + 60      # the next test must not find it listed alive
        while (any(n["NodeID"] == node.node_id and n["Alive"] for n in ray.nodes())
               and time.monotonic() < deadline):
            time.sleep(0.1)


@pytest.mark.ray
@pytest.mark.slow
def test_a_gpu_node_that_joins_runs_the_gpu_trial_on_its_device_and_cpu_trials_stay_on_cpus(
        tmp_path, gpu_node):
    from hypersack.runtime.executors.ray import RayExecutor
    ex = RayExecutor(_setup(tmp_path), trial_dir=lambda t: tmp_path / f"trial-{t}")
    try:
        ex.start()
        assert {g.arch for _, g in ex.inventory().gpus()} == {"cpu"}      # CPU-only so far
        joined = gpu_node().node_id[:12]
        added = _until(ex, lambda ev: len([e for e in ev if isinstance(e, DeviceAdded)]) == 2)
        assert {(e.node_id, e.gpu.id, e.gpu.arch, e.node_cpus) for e in added
                if isinstance(e, DeviceAdded)} == {(joined, "gpu0", "gpu", 3), (joined, "gpu1", "gpu", 3)}
        # The driver's placement: the GPU trial wants the GPU node's three cores (no CPU node
        # has them; the local detection alone said one per GPU), so it lands there and fills its cores; the CPU trials go to the CPU nodes.
        allocator = Allocator(ex.inventory(), policy="wfd")
        wants = {0: Demand(100, 0, cpus=3), 1: Demand(100, 0, cpus=1), 2: Demand(100, 0, cpus=1)}
        allocator.demand = lambda record: wants[record.trial_id].job(record)
        placed = {}
        for t in wants:
            placed.update(allocator.place([TrialRecord(t, {"x": 0.5}, seed=t)]))
        (gpu_node_id, gpu), = placed[0]
        assert gpu_node_id == joined and gpu in ("gpu0", "gpu1")
        assert {placed[t][0][0] for t in (1, 2)} == set(ex.node_ids().values()) - {joined}
        for t, devices in placed.items():
            ex.submit(Launch(t, {"x": 0.5, "steps": 2}, seed=t, attempt=1, devices=devices))
        events = _until(ex, lambda ev: len([e for e in ev if isinstance(e, TrialFinished)]) == 3)
    finally:
        ex.shutdown(kill=True)
    started = {e.trial_id: e.device for e in events if isinstance(e, TrialStarted)}
    index = int(gpu.removeprefix("gpu"))
    assert started[0] == f"{joined}/cuda:{index}"
    assert all(started[t].endswith("/cpu/0") and not started[t].startswith(joined) for t in (1, 2))
    reports = {(e.trial_id, e.metrics["cuda"], e.metrics["visible"])
               for e in events if isinstance(e, ResultReported)}
    assert reports == {(0, 1, index), (1, 0, -1), (2, 0, -1)}     # it sees its GPU, only it
