"""Multi-objective studies: the objective as a list (Python, spec dict, YAML), its errors, and
the pure Pareto front (``core.pareto``)."""
from __future__ import annotations

import json

import pytest

from hypersack.config import load_study
from hypersack.core.objective import MultiObjective, Objective
from hypersack.core.pareto import dominates, non_dominated, pareto_front
from hypersack.core.spec import StudySpec
from hypersack.errors import ConfigError

TWO = [("loss", "min"), ("latency_ms", "min")]
SPEC = {"name": "mo", "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
        "objective": [{"metric": "loss", "mode": "min"}, {"metric": "acc", "mode": "maximize"}],
        "budget": {"trials": 4}}


# ---- parsing ---------------------------------------------------------------------------------

def test_a_list_of_objectives_is_a_multi_objective_whose_first_part_is_the_objective():
    objective = Objective.parse([("loss", "min"), {"metric": "acc", "mode": "maximize"}])
    assert isinstance(objective, MultiObjective) and objective.is_multi
    assert objective.metrics == ("loss", "acc")
    assert [p.mode for p in objective.parts] == ["min", "max"]          # Optuna's word read
    assert (objective.metric, objective.mode) == ("loss", "min")        # single-metric views
    assert objective.to_spec() == [{"metric": "loss", "mode": "min"}, {"metric": "acc", "mode": "max"}]
    assert Objective.parse(objective.to_spec()) == objective


@pytest.mark.parametrize("spec", [("loss", "min"), ["loss", "min"], {"metric": "loss", "mode": "min"}])
def test_the_single_forms_are_unchanged(spec):
    objective = Objective.parse(spec)
    assert type(objective) is Objective and not objective.is_multi
    assert objective.parts == (objective,) and objective.to_spec() == {"metric": "loss", "mode": "min"}


def test_a_list_of_one_objective_is_that_objective():
    assert Objective.parse([("loss", "min")]) == Objective("loss", "min")


@pytest.mark.parametrize("spec, field, words", [
    ([], "objective", "at least one objective"),
    ([("loss", "min"), ("loss", "max")], "objective[1].metric", "repeats objective[0]'s metric"),
    ([("loss", "min"), ("lat", "down")], "objective[1].mode", "must be 'min' or 'max'"),
    ([("loss", "min"), ("lat",)], "objective[1]", "(metric, 'min'|'max')"),
    (["loss", {"metric": "lat", "mode": "min"}], "objective[0].mode", "must be 'min' or 'max'"),
    ([("loss", "min"), {"metric": "lat"}], "objective[1].mode", "must be 'min' or 'max'"),
    ([{"metric": "", "mode": "min"}, ("lat", "min")], "objective[0].metric", "non-empty"),
    ([("loss", "min"), {"metric": "lat", "mode": "min", "weight": 2}], "objective[1].weight", "not a field"),
    ([("loss", "min"), [("a", "min"), ("b", "min")]], "objective[1]", "one objective, not a list"),
])
def test_a_bad_list_names_the_field_and_the_value(spec, field, words):
    with pytest.raises(ConfigError) as info:
        Objective.parse(spec)
    assert info.value.field == field and words in str(info.value)


def test_the_values_of_a_report_are_every_objectives_or_none():
    objective = Objective.parse(TWO)
    assert objective.values_of({"loss": 1, "latency_ms": 2.5, "other": 9}) == (1.0, 2.5)
    assert objective.values_of({"loss": 1}) is None
    assert objective.missing({"loss": 1}) == ["latency_ms"]
    assert objective.part("latency_ms") == Objective("latency_ms", "min")
    with pytest.raises(ConfigError, match="must name an objective metric"):
        objective.part("acc", "algorithm.rank_by")


def test_a_spec_with_several_objectives_round_trips_through_its_json():
    spec = StudySpec.from_dict(SPEC)
    assert spec.objective.metrics == ("loss", "acc")
    again = StudySpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again.objective == spec.objective and again.to_dict() == spec.to_dict()


def test_a_spec_objective_list_checks_each_elements_keys():
    bad = {**SPEC, "objective": [{"metric": "loss", "mode": "min"}, {"metric": "a", "mode": "min", 1: 2}]}
    with pytest.raises(ConfigError) as info:
        StudySpec.from_dict(bad)
    assert info.value.field == "objective[1].1"


YAML = """name: mo
objective:
  - {metric: loss, mode: min}
  - {metric: latency_ms, mode: {mode}}
space:
  x: {type: float, low: 0.0, high: 1.0}
budget: {trials: 4}
algorithm: {algorithm}
"""


def _yaml(tmp_path, mode="min", algorithm="random"):
    path = tmp_path / "study.yaml"
    path.write_text(YAML.replace("{mode}", mode).replace("{algorithm}", algorithm))
    return path


def test_a_yaml_objective_list_is_read(tmp_path):
    loaded = load_study(_yaml(tmp_path, algorithm="{type: optuna, sampler: nsga2}"))
    assert loaded.spec.objective.metrics == ("loss", "latency_ms")
    assert type(loaded.algorithm).__name__ == "OptunaSearch"


def test_a_bad_yaml_objective_names_its_line(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_study(_yaml(tmp_path, mode="fastest"))
    assert info.value.field == "objective[1].mode" and info.value.location.endswith("study.yaml:4")


def test_a_multi_fidelity_algorithm_in_yaml_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(ConfigError, match="rank_by"):
        load_study(_yaml(tmp_path, algorithm="{type: asha, max_t: 9}"))
    ranked = load_study(_yaml(tmp_path, algorithm="{type: asha, max_t: 9, rank_by: latency_ms}"))
    assert ranked.algorithm.objective == Objective("latency_ms", "min")


# ---- the Pareto front ------------------------------------------------------------------------

def test_dominance_is_at_least_as_good_everywhere_and_better_somewhere():
    assert dominates((1, 1), (2, 2), ["min", "min"])
    assert dominates((1, 2), (2, 2), ["min", "min"])             # weakly: equal in one
    assert not dominates((2, 2), (2, 2), ["min", "min"])         # a tie dominates neither way
    assert not dominates((1, 3), (2, 2), ["min", "min"])         # a trade-off
    assert dominates((2, 2), (1, 1), ["max", "max"])             # the modes decide
    assert dominates((1, 2), (2, 1), ["min", "max"])
    assert not dominates((1, 2), (2, 1), ["max", "min"])
    with pytest.raises(ValueError):
        dominates((1, 2), (1, 2, 3), ["min", "min"])


def test_the_front_keeps_ties_drops_weakly_dominated_points_and_keeps_input_order():
    points = [(3, 1), (1, 3), (2, 2), (2, 3), (1, 3), (3, 3), (4, 0)]
    #          front   front   front   weakly    tie of 1  dominated  front
    assert non_dominated(points, ["min", "min"]) == [0, 1, 2, 4, 6]
    assert non_dominated(points, ["max", "max"]) == [5, 6]      # (3,3) and (4,0)
    assert non_dominated(points, ["min", "max"]) == [1, 4]      # (1,3) and its tie beat all
    assert non_dominated([], ["min", "min"]) == []
    assert non_dominated([(5, 5)], ["min", "min"]) == [0]


def test_three_objectives_a_point_better_in_the_third_stays():
    points = [(1, 1, 9), (1, 1, 1), (2, 2, 0)]
    assert non_dominated(points, ["min", "min", "min"]) == [1, 2]
    assert non_dominated(points, ["min", "min", "max"]) == [0]      # (1,1,9) beats both


def test_pareto_front_uses_each_objectives_mode():
    objective = Objective.parse([("loss", "min"), ("acc", "max")])
    items = ["a", "b", "c", "d"]
    values = [(0.1, 0.5), (0.2, 0.9), (0.2, 0.8), (0.3, 0.9)]
    assert pareto_front(items, values, objective) == ["a", "b"]
