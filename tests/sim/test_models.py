"""The performance model's formulas, the learning curves, and scenario validation."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from hypersack.errors import ConfigError
from hypersack.sim import cli, scenario_from_dict
from hypersack.sim.curves import CurveParams, ParametricCurves, ReplayCurves
from hypersack.sim.perf import PerfModel, PerfParams, ProfileTable, WorkloadKeys

CURVES = Path(__file__).resolve().parents[2] / "examples" / "sim" / "curves" / "digits_mlp.json"


def _model(**params) -> PerfModel:
    table = ProfileTable.from_list([{"arch": "A100", "step_time_s": 10, "utilization": 50}])
    return PerfModel(table, WorkloadKeys(), PerfParams.from_dict(params), ["A100"])


def test_gpu_factor_follows_the_documented_formula():
    m = _model(interference=0.1, saturation={"A100": 1.5})
    assert m.gpu_factor("A100", 100, [50]) == 1.0
    assert m.gpu_factor("A100", 100, [50, 50]) == pytest.approx(1 / 1.1)          # under s*C
    assert m.gpu_factor("A100", 100, [100, 100]) == pytest.approx(0.75 / 1.1)     # 150 / 200
    assert m.cpu_factor(8, 16) == 0.5 and m.cpu_factor(8, 4) == 1.0


def test_data_parallel_efficiency_and_cross_node_penalty():
    m = _model(dp_beta=0.2, cross_node_efficiency=0.5, checkpoint_s=0)
    assert m.dp_efficiency(1) == 1.0
    assert m.dp_efficiency(4) == pytest.approx(1 / 1.4)
    assert m.step_work({}, ["A100"] * 4, nodes=2) == pytest.approx(10 / (4 * 0.5 / 1.4))


def test_profile_and_perf_errors_name_their_field():
    with pytest.raises(ConfigError, match=r"workload.profiles\[0\].utilization"):
        ProfileTable.from_list([{"arch": "A100", "step_time_s": 1, "utilization": 150}])
    with pytest.raises(ConfigError, match="perf.bogus"):
        PerfParams.from_dict({"bogus": 1})
    with pytest.raises(ConfigError, match="perf.saturation.A100"):
        PerfParams.from_dict({"saturation": {"A100": 0}})


def test_parametric_curves_are_seeded_and_peak_at_the_optimum():
    curves = ParametricCurves("accuracy", CurveParams(start=0.1, best=0.9, worst=0.2, lr_optimum=0.01,
                                                      config_spread=0.0), noise=0.02)
    a = [curves.curve({"lr": 0.01}, 7).at(s)["accuracy"] for s in (3, 1, 2)]
    b = [curves.curve({"lr": 0.01}, 7).at(s)["accuracy"] for s in (3, 1, 2)]
    assert a == b                                            # same seed, any access order
    assert curves.curve({"lr": 0.01}, 8).at(1) != curves.curve({"lr": 0.01}, 7).at(1)
    assert curves.asymptote({"lr": 0.01}) == pytest.approx(0.9)
    assert curves.asymptote({"lr": 1e-4}) < curves.asymptote({"lr": 1e-3}) < 0.9
    quiet = ParametricCurves("loss", CurveParams(start=2.0, best=0.5, worst=2.0, config_spread=0.0))
    values = [quiet.curve({"lr": 0.01}, 0).at(s)["loss"] for s in range(1, 20)]
    assert all(x > y for x, y in zip(values, values[1:])) and values[-1] > 0.5    # falls to best


def test_replay_returns_the_nearest_recorded_curve():
    recorded = json.loads(CURVES.read_text())
    replay = ReplayCurves(recorded)
    first = recorded["curves"][3]
    curve = replay.curve(first["config"], 0)
    assert [curve.at(r["step"])["accuracy"] for r in first["reports"]] == \
        [r["accuracy"] for r in first["reports"]]
    assert curve.at(999)["accuracy"] == first["reports"][-1]["accuracy"]       # held at its end
    assert set(curve.at(1)) == {"accuracy", "loss", "train_loss"}


@pytest.mark.parametrize("change, field", [
    (lambda d: d.update(bogus=1), "bogus"),
    (lambda d: d["study"].update(space={"lr": {"type": "float", "low": 1, "high": 0}}), "study.space.lr.low"),
    (lambda d: d["workload"]["profiles"].pop(), "workload.profiles"),
    (lambda d: d["workload"].update(batch_size_key="nope"), "workload.batch_size_key"),
    (lambda d: d["cluster"]["nodes"][0]["gpus"][0].update(memory_gb=-1), "cluster.nodes[0].gpus[0].memory_gb"),
    (lambda d: d.update(events=[{"at": -1, "fail": {"node": "n0", "gpu": "0"}}]), "events[0].at"),
    (lambda d: d.update(events=[{"at": 1, "add": {"node": "zz", "gpu": {"arch": "A100", "memory_gb": 1}}}]),
     "events[0].add.node"),
    (lambda d: d["curves"].update(tau=0), "curves.tau"),
    (lambda d: d.update(policy="best"), "policy"),
    (lambda d: d["study"]["algorithm"].update(type="nope"), "study.algorithm.type"),
])
def test_scenario_errors_name_the_field(mini, change, field):
    change(mini)
    with pytest.raises(ConfigError) as info:
        scenario_from_dict(mini)
    assert info.value.field == field


def test_the_cli_prints_figures_and_writes_a_timeline(mini, tmp_path, capsys):
    import yaml
    path = tmp_path / "mini.yaml"
    mini["compare"] = {"policies": ["exclusive", "wfd"]}
    path.write_text(yaml.safe_dump(mini))
    args = argparse.Namespace(scenario=str(path), policy=None, compare=False,
                              timeline=str(tmp_path / "t.csv"), json=True)
    assert cli.main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["run"]["policy"] == "wfd" and out["speedup_vs_exclusive"] > 1
    assert "workload.profiles" in out["unvalidated"]
    rows = (tmp_path / "t.csv").read_text().splitlines()
    assert rows[0].startswith("node,gpu,trial_id") and len(rows) > 8
    args.compare, args.json, args.timeline = True, False, None
    assert cli.main(args) == 0
    text = capsys.readouterr().out
    assert "exclusive" in text and "wfd" in text and "UNVALIDATED" in text
    args.scenario = str(tmp_path / "missing.yaml")
    assert cli.main(args) == 2
    assert "scenario" in capsys.readouterr().err
