"""Placement policies and their options in the simulator: hay and ray run, options from the
scenario, profile ``gpus`` for always-data-parallel models, the Hay scenarios load and run."""
from __future__ import annotations

from pathlib import Path

import pytest

from hypersack.errors import ConfigError
from hypersack.sim import load_scenario, scenario_from_dict, simulate

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "sim"


def _with_trainer(mini):
    """Two nodes of 2 GPUs; model 'dp' always on 2 GPUs, the rest single-GPU trials."""
    mini["cluster"] = {"nodes": [{"id": f"n{k}", "cpus": 16, "gpus": {"count": 2, "arch": "A100", "memory_gb": 40}}
                                 for k in range(2)]}
    mini["study"]["space"] = {"task": {"type": "categorical", "choices": ["dp", "a", "b", "c", "d", "e"]}}
    mini["study"]["algorithm"] = {"type": "grid"}
    mini["study"]["budget"] = {"trials": 6}
    mini["workload"] = {"model_key": "task", "profiles": [
        {"model": "dp", "arch": "A100", "step_time_s": 40, "utilization": 60, "memory_gb": 10, "gpus": 2},
        {"model": "*", "arch": "A100", "step_time_s": 5, "utilization": 30, "memory_gb": 2}]}
    return mini


@pytest.mark.parametrize("policy", ["hay", "ray", {"policy": "hay", "w_frag": 1, "w_entire": 0}])
def test_hay_and_ray_run_in_the_simulator_and_a_profile_can_ask_for_several_gpus(mini, policy):
    result = simulate(scenario_from_dict(_with_trainer(mini)), policy)
    assert result.states["complete"] == 6
    dp = next(t for t, r in result.controller.trials.items() if r.config["task"] == "dp")
    devices = {(iv.node, iv.gpu) for iv in result.executor.timeline.intervals if iv.trial_id == dp}
    assert len(devices) == 2
    assert result.policy == (policy if isinstance(policy, str) else "hay(w_frag=1,w_entire=0)")


def test_under_hay_small_trials_leave_the_trainers_gpus_alone_while_another_node_has_room(mini):
    # Four 30% trials fit the other node (3 + 1): its score stays above the trainer's node's
    # (1 x 0.8 / 2 = 0.4) until both of its GPUs are activated.
    mini = _with_trainer(mini)
    mini["study"]["space"]["task"]["choices"] = ["dp", "a", "b", "c", "d"]
    mini["study"]["budget"]["trials"] = 5
    result = simulate(scenario_from_dict(mini), "hay")
    dp = next(t for t, r in result.controller.trials.items() if r.config["task"] == "dp")
    intervals = result.executor.timeline.intervals
    trainer = {(iv.node, iv.gpu) for iv in intervals if iv.trial_id == dp}
    start, end = next((iv.start, iv.end) for iv in intervals if iv.trial_id == dp)
    sharing = [iv for iv in intervals if iv.trial_id != dp and (iv.node, iv.gpu) in trainer
               and iv.start < end and iv.end > start]
    assert len({node for node, _ in trainer}) == 1 and not sharing


def test_scenario_placement_options_are_checked_with_the_field_named(mini):
    mini["policy"] = {"policy": "hay", "w_frag": -1}
    with pytest.raises(ConfigError) as err:
        scenario_from_dict(mini)
    assert err.value.field == "policy.w_frag"
    mini["policy"] = "wfd"
    mini["compare"] = {"policies": ["wfd", {"policy": "nope"}]}
    with pytest.raises(ConfigError) as err:
        scenario_from_dict(mini)
    assert err.value.field == "compare.policies[1].policy"


def test_profile_gpus_must_be_a_whole_number(mini):
    mini["workload"]["profiles"][0]["gpus"] = 1.5
    with pytest.raises(ConfigError, match="gpus"):
        scenario_from_dict(mini)


@pytest.mark.parametrize("name", ["hay_dp8_s40_2x8xa100.yaml", "hay_rasda_2x8xa100.yaml"])
def test_the_hay_scenarios_load_and_run(name):
    scenario = load_scenario(EXAMPLES / name)
    result = simulate(scenario, "hay", keep_log=False)
    assert result.states["failed"] == 0 and result.trials == scenario.study.budget.trials
