"""The simulator's fast paths change no decision: the incremental placement load (LiveCluster)
gives the same event log as the general path (an immutable Cluster and ``assign``), and the
memo of ``PerfModel.demand`` gives the Job that ``make_job`` builds."""
from __future__ import annotations

import pytest

from hypersack.core.trial import TrialRecord
from hypersack.placement import register_policy, unregister_policy
from hypersack.placement.policies import exclusive, first_fit, worst_fit_decreasing
from hypersack.sim import scenario_from_dict, simulate
from hypersack.sim._placement import make_job


def _busy(mini, mode):
    """Three 4-GPU nodes, short on cores, many trials: placement decides a lot."""
    mini["cluster"] = {"nodes": [{"id": f"n{i}", "cpus": 10, "gpus": {"count": 4, "arch": "A100", "memory_gb": 16,
                                                                     "oversubscription": 2.5}}
                                 for i in range(3)]}
    mini["study"]["algorithm"] = {"type": "asha", "min_t": 1, "max_t": 4, "reduction_factor": 2, "mode": mode}
    mini["study"]["budget"] = {"trials": 60}
    mini["events"] = [{"at": 30.0, "fail": {"node": "n1", "gpu": "2"}},
                      {"at": 45.0, "add": {"node": "n0", "gpu": {"id": "9", "arch": "A100", "memory_gb": 16}}}]
    return scenario_from_dict(mini)


@pytest.mark.parametrize("mode", ["stop", "pause"])
@pytest.mark.parametrize("builtin,plain", [("wfd", worst_fit_decreasing), ("ff", first_fit),
                                           ("exclusive", exclusive)])
def test_the_incremental_load_and_the_general_path_give_the_same_log(mini, mode, builtin, plain):
    register_policy("plain-copy", lambda jobs, cluster: plain(jobs, cluster), replace=True)
    try:
        fast = simulate(_busy(mini, mode), builtin)
        general = simulate(_busy(mini, mode), "plain-copy")
    finally:
        unregister_policy("plain-copy")
    assert fast.controller.allocator._live is not None and general.controller.allocator._live is None
    assert fast.executor.log == general.executor.log and len(fast.executor.log) > 200
    assert fast.states == general.states


def test_the_demand_memo_returns_what_make_job_builds(mini):
    perf = scenario_from_dict(mini).perf
    config = {"lr": 0.01, "batch_size": 128}
    first = perf.demand(TrialRecord(3, dict(config), seed=0))
    again = perf.demand(TrialRecord(-1, dict(config), seed=0))
    assert first == make_job(perf, TrialRecord(3, dict(config), seed=0))
    assert again == make_job(perf, TrialRecord(-1, dict(config), seed=0))
    grown = perf.demand(TrialRecord(3, dict(config), seed=0, resources=2))
    assert grown.gpus == 2 and grown == make_job(perf, TrialRecord(3, dict(config), seed=0, resources=2))
    odd = perf.demand(TrialRecord(4, {"lr": 0.01, "batch_size": 64, "tags": ["a"]}, seed=0))
    assert odd.id == 4                                   # an unhashable config is not memoised
