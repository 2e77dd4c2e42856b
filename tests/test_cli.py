"""The command line: one study run end to end in a subprocess (``python -m hypersack run``), then
its read commands (status, best, export, list), bad input and the other runs through the same
entry point in process (``hypersack._entry.main``: what ``python -m hypersack`` calls), and in
subprocesses where the process is the point (a closed pipe, the trainable's module found from
the study's folder)."""
from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hypersack.config import load_study_file
from hypersack.errors import ConfigError

QUICK = """
name: q
trainable: trainables:quick
objective: {metric: score, mode: max}
space:
  x: {type: float, low: 0.0, high: 1.0}
budget: {trials: 4}
executor: {workers: 2}
"""

TESTS_DIR = Path(__file__).resolve().parent


def _env() -> dict[str, str]:
    """A CLI subprocess's environment: it imports hypersack and tests/trainables.py."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), str(TESTS_DIR.parent),
                                         env.get("PYTHONPATH", "")])
    return env


class Out:
    """What one command gave: its exit code and its two streams."""

    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def hs(tmp_path, capsys):
    """``hs(folder, *args, check=True)``: the command ``hypersack ARGS --storage folder/s.db``
    run in this process through the console entry point; returns an ``Out``."""
    from hypersack._entry import main

    def run(folder: Path, *args: str, check: bool = True) -> Out:
        capsys.readouterr()
        try:
            code = main([*args, "--storage", str(folder / "s.db")])
        except SystemExit as exc:          # argparse: --help, --version, usage errors
            code = exc.code if isinstance(exc.code, int) else 2
        got = capsys.readouterr()
        out = Out(code, got.out, got.err)
        if check:
            assert out.returncode == 0, out.stderr
        return out
    return run


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """Study q (4 trials of 5 reports) run by ``python -m hypersack run`` in a subprocess, once
    for the module; tests that write copy its folder first (``_copy``)."""
    folder = tmp_path_factory.mktemp("cli-q")
    (folder / "q.yaml").write_text(QUICK)
    out = subprocess.run([sys.executable, "-m", "hypersack", "run", str(folder / "q.yaml"),
                          "--progress", "lines", "--storage", str(folder / "s.db")],
                         env=_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "Best trial of 'q'" in out.stdout
    return folder


def _copy(folder: Path, into: Path) -> Path:
    for name in ("s.db", "q.yaml"):
        shutil.copy(folder / name, into / name)
    return into


def test_best_status_export_list(ran, hs):
    best = json.loads(hs(ran, "best", "q", "--json").stdout)
    assert set(best) == {"trial_id", "config", "metric", "value", "step", "state"}
    assert best["metric"] == "score" and best["step"] == 5 and best["state"] == "complete"
    status = json.loads(hs(ran, "status", "q", "--json").stdout)
    assert status["complete"] == 4 and status["failed"] == 0 and len(status["trials"]) == 4
    assert best["value"] == max(t["value"] for t in status["trials"])
    rows = list(csv.DictReader(io.StringIO(hs(ran, "export", "q", "--format", "csv").stdout)))
    assert len(rows) == 4 and "config.x" in rows[0] and "metric.score" in rows[0]
    exported = json.loads(hs(ran, "export", "q", "--format", "json").stdout)
    assert all(len(t["results"]) == 5 for t in exported["trials"])
    studies = json.loads(hs(ran, "list", "--json").stdout)
    assert [s["name"] for s in studies] == ["q"] and studies[0]["counts"]["complete"] == 4
    human = hs(ran, "status", "q").stdout
    assert "4 complete" in human
    header = hs(ran, "list").stdout.splitlines()[0].split()
    assert header == ["study", "status", "complete", "running", "paused", "pending", "pruned", "failed"]


def test_status_shows_failed_trial_traceback(tmp_path, hs):
    (tmp_path / "f.yaml").write_text(QUICK.replace("name: q", "name: f").replace(
        "trainables:quick", "trainables:raises_for_negative").replace(
        "x: {type: float, low: 0.0, high: 1.0}", "x: {type: float, low: -2.0, high: -1.0}"))
    ran = hs(tmp_path, "run", str(tmp_path / "f.yaml"), "--progress", "none", check=False)
    assert ran.returncode == 1                      # every trial failed: not a success
    assert "no trial completed (4 failed, 0 pruned of 4)" in ran.stderr and "hypersack status f" in ran.stderr
    out = hs(tmp_path, "status", "f").stdout
    assert "failed" in out and "ValueError: negative x" in out and "Traceback" in out
    assert hs(tmp_path, "best", "f", check=False).returncode == 1


def test_version_and_help_texts(tmp_path, hs):
    from hypersack import __version__
    assert hs(tmp_path, "--version").stdout.strip() == f"hypersack {__version__}"
    helped = hs(tmp_path, "run", "--help").stdout
    helped = " ".join(helped.split())
    assert "one line per finished, paused or pruned trial" in helped and "130 interrupted" in helped


def test_status_fits_80_columns_and_survives_a_closed_pipe(tmp_path, hs, monkeypatch):
    wide = QUICK.replace("name: q", "name: w").replace(
        "x: {type: float, low: 0.0, high: 1.0}",
        "x: {type: float, low: 0.0, high: 1.0}\n  note: " + "a-very-long-constant-" * 6 + "\n  lr: 0.001")
    (tmp_path / "w.yaml").write_text(wide)
    hs(tmp_path, "run", str(tmp_path / "w.yaml"), "--progress", "none")
    monkeypatch.setenv("COLUMNS", "80")
    lines = hs(tmp_path, "status", "w").stdout.splitlines()
    assert len(lines) >= 6 and max(len(line) for line in lines) <= 80
    assert sum(1 for line in lines if "…" in line and "note=" in line) == 4   # 4 trials: cut rows
    # A reader that has gone (`| head`): the read end is closed before the command writes.
    proc = subprocess.Popen([sys.executable, "-m", "hypersack", "status", "w", "--storage",
                             str(tmp_path / "s.db")], env={**_env(), "COLUMNS": "80"},
                            stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    stderr = proc.stderr.read()
    assert proc.wait(60) == 1 and "Traceback" not in stderr and "BrokenPipe" not in stderr


def test_run_existing_study_needs_resume_or_replace(ran, hs, tmp_path):
    ran = _copy(ran, tmp_path)
    again = hs(ran, "run", str(ran / "q.yaml"), check=False)
    assert again.returncode == 2 and "already exists" in again.stderr
    for way in ("hypersack resume q", f"hypersack run {ran / 'q.yaml'} --resume",
                f"hypersack run {ran / 'q.yaml'} --replace", "if_exists="):
        assert way in again.stderr
    hs(ran, "run", str(ran / "q.yaml"), "--replace", "--progress", "none")
    done = hs(ran, "run", str(ran / "q.yaml"), "--resume", "--progress", "none")
    assert "Best trial" in done.stdout


def test_unknown_study_is_an_error(tmp_path, hs):
    out = hs(tmp_path, "best", "nope", check=False)
    assert out.returncode == 2 and "No study store at" in out.stderr
    assert not (tmp_path / "s.db").exists()          # a read command never creates the file
    from hypersack.runtime.storage.sqlite import Storage
    Storage(tmp_path / "s.db").close()
    out = hs(tmp_path, "best", "nope", check=False)
    assert out.returncode == 2 and "No study named 'nope'" in out.stderr


def test_malformed_yaml_names_file_and_line(tmp_path, hs):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: q\nspace:\n  x: {type: float, low: 0\n")
    out = hs(tmp_path, "run", str(bad), check=False)
    assert out.returncode == 2 and f"{bad}:" in out.stderr and "malformed" in out.stderr
    assert not (tmp_path / "hypersack-runs").exists()


@pytest.mark.parametrize("edit, field, line", [
    (("budget: {trials: 4}", "budget: {trials: 4}\nepochs: 3"), "epochs", 8),
    (("executor: {workers: 2}", "executor: {workers: 2, gpus: 1}"), "executor.gpus", 8),
    (("low: 0.0, high: 1.0", "low: 2.0, high: 1.0"), "space.x.low", 6),
    (("type: float", "type: real"), "space.x.type", 6),
    (("mode: max", "mode: up"), "objective.mode", 4),
    ((", mode: max", ""), "objective.mode", 4),            # no default: the mode is required
    (("budget: {trials: 4}", "budget: {trials: 0}"), "budget.trials", 7),
])
def test_bad_field_names_file_line_and_field(tmp_path, edit, field, line):
    path = tmp_path / "s.yaml"
    path.write_text(QUICK.replace(*edit))
    with pytest.raises(ConfigError) as info:
        load_study_file(path)
    assert info.value.field == field
    assert info.value.location == f"{path}:{line}"
    assert str(info.value).startswith(f"{path}:{line}: The value of {field} is")


def test_bad_field_fails_before_anything_runs(tmp_path, hs):
    (tmp_path / "s.yaml").write_text(QUICK + "surprise: 1\n")
    out = hs(tmp_path, "run", str(tmp_path / "s.yaml"), check=False)
    assert out.returncode == 2 and "surprise" in out.stderr and "is not a known field" in out.stderr
    assert not (tmp_path / "s.db").exists()          # nothing stored, no file made


def test_a_builtin_workload_named_in_yaml_is_the_builtin(tmp_path):
    """``trainable: digits_mlp`` in a study file names the built-in workload; the driver checks
    it without importing torch (the workers import it). That it learns the digits (accuracy
    >= 0.95) is tests/workloads/test_digits.py; the YAML run path is ``ran`` above, and a
    study runs digits_mlp by name end to end in tests/runtime/test_timesharing_study.py."""
    from hypersack.errors import TrainableError
    from hypersack.runtime.worker.trainable import TrainableRef
    from hypersack.workloads import BUILTINS
    (tmp_path / "d.yaml").write_text("""
name: d
trainable: digits_mlp
objective: {metric: accuracy, mode: max}
space:
  lr: {type: float, low: 0.002, high: 0.005, log: true}
  batch_size: {type: categorical, choices: [32, 64]}
  optimizer: adam
  epochs: 4
budget: {trials: 2}
max_steps: epochs
""")
    spec = load_study_file(tmp_path / "d.yaml")
    assert spec["trainable"] == "digits_mlp" and spec["max_steps"] == "epochs"
    assert BUILTINS["digits_mlp"] == "hypersack.workloads.digits:train_mlp"
    assert TrainableRef.of(spec["trainable"]).reference == "digits_mlp"
    with pytest.raises(TrainableError, match="digits_mpl"):
        TrainableRef.of("digits_mpl")


# ---- finding the trainable's module (issue 12, items 2 and 8) ------------------------------------

MODULE = "def train(config, ctx):\n    ctx.report(1, score=config['x'])\n"


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """The CLI with only the repository on PYTHONPATH (not tests/), run from ``cwd``."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.run([sys.executable, "-m", "hypersack", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_yaml_trainable_imports_from_the_study_folder(tmp_path):
    """`hypersack run configs/s.yaml` with mymodule.py beside it, no PYTHONPATH for it (the
    working directory is covered in tests/test_study_api.py, in process)."""
    study_dir = tmp_path / "configs"
    study_dir.mkdir()
    (study_dir / "mymodule.py").write_text(MODULE)
    (study_dir / "s.yaml").write_text(QUICK.replace("trainables:quick", "mymodule:train"))
    out = _cli(tmp_path, "run", "configs/s.yaml", "--progress", "none")
    assert out.returncode == 0, out.stderr
    assert "Best trial of 'q'" in out.stdout


def test_missing_function_is_reported_before_anything_runs(tmp_path):
    (tmp_path / "mymodule.py").write_text(MODULE)
    (tmp_path / "s.yaml").write_text(QUICK.replace("trainables:quick", "mymodule:trian"))
    out = _cli(tmp_path, "run", "s.yaml")
    assert out.returncode == 2
    assert "'mymodule:trian'" in out.stderr and "defines no 'trian'" in out.stderr
    assert not (tmp_path / "hypersack-runs").exists()


def test_resume_from_another_folder_finds_the_module_beside_the_study_file(tmp_path):
    """The printed resume command works wherever it is run: the study file's folder is stored."""
    study_dir, elsewhere = tmp_path / "configs", tmp_path / "elsewhere"
    study_dir.mkdir()
    elsewhere.mkdir()
    (study_dir / "mymodule.py").write_text(MODULE)
    (study_dir / "s.yaml").write_text(QUICK.replace("trainables:quick", "mymodule:train"))
    db = str(tmp_path / "s.db")
    assert _cli(tmp_path, "run", "configs/s.yaml", "--progress", "none",
                "--storage", db).returncode == 0
    out = _cli(elsewhere, "resume", "q", "--progress", "none", "--storage", db)
    assert out.returncode == 0, out.stderr
    assert "Best trial of 'q'" in out.stdout


def test_a_study_with_no_complete_trial_prints_its_message_without_a_warning_line(tmp_path):
    (tmp_path / "failing.py").write_text("def train(config, ctx):\n    raise ValueError('no')\n")
    (tmp_path / "s.yaml").write_text(QUICK.replace("trainables:quick", "failing:train")
                                     .replace("trials: 4", "trials: 2"))
    out = _cli(tmp_path, "run", "s.yaml", "--progress", "none")
    assert out.returncode == 1
    assert "no trial completed (2 failed" in out.stderr
    assert "RuntimeWarning" not in out.stderr and "warn(" not in out.stderr


MULTI = """
name: m
trainable: trainables:two_objectives
objective:
  - {metric: loss, mode: min}
  - {metric: latency_ms, mode: min}
space:
  x: {type: float, low: 0.0, high: 1.0}
budget: {trials: 5}
algorithm: {type: optuna, sampler: nsga2, options: {population_size: 4}}
executor: {workers: 2}
"""


def test_best_of_a_multi_objective_study_is_its_pareto_front(tmp_path, hs):
    (tmp_path / "m.yaml").write_text(MULTI)
    ran = hs(tmp_path, "run", str(tmp_path / "m.yaml"), "--progress", "none")
    assert "Pareto front of 'm'" in ran.stdout
    front = json.loads(hs(tmp_path, "best", "m", "--json").stdout)
    status = json.loads(hs(tmp_path, "status", "m", "--json").stdout)
    assert status["best"] is None and status["best_trials"] == front and front
    complete = [t for t in status["trials"] if t["state"] == "complete"]
    on_front = {t["trial_id"] for t in front}
    for t in complete:       # each front trial is beaten by none; each other one by some
        beaten = any(o["values"][0] <= t["values"][0] and o["values"][1] <= t["values"][1]
                     and o["values"] != t["values"] for o in complete)
        assert beaten is (t["trial_id"] not in on_front)
    for t in front:
        assert set(t) == {"trial_id", "config", "values", "step", "state"}
        assert list(t["values"]) == ["loss", "latency_ms"] and t["step"] == 3
    table = hs(tmp_path, "best", "m").stdout.splitlines()
    assert table[0].startswith("Pareto front of 'm': ")
    assert table[1].split()[:4] == ["trial", "step", "loss", "latency_ms"]
    assert [int(line.split()[0]) for line in table[2:]] == [t["trial_id"] for t in front]
    assert "Pareto front of 'm'" in hs(tmp_path, "status", "m").stdout


def test_status_shows_a_silent_running_trial_as_not_responding():
    from rich.console import Console

    from hypersack.cli import _trials_table
    base = {"value": None, "last_step": 1, "config": {"x": 1}, "attempts": 1}
    trials = [{**base, "trial_id": 0, "state": "running", "not_responding": 31.5},
              {**base, "trial_id": 1, "state": "running", "not_responding": None}]
    console = Console(width=100, record=True)
    console.print(_trials_table(trials, 100))
    rows = console.export_text().splitlines()[1:]
    assert "not responding" in rows[0] and "not responding" not in rows[1]
