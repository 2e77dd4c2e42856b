"""The shared validators: what they accept, what they refuse, and messages naming field, value and range."""
from __future__ import annotations

import datetime

import numpy as np
import pytest

from hypersack.errors import ConfigError
from hypersack.validation import (check_choice, check_integer, check_name, check_number,
                                  check_plain_data, check_text, check_workers_fit, is_finite,
                                  is_integer, is_number)


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
