"""Host cores are a first-class resource on GPU nodes: a trial's loader workers are part of its
``cpus`` demand, and placement (the knapsack's Eq. 4) never puts more loaders on a node than it
has cores, however much GPU compute the oversubscription ratio leaves."""
from __future__ import annotations

from hypersack.core.allocator import Demand
from hypersack.core.demand import with_loader_cpus
from hypersack.placement import GPU, Cluster, Job, Node, place


def _jobs(n: int, config: dict) -> list[Job]:
    return [with_loader_cpus(Job(i, compute=20.0, memory_gb=1.0, cpus=1), config)
            for i in range(n)]


def _fake_h100_node(cores: int) -> Cluster:
    return Cluster([Node("n0", cores, (GPU("g0", "H100", 80.0, oversubscription=4.0),))])


def test_pipeline_trials_are_limited_by_the_nodes_cores_not_the_gpu():
    # compute allows 20 trials (400% / 20%), 16 cores allow 5 pipelines of 3 cores
    placed = place(_jobs(20, {"data": "pipeline"}), _fake_h100_node(16), "wfd")
    assert len(placed) == 5
    # with one loader worker each (cpus 2): 8 fit
    assert len(place(_jobs(20, {"data": "pipeline", "cpus": 2}), _fake_h100_node(16), "wfd")) == 8
    # synthetic data needs no loader: the GPU's compute is the limit
    assert len(place(_jobs(20, {}), _fake_h100_node(16), "wfd")) == 16


def test_the_declared_cores_win_when_larger():
    job = Demand(50.0, 1.0, 4).job(_record())
    assert with_loader_cpus(job, {"data": "pipeline"}).cpus == 4
    assert with_loader_cpus(job, {"data": "pipeline", "cpus": 8}).cpus == 8


def _record():
    from hypersack.core.trial import TrialRecord
    return TrialRecord(0, {}, seed=0)
