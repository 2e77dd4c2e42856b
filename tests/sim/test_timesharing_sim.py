"""Time-sharing in the simulator: the study runs unchanged, preempted trials pay suspend and
restore costs, never replay nor skip a step, and Hermes reaches the good trials' targets first."""
from __future__ import annotations

import copy
import dataclasses
from collections import Counter
from pathlib import Path

import pytest

from hypersack.sim.run import simulate
from hypersack.sim.scenario import load_scenario, scenario_from_dict

from executor_helpers import ack_reports

YAML = Path(__file__).resolve().parents[2] / "examples" / "sim" / "hermes_bins.yaml"
STEPS = 30
GOOD, BAD = [0.01, 0.009], [0.0001, 0.00015, 0.0002, 0.00025]


def scenario(policy: str, lrs=BAD + GOOD, **options):
    raw = copy.deepcopy(load_scenario(YAML).raw)
    raw["cluster"]["nodes"] = raw["cluster"]["nodes"][:2]
    raw["study"].update(max_steps=STEPS, budget={"trials": len(lrs)})
    raw["study"]["space"]["lr"]["choices"] = list(lrs)
    raw["study"]["time_sharing"] = {"policy": policy, "quantum_s": 3.0, **options}
    raw["perf"].update(suspend_s=0.25, restore_s=0.5)
    return scenario_from_dict(raw, YAML.parent)


def reports(result):
    return [(at, t, d[0]) for at, kind, t, d in result.executor.log if kind == "ResultReported"]


@pytest.mark.parametrize("policy", ["hermes", "rr", "slaq", "fifo"])
def test_every_step_is_reported_once_under_every_policy(policy):
    result = simulate(scenario(policy))
    assert result.states["complete"] == len(BAD + GOOD)
    counts = Counter((t, step) for _, t, step in reports(result))
    assert set(counts.values()) == {1}
    assert set(counts) == {(t, s) for t in range(len(BAD + GOOD)) for s in range(1, STEPS + 1)}
    attempts = [r.attempts for r in result.controller.trials.values()]
    assert all(r.retries == 0 for r in result.controller.trials.values())
    if policy == "fifo":
        assert set(attempts) == {1}
    else:
        assert sum(attempts) > len(attempts)


def test_a_preemption_costs_suspend_then_restore():
    result = simulate(scenario("hermes"))
    log = reports(result)
    preempted = [iv for iv in result.executor.timeline.intervals if iv.outcome == "preempted"]
    assert preempted
    for iv in preempted:
        last = max(at for at, t, _ in log if t == iv.trial_id and at <= iv.end + 1e-9)
        assert iv.end == pytest.approx(last + 0.25)           # suspend_s after its last step
    step_s = 0.3273                                            # GoogleNet's, sole on its device
    for iv in result.executor.timeline.intervals:
        if iv.attempt > 1:                                     # a resumed stay: restore first
            first = min(at for at, t, _ in log if t == iv.trial_id and at >= iv.start)
            assert first == pytest.approx(iv.start + 0.5 + step_s)


def test_the_simulated_run_is_deterministic():
    a, b = simulate(scenario("hermes")), simulate(scenario("hermes"))
    assert a.executor.log == b.executor.log


def test_the_acks_free_below_changes_nothing_a_simulation_computes(monkeypatch):
    """Grid search never decides: an ack's ``free_below`` is past the last step (0 only for a
    trial asked to stop), so every preemption lands on a report below the point its last ack
    named. A simulated report carries a checkpoint and waits for its ack all the same (as the
    local worker's does), so the run is the one whose acks say 0 (every report waits): the
    same log, the same stays. (A simulator that let such reports go on unacked ends each
    trial preempted at a report one step later: this test then fails.)"""
    from hypersack.sim.executor import SimExecutor
    acknowledge = SimExecutor.acknowledge
    given: list[int] = []

    def recorded(self, trial_ids, free_below):
        given.extend(free_below.values())
        acknowledge(self, trial_ids, free_below)

    def zeroed(self, trial_ids, free_below):
        acknowledge(self, trial_ids, {t: 0 for t in trial_ids})

    monkeypatch.setattr(SimExecutor, "acknowledge", recorded)
    honoured = simulate(scenario("hermes"))
    monkeypatch.setattr(SimExecutor, "acknowledge", zeroed)
    waiting = simulate(scenario("hermes"))
    assert honoured.executor.log == waiting.executor.log
    assert ([dataclasses.astuple(iv) for iv in honoured.executor.timeline.intervals]
            == [dataclasses.astuple(iv) for iv in waiting.executor.timeline.intervals])
    assert any(iv.outcome == "preempted" for iv in honoured.executor.timeline.intervals)
    assert sum(b > STEPS for b in given) > len(given) / 2    # most acks: past the last step


def _time_to_target(result, lr: float) -> float:
    clean = copy.deepcopy(result_raw := load_scenario(YAML).raw)
    clean["curves"]["noise"] = 0.0
    curve = scenario_from_dict(clean, YAML.parent).curves.curve({"lr": lr}, 0)
    start = float(result_raw["curves"]["start"])
    goal = start - 0.9 * (start - curve.at(STEPS)["loss"])
    target = next(s for s in range(1, STEPS + 1) if curve.at(s)["loss"] <= goal)
    trial = next(r.trial_id for r in result.controller.trials.values() if r.config["lr"] == lr)
    return min(at for at, t, step in reports(result) if t == trial and step >= target)


def test_hermes_brings_the_good_trials_submitted_last_to_their_target_first():
    means = {}
    for policy in ("fifo", "rr", "hermes"):
        result = simulate(scenario(policy))
        means[policy] = sum(_time_to_target(result, lr) for lr in GOOD) / len(GOOD)
    assert means["hermes"] < min(means["rr"], means["fifo"])


@pytest.mark.parametrize("algorithm", [{"type": "random"}, {"type": "tpe", "n_startup_trials": 3}])
def test_any_search_algorithm_with_oversubscribed_devices(algorithm):
    """r = 2 and trials of 50%: each device runs the best two of its bound trials at once."""
    raw = copy.deepcopy(load_scenario(YAML).raw)
    raw["cluster"]["nodes"] = [
        {"id": "n0", "cpus": 20, "gpus": [{"id": str(i), "arch": "RTX2080Ti", "memory_gb": 11,
                                           "oversubscription": 2} for i in range(2)]}]
    for row in raw["workload"]["profiles"]:
        row.update(utilization=50, memory_gb=4)
    raw["study"].update(max_steps=20, budget={"trials": 10}, algorithm=algorithm,
                        space={"lr": {"type": "float", "low": 1e-4, "high": 0.02, "log": True}})
    raw["study"]["time_sharing"] = {"policy": "hermes", "quantum_s": 2.0}
    result = simulate(scenario_from_dict(raw, YAML.parent))
    assert result.states["complete"] == 10
    counts = Counter((t, step) for _, t, step in reports(result))
    assert set(counts.values()) == {1} and len(counts) == 10 * 20
    assert any(r.attempts > 1 for r in result.controller.trials.values())
    intervals = result.executor.timeline.intervals
    for iv in intervals:                      # at every stay's start, at most 2 share its device
        on = [o for o in intervals if (o.node, o.gpu) == (iv.node, iv.gpu)
              and o.start <= iv.start < o.end]
        assert 1 <= len(on) <= 2
    assert max(sum(1 for o in intervals if (o.node, o.gpu) == (iv.node, iv.gpu)
                   and o.start <= iv.start < o.end) for iv in intervals) == 2


def test_a_trial_preempted_at_its_last_report_completes_without_another_step():
    from hypersack.core.trial import Launch, ResultReported, TrialFinished
    from hypersack.sim.executor import SimExecutor
    s = scenario("hermes")
    executor = SimExecutor(s.cluster, s.perf, s.curves, steps_for=lambda config: 2)
    executor.submit(Launch(0, {"lr": 0.01}, 1, 1, None, (("n0", "0"),)))
    events = []
    while not any(isinstance(e, TrialFinished) for e in events):
        polled = executor.poll()
        events += polled
        ack_reports(executor, polled)
    assert [e.step for e in events if isinstance(e, ResultReported)] == [1, 2]
    checkpoint = [e.checkpoint for e in events if isinstance(e, ResultReported)][-1]
    executor.submit(Launch(0, {"lr": 0.01}, 1, 2, checkpoint, (("n0", "0"),)))
    again = executor.poll()
    assert [type(e).__name__ for e in again] == ["TrialStarted", "TrialFinished"]
