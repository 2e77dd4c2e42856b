"""Property-based: mutated study files are accepted or refused with a HyperSackError, never a raw
exception and never a hang.

Valid study files (examples/*.yaml and a few built here) are mutated by hypothesis: values replaced
by values of every type (huge and tiny numbers, NaN, infinities, dates, lists, mappings, strings
with control characters, deep nesting), keys deleted, renamed or added, subtrees shared (aliases),
and the text itself damaged (NUL and other control bytes, bad UTF-8, cut files, anchors, alias
bombs, self references, deep brackets). Each file goes through ``load_study_file``; when accepted,
its spec must round-trip through strict JSON (the study store keeps JSON) and its algorithm
must build or be refused with a HyperSackError.

Only the spec is parsed and the algorithm built, as `run` does before it stores the study
(no study runs), so thousands of files take seconds. A per-file limit of
``LIMIT_S`` seconds (SIGALRM) turns a hang into a failure; it is far above the milliseconds a file
takes, so a slow machine does not fail the test.
"""
from __future__ import annotations

import contextlib
import copy
import datetime
import json
import os
import signal
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hypersack.config import load_study_file
from hypersack.core.algorithms import make_algorithm
from hypersack.core.spec import StudySpec
from hypersack.errors import HyperSackError

LIMIT_S = 20
EXAMPLES = sorted((Path(__file__).parents[1] / "examples").glob("*.yaml"))

BUILT = [
    {"name": "grid-1", "trainable": "trainables:quick", "objective": {"metric": "loss", "mode": "min"},
     "space": {"x": {"type": "float", "low": -1.0, "high": 1.0, "values": [-1.0, 0.0, 1.0]},
               "n": {"type": "int", "low": 1, "high": 64, "step": 3},
               "act": ["relu", "tanh", None, True, 3]},
     "algorithm": {"type": "grid", "points_per_axis": 4}, "budget": {"trials": 12, "time_s": 60},
     "executor": {"workers": 2, "max_retries": 0, "trial_timeout_s": 30.5}},
    {"name": "tpe.study", "objective": {"metric": "accuracy", "mode": "max"}, "space": {"lr": {"type": "float", "low": 1e-5,
     "high": 1.0, "log": True}, "layers": {"type": "constant", "value": [64, {"a": 1.5}]},
     "steps": {"type": "int", "low": 1, "high": 9, "log": True}},
     "algorithm": {"type": "tpe", "n_startup_trials": 3}, "budget": {"time_s": 10}, "seed": 7,
     "max_steps": "steps", "placement": "ff", "oversubscription": {"A100": 2, "H100": 1.5},
     "resources": {"compute": 50, "memory_gb": 4.5, "cpus": 2}, "description": "a\nb"},
    {"name": "hb", "objective": ["val", "max"], "space": {"a": [1, 2, 3], "epochs": 9},
     "algorithm": {"type": "hyperband", "max_t": 9, "reduction_factor": 3}, "budget": {"trials": 30},
     "execution": "auto", "pack": {"max_members": 4}, "oversubscription": 3, "max_steps": 9,
     "storage": "runs/hb.db"},
]

DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
SEEDS = [yaml.safe_load(p.read_text()) for p in EXAMPLES] + BUILT

# ---- values of every type ---------------------------------------------------------------------

control_text = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x9f), max_size=8)
huge_ints = st.sampled_from([2**53 + 1, 2**63, -2**63 - 1, 2**64, 10**30, 10**400, -10**400])
odd_floats = st.sampled_from([float("nan"), float("inf"), -float("inf"), 1e308, -1e308,
                              1.7976931348623157e308, 5e-324, -0.0, 1e-300])
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), huge_ints, st.floats(), odd_floats,
    st.dates(), st.datetimes(), control_text, st.text(max_size=6),
    st.sampled_from(["", "..", "../x", "/etc/passwd", "digits\n", "a:b", "asha", "grid", "tpe",
                     "random", "min", "max", "float", "int", "categorical", "constant", "fused",
                     "wfd", ".inf", "1e308", "0x10", "~", "yes"]),
)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.one_of(st.text(max_size=5), scalars), inner,
                                                 max_size=3)), max_leaves=6)


def _deep(depth: int, kind: str) -> Any:
    out: Any = 1
    for _ in range(depth):
        out = [out] if kind == "list" else {"k": out}
    return out


nested = st.builds(_deep, st.sampled_from([10, 63, 64, 65, 120]), st.sampled_from(["list", "dict"]))
anything = st.one_of(values, nested)

# ---- mutations of the data --------------------------------------------------------------------


def _paths(node: Any, prefix: tuple = (), seen: set[int] | None = None) -> list[tuple]:
    """Every path into ``node``; a shared or cyclic subtree is entered once."""
    seen = set() if seen is None else seen
    out = [prefix]
    if isinstance(node, (dict, list)) and id(node) not in seen:
        seen.add(id(node))
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for k, v in list(items):
            out += _paths(v, prefix + (k,), seen)
    return out


def _get(node: Any, path: tuple) -> Any:
    for p in path:
        node = node[p]
    return node


@st.composite
def _a_path(draw: st.DrawFn, data: Any) -> tuple:
    """A path into ``data``: a top-level section first (each equally likely, so ``budget`` is
    mutated as often as the larger ``space``), then any path inside it."""
    if not isinstance(data, dict) or not data or draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from(_paths(data)))
    key = draw(st.sampled_from(list(data)))
    return draw(st.sampled_from(_paths(data[key], (key,))))


@st.composite
def mutated(draw: st.DrawFn) -> Any:
    """A study declaration (a dict, or what replaced it) after 1-4 mutations."""
    data = copy.deepcopy(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        path = draw(_a_path(data))
        op = draw(st.sampled_from(["replace", "replace", "replace", "delete", "add", "rename", "share"]))
        if not path:
            if op == "replace":
                data = draw(anything)
            continue
        parent, last = _get(data, path[:-1]), path[-1]
        if op == "replace":
            parent[last] = draw(anything)
        elif op == "delete":
            del parent[last]
        elif op == "add" and isinstance(parent, dict):
            parent[draw(st.one_of(st.text(max_size=6), scalars))] = draw(anything)
        elif op == "rename" and isinstance(parent, dict):
            parent[draw(st.one_of(st.text(max_size=6), scalars))] = parent.pop(last)
        elif op == "share":   # the same object twice (an anchor and an alias), or a cycle
            parent[last] = _get(data, draw(st.sampled_from(_paths(data))))
    return data


def _dump(data: Any) -> str:
    try:
        return yaml.dump(data, Dumper=DUMPER, sort_keys=False, allow_unicode=True)
    except (yaml.YAMLError, RecursionError):
        return yaml.dump({"unrepresentable": str(type(data))}, Dumper=DUMPER)


# ---- mutations of the text --------------------------------------------------------------------

BOMB = "l0: &l0 [a, a, a, a, a, a, a, a, a]\n" + "".join(
    f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 10))
SNIPPETS = ["\x00", "\x01", "\x1b[2J", "\t", "\r", "\ufeff", "&a ", "*a", "*undefined", "&x [*x]",
            "<<: *a\n", "!!python/object/apply:os.system [echo hi]", "!!binary aGk=", "!!set {a}",
            "!!float abc", "!!int 1_000", "!!int", "!!bool", "!!timestamp x", "? [a, b]\n: 1\n", "[" * 3000,
            "{" * 3000, "---\n", "...\n", "%YAML 1.1\n", "'unterminated", '"\\x"', "#", "- ",
            ": ", "1" * 5000, "-.inf", ".NaN", "2020-01-01", "2020-01-01T00:00:00Z", BOMB,
            "a: &a\n  b: *a\n"]


@st.composite
def damaged(draw: st.DrawFn) -> bytes:
    """The YAML bytes of a mutated study, then damaged at 1-3 random places."""
    raw = _dump(draw(mutated())).encode()
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(raw)))
        op = draw(st.sampled_from(["insert", "insert", "bytes", "cut"]))
        if op == "insert":
            raw = raw[:at] + draw(st.sampled_from(SNIPPETS)).encode() + raw[at:]
        elif op == "bytes":
            raw = raw[:at] + draw(st.binary(min_size=1, max_size=4)) + raw[at:]
        else:
            raw = raw[:at]
    return raw


# ---- the property -----------------------------------------------------------------------------


class _Hang(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Hang(f"a study file took more than {LIMIT_S} s")


@contextlib.contextmanager
def _limit() -> Iterator[None]:
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(LIMIT_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def check_loads_or_refuses(path: Path, raw: bytes) -> None:
    """``raw`` as a study file is refused with a HyperSackError, or accepted (load_study_file
    has built the algorithm, as ``run`` does) with a spec the store can keep and a space that
    samples a valid config; nothing else, and within LIMIT_S."""
    path.write_bytes(raw)
    try:
        with _limit():
            data = load_study_file(path)
    except HyperSackError as exc:
        assert str(exc)          # a message, and one that can be printed
        return
    spec = StudySpec.from_dict(data)
    # What the store keeps: strict JSON, and the same spec when read back.
    stored = json.loads(json.dumps(spec.to_dict(), allow_nan=False))
    assert StudySpec.from_dict(stored).to_dict() == stored
    # A first configuration, as a trial would get it.
    config = spec.space.sample(np.random.default_rng(0))
    spec.space.validate(config)
    assert spec.steps_for(config) is None or spec.steps_for(config) >= 1



# 150 + 150 files by default (a few seconds; the suite runs on busy 2-core machines):
# HYPERSACK_FUZZ_EXAMPLES=20000 for a deeper run.
EXAMPLES_PER_TEST = int(os.environ.get("HYPERSACK_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES_PER_TEST, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz") / "study.yaml"


def test_examples_and_built_seeds_are_valid(scratch: Path) -> None:
    assert EXAMPLES, "examples/*.yaml not found"
    for p in EXAMPLES:
        load_study_file(p)
    for d in BUILT:
        scratch.write_text(_dump(d))
        spec = StudySpec.from_dict(load_study_file(scratch))
        make_algorithm(spec.algorithm, spec.space, spec.objective, spec.seed)


@FUZZ
@given(data=mutated())
def test_mutated_study_data_is_accepted_or_refused_cleanly(scratch: Path, data: Any) -> None:
    check_loads_or_refuses(scratch, _dump(data).encode())


@FUZZ
@given(raw=damaged())
def test_damaged_study_text_is_accepted_or_refused_cleanly(scratch: Path, raw: bytes) -> None:
    check_loads_or_refuses(scratch, raw)


def test_the_fuzzer_reaches_dates_nan_and_aliases() -> None:
    """The strategies do produce the inputs this file promises (a guard on the generator)."""
    assert "&" in _dump({"a": (shared := [1]), "b": shared})
    assert isinstance(yaml.safe_load(_dump({"d": datetime.date(2020, 1, 1)}))["d"], datetime.date)
    assert yaml.safe_load(_dump({"x": float("nan")}))["x"] != yaml.safe_load(_dump({"x": float("nan")}))["x"]
