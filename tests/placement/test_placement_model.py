"""The cluster model: values that validate themselves, the load, elasticity, the YAML form."""
from __future__ import annotations

import pytest

from hypersack.errors import ConfigError, HyperSackError
from hypersack.placement import (GPU, ArchDemand, Cluster, Job, Node, PlacementError, check_placement,
                                 occupancy)


def small_cluster(r: float = 3.0) -> Cluster:
    return Cluster([Node("n0", 8, [GPU(0, "A100", 40, oversubscription=r), GPU(1, "A100", 40, oversubscription=r)]),
                    Node("n1", 4, [GPU(0, "H100", 80, oversubscription=2.5)])])


def test_gpu_capacity_is_r_times_c_and_memory_is_not_scaled():
    gpu = GPU(0, "A100", 40, compute=100, oversubscription=3)
    assert gpu.capacity == 300
    assert gpu.memory_gb == 40
    with pytest.raises(AttributeError):
        gpu.memory_gb = 80     # frozen


@pytest.mark.parametrize("kwargs, field", [
    (dict(id=0, arch="A100", memory_gb=0), "gpu.memory_gb"),
    (dict(id=0, arch="A100", memory_gb=40, compute=-1), "gpu.compute"),
    (dict(id=0, arch="A100", memory_gb=40, oversubscription=float("nan")), "gpu.oversubscription"),
    (dict(id=0, arch="", memory_gb=40), "gpu.arch"),
    (dict(id=None, arch="A100", memory_gb=40), "gpu.id"),
    (dict(id=True, arch="A100", memory_gb=40), "gpu.id"),
])
def test_gpu_rejects_bad_values(kwargs, field):
    with pytest.raises(ConfigError) as err:
        GPU(**kwargs)
    assert err.value.field == field
    assert str(err.value).startswith(f"The value of {field} is ")


def test_node_stores_gpus_as_tuple_and_rejects_duplicate_ids():
    node = Node("n", 4, [GPU(0, "A100", 40), GPU(1, "A100", 40)])
    assert isinstance(node.gpus, tuple) and len(node.gpus) == 2
    with pytest.raises(ConfigError, match="must be unique"):
        Node("n", 4, [GPU(0, "A100", 40), GPU(0, "A100", 40)])
    with pytest.raises(ConfigError) as err:
        Node("n", -1, [])
    assert err.value.field == "node.cpus"


def test_job_demand_falls_back_to_top_level_values():
    job = Job("j", compute=40, memory_gb=4, runtime=100, per_arch={"H100": {"compute": 25, "runtime": 60}})
    assert job.demand("H100") == ArchDemand(25, 4, 60)
    assert job.demand("A100") == ArchDemand(40, 4, 100)
    assert job.expected_runtime(["A100", "H100"]) == 100
    assert job.expected_runtime(["H100"]) == 60
    assert hash(job) == hash(Job("j", compute=40, memory_gb=4, runtime=100))


@pytest.mark.parametrize("kwargs, field", [
    (dict(compute=-1, memory_gb=1), "job.compute"),
    (dict(compute=1, memory_gb="x"), "job.memory_gb"),
    (dict(compute=1, memory_gb=1, gpus=0), "job.gpus"),
    (dict(compute=1, memory_gb=1, gpus=1.5), "job.gpus"),
    (dict(compute=1, memory_gb=1, per_arch={"A100": {"computee": 3}}), "job.per_arch.A100.computee"),
    (dict(compute=1, memory_gb=1, per_arch={"A100": {"compute": -3}}), "job.per_arch.A100.compute"),
    (dict(compute=1, memory_gb=1, per_arch=[1]), "job.per_arch"),
])
def test_job_rejects_bad_values(kwargs, field):
    with pytest.raises(ConfigError) as err:
        Job("j", **kwargs)
    assert err.value.field == field


def test_load_is_tracked_per_gpu_and_node():
    cluster = small_cluster()
    job = Job("a", compute=50, memory_gb=10, cpus=3, per_arch={"H100": {"compute": 30}})
    loaded = cluster.with_running(job, ("n0", 1))
    assert cluster.free("n0", 1) == (300, 40)         # the original is unchanged
    assert loaded.free("n0", 1) == (250, 30)
    assert loaded.free_cpus("n0") == 5
    assert loaded.jobs_on("n0", 1) == ["a"]
    on_h100 = cluster.with_running(job, [("n1", 0)])
    assert on_h100.free("n1", 0) == (220, 70)          # the H100 demand
    assert loaded.without("a").free("n0", 1) == (300, 40)
    assert occupancy(loaded) == pytest.approx(50 / 850)


def test_multi_gpu_job_takes_cpus_per_gpu():
    cluster = small_cluster()
    job = Job("dp", compute=60, memory_gb=5, cpus=2, gpus=2)
    loaded = cluster.with_running(job, [("n0", 0), ("n0", 1)])
    assert loaded.free_cpus("n0") == 4
    assert loaded.free("n0", 0) == loaded.free("n0", 1) == (240, 35)
    with pytest.raises(PlacementError, match="2 distinct"):
        cluster.with_running(job, [("n0", 0), ("n0", 0)])


def test_with_running_is_strict_unless_told_otherwise():
    cluster = small_cluster(r=1)
    big = Job("big", compute=150, memory_gb=1)
    with pytest.raises(PlacementError, match="Eq. 2"):
        cluster.with_running(big, ("n0", 0))
    loaded = cluster.with_running(big, ("n0", 0), strict=False)
    assert loaded.free("n0", 0)[0] == -50
    with pytest.raises(PlacementError, match="already running"):
        loaded.with_running(big, ("n0", 1))
    with pytest.raises(PlacementError, match="no GPU"):
        cluster.with_running(Job("x", 1, 1), ("n9", 0))
    with pytest.raises(ConfigError):
        cluster.without("nobody")


def test_elasticity_adds_and_removes_gpus_dropping_their_jobs():
    cluster = small_cluster().with_running(Job("a", 10, 1), ("n0", 0)).with_running(Job("b", 10, 1), ("n0", 1))
    grown = cluster.with_gpu("n1", GPU(1, "H100", 80))
    assert [(n.id, g.id) for n, g in grown.gpus()][-1] == ("n1", 1)
    assert grown.free("n1", 1) == (100, 80)
    shrunk = cluster.without_gpu("n0", 0)
    assert set(shrunk.running) == {"b"}
    assert ("n0", 0) not in [(n.id, g.id) for n, g in shrunk.gpus()]
    with pytest.raises(ConfigError) as err:
        cluster.without_gpu("n0", 7)
    assert err.value.field == "gpu_id"
    with pytest.raises(ConfigError):
        cluster.with_gpu("n0", GPU(0, "A100", 40))      # duplicate id on the node
    assert set(cluster.without_node("n0").running) == set()


def test_cluster_yaml_form_round_trips_with_templates_and_ratio_defaults():
    d = {"oversubscription": {"A100": 3, "H100": 2.5},
         "nodes": [{"id": "a", "cpus": 88, "gpus": {"count": 3, "arch": "A100", "memory_gb": 40}},
                   {"id": "h", "cpus": 96, "gpus": [{"arch": "H100", "memory_gb": 80},
                                                    {"id": 7, "arch": "H100", "memory_gb": 80,
                                                     "oversubscription": 1}]}]}
    cluster = Cluster.from_dict(d)
    gpus = [(n.id, g.id, g.arch, g.capacity) for n, g in cluster.gpus()]
    assert gpus == [("a", 0, "A100", 300), ("a", 1, "A100", 300), ("a", 2, "A100", 300),
                    ("h", 0, "H100", 250), ("h", 7, "H100", 100)]
    assert Cluster.from_dict(cluster.to_dict()) == cluster


@pytest.mark.parametrize("d, field", [
    ({"nodes": []}, "cluster.nodes"),
    ({"nodes": [{"id": "a"}]}, "cluster.nodes[0].cpus"),
    ({"nodes": [{"id": "a", "cpus": 8, "gpus": [{"arch": "A100", "memory_gb": -4}]}]},
     "cluster.nodes[0].gpus[0].memory_gb"),
    ({"nodes": [{"id": "a", "cpus": 8, "gpus": {"count": -1, "arch": "A100", "memory_gb": 4}}]},
     "cluster.nodes[0].gpus.count"),
    ({"nodes": [{"id": "a", "cpus": 8, "gpus": [{"arch": "A100"}]}]}, "cluster.nodes[0].gpus[0].memory_gb"),
    ({"nodes": [{"id": "a", "cpus": 8, "gpu": []}]}, "cluster.nodes[0].gpu"),
    ({"nodes": [{"id": "a", "cpus": 8}, {"id": "a", "cpus": 8}]}, "cluster.nodes[1].id"),
    ({"oversubscription": {"A100": 0}, "nodes": [{"id": "a", "cpus": 1}]}, "cluster.oversubscription.A100"),
    ({"nodes": [{"id": "a", "cpus": 8, "gpus": [{"arch": "A", "memory_gb": 4}, {"id": 0, "arch": "A",
                                                                             "memory_gb": 4}]}]},
     "cluster.nodes[0].gpus[1].id"),
])
def test_cluster_yaml_errors_name_the_dotted_field(d, field):
    with pytest.raises(ConfigError) as err:
        Cluster.from_dict(d)
    assert err.value.field == field, str(err.value)


def test_check_placement_names_each_violated_equation():
    cluster = small_cluster(r=1)
    jobs = [Job("a", 60, 10, cpus=4), Job("b", 60, 10, cpus=4), Job("c", 10, 35, cpus=1),
            Job("dp", 10, 1, gpus=2)]
    check_placement(jobs, cluster, {"a": ("n0", 0), "b": ("n0", 1)})
    cases = [({"a": ("n0", 0), "b": ("n0", 0)}, "Eq. 2"),
             ({"a": ("n0", 0), "c": ("n0", 0)}, "Eq. 3"),
             ({"a": ("n0", 0), "b": ("n0", 1), "c": ("n0", 1)}, "Eq. 3"),
             ({"a": ("n1", 0), "c": ("n1", 0)}, "Eq. 4"),
             ({"dp": ("n0", 0)}, "Eq. 1"),
             ({"dp": [("n0", 0), ("n0", 0)]}, "Eq. 1"),
             ({"zz": ("n0", 0)}, "not among the jobs"),
             ({"a": ("n5", 0)}, "no GPU")]
    for assignment, message in cases:
        with pytest.raises(PlacementError, match=message):
            check_placement(jobs, cluster, assignment)
    assert issubclass(PlacementError, HyperSackError)
    running = cluster.with_running(jobs[0], ("n0", 0))
    with pytest.raises(PlacementError, match="already running"):
        check_placement(jobs, running, {"a": ("n0", 1)})
    with pytest.raises(PlacementError, match="Eq. 2"):
        check_placement(jobs, running, {"b": ("n0", 0)})
