"""Search spaces: self-validating domains, seeded sampling, grid expansion, dict/YAML round trip.

A domain is an immutable value object. ``sample(rng)`` draws with a ``numpy.random.Generator``
the caller owns; ``grid(n)`` lists the points a grid search visits (explicit ``values`` when
given, else ``n`` evenly spaced points, log-spaced for log domains).
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

import numpy as np

from hypersack.errors import ConfigError, SpaceError
from hypersack.validation import (INT53, check_bool, check_integer, check_name, check_number,
                                  check_plain_data, is_finite, is_integer, is_number)

__all__ = ["Float", "Int", "Categorical", "Constant", "Domain", "SearchSpace", "domain_from_dict",
           "MAX_GRID_POINTS"]

#: Most configurations a grid may list (a grid is materialised before the study starts).
MAX_GRID_POINTS = 100_000


@dataclass(frozen=True)
class Domain:
    """Base of all domains. ``name`` is the parameter name, used in error messages."""

    name: str = field(default="?", kw_only=True)

    def sample(self, rng: np.random.Generator) -> Any:
        raise NotImplementedError

    def grid(self, points: int) -> list[Any]:
        raise NotImplementedError

    def contains(self, value: Any) -> bool:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def _fail(self, attr: str, value: Any, problem: str) -> SpaceError:
        return SpaceError(f"space.{self.name}.{attr}", value, problem)


def _uniform(rng: np.random.Generator, low: float, high: float) -> float:
    """``rng.uniform(low, high)``, draw for draw and bit for bit: numpy's is ``low + (high - low)
    * next_double`` in doubles, and ``rng.random()`` is that ``next_double``, at a third of the
    call's cost (a study samples every new config's floats). ``high - low`` is finite here (a
    domain checks its width)."""
    low = float(low)
    return low + (float(high) - low) * rng.random()


@contextmanager
def _as_space_error() -> Iterator[None]:
    """A validation ConfigError raised inside re-raised as a SpaceError (same field, value and
    problem): the space's checks come from ``hypersack.validation``, its errors stay SpaceErrors."""
    try:
        yield
    except SpaceError:
        raise
    except ConfigError as exc:
        raise SpaceError(exc.field, exc.value, exc.problem) from None


def _check_values(domain: "Float | Int", values: Any) -> tuple[Any, ...] | None:
    """The grid values as a tuple, each checked against the domain before any conversion."""
    if values is None:
        return None
    if isinstance(values, (str, bytes, Mapping)) or not hasattr(values, "__iter__"):
        raise domain._fail("values", values, "must be a list of grid values")
    values = tuple(values)
    if len(values) == 0:
        raise domain._fail("values", list(values), "must list at least one grid value")
    kind = "an integer" if isinstance(domain, Int) else "a number"
    step = getattr(domain, "step", 1)
    lattice = f" on the lattice {domain.low} + k * {step}" if step != 1 else ""
    for v in values:
        if not domain.contains(v):
            raise domain._fail("values", v, f"must be {kind} in [{domain.low}, {domain.high}]{lattice}")
    return tuple(values)


@dataclass(frozen=True)
class Float(Domain):
    """A real number in [low, high]; ``log=True`` samples uniformly in log space."""

    low: float
    high: float
    log: bool = False
    values: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        with _as_space_error():
            for attr in ("low", "high"):
                check_number(f"space.{self.name}.{attr}", getattr(self, attr))
        if self.low > self.high:
            raise self._fail("low", self.low, f"must be <= high ({self.high})")
        if not math.isfinite(float(self.high) - float(self.low)):
            raise self._fail("high", self.high, f"is too far from low ({self.low}): the width "
                             "high - low must be a finite float (below 1.8e308)")
        if self.log and self.low <= 0:
            raise self._fail("low", self.low, "must be > 0 for a log domain")
        values = _check_values(self, self.values)
        if values is not None:
            object.__setattr__(self, "values", tuple(float(v) for v in values))

    def sample(self, rng: np.random.Generator) -> float:
        """A uniform (log-uniform) draw in [low, high]: ``rng.uniform(low, high)``'s value, bit
        for bit (``_uniform``)."""
        if self.log:
            # exp(log(x)) can miss x by an ulp: clamp, or an endpoint draw falls outside [low, high].
            raw = math.exp(_uniform(rng, math.log(self.low), math.log(self.high)))
            return float(min(max(raw, self.low), self.high))
        return float(_uniform(rng, self.low, self.high))

    def grid(self, points: int) -> list[float]:
        if self.values is not None:
            return list(self.values)
        if points == 1 or self.low == self.high:
            return [float(self.low)] if self.low == self.high else [_mid(self.low, self.high, self.log)]
        space = np.geomspace if self.log else np.linspace
        return [float(v) for v in space(self.low, self.high, points)]

    def contains(self, value: Any) -> bool:
        return is_finite(value) and self.low <= value <= self.high

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "float", "low": self.low, "high": self.high}
        if self.log:
            out["log"] = True
        if self.values is not None:
            out["values"] = list(self.values)
        return out


INT_GRID_LIMIT = 100       # an Int axis with at most this many values is gridded whole by default
FLOAT_GRID_POINTS = 3      # points of a Float axis when points_per_axis is not set


def _default_points(name: str, domain: "Domain") -> int:
    """Grid points of an axis when ``points_per_axis`` is not set (see ``SearchSpace.grid``)."""
    if isinstance(domain, Int) and domain.values is None:
        count = (domain._top - domain.low) // domain.step + 1
        if count > INT_GRID_LIMIT:
            raise SpaceError("points_per_axis", None, (
                f"must be set: space.{name} has {count} integer values, more than a grid takes "
                f"whole ({INT_GRID_LIMIT}); set points_per_axis, or list the grid's values "
                f"(space.{name}.values)"))
        return count
    return FLOAT_GRID_POINTS


def _storable_number(value: Any) -> bool:
    """An int, or a float that is finite (JSON, and so the study store, has no NaN or inf)."""
    return is_integer(value) or is_finite(value)


def _mid(low: float, high: float, log: bool) -> float:
    return float(math.sqrt(low * high)) if log else (low + high) / 2


@dataclass(frozen=True)
class Int(Domain):
    """An integer in [low, high] on the lattice low + k * step; ``log=True`` samples log-uniformly."""

    low: int
    high: int
    log: bool = False
    step: int = 1
    values: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        with _as_space_error():
            for attr, least in (("low", -INT53), ("high", -INT53), ("step", 1)):
                check_integer(f"space.{self.name}.{attr}", getattr(self, attr), low=least,
                              high=INT53, hint="(the integers a float holds exactly)")
        if self.low > self.high:
            raise self._fail("low", self.low, f"must be <= high ({self.high})")
        if self.log and self.low <= 0:
            raise self._fail("low", self.low, "must be > 0 for a log domain")
        if self.log and self.step != 1:
            raise self._fail("step", self.step, "must be 1 for a log domain")
        if self.step > self.high - self.low > 0:
            raise self._fail("step", self.step, f"is larger than the range high - low "
                             f"({self.high} - {self.low} = {self.high - self.low}): the only "
                             f"value would be low ({self.low}); give a smaller step, or a constant")
        values = _check_values(self, self.values)
        if values is not None:
            object.__setattr__(self, "values", tuple(int(v) for v in values))

    @property
    def _top(self) -> int:
        """The largest lattice point <= high."""
        return self.low + (self.high - self.low) // self.step * self.step

    def sample(self, rng: np.random.Generator) -> int:
        if self.log:
            # Log-uniform over [low - 0.5, high + 0.5] (low >= 1 here), rounded: each integer
            # gets the log-width of its rounding interval, as in Optuna.
            raw = math.exp(_uniform(rng, math.log(self.low - 0.5), math.log(self.high + 0.5)))
            return int(min(max(round(raw), self.low), self.high))
        count = (self._top - self.low) // self.step + 1
        return int(self.low + int(rng.integers(count)) * self.step)

    def grid(self, points: int) -> list[int]:
        if self.values is not None:
            return list(self.values)
        count = (self._top - self.low) // self.step + 1
        if count <= points:
            return list(range(self.low, self._top + 1, self.step))
        space = np.geomspace if self.log else np.linspace
        # One point is the middle, as for Float (linspace would give just ``low``).
        raw = [_mid(self.low, self._top, self.log)] if points == 1 else space(self.low, self._top, points)
        snapped = [self.low + int(round((v - self.low) / self.step)) * self.step for v in raw]
        return sorted(set(min(max(v, self.low), self._top) for v in snapped))

    def contains(self, value: Any) -> bool:
        if not is_integer(value):
            return False
        return self.low <= value <= self.high and (value - self.low) % self.step == 0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "int", "low": self.low, "high": self.high}
        if self.log:
            out["log"] = True
        if self.step != 1:
            out["step"] = self.step
        if self.values is not None:
            out["values"] = list(self.values)
        return out


@dataclass(frozen=True)
class Categorical(Domain):
    """One of a fixed list of choices (numbers, strings, booleans or None)."""

    choices: tuple[Any, ...]

    def __post_init__(self) -> None:
        if isinstance(self.choices, (str, bytes)) or not hasattr(self.choices, "__iter__"):
            raise self._fail("choices", self.choices, "must be a list")
        object.__setattr__(self, "choices", tuple(self.choices))
        if not self.choices:
            raise self._fail("choices", [], "must list at least one choice")
        for c in self.choices:
            if not isinstance(c, (str, int, float, bool, type(None))) \
                    or (is_number(c) and not _storable_number(c)):
                raise self._fail("choices", c, "must be a finite number, a string, a boolean or null")

    def sample(self, rng: np.random.Generator) -> Any:
        return self.choices[int(rng.integers(len(self.choices)))]

    def grid(self, points: int) -> list[Any]:
        return list(self.choices)

    def contains(self, value: Any) -> bool:
        return value in self.choices

    def to_dict(self) -> dict[str, Any]:
        return {"type": "categorical", "choices": list(self.choices)}


@dataclass(frozen=True)
class Constant(Domain):
    """A fixed value passed to every trial (epochs, a model name...)."""

    value: Any

    def __post_init__(self) -> None:
        try:
            check_plain_data(f"space.{self.name}", self.value)
        except ConfigError as exc:
            raise self._fail("value", exc.value, exc.problem) from None

    def sample(self, rng: np.random.Generator) -> Any:
        return self.value

    def grid(self, points: int) -> list[Any]:
        return [self.value]

    def contains(self, value: Any) -> bool:
        return bool(value == self.value)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "constant", "value": self.value}


_DOMAIN_TYPES: dict[str, tuple[type[Domain], set[str], set[str]]] = {
    # type name: (class, required keys, optional keys)
    "float": (Float, {"low", "high"}, {"log", "values"}),
    "int": (Int, {"low", "high"}, {"log", "step", "values"}),
    "categorical": (Categorical, {"choices"}, set()),
    "constant": (Constant, {"value"}, set()),
}


def domain_from_dict(name: str, spec: Any) -> Domain:
    """Build a domain from its dict form. A bare scalar is a constant; a bare list is categorical."""
    if isinstance(spec, Domain):
        return spec if spec.name == name else _renamed(spec, name)
    if isinstance(spec, list):
        return Categorical(tuple(spec), name=name)
    if not isinstance(spec, Mapping):
        return Constant(spec, name=name)
    kind = spec.get("type")
    if not isinstance(kind, str) or kind not in _DOMAIN_TYPES:
        raise SpaceError(f"space.{name}.type", kind, f"must be one of {sorted(_DOMAIN_TYPES)}")
    cls, required, optional = _DOMAIN_TYPES[kind]
    for key in spec:
        if not isinstance(key, str):
            raise SpaceError(f"space.{name}", key, f"is not a field of a {kind} domain "
                             f"(fields: {sorted(required | optional)})")
    keys = set(spec) - {"type"}
    for missing in sorted(required - keys):
        raise SpaceError(f"space.{name}.{missing}", None, f"is required for a {kind} domain")
    for unknown in sorted(keys - required - optional):
        raise SpaceError(f"space.{name}.{unknown}", spec[unknown],
                         f"is not a field of a {kind} domain (fields: {sorted(required | optional)})")
    kwargs = {k: spec[k] for k in keys}
    if "log" in kwargs:
        with _as_space_error():
            check_bool(f"space.{name}.log", kwargs["log"])
    return cls(**kwargs, name=name)


def _axis_size(domain: Domain, points: int) -> int:
    """How many values ``domain.grid(points)`` lists, at most."""
    if isinstance(domain, (Float, Int)) and domain.values is not None:
        return len(domain.values)
    if isinstance(domain, Float):
        return 1 if domain.low == domain.high else points
    if isinstance(domain, Int):
        return min(points, (domain._top - domain.low) // domain.step + 1)
    if isinstance(domain, Categorical):
        return len(domain.choices)
    return 1


def _renamed(domain: Domain, name: str) -> Domain:
    from dataclasses import replace
    return replace(domain, name=name)


class SearchSpace(Mapping[str, Domain]):
    """An ordered mapping of parameter names to domains."""

    def __init__(self, domains: Mapping[str, Any]):
        if not isinstance(domains, Mapping):
            raise SpaceError("space", domains, "must be a mapping of parameter names to domains")
        if not domains:
            raise SpaceError("space", {}, "must declare at least one parameter")
        with _as_space_error():
            for key in domains:
                check_name("space (a parameter name)", key)
        self._domains = {str(k): domain_from_dict(str(k), v) for k, v in domains.items()}

    def __getitem__(self, key: str) -> Domain:
        return self._domains[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._domains)

    def __len__(self) -> int:
        return len(self._domains)

    def __repr__(self) -> str:
        return f"SearchSpace({self.to_dict()!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SearchSpace) and self._domains == other._domains

    def sample(self, rng: np.random.Generator) -> dict[str, Any]:
        """One configuration; parameters are drawn in declaration order from ``rng``."""
        return {name: d.sample(rng) for name, d in self._domains.items()}

    def grid_size(self, points_per_axis: int | None = 3) -> int:
        """An upper bound on ``len(self.grid(points_per_axis))``, computed without listing it."""
        if points_per_axis is not None:
            with _as_space_error():
                check_integer("points_per_axis", points_per_axis, low=1)
        size = 1
        for name, domain in self._domains.items():
            size *= _axis_size(domain, self._points(name, domain, points_per_axis))
        return size

    @property
    def has_nothing_to_search(self) -> bool:
        """True when every parameter holds one value (constants, low == high, one choice):
        every configuration is the same one."""
        return self.grid_size(2) == 1

    @staticmethod
    def _points(name: str, domain: "Domain", points_per_axis: int | None) -> int:
        return int(points_per_axis) if points_per_axis is not None else _default_points(name, domain)

    def grid(self, points_per_axis: int | None = 3) -> list[dict[str, Any]]:
        """The Cartesian product of every domain's grid, first parameter varying slowest.

        ``points_per_axis=None``: every value of an Int axis (a SpaceError naming the axis when it
        has more than ``INT_GRID_LIMIT``), ``FLOAT_GRID_POINTS`` points of a Float axis.
        SpaceError when the grid would hold more than MAX_GRID_POINTS configurations.
        """
        size = self.grid_size(points_per_axis)
        if size > MAX_GRID_POINTS:
            raise SpaceError("points_per_axis", points_per_axis,
                             f"gives a grid of up to {size} configurations over {len(self)} "
                             f"parameters; at most {MAX_GRID_POINTS} are allowed (lower "
                             "points_per_axis, or list fewer grid values)")
        configs: list[dict[str, Any]] = [{}]
        for name, domain in self._domains.items():
            points = self._points(name, domain, points_per_axis)
            configs = [{**c, name: v} for c in configs for v in domain.grid(points)]
        return configs

    def validate(self, config: Mapping[str, Any]) -> None:
        """Raise SpaceError when ``config`` is missing a parameter or has a value out of its domain."""
        for name, domain in self._domains.items():
            if name not in config:
                raise SpaceError(f"config.{name}", None, "is missing")
            if not domain.contains(config[name]):
                raise SpaceError(f"config.{name}", config[name], f"is outside {domain.to_dict()}")

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return {name: d.to_dict() for name, d in self._domains.items()}

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> "SearchSpace":
        return cls(spec)

    def to_yaml(self) -> str:
        from hypersack.yaml_input import dump_yaml
        return dump_yaml(self.to_dict())

    @classmethod
    def from_yaml(cls, text: str) -> "SearchSpace":
        """The space in the YAML ``text``, read within the loader's limits (hypersack.yaml_input)."""
        from hypersack.yaml_input import parse_yaml   # PyYAML stays unimported until needed
        return cls(parse_yaml(text, "space YAML")[0])
