"""``hypersack simulate --compare`` across time-sharing policies and algorithms, and its report."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from hypersack.errors import ConfigError
from hypersack.sim.compare import compare_time_sharing, time_sharing_rows
from hypersack.sim.scenario import load_scenario, scenario_from_dict

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "sim"


def small_hermes(trials: int = 4) -> dict:
    """Hermes' bin scenario cut to ``trials`` jobs (two good learning rates, two bad)."""
    raw = copy.deepcopy(load_scenario(EXAMPLES / "hermes_bins.yaml").raw)
    raw["study"]["space"]["lr"]["choices"] = [0.0003, 0.0094, 0.00012, 0.01][:trials]
    raw["study"]["budget"]["trials"] = trials
    raw["study"]["max_steps"] = 20
    return raw


def test_the_hermes_example_compares_the_four_policies_of_its_paper():
    assert load_scenario(EXAMPLES / "hermes_bins.yaml").compare_time_sharing == \
        ["fifo", "rr", "slaq", "hermes"]


def test_a_compared_policy_keeps_the_scenarios_options_or_takes_its_own_defaults():
    scenario = scenario_from_dict(small_hermes(), EXAMPLES)
    hermes = scenario.with_time_sharing("hermes").study.time_sharing
    fifo = scenario.with_time_sharing("fifo").study.time_sharing
    assert (hermes.policy, hermes.quantum_s, hermes.growth) == ("hermes", 10.0, 1.5)
    assert (fifo.policy, fifo.quantum_s, fifo.growth) == ("fifo", 30.0, 1.0)   # its defaults
    assert fifo.max_jobs_per_device == hermes.max_jobs_per_device == 4         # G_thres kept


def test_each_time_sharing_policy_runs_and_the_first_is_the_baseline():
    scenario = scenario_from_dict(small_hermes(), EXAMPLES)
    runs = compare_time_sharing(scenario, ["fifo", "hermes"])
    assert [label for label, _ in runs] == ["fifo", "hermes"]
    assert all(r.trials == 4 and r.states.get("complete") == 4 for _, r in runs)
    rows = time_sharing_rows(runs)
    assert [r["time_sharing"] for r in rows] == ["fifo", "hermes"] and rows[0]["speedup"] == 1.0
    assert rows[1]["speedup"] == pytest.approx(runs[0][1].makespan_s / runs[1][1].makespan_s)


@pytest.mark.parametrize("value, field", [(["fifo", "fifo"], "compare.time_sharing[1]"),
                                          (["fifo", "lottery"], "compare.time_sharing[1]"),
                                          ("hermes", "compare.time_sharing"),
                                          ([], "compare.time_sharing")])
def test_a_bad_time_sharing_comparison_is_refused_by_name(value, field):
    raw = small_hermes()
    raw["compare"] = {"time_sharing": value}
    with pytest.raises(ConfigError) as info:
        scenario_from_dict(raw, EXAMPLES)
    assert info.value.field == field


def test_the_compare_report_shows_every_compared_run(tmp_path, capsys):
    from hypersack.cli import main
    raw = small_hermes()
    raw["compare"] = {"time_sharing": ["fifo", "hermes"],
                      "algorithms": {"GRID": {"type": "grid"}, "RANDOM": {"type": "random"}}}
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["simulate", str(path), "--compare", "--report", str(tmp_path / "c.html"),
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["algorithm"] for r in out["algorithms"]] == ["GRID", "RANDOM"]
    assert [r["time_sharing"] for r in out["time_sharing"]] == ["fifo", "hermes"]
    page = Path(out["report"]).read_text()
    for name in ("GRID", "RANDOM", "time sharing fifo", "time sharing hermes"):
        assert f'"name":"hermes-bins-googlenet ({name})"' in page
