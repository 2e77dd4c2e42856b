"""The study-file loader: its limits (size, bytes, nesting, aliases, tags) and errors that name
the file and line, for every bad input of issue 10 (each a ConfigError before anything runs)."""
from __future__ import annotations

import contextlib
import signal
from pathlib import Path
from typing import Iterator

import pytest

from hypersack import yaml_input
from hypersack.config import MAX_DEPTH, MAX_FILE_BYTES, MAX_NODES, load_study_file, parse_yaml
from hypersack.errors import ConfigError

DIGITS = (Path(__file__).parents[1] / "examples" / "digits.yaml").read_text()


@contextlib.contextmanager
def no_hang(seconds: int = 30) -> Iterator[None]:
    """Fail (instead of hanging the suite) if the block runs for ``seconds``; far above the
    milliseconds it takes, so a slow machine does not fail it."""
    def alarm(signum, frame):
        raise AssertionError(f"took more than {seconds} s: the loader hangs")
    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(params=["libyaml", "python"])
def loader(request, monkeypatch):
    """Every loader test runs with libyaml's parser and with the pure-Python fallback."""
    if request.param == "python":
        monkeypatch.setattr(yaml_input, "_Loader", yaml_input._PyLoader)
    elif not yaml_input.yaml.__with_libyaml__:
        pytest.skip("PyYAML without libyaml")
    return request.param


def write(tmp_path: Path, content: str | bytes, name: str = "study.yaml") -> Path:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def refused(path: Path) -> ConfigError:
    with no_hang(), pytest.raises(ConfigError) as exc:
        load_study_file(path)
    return exc.value


def digits_with(old: str, new: str) -> str:
    assert old in DIGITS, old
    return DIGITS.replace(old, new)


# ---- bytes and size ---------------------------------------------------------------------------

def test_the_example_loads(tmp_path, loader):
    assert load_study_file(write(tmp_path, DIGITS))["name"] == "digits"


def test_nul_byte_names_its_line(tmp_path, loader):
    exc = refused(write(tmp_path, DIGITS.replace("seed: 0", "seed: 0\x00")))
    line = DIGITS.splitlines().index("seed: 0") + 1
    assert exc.location == f"{tmp_path / 'study.yaml'}:{line}"
    assert "NUL byte" in str(exc)


def test_bytes_that_are_not_utf8_name_their_line(tmp_path, loader):
    exc = refused(write(tmp_path, b"name: x\nspace: {a: \xff\xfe}\n"))
    assert exc.location.endswith("study.yaml:2")
    assert "not UTF-8" in str(exc) and "0xff" in str(exc)


def test_a_utf8_bom_is_accepted(tmp_path, loader):
    assert load_study_file(write(tmp_path, b"\xef\xbb\xbf" + DIGITS.encode()))["name"] == "digits"


@pytest.mark.parametrize("char", ["\x01", "\x1b", "\x7f", "\ufffe"])
def test_control_characters_name_their_line(tmp_path, loader, char):
    exc = refused(write(tmp_path, f"name: x\nspace:\n  a: [1{char}]\n"))
    assert exc.location.endswith("study.yaml:3")
    assert "does not allow" in str(exc)


def test_file_size_is_limited(tmp_path, loader):
    exc = refused(write(tmp_path, DIGITS + "#" * MAX_FILE_BYTES))
    assert f"larger than {MAX_FILE_BYTES} bytes" in str(exc)


def test_a_missing_file_is_an_error(tmp_path):
    assert "cannot be read" in str(refused(tmp_path / "nope.yaml"))


# ---- nesting and aliases ----------------------------------------------------------------------

def test_5000_nested_brackets_are_refused_at_their_line(tmp_path, loader):
    exc = refused(write(tmp_path, "name: x\nspace: " + "[" * 5000 + "]" * 5000 + "\n"))
    assert exc.location.endswith("study.yaml:2")
    assert f"nests deeper than {MAX_DEPTH} levels" in str(exc)


def test_nesting_up_to_the_limit_is_read(loader):
    ok = "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)         # the mapping is level 1
    data, _ = parse_yaml(f"a: {ok}")
    with pytest.raises(ConfigError, match="nests deeper"):
        parse_yaml(f"a: [{ok}]")
    assert isinstance(data["a"], list)


def test_self_referencing_alias_is_refused(tmp_path, loader):
    exc = refused(write(tmp_path, "name: x\nspace: &s\n  a: *s\n"))
    assert "refers to itself through an alias" in str(exc)
    assert exc.location.endswith("study.yaml:2")


@pytest.mark.parametrize("text", ["a: &a [*a]\n", "a: &a {b: *a}\n", "a: &a {<<: *a}\n",
                                  "a: &a [[[*a]]]\n"])
def test_every_alias_cycle_is_refused(loader, text):
    with no_hang(), pytest.raises(ConfigError, match="refers to itself"):
        parse_yaml(text)


def alias_bomb(levels: int = 10, width: int = 10) -> str:
    lines = ["l0: &l0 [" + ", ".join(["lol"] * width) + "]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_a_1kb_alias_bomb_is_refused(tmp_path, loader):
    text = alias_bomb()                     # 10**10 values once expanded
    assert len(text) < 1024
    exc = refused(write(tmp_path, text))
    assert f"expands to more than {MAX_NODES} values" in str(exc)


def test_aliases_within_the_limit_are_read(loader):
    data, _ = parse_yaml(alias_bomb(levels=3, width=10))   # 1,111 values
    assert len(data["l2"]) == 10 and data["l2"][0] == data["l1"]


def test_aliases_expanding_past_the_depth_limit_are_refused(loader):
    chain = "a0: &a0 " + "[" * 40 + "]" * 40 + "\n"
    chain += "".join(f"a{i}: &a{i} " + "[" * 30 + f"*a{i - 1}" + "]" * 30 + "\n" for i in range(1, 3))
    with pytest.raises(ConfigError, match="once its aliases are expanded"):
        parse_yaml(chain)


def test_shared_definitions_by_alias_make_a_valid_study(tmp_path, loader):
    text = digits_with("  hidden: {type: int, low: 32, high: 256, log: true}",
                       "  hidden: &h {type: int, low: 32, high: 256, log: true}\n  hidden2: *h")
    data = load_study_file(write(tmp_path, text))
    assert data["space"]["hidden2"] == data["space"]["hidden"]


# ---- tags and scalars -------------------------------------------------------------------------

@pytest.mark.parametrize("value, text", [
    ("!!python/object/apply:os.system ['echo hi']", "python/object/apply:os.system"),
    ("!!python/name:os.system", "python/name:os.system"),
    ("!!set {a, b}", "tag:yaml.org,2002:set"),
    ("!!binary aGk=", "tag:yaml.org,2002:binary"),
    ("!!omap [a: 1]", "tag:yaml.org,2002:omap"),
    ("!custom 1", "!custom"),
    ("!!float abc", "cannot be read as float"),
    ("!!int abc", "cannot be read as int"),
    ("!!timestamp yesterday", "cannot be read as timestamp"),
    ("1" * 5000, "cannot be read as int"),
    ("!!int", "cannot be read as int"),
    ("!!bool maybe", "cannot be read as bool"),
    ("!!bool", "cannot be read as bool"),
    ("!!timestamp", "cannot be read as timestamp"),
])
def test_only_plain_values_are_built(tmp_path, loader, value, text):
    exc = refused(write(tmp_path, f"name: x\nseed: {value}\n"))
    assert text in str(exc)
    assert exc.location.endswith("study.yaml:2")


@pytest.mark.parametrize("content, line", [
    ("name: x\nspace:\n  a: [1, 2\nseed: 1\n", 4),
    ("name: x\n  bad: indent\n", 2),
    ("name: x\n---\nname: y\n", 2),
    ("name: x\nspace: {a: *nowhere}\n", 2),
    ("name: x\nspace: {[1, 2]: 3}\n", 2),
    ("a: &x 1\nb: &x 2\n", 2),
])
def test_yaml_errors_name_the_file_and_line(tmp_path, loader, content, line):
    exc = refused(write(tmp_path, content))
    assert exc.location == f"{tmp_path / 'study.yaml'}:{line}"
    assert str(exc).startswith(f"{exc.location}: ")


@pytest.mark.parametrize("content", ["", "[1, 2]\n", "just text\n", "~\n"])
def test_a_file_that_is_not_a_mapping_is_refused(tmp_path, loader, content):
    assert "must be a mapping of fields" in str(refused(write(tmp_path, content)))


# ---- the numbers and names of issue 10, from a file -------------------------------------------

CASES = [
    # (old text in digits.yaml, new text, field in the error, words of the problem)
    ("  epochs: 12", "  epochs: 2020-01-01", "space.epochs.value", "quote a date"),
    ("  epochs: 12", "  epochs: .inf", "space.epochs.value", "finite number"),
    ("  epochs: 12", "  epochs: .nan", "space.epochs.value", "finite number"),
    ("algorithm: {type: asha,", "algorithm: {type: [asha],", "algorithm.type", "name of an algorithm"),
    ("  hidden: {type: int, low: 32, high: 256, log: true}",
     "  hidden: {type: int, low: -100000000000000000000000, high: 256}", "space.hidden.low", "2**53"),
    ("  hidden: {type: int, low: 32, high: 256, log: true}",
     "  hidden: {type: int, low: 1, high: 18446744073709551616}", "space.hidden.high", "2**53"),
    ("  lr: {type: float, low: 0.0003, high: 0.03, log: true}",
     "  lr: {type: float, low: -1.0e+308, high: 1.0e+308}", "space.lr.high", "width"),
    ("  lr: {type: float, low: 0.0003, high: 0.03, log: true}",
     "  lr: {type: float, low: 0.0003, high: 1.0e+309}", "space.lr.high", "finite number"),
    ("seed: 0", "seed: 0\noversubscription: 1.0e+308", "oversubscription", "in [1, 100]"),
    ("seed: 0", "seed: 0\npack: {max_members: 1" + "0" * 400 + "}", "pack.max_members", "in [1, 1024]"),
    ("  max_retries: 2", "  workers: 1000000000\n  max_retries: 2", "executor.workers", "in [1, 1024]"),
    ("name: digits", 'name: "digits\\n"', "name", "letters, digits"),
    ("name: digits", "name: ../x", "name", "letters, digits"),
    ("name: digits", "name: /etc/x", "name", "letters, digits"),
    ("budget: {trials: 32}", "budget: {trials: 32, time_s: .inf}", "budget.time_s", "finite number"),
    ("budget: {trials: 32}", "budget: {time_s: 1" + "0" * 400 + "}", "budget.time_s", "finite number"),
    ("budget: {trials: 32}", "budget: {trials: 1" + "0" * 30 + "}", "budget.trials", "integer in"),
    ("  trial_timeout_s: 300", "  trial_timeout_s: .nan", "executor.trial_timeout_s", "finite number"),
    ("seed: 0", "seed: 1" + "0" * 30, "seed", "integer in [0, 4294967295]"),
    ("max_steps: epochs", "max_steps: 2020-01-01", "max_steps", "integer in"),
    ("trainable: digits_mlp", "trainable: \"digits_mlp\\x1b[2J\"", "trainable", "printable"),
    ("seed: 0", "seed: 0\nstorage: [a]", "storage", "printable"),
    ("seed: 0", "seed: 0\nobjective: {metric: accuracy, 1: 2, null: 3}", "objective.1", "not a known field"),
]


@pytest.mark.parametrize("old, new, field, problem", CASES, ids=[c[2] + ":" + c[1][:30] for c in CASES])
def test_bad_numbers_and_names_are_errors_naming_field_and_line(tmp_path, old, new, field, problem):
    text = digits_with(old, new)
    if new.startswith("seed: 0\nobjective"):
        text = text.replace("objective: {metric: accuracy, mode: max}\n", "")
    exc = refused(write(tmp_path, text))
    assert exc.field == field
    assert problem in exc.problem
    # The line named is the line of the field (or of its enclosing field) in the file.
    line = int(exc.location.rsplit(":", 1)[1])
    assert exc.location == f"{tmp_path / 'study.yaml'}:{line}"
    assert any(part in text.splitlines()[line - 1] for part in field.split(".") if part != "value")


def test_a_grid_too_large_is_refused_before_it_is_listed(tmp_path, monkeypatch):
    from hypersack.core import space
    for cls in (space.Float, space.Int, space.Categorical, space.Constant):
        monkeypatch.setattr(cls, "grid", lambda self, points: pytest.fail("grid listed"))
    text = digits_with("algorithm: {type: asha, min_t: 1, max_t: 12, reduction_factor: 3, "
                       "num_samples: 32, mode: stop}", "algorithm: {type: grid, points_per_axis: 1000}")
    exc = refused(write(tmp_path, text))
    assert exc.field == "algorithm.points_per_axis"
    assert "at most 100000" in str(exc)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if ln.startswith("algorithm:"))
    assert exc.location.endswith(f"study.yaml:{line}")


def test_a_bad_algorithm_option_names_its_line(tmp_path):
    text = digits_with("reduction_factor: 3", "reduction_factor: 1")
    exc = refused(write(tmp_path, text))
    assert exc.field.startswith("algorithm")
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if ln.startswith("algorithm:"))
    assert exc.location.endswith(f"study.yaml:{line}")


def test_the_parsers_own_depth_limit_reads_as_ours(monkeypatch):
    """PyYAML 6.0.3+ bundles a libyaml whose scanner stops at 1,000 levels before our event
    check runs; whichever limit fires first, the user reads one message at the right line."""
    def scanner_limit(text):
        mark = yaml_input.yaml.Mark("<string>", 0, 1, 7, None, None)
        raise yaml_input.yaml.scanner.ScannerError("while increasing flow level", mark,
                                                   "exceeded maximum nesting depth", mark)
    monkeypatch.setattr(yaml_input, "_check_depth", scanner_limit)
    with pytest.raises(ConfigError, match=f"nests deeper than {MAX_DEPTH} levels") as exc:
        parse_yaml("name: x\nspace: [[]]\n", "f.yaml")
    assert exc.value.location == "f.yaml:2"
    assert "malformed" not in str(exc.value)


# ---- what users write (issue 27) ----------------------------------------------------------------

@pytest.mark.parametrize("text, value", [("1e-4", 1e-4), ("5E3", 5000.0), ("-2e+2", -200.0),
                                         ("1.5e3", 1500.0), (".5e1", 5.0)])
def test_yaml_12_floats_are_numbers(loader, text, value):
    data, _ = parse_yaml(f"low: {text}\nquoted: '{text}'\nword: e5\n")
    assert data["low"] == value and type(data["low"]) is float
    assert data["quoted"] == text and data["word"] == "e5"


def test_a_space_bound_written_1e_4_is_accepted(tmp_path, loader):
    text = digits_with("low: 0.0003, high: 0.03", "low: 3e-4, high: 3e-2")
    assert load_study_file(write(tmp_path, text))["space"]["lr"]["low"] == 3e-4


def test_optunas_mode_words_are_accepted(tmp_path, loader):
    text = digits_with("mode: max}", "mode: maximize}")
    assert load_study_file(write(tmp_path, text))["objective"]["mode"] == "maximize"
    from hypersack.core.spec import StudySpec
    assert StudySpec.from_dict(load_study_file(write(tmp_path, text))).objective.mode == "max"


def test_a_repeated_key_is_refused_naming_both_lines(tmp_path, loader):
    text = digits_with("seed: 0", "seed: 0\nbudget: {trials: 8}")
    exc = refused(write(tmp_path, text))
    first, second = sorted(text.splitlines().index(line) + 1
                           for line in ("budget: {trials: 32}", "budget: {trials: 8}"))
    assert exc.location.endswith(f"study.yaml:{second}")
    assert f"repeats the key 'budget' (first at line {first}, again at line {second})" in str(exc)


def test_a_merge_key_may_be_overridden(loader):
    data, _ = parse_yaml("base: &b {low: 1, high: 2}\nx: {<<: *b, high: 3}\n")
    assert data["x"] == {"low": 1, "high": 3}


def test_malformed_yaml_reads_as_a_sentence(tmp_path, loader):
    exc = refused(write(tmp_path, "name: x\nspace:\n  a: [1, 2\nseed: 1\n"))
    assert str(exc).startswith(f"{tmp_path / 'study.yaml'}:4: the YAML is malformed: ")
    assert "The value of" not in str(exc)


def test_an_unknown_algorithm_option_names_the_option_and_the_valid_ones(tmp_path):
    text = digits_with("reduction_factor: 3", "reduction_factr: 3")
    exc = refused(write(tmp_path, text))
    assert exc.field == "algorithm.reduction_factr"
    assert "is not an option of 'asha'" in str(exc) and "reduction_factor" in str(exc)
    assert "__init__" not in str(exc)


@pytest.mark.parametrize("word, mode", [("on", "on"), ("off", "off"), ("yes", "on"),
                                        ("auto", "auto"), ("'on'", "on")])
def test_pack_graphs_on_and_off_unquoted_are_the_modes(tmp_path, loader, word, mode):
    """YAML 1.1 reads on / off as booleans: for ``pack.graphs`` they mean the modes."""
    from hypersack.config import load_study
    text = digits_with("seed: 0", "seed: 0\nexecution: fused\n"
                                  f"pack: {{max_members: 4, graphs: {word}}}")
    assert load_study(write(tmp_path, text)).spec.pack.graphs == mode
