"""Shared validators for user input: numbers, integer ranges, choices, names, plain data.

Every ``check_*`` returns the value (converted where it says so) or raises ConfigError naming
the field and the value, with the allowed range in the message:
``The value of pack.max_members is 10000, but must be an integer in [1, 1024]``.
The ``is_*`` predicates never raise, whatever they are given (``10**400``, NaN, a list).

A *number* is a real number that is not a bool (numpy scalars included); a *finite* number is
one whose float is finite, so ``10**400`` (which no float holds) is not finite.
"""
from __future__ import annotations

import importlib
import math
import numbers
from typing import Any, Collection, Mapping, TypeGuard

from hypersack.errors import ConfigError, ReportError

__all__ = ["is_number", "is_integer", "is_finite", "check_number", "check_integer",
           "check_positive", "check_probability", "check_limit", "check_bool", "check_mapping",
           "check_choice", "check_name", "check_step", "check_metric", "is_plain_report", "MAX_STEP", "check_text", "check_plain_data", "check_workers_fit",
           "INT53", "MAX_OVERSUBSCRIPTION", "MAX_DEVICES_PER_NODE", "MAX_LOCAL_WORKERS_PER_CPU", "MAX_LOCAL_WORKERS_PER_GPU"]

#: The largest integer a float holds exactly: integer domains stay within +/- this.
INT53 = 2**53

#: The largest step a report may carry (exact in a float, and a SQLite INTEGER).
MAX_STEP = INT53
#: Integer metrics beyond +/- this (SQLite's INTEGER range) are stored as the nearest float.
_INT64 = 2**63 - 1

#: Largest oversubscription ratio r (jobs on a device may ask for r x its compute).
MAX_OVERSUBSCRIPTION = 100.0
#: Most devices one node may declare (a cluster file's ``count``).
MAX_DEVICES_PER_NODE = 1024

#: Local worker slots at most per CPU core and per GPU (``check_workers_fit``): more processes
#: than that only thrash the machine.
MAX_LOCAL_WORKERS_PER_CPU = 4
MAX_LOCAL_WORKERS_PER_GPU = 16


def is_number(value: Any) -> TypeGuard[float]:
    """True for a real number that is not a bool (int, float, numpy scalars). A plain float or
    int answers without the ``numbers.Real`` check (an ABC's; the same answer)."""
    kind = type(value)
    if kind is float or kind is int:
        return True
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_integer(value: Any) -> TypeGuard[int]:
    """True for an integer that is not a bool (int, numpy integers)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_finite(value: Any) -> TypeGuard[float]:
    """True for a number whose float is finite (False for NaN, +/-inf and ints beyond floats)."""
    if type(value) is float:
        return math.isfinite(value)
    if not is_number(value):
        return False
    try:
        return math.isfinite(float(value))
    except (OverflowError, ValueError):
        return False


def _fmt(x: float) -> str:
    """A bound as written in messages: ``0.5``, ``100``, and ``2**53`` for INT53."""
    if abs(x) == INT53 and not isinstance(x, float):
        return "2**53" if x > 0 else "-2**53"
    return f"{x:g}" if isinstance(x, float) else str(x)


def _range_text(low: float | None, high: float | None, low_open: bool,
                high_open: bool = False) -> str:
    """`` in [1, 8]`` (both bounds closed), `` > 0 and <= 1``, `` >= 0 and < 1``, `` >= 1``,
    `` < 10`` or ``""``."""
    if low is not None and high is not None and not low_open and not high_open:
        return f" in [{_fmt(low)}, {_fmt(high)}]"
    parts = [f"{'>' if low_open else '>='} {_fmt(low)}"] if low is not None else []
    parts += [f"{'<' if high_open else '<='} {_fmt(high)}"] if high is not None else []
    return (" " + " and ".join(parts)) if parts else ""


def _in_range(x: float, low: float | None, high: float | None, low_open: bool,
              high_open: bool) -> bool:
    return ((low is None or (x > low if low_open else x >= low))
            and (high is None or (x < high if high_open else x <= high)))


def check_number(field: str, value: Any, *, low: float | None = None, high: float | None = None,
                 low_open: bool = False, high_open: bool = False, hint: str = "") -> float:
    """``value`` as a float when it is a finite number (not a bool; numpy scalars and Fractions
    count) in the range: ``low`` excluded when ``low_open``, ``high`` when ``high_open``.
    ``hint`` is added to the message (``"seconds"``, ``"(1: none)"``).
    A plain float, or an int within +/- 2**53, skips the ``numbers.Real`` check (same answer: it is
    the common case, and placement builds a Job per new trial)."""
    kind = type(value)
    if kind is float or (kind is int and -INT53 <= value <= INT53):
        x = float(value)
        if math.isfinite(x) and _in_range(x, low, high, low_open, high_open):
            return x
    if not (is_finite(value) and _in_range(float(value), low, high, low_open, high_open)):
        extra = f" {hint}" if hint else ""
        raise ConfigError(field, value, "must be a finite number"
                          f"{_range_text(low, high, low_open, high_open)}{extra}")
    return float(value)


def check_positive(field: str, value: Any, *, hint: str = "") -> float:
    """``value`` as a float when it is a finite number > 0 (a size, a rate, a duration)."""
    return check_number(field, value, low=0.0, low_open=True, hint=hint)


def check_probability(field: str, value: Any) -> float:
    """``value`` as a float when it is a finite number in [0, 1] (a fraction, a probability)."""
    return check_number(field, value, low=0.0, high=1.0)


def check_limit(field: str, value: Any, *, low: float = 0.0, hint: str = "(inf: no limit)") -> float:
    """``value`` as a float when it is a number >= ``low`` or +inf (no limit); NaN, -inf, bools
    and non-numbers are refused."""
    try:
        x = float(value) if is_number(value) else math.nan
    except OverflowError:          # an int no float holds
        x = math.nan
    if math.isnan(x) or x < low:
        raise ConfigError(field, value, f"must be a number >= {_fmt(low)} {hint}")
    return x


def check_integer(field: str, value: Any, *, low: int | None = None, high: int | None = None,
                  hint: str = "") -> int:
    """``value`` as an int when it is an integer (not a bool; numpy integers count) in
    ``[low, high]``."""
    if not is_integer(value) or (low is not None and value < low) \
            or (high is not None and value > high):
        extra = f" {hint}" if hint else ""
        raise ConfigError(field, value, f"must be an integer{_range_text(low, high, False)}{extra}")
    return int(value)


def check_bool(field: str, value: Any) -> bool:
    """``value`` when it is True or False (not 0, 1, "yes" or a numpy bool)."""
    if not isinstance(value, bool):
        raise ConfigError(field, value, "must be true or false")
    return value


def check_mapping(field: str, value: Any, *, what: str = "a mapping") -> Mapping[Any, Any]:
    """``value`` when it is a mapping (a dict, a MappingProxy, ...); ``what`` says which kind of
    mapping in the message (``"a mapping of metric names to numbers"``)."""
    if not isinstance(value, Mapping):
        raise ConfigError(field, value, f"must be {what}")
    return value


def check_choice(field: str, value: Any, choices: Collection[Any]) -> Any:
    """``value`` when it equals one of ``choices`` (a list or a dict is never one: no hashing)."""
    if isinstance(value, (list, dict, set)) or not any(
            type(value) is type(c) and value == c for c in choices):
        raise ConfigError(field, value, f"must be one of {', '.join(map(str, choices))}")
    return value


def _has_control(text: str) -> bool:
    return any(not ch.isprintable() for ch in text)


def check_name(field: str, value: Any, *, max_len: int = 128) -> str:
    """A name shown in tables and used in keys: a non-empty string of at most ``max_len``
    printable characters (no newline, tab, NUL or other control character)."""
    if not isinstance(value, str) or not value or len(value) > max_len or _has_control(value):
        raise ConfigError(field, value, f"must be 1-{max_len} printable characters "
                          "(no newline, tab or other control character)")
    return value


def check_text(field: str, value: Any, *, max_len: int = 10_000) -> str:
    """Free text (a description): a string of at most ``max_len`` characters with no NUL."""
    if not isinstance(value, str) or len(value) > max_len or "\x00" in value:
        raise ConfigError(field, value, f"must be a text of at most {max_len} characters without NUL")
    return value


def check_plain_data(field: str, value: Any, *, depth: int = 32) -> Any:
    """``value`` when it is JSON data: null, a bool, a string, an int, a finite float, or lists and string-keyed mappings of those, nested at most ``depth`` deep.
    Dates, sets, bytes, NaN and infinities are refused (the study store keeps JSON)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if level > depth:
            raise ConfigError(field, value, f"must nest at most {depth} levels")
        if item is None or isinstance(item, (bool, str)):
            continue
        if is_integer(item) or is_finite(item):
            continue
        elif isinstance(item, list):
            stack.extend((x, level + 1) for x in item)
            continue
        elif isinstance(item, Mapping) and all(isinstance(k, str) for k in item):
            stack.extend((x, level + 1) for x in item.values())
            continue
        raise ConfigError(field, item, "must be null, true/false, a string, a finite number, "
                          "or lists and string-keyed mappings of those"
                          + (" (quote a date to pass it as text)" if _is_date(item) else ""))
    return value


def _is_date(value: Any) -> bool:
    import datetime
    return isinstance(value, (datetime.date, datetime.time))


def check_workers_fit(field: str, workers: int, cpus: int, gpus: int) -> int:
    """``workers`` when this machine can hold that many local worker slots: at most
    ``MAX_LOCAL_WORKERS_PER_CPU`` per CPU core plus ``MAX_LOCAL_WORKERS_PER_GPU`` per GPU."""
    limit = MAX_LOCAL_WORKERS_PER_CPU * max(cpus, 1) + MAX_LOCAL_WORKERS_PER_GPU * max(gpus, 0)
    return check_integer(field, workers, low=1, high=limit,
                         hint=f"(this machine has {cpus} CPU cores and {gpus} GPUs: at most "
                              f"{MAX_LOCAL_WORKERS_PER_CPU} workers per core and "
                              f"{MAX_LOCAL_WORKERS_PER_GPU} per GPU)")


def check_step(value: Any) -> int:
    """A report's step as an int: an integer (a 0-d integer tensor or numpy integer too) in
    ``[0, MAX_STEP]``; ReportError otherwise (``1.5`` is refused, not cut to 1)."""
    step = _scalar(value)
    if not is_integer(step) or not 0 <= step <= MAX_STEP:
        raise ReportError("the step of ctx.report(step, ...)", value,
                          f"must be an integer in [0, {MAX_STEP}] (got {_type_name(value)})")
    return int(step)


def is_plain_report(step: Any, metrics: Any) -> bool:
    """Whether a report is already what ``check_step`` and ``check_metric`` would make of it:
    an int step in ``[0, MAX_STEP]`` and a dict of str names to floats and 64-bit ints (not
    bools). The fast path of a reader of unpickled reports; False says "check it in full"."""
    if type(step) is not int or not 0 <= step <= MAX_STEP or type(metrics) is not dict:
        return False
    for name, value in metrics.items():
        kind = type(value)
        if type(name) is not str or not (kind is float or (kind is int and -_INT64 <= value <= _INT64)):
            return False
    return True


def check_metric(name: str, value: Any) -> int | float:
    """A reported metric as a plain Python int or float, ready for the pipe and the study
    store: a real number, or a 0-d tensor / numpy array holding one (NaN and infinities pass:
    the controller fails the trial on them). An int beyond SQLite's 64-bit range becomes the
    nearest float. ReportError, naming the metric and its type, for anything else (bools,
    arrays of several values, strings, containers, complex numbers, ints beyond any float)."""
    number = _scalar(value)
    if is_integer(number):
        number = int(number)
        if -_INT64 <= number <= _INT64:
            return number
        try:
            return float(number)
        except OverflowError:
            raise ReportError(f"metric {name!r}", value,
                              "must be a number a float can hold (|x| < 1.8e308)") from None
    if is_number(number):
        return float(number)
    raise ReportError(f"metric {name!r}", value,
                      "must be a number (an int or a float, or a tensor or numpy array of one "
                      f"element with no dimensions), not {_type_name(value)}")


def _scalar(value: Any) -> Any:
    """A 0-d tensor's or numpy array's number (``.item()``); anything else unchanged."""
    if getattr(value, "ndim", None) == 0 and not is_number(value):
        try:
            return value.item()
        except Exception:       # a foreign object's item() may raise anything: not a number
            return value
    return value


def _type_name(value: Any) -> str:
    kind = type(value)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def check_references(field: str, value: Any) -> tuple[str, ...]:
    """A list of ``module:object`` references (YAML ``callbacks``) as a tuple; None: empty.
    ConfigError naming the item (``callbacks[1]``) otherwise."""
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)):
        raise ConfigError(field, value, "must be a list of 'module:object' references")
    for i, item in enumerate(value):
        if not isinstance(item, str) or item.count(":") != 1 or not all(item.split(":")):
            raise ConfigError(f"{field}[{i}]", item, "must be a 'module:object' reference")
    return tuple(value)


def import_reference(field: str, reference: Any) -> Any:
    """The object a ``module:attr`` reference names (dots allowed after the colon: a class's
    attribute); ConfigError naming ``field`` and the reference when it is not of that form, its
    module cannot be imported or the attribute is not there."""
    module_name, sep, attr = reference.partition(":") if isinstance(reference, str) else ("", "", "")
    if not sep or not module_name or not attr:
        raise ConfigError(field, reference, "must be 'module:attr'")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(field, reference, f"names a module that cannot be imported ({exc})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(field, reference, f"names nothing: {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj
