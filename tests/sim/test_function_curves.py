"""Function and table curves (``sim.curves``), the test functions (``sim.functions``) and the
search-quality table of ``simulate --compare`` (``sim.quality``)."""
from __future__ import annotations

import argparse
import copy
import json
import math
import random
import sys
import types
from typing import Any

import numpy as np
import pytest
import yaml

from hypersack.errors import ConfigError
from hypersack.sim import cli, scenario_from_dict, simulate
from hypersack.sim.curves import ReplayCurves, _key_scales
from hypersack.sim.functions import MFBranin, branin, hartmann3, hartmann6, hartmann6_bad
from hypersack.sim.quality import Trace, quality_rows

from tests.sim.conftest import BASE


def function_scenario(**curves: Any) -> dict[str, Any]:
    """The conftest scenario on Branin: 1 device, 6 trials of 9 steps, function curves."""
    raw = copy.deepcopy(BASE)
    raw["cluster"]["nodes"][0]["gpus"] = raw["cluster"]["nodes"][0]["gpus"][:1]
    raw["study"].update(space=branin.space(), objective={"metric": "value", "mode": "min"},
                        budget={"trials": 6}, max_steps=9)
    raw["workload"] = {"profiles": [{"arch": "A100", "step_time_s": 1, "utilization": 100}]}
    raw["curves"] = {"type": "function", "function": "hypersack.sim.functions:MFBranin",
                     "options": {"max_fidelity": 9}, **curves}
    return raw


def reported(result) -> list[tuple[dict, int, float]]:
    configs = {tid: rec.config for tid, rec in result.controller.trials.items()}
    return [(configs[t], s, m["value"]) for t, s, m in result.store.results]


def test_function_curves_report_the_function_at_each_step():
    result = simulate(scenario_from_dict(function_scenario()), keep_results=True)
    rows = reported(result)
    assert len(rows) == 6 * 9
    nine = MFBranin(max_fidelity=9)
    for config, step, value in rows:
        assert value == nine.value(np.array([config["x0"], config["x1"]]), step)
    assert {s for _, s, _ in rows} == set(range(1, 10))


def test_a_user_function_returns_several_metrics(monkeypatch):
    module = types.ModuleType("user_curves_mod")
    module.quadratic = lambda config, step: {"value": (config["x0"] - 1) ** 2 + 1 / step, "time": step * 2.0}
    monkeypatch.setitem(sys.modules, "user_curves_mod", module)
    raw = function_scenario(function="user_curves_mod:quadratic")
    del raw["curves"]["options"]
    result = simulate(scenario_from_dict(raw), keep_results=True)
    _, step, metrics = result.store.results[0]
    assert metrics["time"] == 2.0 * step and "value" in metrics


@pytest.mark.parametrize("change, field", [
    (lambda c: c.update(function="no_such_module_xyz:f"), "curves.function"),
    (lambda c: c.update(function="hypersack.sim.functions:nothing"), "curves.function"),
    (lambda c: c.update(function="hypersack.sim.functions"), "curves.function"),
    (lambda c: c.update(options={"bogus": 1}), "curves.options"),
    (lambda c: c.update(file="x.csv"), "curves.file"),
    (lambda c: c.pop("function"), "curves.function"),
    (lambda c: c.update(type="tabel"), "curves.type"),
    (lambda c: c.update(clip=[1, 0]), "curves.clip"),
])
def test_function_curve_errors_name_their_field(change, field):
    raw = function_scenario()
    change(raw["curves"])
    with pytest.raises(ConfigError) as info:
        scenario_from_dict(raw)
    assert info.value.field == field


# ---- tables ---------------------------------------------------------------------------------

def write_table(path, rows: list[str]) -> str:
    path.write_text("x0,x1,step,value,time\n" + "\n".join(rows) + "\n")
    return str(path)


def table_scenario(file: str) -> dict[str, Any]:
    raw = function_scenario()
    raw["study"]["max_steps"] = 3
    raw["curves"] = {"type": "table", "file": file}
    return raw


def test_table_curves_replay_the_nearest_rows_curve(tmp_path):
    file = write_table(tmp_path / "t.csv", [
        "0,0,1,5.0,1", "0,0,2,4.0,2", "0,0,3,3.5,3",
        "9,14,1,9.0,1", "9,14,2,8.0,2", "9,14,3,1.5,3"])
    scenario = scenario_from_dict(table_scenario(file))
    curves = scenario.curves
    assert curves.mean({"x0": 8.0, "x1": 13.0}, 3) == 1.5       # nearest: (9, 14)
    assert curves.mean({"x0": -4.0, "x1": 1.0}, 2) == 4.0       # nearest: (0, 0)
    assert curves.curve({"x0": 0, "x1": 0}, 0).at(1) == {"value": 5.0, "time": 1}
    assert curves.best_known("min", 3) == 1.5 and curves.best_known("max", 3) == 3.5
    result = simulate(scenario, keep_results=True)
    assert {v for _, _, v in reported(result)} <= {5.0, 4.0, 3.5, 9.0, 8.0, 1.5}
    assert result.reports == 6 * 3


def test_a_parquet_table_reads_like_the_csv(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    table = pa.table({"x0": [0.0, 0.0], "x1": [0.0, 0.0], "step": [1, 2], "value": [2.0, 1.0]})
    pq.write_table(table, tmp_path / "t.parquet")
    raw = table_scenario(str(tmp_path / "t.parquet"))
    raw["study"]["max_steps"] = 2
    assert scenario_from_dict(raw).curves.mean({"x0": 3, "x1": 3}, 2) == 1.0


@pytest.mark.parametrize("rows, problem", [
    (["0,0,1,5.0,1", "0,0,3,4.0,2"], "steps 1..n"),
    (["0,0,0,5.0,1"], "integer step"),
    (["0,0,1,abc,1"], "integer step"),
])
def test_a_bad_table_is_refused_naming_the_file(tmp_path, rows, problem):
    file = write_table(tmp_path / "t.csv", rows)
    with pytest.raises(ConfigError, match=problem) as info:
        scenario_from_dict(table_scenario(file))
    assert info.value.field.startswith("curves.file")


def test_a_table_without_a_space_column_is_refused(tmp_path):
    (tmp_path / "t.csv").write_text("x0,step,value\n0,1,1.0\n")
    with pytest.raises(ConfigError, match="'x1'") as info:
        scenario_from_dict(table_scenario(str(tmp_path / "t.csv")))
    assert info.value.field == "curves.file"


def _scalar_distance(a, b, scales):
    """The replay distance written per key (the documented formula), as the oracle."""
    total = 0.0
    for key, vb in b.items():
        va = a.get(key)
        if key in scales and isinstance(va, (int, float)):
            log, span = scales[key]
            xa = math.log(va) if log and va > 0 else float(va)
            xb = math.log(vb) if log else float(vb)
            total += ((xa - xb) / span) ** 2
        else:
            total += 0.0 if va == vb else 1.0
    return total


def test_the_vectorised_nearest_matches_the_distance_formula():
    rng = random.Random(3)
    recorded = [{"lr": 10 ** rng.uniform(-4, -1), "width": rng.randint(-3, 3),
                 "opt": rng.choice(["adam", "sgd", "rmsprop"])} for _ in range(60)]
    replay = ReplayCurves({"metric": "a", "curves": [{"config": c, "reports": [{"a": i}]}
                                                      for i, c in enumerate(recorded)]})
    scales = _key_scales(recorded)
    for _ in range(200):
        query = {"lr": 10 ** rng.uniform(-5, 0), "width": rng.randint(-4, 4),
                 "opt": rng.choice(["adam", "sgd", "adagrad"])}
        want = min(range(len(recorded)), key=lambda i: (_scalar_distance(query, recorded[i], scales), i))
        assert replay.nearest(query) == want


# ---- the test functions -------------------------------------------------------------------

@pytest.mark.parametrize("f", [hartmann3, hartmann6, branin, hartmann6_bad])
def test_each_function_reaches_its_published_optimum_at_the_top_fidelity(f):
    assert f.value(np.array(f.argmin), f.max_fidelity) == pytest.approx(f.optimum, abs=1e-5)
    rng = np.random.default_rng(0)
    lows = [lo for lo, _ in f.bounds]
    highs = [hi for _, hi in f.bounds]
    assert min(f.value(rng.uniform(lows, highs), f.max_fidelity) for _ in range(200)) > f.optimum


def test_hartmann_bias_and_noise_fade_and_the_bad_one_inverts_the_low_fidelity():
    x = np.array(hartmann6.argmin)
    assert hartmann6.value(x, 1) > hartmann6.value(x, 10) > hartmann6.value(x, 100)
    assert hartmann6.value(x, 7) == hartmann6.value(x, 7)               # noise: a pure function
    assert hartmann6_bad.value(x, 1) > 0 > hartmann6_bad.value(x, 100)  # the optimum looks worst
    clean = type(hartmann6)(6, bias=0.5, noise=0.0)
    assert hartmann6.value(x, 1) > clean.value(x, 1)                    # |noise| only adds
    assert hartmann6.value(x, 100) == clean.value(x, 100)


# ---- the quality table ----------------------------------------------------------------------

def test_regret_is_of_the_best_top_fidelity_trial_within_each_budget():
    # trials 0 and 1 reach the top (step 2); trial 1 is better but arrives after 4 steps
    reports = [(0, 1, 5.0), (0, 2, 3.0), (1, 1, 9.0), (1, 2, 1.0), (2, 1, 0.0)]
    trace = Trace(reports, {0: 2, 1: 2, 2: 2}, {0: 3.5, 1: 1.25})
    assert trace.chosen([1, 2, 3, 4, 5], "min") == [None, 0, 0, 1, 1]
    assert trace.regrets([1, 2, 4], "min", 1.0) == [math.inf, 2.5, 0.25]
    assert trace.chosen([4], "max") == [0]                              # 3.0 > 1.0 at the top
    rows = quality_rows({"a": [trace, trace]}, "min", optimum=1.0, budget=4, fractions=(0.25, 0.5, 1.0))
    assert rows["rows"][0]["regret"] == [[math.inf] * 3, [2.5] * 3, [0.25] * 3]
    short = Trace(reports[:2], {0: 2}, {0: 3.5})
    assert quality_rows({"a": [trace], "b": [short]}, "min")["budget"] == 2   # cut at the fewest
    assert quality_rows({"a": [trace]}, "min")["optimum"] == 1.25            # unknown: best reached


def test_quartiles_count_a_run_without_an_answer_as_the_worst():
    done = Trace([(0, 1, 1.0)], {0: 1}, {0: 2.0})
    empty = Trace([(0, 1, 1.0)], {0: 5}, {})
    rows = quality_rows({"a": [done, done, done, empty]}, "min", optimum=0.0, budget=1)
    q1, median, q3 = rows["rows"][0]["regret"][-1]
    assert (q1, median) == (2.0, 2.0) and q3 == math.inf


def test_simulate_compare_prints_the_regret_table(capsys, tmp_path):
    raw = function_scenario()
    raw["compare"] = {"seeds": 2, "budget_steps": 40,
                      "algorithms": {"random": {"type": "random"},
                                     "asha": {"type": "asha", "min_t": 1, "max_t": 9}}}
    raw["study"]["budget"] = {"trials": 12}
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    assert cli.main(argparse.Namespace(scenario=str(path), policy=None, compare=True, timeline=None,
                                       json=True, execution=None, report=None)) == 0
    out = json.loads(capsys.readouterr().out)
    quality = out["quality"]
    assert [r["algorithm"] for r in quality["rows"]] == ["random", "asha"]
    assert quality["optimum"] == pytest.approx(branin.optimum) and quality["budget"] == 40
    for row in quality["rows"]:
        assert row["seeds"] == 2 and len(row["regret"]) == 3
        medians = [m for _, m, _ in row["regret"]]
        assert medians[2] <= medians[1] <= medians[0] and medians[2] > 0   # more budget, no worse
    cli._print(out)
    text = capsys.readouterr().out
    assert "regret" in text and "25% budget" in text and "over 2 seed(s)" in text
    assert "40 fidelity steps" in text and text.count("[") >= 6          # median [q1, q3] cells


def test_a_quality_comparison_needs_an_objective_metric():
    raw = function_scenario(metric="loss")
    raw["compare"] = {"algorithms": {"random": {"type": "random"}}}
    with pytest.raises(ConfigError) as info:
        scenario_from_dict(raw)
    assert info.value.field == "curves.metric"
