"""Example-based tests of the placement policies and placement by name."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hypersack.errors import ConfigError, MissingDependencyError
from hypersack.placement import (GPU, Cluster, Job, Node, PlacementError, assign, occupancy, place,
                                 policy_names, register_policy, unregister_policy)

HEURISTICS = ["ff", "ffd", "wf", "wfd", "exclusive", "wfd-ls"]


def one_node(n_gpus: int = 2, r: float = 1.0, cpus: int = 64, memory: float = 40) -> Cluster:
    return Cluster([Node("n0", cpus, [GPU(g, "A100", memory, oversubscription=r) for g in range(n_gpus)])])


def test_first_fit_fills_the_first_gpu_and_worst_fit_balances():
    jobs = [Job(i, compute=40, memory_gb=1) for i in range(3)]
    assert place(jobs, one_node(), "ff") == {0: ("n0", 0), 1: ("n0", 0), 2: ("n0", 1)}
    assert place(jobs, one_node(), "wf") == {0: ("n0", 0), 1: ("n0", 1), 2: ("n0", 0)}


def test_decreasing_policies_place_the_longest_jobs_first():
    # Capacity 100: the long 60 must go before the short 50s, or it no longer fits anywhere.
    jobs = [Job("s1", 50, 1, runtime=1), Job("s2", 50, 1, runtime=1), Job("s3", 50, 1, runtime=1),
            Job("long", 60, 1, runtime=9)]
    cluster = one_node(2)
    assert place(jobs, cluster, "ff") == {"s1": ("n0", 0), "s2": ("n0", 0), "s3": ("n0", 1)}
    expected = {"s1": ("n0", 1), "s2": ("n0", 1), "long": ("n0", 0)}
    assert place(jobs, cluster, "ffd") == expected
    assert place(jobs, cluster, "wfd") == expected


def test_existing_load_is_respected_and_worst_fit_avoids_the_busy_gpu():
    cluster = one_node(2, r=3).with_running(Job("old", 250, 30), ("n0", 0))
    result = place([Job("new", 40, 5)], cluster, "wf")
    assert result == {"new": ("n0", 1)}
    assert place([Job("new", 60, 5)], cluster.with_running(Job("old2", 250, 1), ("n0", 1)), "ff") == {}
    assert place([Job("mem", 5, 15)], cluster, "ff") == {"mem": ("n0", 1)}       # 30 + 15 > 40 GB


def test_oversubscription_scales_compute_but_not_memory():
    jobs = [Job(i, compute=50, memory_gb=10) for i in range(8)]
    assert len(place(jobs, one_node(1, r=1), "wfd")) == 2
    assert len(place(jobs, one_node(1, r=3), "wfd")) == 4        # memory: 4 x 10 = 40 GB
    assert len(place(jobs, one_node(1, r=3, memory=80), "wfd")) == 6


def test_cpu_cores_per_node_limit_the_jobs():
    jobs = [Job(i, compute=10, memory_gb=1, cpus=3) for i in range(10)]
    for policy in ["ff", "ffd", "wf", "wfd", "wfd-ls"]:
        assert len(place(jobs, one_node(2, r=3, cpus=10), policy)) == 3


def test_exclusive_is_one_job_per_idle_gpu_without_oversubscription():
    cluster = one_node(3, r=3).with_running(Job("old", 10, 1), ("n0", 1))
    jobs = [Job("too_big", 150, 1), Job("a", 10, 1), Job("b", 10, 1), Job("c", 10, 1)]
    assert place(jobs, cluster, "exclusive") == {"a": ("n0", 0), "b": ("n0", 2)}


def test_heterogeneous_demand_uses_each_architectures_own_numbers():
    cluster = Cluster([Node("a", 16, [GPU(0, "A100", 40)]), Node("h", 16, [GPU(0, "H100", 80)])])
    job = Job("j", compute=90, memory_gb=50, per_arch={"A100": {"memory_gb": 60}, "H100": {"compute": 40}})
    assert place([job], cluster, "ff") == {"j": ("h", 0)}
    loaded = cluster.with_jobs([job], assign([job], cluster))
    assert loaded.free("h", 0) == (60, 30)
    # The H100 takes two such jobs (40 + 40 compute): worst-fit still respects its memory.
    twins = [Job(i, compute=90, memory_gb=30, per_arch={"H100": {"compute": 40}}) for i in range(3)]
    assert sorted(place(twins, cluster, "wfd").values()) == [("a", 0), ("h", 0), ("h", 0)]


def test_data_parallel_jobs_prefer_one_node_then_span_nodes():
    cluster = Cluster([Node("small", 8, [GPU(0, "A100", 40)]),
                       Node("big", 8, [GPU(0, "A100", 40), GPU(1, "A100", 40)])])
    dp = Job("dp", compute=50, memory_gb=4, cpus=2, gpus=2)
    for policy in ["ff", "ffd", "wf", "wfd", "exclusive"]:
        assert assign([dp], cluster, policy) == {"dp": (("big", 0), ("big", 1))}, policy
    three = Job("dp3", compute=50, memory_gb=4, cpus=2, gpus=3)
    for policy in ["ff", "wfd", "exclusive"]:
        assert sorted(assign([three], cluster, policy)["dp3"]) == [("big", 0), ("big", 1), ("small", 0)]
    assert assign([Job("dp4", 1, 1, gpus=4)], cluster) == {}
    with pytest.raises(ConfigError) as err:
        place([dp], cluster)
    assert err.value.field == "jobs[0].gpus"


def test_a_job_that_fits_nowhere_is_absent_and_the_rest_still_placed():
    jobs = [Job("huge", 400, 1), Job("fat", 10, 100), Job("greedy", 10, 1, cpus=100), Job("ok", 10, 1)]
    for policy in HEURISTICS:
        assert place(jobs, one_node(2, r=3), policy) == {"ok": ("n0", 0)}, policy


def test_policies_are_deterministic_and_leave_the_cluster_unchanged():
    cluster = Cluster.from_dict({"nodes": [{"id": i, "cpus": 12, "gpus": {"count": 4, "arch": "A100",
                                                                           "memory_gb": 40,
                                                                           "oversubscription": 3}}
                                           for i in range(3)]})
    jobs = [Job(i, compute=10 + (i * 37) % 50, memory_gb=1 + i % 7, runtime=(i * 13) % 17) for i in range(60)]
    for policy in HEURISTICS:
        first = assign(jobs, cluster, policy, check=True)
        assert assign(jobs, cluster, policy) == first
        assert occupancy(cluster) == 0
        assert occupancy(cluster.with_jobs(jobs, first)) > 0


def test_unknown_policy_and_bad_inputs_raise_config_errors():
    with pytest.raises(ConfigError) as err:
        place([], one_node(), "bogus")
    assert str(err.value).startswith("The value of placement is 'bogus', but must be one of ff, ffd, wf, wfd,")
    with pytest.raises(ConfigError, match="unique"):
        place([Job(1, 1, 1), Job(1, 2, 2)], one_node())
    with pytest.raises(ConfigError, match="already running"):
        place([Job(1, 1, 1)], one_node().with_running(Job(1, 1, 1), ("n0", 0)))
    with pytest.raises(ConfigError) as err:
        place(["job"], one_node())
    assert err.value.field == "jobs[0]"


def test_user_policies_are_registered_by_name_and_checked():
    def reverse_first_fit(jobs, cluster):
        return assign(list(reversed(jobs)), cluster, "ff")

    def cheater(jobs, cluster):
        return {job.id: ("n0", 0) for job in jobs}

    register_policy("rff", reverse_first_fit)
    register_policy("cheater", cheater)
    try:
        assert policy_names()[:7] == ("ff", "ffd", "wf", "wfd", "exclusive", "wfd-ls", "mip")
        assert "rff" in policy_names()
        jobs = [Job(i, compute=60, memory_gb=1) for i in range(3)]
        assert place(jobs, one_node(), "rff") == {1: ("n0", 1), 2: ("n0", 0)}
        with pytest.raises(PlacementError, match="Eq. 2"):
            place(jobs, one_node(), "cheater")
        with pytest.raises(ConfigError, match="already registered"):
            register_policy("rff", cheater)
        with pytest.raises(ConfigError, match="built-in"):
            register_policy("wfd", cheater, replace=True)
        assert place(jobs[:1], one_node(), policy=cheater) == {0: ("n0", 0)}
    finally:
        unregister_policy("rff")
        unregister_policy("cheater")
    assert "rff" not in policy_names()


def test_mip_without_ortools_names_the_extra(monkeypatch):
    for name in ["ortools", "ortools.sat", "ortools.sat.python", "ortools.sat.python.cp_model"]:
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(MissingDependencyError) as err:
        place([Job(0, 1, 1)], one_node(), "mip", time_limit=1)
    assert "the mip placement policy needs the package 'ortools'" in str(err.value)
    assert "pip install 'hypersack[mip]'" in str(err.value)


BLOCKED = textwrap.dedent("""
    import importlib.abc, sys
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {"torch", "ray", "optuna", "ortools"}:
                raise ImportError("blocked: " + name)
    sys.meta_path.insert(0, Block())
    from hypersack.placement import GPU, Node, Cluster, Job, place
    cluster = Cluster([Node("n", 4, [GPU(0, "A100", 40, oversubscription=2)])])
    assert place([Job("a", 50, 1), Job("b", 50, 1)], cluster) == {"a": ("n", 0), "b": ("n", 0)}
    leaked = sorted(n for n in sys.modules if n.split(".")[0] in {"torch", "ray", "optuna", "ortools"})
    assert not leaked, leaked
    print("PLACEMENT-OK")
""")


def test_placement_imports_without_torch_ray_optuna_or_ortools():
    root = Path(__file__).resolve().parents[3]
    proc = subprocess.run([sys.executable, "-c", BLOCKED], capture_output=True, text=True, timeout=60,
                          cwd=str(root))
    assert proc.returncode == 0, proc.stderr
    assert "PLACEMENT-OK" in proc.stdout


def test_gpus_filled_to_the_brim_still_take_the_smallest_jobs():
    jobs = [Job("a", 97, 1), Job("b", 3, 1), Job("c", 3, 1)]
    assert place(jobs, one_node(2), "ff") == {"a": ("n0", 0), "b": ("n0", 0), "c": ("n0", 1)}
    cluster = one_node(2).with_running(Job("x", 90, 1), ("n0", 0)).with_running(Job("y", 97, 1), ("n0", 1))
    small = [Job(i, 3, 1) for i in range(5)]
    assert place(small, cluster, "wf") == {0: ("n0", 0), 1: ("n0", 0), 2: ("n0", 0), 3: ("n0", 1)}
    assert place(small, cluster, "ff") == {0: ("n0", 0), 1: ("n0", 0), 2: ("n0", 0), 3: ("n0", 1)}


def test_local_search_escapes_the_first_fit_trap():
    from hypersack.placement.improve import improve
    cluster = one_node(2)
    items = [Job("e", 30, 1), Job("a", 40, 1), Job("b", 60, 1), Job("c", 60, 1), Job("d", 40, 1)]
    start = assign(items, cluster, "ff")
    assert set(start) == {"e", "a", "b", "d"}
    better = improve(items, cluster, start)
    assert better == {"a": (("n0", 0),), "b": (("n0", 1),), "c": (("n0", 0),), "d": (("n0", 1),)}
    # WFD leaves e30 + b60 on GPU 0 and d40 out; the search swaps e30 for d40.
    assert place(items, cluster, "wfd-ls") == {"a": ("n0", 1), "b": ("n0", 0), "c": ("n0", 1), "d": ("n0", 0)}


def test_local_search_options_and_input_are_validated():
    from hypersack.placement.improve import improve
    jobs = [Job("a", 60, 1), Job("b", 60, 1)]
    with pytest.raises(ConfigError) as err:
        assign(jobs, one_node(), "wfd-ls", min_gain=-1)
    assert err.value.field == "placement.min_gain"
    with pytest.raises(ConfigError) as err:
        improve(jobs, one_node(), {}, rounds=1.5)
    assert err.value.field == "placement.rounds"
    with pytest.raises(PlacementError, match="Eq. 2"):
        improve(jobs, one_node(), {"a": ("n0", 0), "b": ("n0", 0)})
    assert improve(jobs, one_node(), {"a": ("n0", 0)}, rounds=0) == {"a": (("n0", 0),)}


def test_fill_trades_one_large_job_for_several_small_ones_where_memory_binds():
    from hypersack.placement.fill import density_order
    cluster = one_node(1, memory=40)
    jobs = [Job("big", 60, 36, runtime=9), Job("a", 30, 10, runtime=1), Job("b", 30, 10, runtime=1),
            Job("c", 30, 10, runtime=1)]
    assert place(jobs, cluster, "wfd") == {"big": ("n0", 0)}            # longest first: 60 placed
    assert place(jobs, cluster, "fill") == {"a": ("n0", 0), "b": ("n0", 0), "c": ("n0", 0)}   # 90
    assert [j.id for j in density_order(jobs, cluster)][0] == "a"        # memory binds: dense ones first
