"""Search-space limits (issue 10): bounds a float or int64 can hold, finite and storable values,
parameter names, and the size of a grid, checked before anything is sampled or listed."""
from __future__ import annotations

import datetime

import numpy as np
import pytest

from hypersack.core.space import (MAX_GRID_POINTS, Categorical, Constant, Float, Int, SearchSpace,
                                  domain_from_dict)
from hypersack.errors import ConfigError, SpaceError
from hypersack.validation import INT53


@pytest.mark.parametrize("low, high, field", [
    (-1e308, 1e308, "high"), (-1.7976931348623157e308, 0.0, None), (-10**400, 0, "low"),
    (0, 10**400, "high"), (np.float64("nan"), 1.0, "low"),
])
def test_float_bounds_and_width_are_finite(low, high, field):
    if field is None:      # a width that is still finite is fine
        d = Float(low, high, name="x")
        assert low <= d.sample(np.random.default_rng(0)) <= high
        return
    with pytest.raises(SpaceError) as exc:
        Float(low, high, name="x")
    assert exc.value.field == f"space.x.{field}"


def test_the_widest_float_range_samples_inside_it():
    d = Float(-8e307, 8e307, name="x")
    rng = np.random.default_rng(1)
    assert all(-8e307 <= d.sample(rng) <= 8e307 for _ in range(50))
    assert d.grid(3) == [-8e307, 0.0, 8e307]


@pytest.mark.parametrize("attrs, field", [
    ({"low": -2**64, "high": 0}, "low"), ({"low": 0, "high": 2**63}, "high"),
    ({"low": 0, "high": 10, "step": 10**30}, "step"), ({"low": -INT53 - 1, "high": 0}, "low"),
])
def test_int_bounds_stay_within_2_53(attrs, field):
    with pytest.raises(SpaceError) as exc:
        Int(**attrs, name="n")
    assert exc.value.field == f"space.n.{field}"
    assert "2**53" in exc.value.problem


def test_the_widest_int_range_samples_and_grids():
    d = Int(-INT53, INT53, name="n")
    rng = np.random.default_rng(0)
    assert all(-INT53 <= d.sample(rng) <= INT53 for _ in range(50))
    assert d.grid(3)[0] == -INT53 and d.grid(3)[-1] == INT53


@pytest.mark.parametrize("choice", [float("nan"), float("inf"), -float("inf"),
                                    datetime.date(2020, 1, 1), [1], {"a": 1}])
def test_categorical_choices_are_finite_plain_values(choice):
    with pytest.raises(SpaceError) as exc:
        Categorical([1, choice], name="c")
    assert exc.value.field == "space.c.choices"


@pytest.mark.parametrize("value", [float("inf"), float("nan"), datetime.date(2020, 1, 1),
                                   datetime.datetime(2020, 1, 1), {1, 2}, b"x", [1, [float("nan")]],
                                   {1: "a"}, (1, 2)])
def test_constants_are_plain_json_data(value):
    with pytest.raises(SpaceError) as exc:
        domain_from_dict("epochs", value if not isinstance(value, (list, dict)) else
                         {"type": "constant", "value": value})
    assert exc.value.field == "space.epochs.value"


@pytest.mark.parametrize("value", [12, "resnet", None, True, 1.5, [64, 64], {"a": [1, "b"]}, 10**30])
def test_plain_constants_are_kept(value):
    assert Constant(value, name="k").sample(np.random.default_rng(0)) == value


@pytest.mark.parametrize("key", ["a\nb", "", "\x00", 5, None, datetime.date(2020, 1, 1), "x" * 129])
def test_parameter_names_are_printable_strings(key):
    with pytest.raises(SpaceError) as exc:
        SearchSpace({"ok": 1, key: 2})
    assert exc.value.field == "space (a parameter name)"


@pytest.mark.parametrize("key", [1, None, datetime.date(2020, 1, 1)])
def test_domain_fields_of_other_types_are_refused(key):
    with pytest.raises(SpaceError) as exc:
        domain_from_dict("p", {"type": "float", "low": 0, "high": 1, key: 1, "extra": 2})
    assert exc.value.field == "space.p"
    assert exc.value.value == key


# ---- grid size ----------------------------------------------------------------------------------

def six_axes() -> SearchSpace:
    return SearchSpace({"a": {"type": "float", "low": 0, "high": 1}, "b": {"type": "float", "low": 0, "high": 1},
                        "c": {"type": "int", "low": 0, "high": 10**6}, "d": ["x", "y"],
                        "e": {"type": "float", "low": 1, "high": 1}, "f": 7})


def test_grid_size_is_computed_without_listing():
    space = six_axes()
    assert space.grid_size(3) == 3 * 3 * 3 * 2 * 1 * 1 == len(space.grid(3))
    assert space.grid_size(1000) == 1000**3 * 2
    assert SearchSpace({"n": {"type": "int", "low": 0, "high": 4}}).grid_size(1000) == 5


def test_grid_size_bounds_every_grid():
    space = SearchSpace({"n": {"type": "int", "low": 0, "high": 100, "step": 7},
                         "m": {"type": "int", "low": 1, "high": 1000, "log": True},
                         "v": {"type": "float", "low": 0, "high": 1, "values": [0, 0.5]}})
    for points in (1, 2, 5, 17, 40):
        assert len(space.grid(points)) <= space.grid_size(points)


def test_a_grid_over_the_limit_is_refused_with_its_size(monkeypatch):
    space = six_axes()
    for cls in (Float, Int, Categorical, Constant):      # refused before any axis is listed
        monkeypatch.setattr(cls, "grid", lambda self, points: pytest.fail("grid listed"))
    with pytest.raises(SpaceError) as exc:
        space.grid(1000)
    assert exc.value.field == "points_per_axis"
    assert "2000000000 configurations over 6 parameters" in exc.value.problem
    assert f"at most {MAX_GRID_POINTS}" in exc.value.problem


def test_a_grid_at_the_limit_is_listed():
    space = SearchSpace({"a": {"type": "int", "low": 0, "high": 999},
                         "b": {"type": "int", "low": 0, "high": 99}})
    assert space.grid_size(1000) == MAX_GRID_POINTS
    assert len(space.grid(1000)) == MAX_GRID_POINTS


@pytest.mark.parametrize("points", [0, -1, True, 2.0, "3", 10**400])
def test_points_per_axis_must_be_a_positive_integer(points):
    space = SearchSpace({"a": [1, 2]})
    if points == 10**400:       # a valid integer: the grid is as large as its axes, not 10**400
        assert space.grid(points) == [{"a": 1}, {"a": 2}]
        return
    with pytest.raises(SpaceError):
        space.grid(points)


def test_from_yaml_reads_within_the_loader_limits():
    bomb = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
        f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
    with pytest.raises(ConfigError, match="expands to more than"):
        SearchSpace.from_yaml(bomb)
    with pytest.raises(ConfigError, match="tag"):
        SearchSpace.from_yaml("x: !!python/object/apply:os.system [true]\n")
    assert SearchSpace.from_yaml("x: [1, 2]\n")["x"] == Categorical((1, 2), name="x")
