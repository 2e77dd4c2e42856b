"""Whole simulated studies: the real loop, controller, algorithms and placement on the simulator."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from hypersack.placement.model import EPS
from hypersack.sim import load_scenario, scenario_from_dict, simulate

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "sim"


def _asha(mini):
    mini["study"]["algorithm"] = {"type": "asha", "min_t": 1, "max_t": 4, "reduction_factor": 2,
                                  "mode": "stop"}
    mini["study"]["budget"] = {"trials": 16}
    return mini


def test_the_same_seed_gives_the_same_event_log(mini):
    logs = [simulate(scenario_from_dict(_asha(mini)), "wfd").executor.log for _ in range(2)]
    assert logs[0] == logs[1] and len(logs[0]) > 50


def test_another_seed_gives_another_log(mini):
    a = simulate(scenario_from_dict(_asha(mini)), "wfd").executor.log
    mini["seed"] = 1
    b = simulate(scenario_from_dict(mini), "wfd").executor.log
    assert a != b


def _check_timeline(result) -> None:
    """Eq. 1-4 at every instant: one place per trial, compute <= r x C, memory <= D, cores <= Q."""
    cluster = result.executor.inventory()
    gpus = {(n.id, g.id): (n, g) for n in cluster.nodes for g in n.gpus}
    intervals = result.executor.timeline.intervals
    times = sorted({iv.start for iv in intervals})
    for t in times:
        live = [iv for iv in intervals if iv.start <= t < iv.end]
        compute, memory, cores, where = defaultdict(float), defaultdict(float), defaultdict(float), defaultdict(set)
        for iv in live:
            compute[(iv.node, iv.gpu)] += iv.compute
            memory[(iv.node, iv.gpu)] += iv.memory_gb
            cores[iv.node] += 2                      # every profile of the mini scenario asks 2
            where[iv.trial_id].add(iv.attempt)
        assert all(len(a) == 1 for a in where.values())                          # Eq. 1
        for dev, c in compute.items():
            node, gpu = gpus[dev]
            assert c <= gpu.capacity + EPS                                        # Eq. 2
            assert memory[dev] <= gpu.memory_gb + EPS                             # Eq. 3
        for node_id, q in cores.items():
            assert q <= next(n for n in cluster.nodes if n.id == node_id).cpus + EPS   # Eq. 4


@pytest.mark.parametrize("policy", ["ff", "ffd", "wf", "wfd", "exclusive"])
def test_no_simulated_instant_breaks_eq_1_to_4(mini, policy):
    mini["cluster"]["nodes"][0]["cpus"] = 6          # three trials at most on the node (Eq. 4 binds)
    result = simulate(scenario_from_dict(_asha(mini)), policy)
    assert result.trials == 16 and not result.states["failed"]
    _check_timeline(result)


def test_packing_beats_the_exclusive_baseline(mini):
    scenario = scenario_from_dict(mini)
    assert simulate(scenario, "wfd").makespan_s < simulate(scenario, "exclusive").makespan_s


def test_a_gpu_failure_restarts_its_trials_from_their_checkpoints(mini):
    mini["events"] = [{"at": 15, "fail": {"node": "n0", "gpu": "0"}},
                      {"at": 40, "add": {"node": "n0", "gpu": {"id": "2", "arch": "A100", "memory_gb": 40}}}]
    result = simulate(scenario_from_dict(mini), "wfd")
    intervals = result.executor.timeline.intervals
    lost = [iv for iv in intervals if iv.outcome == "lost"]
    assert lost and all(iv.node == "n0" and iv.gpu == "0" for iv in lost)
    assert all(s == 0 for k, s in result.states.items() if k != "complete")   # all complete
    for iv in lost:
        again = [j for j in intervals if j.trial_id == iv.trial_id and j.attempt > iv.attempt]
        assert again and again[0].start >= iv.end         # relaunched once a device had room
    assert any(iv.gpu == "2" and iv.start >= 40 for iv in intervals)     # the added GPU was used
    assert not any(iv.node == "n0" and iv.gpu == "0" and iv.start >= 15 for iv in intervals)
    resumed = [e for e in result.executor.log if e[1] == "ResultReported" and e[2] == lost[0].trial_id]
    assert [e[3][0] for e in resumed] == sorted({e[3][0] for e in resumed})   # no step reported twice


def test_a_1024_gpu_cluster_simulates(mini):
    mini["cluster"] = {"nodes": [{"id": f"n{i}", "cpus": 64,
                                  "gpus": {"count": 8, "arch": "A100", "memory_gb": 40}} for i in range(128)]}
    mini["study"]["algorithm"] = {"type": "asha", "min_t": 1, "max_t": 4, "reduction_factor": 2,
                                  "mode": "stop"}
    mini["study"]["budget"] = {"trials": 150}
    result = simulate(scenario_from_dict(mini), "wfd", keep_log=False)
    assert result.trials == 150 and result.states["pending"] == 0 and result.states["running"] == 0
    assert len(result.executor.timeline.devices()) == 1024
    assert 0 < result.makespan_s < 60


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_example_scenario_runs(path):
    result = simulate(load_scenario(path), keep_log=False)
    assert result.makespan_s > 0 and result.states["running"] == 0 and result.states["pending"] == 0
    assert result.best_value is not None


def test_a_scenario_file_is_read_with_the_loader_limits(tmp_path):
    from hypersack.errors import ConfigError
    bomb = tmp_path / "bomb.yaml"
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 8)]
    bomb.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match="bomb.yaml"):
        load_scenario(bomb)
    with pytest.raises(ConfigError, match="missing.yaml"):
        load_scenario(tmp_path / "missing.yaml")
