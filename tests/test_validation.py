"""The shared validators: what they accept, what they refuse, and messages naming field, value and range."""
from __future__ import annotations

import ast
import datetime
import math
import numbers
from pathlib import Path
from types import MappingProxyType

import numpy as np
import pytest

from hypersack.errors import ConfigError
from hypersack.validation import (INT53, check_bool, check_choice, check_integer, check_limit,
                                  check_mapping, check_name, check_number, check_plain_data,
                                  check_positive, check_probability, check_text,
                                  check_workers_fit, is_finite, is_integer, is_number)


@pytest.mark.parametrize("value, number, integer, finite", [
    (1, True, True, True), (1.5, True, False, True), (np.float32(2.0), True, False, True),
    (np.int64(3), True, True, True), (True, False, False, False), (False, False, False, False),
    (float("nan"), True, False, False), (float("inf"), True, False, False),
    (10**400, True, True, False), (-10**400, True, True, False), ("1", False, False, False),
    (None, False, False, False), ([1], False, False, False), (datetime.date(2020, 1, 1), False, False, False),
])
def test_predicates(value, number, integer, finite):
    assert is_number(value) is number
    assert is_integer(value) is integer
    assert is_finite(value) is finite


def test_check_number_returns_a_float_in_range():
    assert check_number("f", 3, low=1.0, high=5.0) == 3.0
    assert isinstance(check_number("f", np.int64(3)), float)
    assert check_number("f", 1.0, low=1.0) == 1.0          # closed low bound
    assert check_number("f", 5.0, high=5.0) == 5.0


class _Float(float):
    pass


@pytest.mark.parametrize("value", [0.0, -0.0, 2.5, 1e308, 5e-324, 0, 7, -7, 2**53 + 1, 2**1000,
                                   10**400, -10**400, _Float(2.5), _Float("nan"), np.float64(2.5),
                                   np.float32("inf"), np.int64(7), float("inf"), float("-inf"),
                                   float("nan"), True, False, np.bool_(True), "1", None])
def test_number_predicates_plain_fast_paths_agree_with_the_abc_checks(value):
    """``is_number`` / ``is_finite`` answer a plain float or int without ``numbers.Real``: the
    same answers as the definitions (a Real that is not a bool; its float finite)."""
    number = isinstance(value, numbers.Real) and not isinstance(value, bool)
    try:
        finite = number and math.isfinite(float(value))
    except OverflowError:
        finite = False
    assert is_number(value) is number
    assert is_finite(value) is finite


@pytest.mark.parametrize("value", [0.0, -0.0, 2.5, -3.0, 1e308, 5e-324, 0, 7, -7, 2**53, -2**53,
                                   2**53 + 1, -(2**53) - 1, 2**1000, _Float(2.5), np.float64(2.5),
                                   np.int64(7), float("inf"), float("nan"), True, False])
@pytest.mark.parametrize("low, high, low_open, high_open", [
    (None, None, False, False), (0.0, None, False, False), (0.0, None, True, False),
    (None, 7.0, False, True), (-3.0, 2.5, False, False), (-3.0, 2.5, True, True)])
def test_check_number_plain_fast_path_agrees_with_the_general_check(value, low, high, low_open,
                                                                    high_open):
    """Plain floats and ints take a fast path: it accepts and refuses exactly what the
    ``numbers.Real`` check does, and returns the same float."""
    ok = is_finite(value) and (low is None or (float(value) > low if low_open
                                               else float(value) >= low)) \
        and (high is None or (float(value) < high if high_open else float(value) <= high))
    kwargs = {"low": low, "high": high, "low_open": low_open, "high_open": high_open}
    if ok:
        got = check_number("f", value, **kwargs)
        assert type(got) is float and got == float(value)
    else:
        with pytest.raises(ConfigError):
            check_number("f", value, **kwargs)


@pytest.mark.parametrize("value, kwargs, text", [
    (0.0, {"low": 0.0, "low_open": True}, "must be a finite number > 0"),
    (0.5, {"low": 1.0, "high": 100.0}, "must be a finite number in [1, 100]"),
    (101, {"low": 1.0, "high": 100.0}, "in [1, 100]"),
    (1e308, {"low": 1.0, "high": 100.0, "hint": "(1: none)"}, "in [1, 100] (1: none)"),
    (float("nan"), {}, "must be a finite number"),
    (float("-inf"), {}, "must be a finite number"),
    (10**400, {}, "must be a finite number"),
    (True, {}, "must be a finite number"),
    ("3", {}, "must be a finite number"),
    (7, {"high": 5}, "<= 5"),
])
def test_check_number_refuses(value, kwargs, text):
    with pytest.raises(ConfigError) as exc:
        check_number("a.b", value, **kwargs)
    assert exc.value.field == "a.b"
    assert exc.value.value is value
    assert text in str(exc.value)


def test_check_integer():
    assert check_integer("n", np.int64(4), low=1) == 4
    assert type(check_integer("n", np.int64(4))) is int
    for bad in (0, 1025, 10**400, 2.0, True, "4", None):
        with pytest.raises(ConfigError, match=r"must be an integer in \[1, 1024\]"):
            check_integer("pack.max_members", bad, low=1, high=1024)
    with pytest.raises(ConfigError, match="must be an integer >= 0 or a name"):
        check_integer("n", -1, low=0, hint="or a name")


def test_check_choice_never_hashes():
    assert check_choice("mode", "min", ("min", "max")) == "min"
    for bad in (["min"], {"min": 1}, {"min"}, "mid", 1):
        with pytest.raises(ConfigError, match="must be one of min, max"):
            check_choice("mode", bad, ("min", "max"))
    with pytest.raises(ConfigError):   # True == 1, but a bool is not the integer choice
        check_choice("n", True, (1, 2))


@pytest.mark.parametrize("bad", ["", "a\nb", "digits\n", "\x00", "tab\there", "\x1b[2J", "x" * 129, 5, None])
def test_check_name_refuses_control_characters(bad):
    with pytest.raises(ConfigError, match="printable"):
        check_name("objective.metric", bad)


def test_check_name_accepts_printable_text():
    assert check_name("n", "val acc/top-1 (%)") == "val acc/top-1 (%)"
    assert check_name("n", "x" * 300, max_len=300)


def test_check_text():
    assert check_text("description", "two\nlines\ttab") == "two\nlines\ttab"
    for bad in ("a\x00", 5, "x" * 10_001):
        with pytest.raises(ConfigError):
            check_text("description", bad)


@pytest.mark.parametrize("good", [None, True, "s", 3, 10**30, 2.5, [1, "a", None], {"a": [1, {"b": 2.0}]}])
def test_check_plain_data_accepts_json(good):
    assert check_plain_data("x", good) is good


@pytest.mark.parametrize("bad, shown", [
    (float("nan"), "nan"), ([1, float("inf")], "inf"), (datetime.date(2020, 1, 1), "datetime.date"),
    ({1: "a"}, "{1: 'a'}"), ({"a": {1, 2}}, "{1, 2}"), (b"x", "b'x'"), ((1, 2), "(1, 2)"),
])
def test_check_plain_data_refuses(bad, shown):
    with pytest.raises(ConfigError) as exc:
        check_plain_data("space.k", bad)
    assert shown in str(exc.value)


def test_check_plain_data_says_to_quote_a_date():
    with pytest.raises(ConfigError, match="quote a date"):
        check_plain_data("space.epochs", datetime.date(2020, 1, 1))


def test_check_plain_data_limits_depth_without_recursion():
    deep: list = []
    node = deep
    for _ in range(10_000):          # deeper than Python's recursion limit
        node.append([])
        node = node[0]
    with pytest.raises(ConfigError, match="nest at most 32"):
        check_plain_data("x", deep)


def test_check_workers_fit_names_the_machine_limit():
    assert check_workers_fit("executor.workers", 8, cpus=2, gpus=0) == 8
    assert check_workers_fit("executor.workers", 40, cpus=2, gpus=2) == 40
    with pytest.raises(ConfigError) as exc:
        check_workers_fit("executor.workers", 9, cpus=2, gpus=0)
    assert "in [1, 8]" in str(exc.value)
    assert "2 CPU cores and 0 GPUs" in str(exc.value)
    with pytest.raises(ConfigError, match=r"in \[1, 36\]"):   # 4 x 5 cores + 16 x 1 GPU
        check_workers_fit("executor.workers", 10**9, cpus=5, gpus=1)


def test_numbers_beyond_floats_are_clear_errors_in_placement_and_packing():
    from hypersack.core.packs import member_cap
    from hypersack.errors import ConfigError
    from hypersack.placement import GPU, Node
    for make in (lambda: GPU("g", "A100", 10**400), lambda: Node("n", 10**400, ()),
                 lambda: member_cap(10**400, 1.0)):
        try:
            make()
        except ConfigError as exc:
            assert "10000000" in str(exc)
        else:
            raise AssertionError("a number beyond floats was accepted")


@pytest.mark.parametrize("step, metrics, plain", [
    (0, {"loss": 0.5, "n": 3}, True),
    (2**53, {"loss": float("nan")}, True),            # NaN is a plain float (the controller fails it)
    (-1, {"loss": 0.5}, False),
    (2**53 + 1, {"loss": 0.5}, False),
    (True, {"loss": 0.5}, False),
    (1, {"loss": True}, False),
    (1, {"n": 2**63}, False),
    (1, {"n": -2**63 + 1}, True),
    (1, {3: 0.5}, False),
    (1, [("loss", 0.5)], False),
    (1, {"loss": "0.5"}, False),
])
def test_is_plain_report_says_yes_only_to_what_the_checks_would_leave_as_is(step, metrics, plain):
    from hypersack.validation import check_metric, check_step, is_plain_report
    assert is_plain_report(step, metrics) is plain
    if plain:
        assert check_step(step) is step or check_step(step) == step
        assert all(check_metric(k, v) is v for k, v in metrics.items())


# ---- bounds: the value just inside passes, the value just outside fails ------------------------

NOT_NUMBERS = [True, False, "1", None, [1], float("nan"), float("inf"), float("-inf"), 10**400]


def _refused(check, value, *args, **kwargs):
    with pytest.raises(ConfigError) as exc:
        check("a.b", value, *args, **kwargs)
    assert exc.value.field == "a.b" and exc.value.value is value
    return str(exc.value)


def test_check_number_open_high_bound():
    below = math.nextafter(1.0, 0.0)
    assert check_number("f", below, low=0.0, high=1.0, high_open=True) == below
    assert check_number("f", 1.0, low=0.0, high=1.0) == 1.0                 # closed: 1 passes
    text = _refused(check_number, 1.0, low=0.0, high=1.0, high_open=True)
    assert "must be a finite number >= 0 and < 1" in text
    assert "< 1" in _refused(check_number, 1.0, high=1.0, high_open=True)


def test_check_number_open_low_bound():
    above = math.nextafter(2.0, 3.0)
    assert check_number("f", above, low=2.0, low_open=True) == above
    assert check_number("f", 2.0, low=2.0) == 2.0                           # closed: 2 passes
    assert "> 2" in _refused(check_number, 2.0, low=2.0, low_open=True)


def test_check_positive():
    assert check_positive("f", 5e-324) == 5e-324              # the smallest float > 0
    assert check_positive("f", np.float32(0.5)) == 0.5
    assert check_positive("f", 3) == 3.0 and type(check_positive("f", 3)) is float
    for bad in (0, 0.0, -0.0, -5e-324, *NOT_NUMBERS):
        assert "must be a finite number > 0" in _refused(check_positive, bad)
    assert _refused(check_positive, 0, hint="(seconds)").endswith("> 0 (seconds)")


def test_check_probability():
    for good in (0, 0.0, 1, 1.0, 0.5, math.nextafter(1.0, 0.0), 5e-324):
        assert check_probability("f", good) == float(good)
    for bad in (math.nextafter(0.0, -1.0), math.nextafter(1.0, 2.0), -1, 2, *NOT_NUMBERS):
        assert "must be a finite number in [0, 1]" in _refused(check_probability, bad)


def test_check_limit_takes_infinity_as_no_limit():
    assert check_limit("f", float("inf")) == math.inf
    assert check_limit("f", 0) == 0.0 and check_limit("f", np.float64(2.5)) == 2.5
    assert check_limit("f", 1.0, low=1.0) == 1.0
    for bad in (math.nextafter(1.0, 0.0), 0.0, float("-inf")):
        assert "must be a number >= 1 (inf: no limit)" in _refused(check_limit, bad, low=1.0)
    for bad in (-5e-324, float("nan"), True, "inf", None, 10**400):   # 10**400: no float holds it
        assert ">= 0" in _refused(check_limit, bad)
    assert _refused(check_limit, -1, hint="(null: none)").endswith(">= 0 (null: none)")


def test_check_integer_bounds_and_types():
    assert check_integer("n", 1, low=1, high=3) == 1 and check_integer("n", 3, low=1, high=3) == 3
    for bad in (0, 4, 2.0, True, False, np.float64(2.0), "2", None, 10**400):
        assert "must be an integer in [1, 3]" in _refused(check_integer, bad, low=1, high=3)
    assert check_integer("n", INT53, low=1, high=INT53) == INT53
    assert "in [1, 2**53]" in _refused(check_integer, INT53 + 1, low=1, high=INT53)
    assert "in [-2**53, 2**53]" in _refused(check_integer, -INT53 - 1, low=-INT53, high=INT53)
    assert check_integer("n", -5) == -5                       # no bounds: any integer
    assert "must be an integer" in _refused(check_integer, 1.5)


def test_check_bool():
    assert check_bool("f", True) is True and check_bool("f", False) is False
    for bad in (0, 1, "true", "yes", None, np.bool_(True), [True]):
        assert "must be true or false" in _refused(check_bool, bad)


def test_check_mapping():
    d = {"a": 1}
    assert check_mapping("f", d) is d
    proxy = MappingProxyType(d)
    assert check_mapping("f", proxy) is proxy
    for bad in ([("a", 1)], None, "a", 3, {"a"}):
        assert "must be a mapping" in _refused(check_mapping, bad)
    assert "must be a mapping of metric names to numbers" in _refused(
        check_mapping, [], what="a mapping of metric names to numbers")


# ---- callers: the checks moved here keep refusing what they refused, and some more -------------

def test_algorithm_integers_are_one_check_with_the_2_53_cap():
    import hypersack.core.algorithms.sha as sha
    from hypersack.core.algorithms.sha import check_horizon
    assert not hasattr(sha, "check_int")                     # the duplicate is gone
    assert check_horizon(1, INT53) == (1, INT53)
    for min_t, max_t, field in ((0, 5, "algorithm.min_t"), (1, INT53 + 1, "algorithm.max_t"),
                                (True, 5, "algorithm.min_t"), (1, 5.0, "algorithm.max_t")):
        with pytest.raises(ConfigError) as exc:
            check_horizon(min_t, max_t)
        assert exc.value.field == field and "must be an integer in [1, 2**53]" in str(exc.value)


@pytest.mark.parametrize("make, field", [
    (lambda: _controller(max_retries=True), "max_retries"),             # a bool passed before
    (lambda: _controller(max_retries=-1), "max_retries"),
    (lambda: _grid(repeat=True), "algorithm.repeat"),                   # a bool passed before
    (lambda: _hyperband_threshold(10**400), "algorithm.threshold"),     # OverflowError before
    (lambda: _pack_opt(threshold=10**400), "packing.threshold"),        # OverflowError before
    (lambda: _pack_opt(member_memory=[1.0, -1.0], capacity=4.0), "packing.member_memory[1]"),
    (lambda: _perf_params([1, 2]), "perf"),                             # TypeError before
    (lambda: _scenario_event_at(float("nan")), "events[0].at"),         # NaN passed before
    (lambda: _scenario_event_at(float("inf")), "events[0].at"),
])
def test_callers_refuse_with_a_config_error_naming_the_field(make, field):
    with pytest.raises(ConfigError) as exc:
        make()
    assert exc.value.field == field


def _controller(**kwargs):
    from hypersack.core.algorithms import make_algorithm
    from hypersack.core.controller import Budget, Controller
    from hypersack.core.objective import Objective
    from hypersack.core.space import SearchSpace
    space, objective = SearchSpace({"x": {"type": "float", "low": 0, "high": 1}}), Objective("loss", "min")
    return Controller(make_algorithm("random", space, objective), objective, Budget(trials=2), **kwargs)


def _grid(**kwargs):
    from hypersack.core.algorithms import make_algorithm
    from hypersack.core.objective import Objective
    from hypersack.core.space import SearchSpace
    space = SearchSpace({"x": {"type": "int", "low": 0, "high": 2}})
    return make_algorithm({"type": "grid", **kwargs}, space, Objective("loss", "min"))


def _hyperband_threshold(threshold):
    from hypersack.core.algorithms.pack_hyperband import _check_threshold
    return _check_threshold(threshold)


def _pack_opt(**kwargs):
    from hypersack.core.packs import pack_opt
    return pack_opt([{"x": 1}, {"x": 2}], **kwargs)


def _perf_params(value):
    from hypersack.sim.perf import PerfParams
    return PerfParams.from_dict(value)


def _scenario_event_at(at):
    from hypersack.sim.scenario import _events
    return _events([{"at": at, "fail": {"node": "n", "gpu": 0}}])


# ---- no ad-hoc number checks outside validation.py ----------------------------------------------

#: If-tests that raise on a number check outside validation.py, by module and function: checks
#: of structure (a pair, a list of values), not of one number. Anything new goes through
#: hypersack.validation instead.
ALLOWED_NUMBER_CHECKS = {
    ("placement/model.py", "check_id"),           # an id: a string or an integer
    ("core/spec.py", "_check_max_steps"),          # every bound of a space parameter
    ("core/space.py", "__post_init__"),           # Categorical: each choice storable as JSON
    ("sim/perf.py", "__post_init__"),             # FusedModel's [members, speedup] pairs
    ("sim/curves.py", "curves_from_dict"),        # clip: a [low, high] pair
    ("sim/curves.py", "_clip"),                   # the same pair, in its own function
    ("sim/curves.py", "_metrics"),                # a curve function's return: a number or a mapping
    ("sim/curves.py", "_curves_from_rows"),       # a curves table's row: an integer step, a number
}


def _number_checks(root: Path):
    numeric = {"is_finite", "is_number", "is_integer", "isfinite"}
    for path in sorted(root.rglob("*.py")):
        if path.name == "validation.py":
            continue
        tree = ast.parse(path.read_text())
        for func in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
            for node in ast.walk(func):
                if not isinstance(node, ast.If) or not any(
                        isinstance(n, ast.Raise) for stmt in node.body for n in ast.walk(stmt)):
                    continue
                names = {n.func.id if isinstance(n.func, ast.Name) else getattr(n.func, "attr", "")
                         for n in ast.walk(node.test) if isinstance(n, ast.Call)}
                bools = "bool" in ast.unparse(node.test) and "isinstance" in names
                if names & numeric or bools:
                    yield str(path.relative_to(root)), func.name, node.lineno


def test_number_checks_live_in_validation():
    import hypersack
    found = {(f, fn): line for f, fn, line in _number_checks(Path(hypersack.__file__).parent)}
    assert set(found) <= ALLOWED_NUMBER_CHECKS, sorted(set(found) - ALLOWED_NUMBER_CHECKS)


def test_the_number_check_scan_finds_a_planted_check(tmp_path):
    (tmp_path / "m.py").write_text("def f(x):\n    if isinstance(x, bool) or x < 1:\n        raise E\n"
                                   "def g(x):\n    if not is_finite(x):\n        raise E\n")
    assert [(f, fn) for f, fn, _ in _number_checks(tmp_path)] == [("m.py", "f"), ("m.py", "g")]
