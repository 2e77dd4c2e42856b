"""GPU nodes of a Ray cluster, with fake GPUs (the GPUs a raylet declares; CUDA_VISIBLE_DEVICES
set by Ray, as on a real GPU node; no NVML, no CUDA): the node agent's inventory, and trials
placed on them with the right device while CPU trials go to the CPU nodes."""
from __future__ import annotations

from typing import Any

import pytest

from hypersack.core.allocator import Allocator, Demand
from hypersack.core.trial import Launch, ResultReported, TrialFinished, TrialStarted, TrialRecord


def _setup(tmp_path, profile: bool = False) -> Any:
    from hypersack.runtime.executors.ray import AgentSetup, driver_paths
    from hypersack.runtime.trainable import TrainableRef
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
    from hypersack.runtime.executors.ray_agent import NodeAgent
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    agent = NodeAgent(_setup(tmp_path), "cpunode", [], 2.0)
    try:
        (node,) = agent.describe()["cluster"].nodes
        assert node.cpus == 2 and [g.id for g in node.gpus] == ["cpu0", "cpu1"]
    finally:
        agent.shutdown(kill=True)
