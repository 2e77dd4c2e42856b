"""Search-space domains: sampling, grids, validation messages, dict/YAML round trips."""
from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hypersack.core.space import (Categorical, Constant, Float, Int, SearchSpace,
                                  domain_from_dict)
from hypersack.errors import ConfigError, SpaceError

FAST = settings(max_examples=75, deadline=None)

seeds = st.integers(min_value=0, max_value=2**32 - 1)
finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
positive = st.floats(min_value=1e-8, max_value=1e6, allow_nan=False, allow_infinity=False)
names = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)


def draws(domain, seed, n=30):
    rng = np.random.default_rng(seed)
    return [domain.sample(rng) for _ in range(n)]


# ---- sampling stays inside every domain -------------------------------------------------------

@FAST
@given(a=finite, b=finite, seed=seeds)
def test_float_uniform_samples_lie_in_bounds(a, b, seed):
    low, high = min(a, b), max(a, b)
    d = Float(low, high, name="x")
    for v in draws(d, seed):
        assert isinstance(v, float)
        assert low <= v <= high
        assert d.contains(v)


@FAST
@given(a=finite, b=finite, seed=seeds, log=st.booleans())
def test_a_float_draw_is_numpys_uniform_draw_bit_for_bit(a, b, seed, log):
    """``Float.sample`` computes ``rng.uniform``'s value itself (cheaper): the same bits, so a
    study's configs are those numpy's ``uniform`` gave before."""
    low, high = min(a, b), max(a, b)
    if log and low <= 0:
        low, high = abs(low) + 1e-3, abs(low) + abs(high) + 1e-3
    d = Float(low, high, log=log, name="x")
    rng = np.random.default_rng(seed)
    expected = []
    for _ in range(30):
        if log:
            raw = math.exp(rng.uniform(math.log(low), math.log(high)))
            expected.append(float(min(max(raw, low), high)))
        else:
            expected.append(float(rng.uniform(low, high)))
    assert draws(d, seed) == expected


@FAST
@given(a=positive, b=positive, seed=seeds)
def test_float_log_samples_lie_in_bounds(a, b, seed):
    low, high = min(a, b), max(a, b)
    d = Float(low, high, log=True, name="x")
    for v in draws(d, seed):
        assert low <= v <= high
        assert d.contains(v)


@pytest.mark.parametrize("low, high", [(0, 1), (-3, 2.5), (1e-4, 1.0), (2**60 + 1, 2**60 + 3),
                                       (-1e300, 1e300), (0.25, 0.25)])
def test_float_samples_are_numpys_uniform_draw_for_draw(low, high):
    """Configs drawn before and after the cheaper draw are the same, bit for bit (stored
    studies resume, and seeds give the same configs)."""
    mine, numpys = np.random.default_rng(7), np.random.default_rng(7)
    plain, log = Float(low, high), Float(low, high, log=True) if low > 0 else None
    for _ in range(200):
        assert plain.sample(mine) == float(numpys.uniform(low, high))
        if log is not None:
            raw = math.exp(numpys.uniform(math.log(low), math.log(high)))
            assert log.sample(mine) == float(min(max(raw, low), high))
    assert mine.random() == numpys.random()


@pytest.mark.parametrize("value", [0.1, 3.0, 1e-3, 100.0])
def test_degenerate_log_float_samples_its_single_value(value):
    # exp(log(v)) != v for these: the sample must still be exactly inside [v, v].
    d = Float(value, value, log=True, name="x")
    assert draws(d, 0, n=3) == [value] * 3


@FAST
@given(low=st.integers(-10_000, 10_000), span=st.integers(0, 10_000), seed=seeds)
def test_int_uniform_samples_lie_in_bounds(low, span, seed):
    d = Int(low, low + span, name="n")
    for v in draws(d, seed):
        assert type(v) is int
        assert low <= v <= low + span


@FAST
@given(low=st.integers(1, 10_000), span=st.integers(0, 100_000), seed=seeds)
def test_int_log_samples_lie_in_bounds(low, span, seed):
    d = Int(low, low + span, log=True, name="n")
    for v in draws(d, seed):
        assert type(v) is int
        assert low <= v <= low + span


@FAST
@given(low=st.integers(-1000, 1000), span=st.integers(0, 1000), step=st.integers(1, 50), seed=seeds)
def test_int_step_samples_stay_on_the_lattice(low, span, step, seed):
    assume(span == 0 or step <= span)       # a larger step is refused (below)
    d = Int(low, low + span, step=step, name="n")
    for v in draws(d, seed):
        assert low <= v <= low + span
        assert (v - low) % step == 0
        assert d.contains(v)


def test_int_step_sampling_reaches_every_lattice_point_and_no_other():
    d = Int(0, 10, step=3, name="n")
    assert set(draws(d, 1, n=400)) == {0, 3, 6, 9}
    assert set(draws(Int(-2, 2, name="m"), 2, n=400)) == {-2, -1, 0, 1, 2}


@FAST
@given(choices=st.lists(st.one_of(st.integers(), st.text(max_size=4), st.booleans(), st.none()),
                        min_size=1, max_size=6), seed=seeds)
def test_categorical_samples_are_choices(choices, seed):
    d = Categorical(choices, name="c")
    for v in draws(d, seed):
        assert any(v is c or (type(v) is type(c) and v == c) for c in choices)


def test_categorical_sampling_reaches_every_choice():
    assert set(draws(Categorical(["a", "b", "c"], name="c"), 0, n=300)) == {"a", "b", "c"}


@FAST
@given(value=st.one_of(st.integers(), st.text(max_size=5),
                       st.floats(allow_nan=False, allow_infinity=False)), seed=seeds)
def test_constant_always_samples_its_value(value, seed):
    assert draws(Constant(value, name="k"), seed, n=5) == [value] * 5


# ---- distribution shape -----------------------------------------------------------------------

def test_float_log_sampling_is_log_uniform():
    d = Float(1e-4, 1.0, log=True, name="lr")
    xs = draws(d, 7, n=4000)
    # Median near the geometric mean 1e-2 (a uniform draw would put it near 0.5).
    assert abs(math.log10(statistics.median(xs)) - (-2)) < 0.15
    # Each decade holds about a quarter of the draws.
    below = sum(x < 1e-3 for x in xs) / len(xs)
    assert 0.2 < below < 0.3


def test_float_uniform_sampling_is_not_log_uniform():
    xs = draws(Float(1e-4, 1.0, name="lr"), 7, n=4000)
    assert 0.45 < statistics.median(xs) < 0.55


def test_int_log_sampling_is_log_uniform():
    xs = draws(Int(1, 1000, log=True, name="n"), 3, n=4000)
    assert 20 < statistics.median(xs) < 50          # geometric mean ~31.6, uniform would be ~500
    assert sum(x <= 10 for x in xs) / len(xs) > 0.25  # uniform would give 1%


# ---- seeded reproducibility -------------------------------------------------------------------

SPACE = {
    "lr": {"type": "float", "low": 1e-5, "high": 1e-1, "log": True},
    "dropout": {"type": "float", "low": 0.0, "high": 0.5},
    "layers": {"type": "int", "low": 1, "high": 8},
    "width": {"type": "int", "low": 16, "high": 512, "log": True},
    "batch": {"type": "int", "low": 16, "high": 256, "step": 16},
    "opt": ["sgd", "adam", "adamw"],
    "epochs": 10,
}


def configs(space, seed, n=5):
    rng = np.random.default_rng(seed)
    return [space.sample(rng) for _ in range(n)]


@FAST
@given(seed=seeds)
def test_same_seed_same_configs(seed):
    space = SearchSpace(SPACE)
    a, b = configs(space, seed), configs(space, seed)
    assert a == b
    for c in a:
        assert list(c) == list(SPACE)
        space.validate(c)


def test_different_seeds_give_different_configs():
    space = SearchSpace(SPACE)
    runs = [configs(space, seed) for seed in range(5)]
    lrs = {tuple(c["lr"] for c in run) for run in runs}
    assert len(lrs) == 5


# ---- grid expansion ---------------------------------------------------------------------------

def test_float_grid_is_linspace():
    assert Float(0.0, 1.0, name="x").grid(5) == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0])


def test_float_log_grid_is_geomspace():
    assert Float(1e-4, 1e-1, log=True, name="x").grid(4) == pytest.approx([1e-4, 1e-3, 1e-2, 1e-1])


def test_float_single_point_grid_is_the_middle():
    assert Float(0.0, 4.0, name="x").grid(1) == [2.0]
    assert Float(1.0, 100.0, log=True, name="x").grid(1) == pytest.approx([10.0])
    assert Float(3.0, 3.0, name="x").grid(7) == [3.0]


def test_explicit_values_replace_the_grid():
    assert Float(0.0, 1.0, values=[0.1, 0.5], name="x").grid(10) == [0.1, 0.5]
    assert Int(0, 100, values=[3, 7], name="n").grid(2) == [3, 7]
    f = Float(0.0, 1.0, values=(0, 1), name="x")
    assert f.values == (0.0, 1.0) and all(type(v) is float for v in f.values)


def test_int_grid_snaps_to_step_and_deduplicates():
    assert Int(0, 10, name="n").grid(3) == [0, 5, 10]
    assert Int(0, 10, step=3, name="n").grid(3) == [0, 6, 9]
    assert Int(1, 1000, log=True, name="n").grid(4) == [1, 10, 100, 1000]
    # geomspace(1, 6, 5) rounds to 1, 2, 2, 4, 6: the duplicate goes.
    assert Int(1, 6, log=True, name="n").grid(5) == [1, 2, 4, 6]


def test_single_point_int_grid_is_the_middle_like_float():
    assert Int(0, 10, name="n").grid(1) == [5]
    assert Int(0, 10, step=4, name="n").grid(1) == [4]
    assert Int(1, 10_000, log=True, name="n").grid(1) == [100]
    space = SearchSpace({"x": {"type": "float", "low": 0, "high": 10},
                         "n": {"type": "int", "low": 0, "high": 10}})
    assert space.grid(1) == [{"x": 5.0, "n": 5}]


def test_int_grid_lists_the_whole_lattice_when_it_is_small():
    assert Int(1, 3, name="n").grid(5) == [1, 2, 3]
    assert Int(0, 10, step=4, name="n").grid(3) == [0, 4, 8]


@FAST
@given(low=st.integers(-500, 500), span=st.integers(0, 2000), step=st.integers(1, 40),
       points=st.integers(1, 12))
def test_int_grid_properties(low, span, step, points):
    assume(span == 0 or step <= span)
    d = Int(low, low + span, step=step, name="n")
    g = d.grid(points)
    top = low + span // step * step
    count = span // step + 1
    assert g == sorted(set(g))
    assert all(d.contains(v) for v in g)
    if count <= points:
        assert g == list(range(low, top + 1, step))
    elif points == 1:
        assert len(g) == 1 and abs(g[0] - (low + top) / 2) <= step / 2
    else:
        assert 2 <= len(g) <= points
        assert g[0] == low and g[-1] == top


def test_categorical_and_constant_grids():
    assert Categorical(["a", "b", "c"], name="c").grid(1) == ["a", "b", "c"]
    assert Constant(42, name="k").grid(9) == [42]


def test_space_grid_is_the_cartesian_product_first_axis_slowest():
    space = SearchSpace({"a": ["x", "y"], "b": {"type": "int", "low": 0, "high": 2}, "k": 5})
    assert space.grid(3) == [
        {"a": "x", "b": 0, "k": 5}, {"a": "x", "b": 1, "k": 5}, {"a": "x", "b": 2, "k": 5},
        {"a": "y", "b": 0, "k": 5}, {"a": "y", "b": 1, "k": 5}, {"a": "y", "b": 2, "k": 5},
    ]


def test_space_grid_size_is_the_product_of_axis_sizes():
    space = SearchSpace({"x": {"type": "float", "low": 0, "high": 1},
                         "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
                         "c": ["a", "b"], "k": 1})
    grid = space.grid(4)
    assert len(grid) == 4 * 4 * 2 * 1
    assert len({tuple(sorted(c.items())) for c in grid}) == len(grid)
    for c in grid:
        space.validate(c)


@pytest.mark.parametrize("points", [0, -1, 2.5, "3"])
def test_space_grid_rejects_bad_points_per_axis(points):
    with pytest.raises(SpaceError) as exc:
        SearchSpace({"x": [1, 2]}).grid(points)
    assert exc.value.field == "points_per_axis"
    assert repr(points) in str(exc.value)


# ---- validation errors name the field and the value -------------------------------------------

def check_error(exc_info, field, value_text):
    err = exc_info.value
    assert isinstance(err, SpaceError) and isinstance(err, ConfigError) and isinstance(err, ValueError)
    assert err.field == field
    assert value_text in str(err)
    assert f"The value of {field} is" in str(err)


@pytest.mark.parametrize("spec, field, value_text", [
    ({"type": "float", "low": 1.0, "high": 0.5}, "space.p.low", "1.0"),
    ({"type": "int", "low": 9, "high": 3}, "space.p.low", "9"),
    ({"type": "float", "low": 0.0, "high": 1.0, "log": True}, "space.p.low", "0.0"),
    ({"type": "float", "low": -2.0, "high": 1.0, "log": True}, "space.p.low", "-2.0"),
    ({"type": "int", "low": 0, "high": 8, "log": True}, "space.p.low", "0"),
    ({"type": "float", "low": "1e-3", "high": 1.0}, "space.p.low", "'1e-3'"),
    ({"type": "float", "low": 0.0, "high": float("inf")}, "space.p.high", "inf"),
    ({"type": "float", "low": float("nan"), "high": 1.0}, "space.p.low", "nan"),
    ({"type": "float", "low": True, "high": 2.0}, "space.p.low", "True"),
    ({"type": "int", "low": 0.5, "high": 3}, "space.p.low", "0.5"),
    ({"type": "int", "low": 0, "high": 3, "step": 0}, "space.p.step", "0"),
    ({"type": "int", "low": 1, "high": 30, "log": True, "step": 2}, "space.p.step", "2"),
    ({"type": "float", "low": 0, "high": 1, "log": "yes"}, "space.p.log", "'yes'"),
    ({"type": "categorical", "choices": []}, "space.p.choices", "[]"),
    ({"type": "categorical", "choices": "abc"}, "space.p.choices", "'abc'"),
    ({"type": "categorical", "choices": [1, {"a": 1}]}, "space.p.choices", "{'a': 1}"),
    ({"type": "floaty", "low": 0, "high": 1}, "space.p.type", "'floaty'"),
    ({"type": ["float"], "low": 0, "high": 1}, "space.p.type", "['float']"),
    ({"low": 0, "high": 1}, "space.p.type", "None"),
    ({"type": "float", "low": 0, "high": 1, "lgo": True}, "space.p.lgo", "True"),
    ({"type": "constant", "value": 1, "choices": [1]}, "space.p.choices", "[1]"),
    ({"type": "float", "low": 0}, "space.p.high", "None"),
    ({"type": "categorical"}, "space.p.choices", "None"),
    ({"type": "float", "low": 0.0, "high": 1.0, "values": [0.5, 1.5]}, "space.p.values", "1.5"),
    ({"type": "float", "low": 0.0, "high": 1.0, "values": []}, "space.p.values", "[]"),
    ({"type": "float", "low": 0.0, "high": 1.0, "values": 0.5}, "space.p.values", "0.5"),
    ({"type": "float", "low": 0.0, "high": 1.0, "values": ["0.5"]}, "space.p.values", "'0.5'"),
    ({"type": "int", "low": 0, "high": 10, "values": [2.5]}, "space.p.values", "2.5"),
    ({"type": "int", "low": 0, "high": 10, "values": [11]}, "space.p.values", "11"),
    ({"type": "int", "low": 0, "high": 10, "step": 2, "values": [4, 3]}, "space.p.values", "3"),
])
def test_invalid_domain_names_field_and_value(spec, field, value_text):
    with pytest.raises(SpaceError) as exc:
        domain_from_dict("p", spec)
    check_error(exc, field, value_text)


def test_invalid_domain_inside_a_space_names_the_parameter():
    with pytest.raises(SpaceError) as exc:
        SearchSpace({"ok": [1, 2], "lr": {"type": "float", "low": 0.1, "high": 0.01}})
    check_error(exc, "space.lr.low", "0.1")
    assert "0.01" in str(exc.value)


def test_off_lattice_value_message_mentions_the_step():
    with pytest.raises(SpaceError) as exc:
        Int(0, 10, step=2, values=(3,), name="n")
    assert "k * 2" in str(exc.value)


@pytest.mark.parametrize("spec", [[1, 2], "lr", 3, None])
def test_space_must_be_a_mapping(spec):
    with pytest.raises(SpaceError) as exc:
        SearchSpace(spec)
    assert exc.value.field == "space"


def test_space_must_not_be_empty():
    with pytest.raises(SpaceError) as exc:
        SearchSpace({})
    assert exc.value.field == "space"


# ---- shorthand --------------------------------------------------------------------------------

def test_shorthand_scalar_is_constant_and_list_is_categorical():
    space = SearchSpace({"epochs": 10, "model": "resnet", "opt": ["sgd", "adam"], "flag": None})
    assert space["epochs"] == Constant(10, name="epochs")
    assert space["model"] == Constant("resnet", name="model")
    assert space["flag"] == Constant(None, name="flag")
    assert space["opt"] == Categorical(("sgd", "adam"), name="opt")
    assert space.to_dict()["opt"] == {"type": "categorical", "choices": ["sgd", "adam"]}
    assert space.to_dict()["epochs"] == {"type": "constant", "value": 10}


def test_domain_objects_are_accepted_and_renamed():
    space = SearchSpace({"lr": Float(1e-3, 1e-1, log=True)})
    assert space["lr"].name == "lr"
    assert space["lr"] == Float(1e-3, 1e-1, log=True, name="lr")
    assert list(space) == ["lr"] and len(space) == 1


def test_domains_are_immutable():
    d = Float(0.0, 1.0, name="x")
    with pytest.raises(Exception):
        d.low = 5.0  # type: ignore[misc]


# ---- round trips ------------------------------------------------------------------------------

scalar = st.one_of(st.integers(-1000, 1000), st.booleans(), st.none(),
                   st.floats(allow_nan=False, allow_infinity=False, width=32),
                   st.sampled_from(["sgd", "yes", "null", "1e-3", "", "a b", "no"]))


@st.composite
def domains(draw):
    kind = draw(st.sampled_from(["float", "float_log", "int", "int_log", "int_step", "cat", "const",
                                 "float_values"]))
    if kind in ("float", "float_values"):
        a, b = sorted(draw(st.lists(finite, min_size=2, max_size=2)))
        if kind == "float":
            return {"type": "float", "low": a, "high": b}
        vals = draw(st.lists(st.floats(a, b), min_size=1, max_size=4))
        return {"type": "float", "low": a, "high": b, "values": vals}
    if kind == "float_log":
        a, b = sorted(draw(st.lists(positive, min_size=2, max_size=2)))
        return {"type": "float", "low": a, "high": b, "log": True}
    if kind.startswith("int"):
        low = draw(st.integers(1, 1000))
        high = low + draw(st.integers(0, 1000))
        if kind == "int_log":
            return {"type": "int", "low": low, "high": high, "log": True}
        if kind == "int_step":            # a step within the range (a larger one is refused)
            step = draw(st.integers(2, 9)) if high - low >= 2 else 1
            return {"type": "int", "low": low, "high": high, "step": min(step, max(high - low, 1)),
                    "values": [low]}
        return {"type": "int", "low": low, "high": high}
    if kind == "cat":
        return {"type": "categorical", "choices": draw(st.lists(scalar, min_size=1, max_size=5))}
    return {"type": "constant", "value": draw(scalar)}


spaces = st.dictionaries(names, domains(), min_size=1, max_size=6)


@FAST
@given(spec=spaces)
def test_dict_round_trip(spec):
    space = SearchSpace(spec)
    again = SearchSpace.from_dict(space.to_dict())
    assert again == space
    assert again.to_dict() == space.to_dict()
    assert list(again) == list(space)


@FAST
@given(spec=spaces)
def test_yaml_round_trip(spec):
    space = SearchSpace(spec)
    text = space.to_yaml()
    assert isinstance(text, str)
    again = SearchSpace.from_yaml(text)
    assert again == space
    assert list(again) == list(space)


def test_yaml_round_trip_of_a_typical_space():
    space = SearchSpace(SPACE)
    assert SearchSpace.from_yaml(space.to_yaml()) == space
    assert SearchSpace.from_yaml(space.to_yaml()).to_dict() == space.to_dict()


def test_space_equality_sees_differences():
    assert SearchSpace({"x": [1, 2]}) != SearchSpace({"x": [1, 3]})
    assert SearchSpace({"x": {"type": "float", "low": 0, "high": 1}}) != \
        SearchSpace({"x": {"type": "float", "low": 0, "high": 1, "log": False, "values": [0.5]}})
    assert SearchSpace({"x": [1, 2]}) != {"x": [1, 2]}


# ---- SearchSpace.validate ---------------------------------------------------------------------

def test_validate_accepts_a_config_in_the_space():
    space = SearchSpace(SPACE)
    space.validate({"lr": 1e-3, "dropout": 0.1, "layers": 3, "width": 64, "batch": 32,
                    "opt": "adam", "epochs": 10})


@pytest.mark.parametrize("key, value", [
    ("lr", 0.5), ("dropout", -0.1), ("layers", 9), ("layers", 2.0), ("batch", 40),
    ("opt", "rmsprop"), ("epochs", 11), ("lr", "0.001"), ("layers", True),
])
def test_validate_rejects_a_value_outside_its_domain(key, value):
    space = SearchSpace(SPACE)
    config = {"lr": 1e-3, "dropout": 0.1, "layers": 3, "width": 64, "batch": 32, "opt": "adam",
              "epochs": 10}
    config[key] = value
    with pytest.raises(SpaceError) as exc:
        space.validate(config)
    assert exc.value.field == f"config.{key}"
    assert repr(value) in str(exc.value)


def test_validate_rejects_a_missing_parameter():
    with pytest.raises(SpaceError) as exc:
        SearchSpace({"a": [1, 2], "b": 3}).validate({"a": 1})
    assert exc.value.field == "config.b"
    assert "missing" in str(exc.value)


def test_default_grid_takes_every_integer_up_to_the_limit_and_says_so_beyond():
    from hypersack.core.space import INT_GRID_LIMIT
    space = SearchSpace({"n": {"type": "int", "low": 1, "high": 10}, "x": {"type": "float", "low": 0, "high": 1}})
    grid = space.grid(None)
    assert sorted({c["n"] for c in grid}) == list(range(1, 11)) and len(grid) == 10 * 3
    big = SearchSpace({"n": {"type": "int", "low": 1, "high": 1000}})
    with pytest.raises(SpaceError, match=r"space.n has 1000 integer values.*set points_per_axis") as err:
        big.grid(None)
    assert err.value.field == "points_per_axis" and INT_GRID_LIMIT < 1000
    assert len(big.grid(5)) == 5                 # an explicit count applies to every axis
    from hypersack.core.algorithms import GridSearch
    from hypersack.core.objective import Objective
    with pytest.raises(ConfigError, match="algorithm.points_per_axis is None, but must be set: space.n"):
        GridSearch(big, Objective("y", "max"))
    assert GridSearch(space, Objective("y", "max")).size == 30


def test_a_step_larger_than_the_range_is_refused_naming_the_step():
    with pytest.raises(SpaceError, match=r"larger than the range high - low \(4 - 1 = 3\)") as err:
        Int(1, 4, step=10, name="n")
    assert err.value.field == "space.n.step" and err.value.value == 10
    assert Int(1, 4, step=3, name="n").grid(5) == [1, 4]       # a step equal to the range is fine
    assert Int(2, 2, step=5, name="n").grid(5) == [2]          # so is any step of a single point


def test_a_space_of_single_values_has_nothing_to_search():
    fixed = SearchSpace({"a": 1, "b": Float(0.5, 0.5), "c": Int(3, 3), "d": Categorical(["x"]),
                         "e": Float(0, 1, values=(0.25,))})
    assert fixed.has_nothing_to_search
    assert not SearchSpace({"a": 1, "b": Int(1, 2)}).has_nothing_to_search
    assert not SearchSpace({"a": Categorical([1, 2])}).has_nothing_to_search
