"""The README's "Coming from Optuna or Ray Tune" section, run verbatim (as tests/test_readme.py
runs the quick start): each python and yaml block is written to the file its first line names,
the scripts are run, then each line of the bash block."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from test_readme import REPO, blocks, command, section

SECTION = "Coming from Optuna or Ray Tune"
SCRIPTS = ["warm_start.py", "my_algorithm.py", "logged.py"]


def _files(folder: Path) -> list[str]:
    names = []
    for kind, body in blocks(SECTION):
        if kind != "bash":
            name = body.splitlines()[0].removeprefix("# ").strip()
            (folder / name).write_text(body)
            names.append(name)
    return names


def test_the_section_has_the_files_and_commands_it_names(tmp_path):
    assert _files(tmp_path) == ["warm_start.py", "my_algorithm.py", "tuned.py", "tuned.yaml",
                                "logged.py"]
    assert [kind for kind, _ in blocks(SECTION)][-2:] == ["bash", "python"]


def _run(folder: Path, line: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(command(line), cwd=folder, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.slow
def test_the_section_runs_verbatim(tmp_path):
    _files(tmp_path)
    text = _run(tmp_path, "python warm_start.py")    # callbacks print beside the progress lines
    assert text.count("ended: ") == 6 and "ended: 1 {'lr': 0.01, 'width': 30} " in text
    out = text.splitlines()
    assert out[-2].startswith("{'epoch': 3, 'lr': ")
    assert out[-1] == "['user_attrs_device']"
    out = _run(tmp_path, "python my_algorithm.py").splitlines()
    assert out[-1] == "{'lr': 0.025}"
    for kind, body in blocks(SECTION):
        for line in filter(None, (raw.strip() for raw in body.splitlines())) if kind == "bash" else ():
            assert shlex.split(line)[0] == "hypersack"
            text = _run(tmp_path, line)
            if "run" in line:
                assert text.count("loss") >= 4
    best = json.loads((tmp_path / "best-model" / "best.json").read_text())
    assert (tmp_path / "best-model" / best["checkpoint"]).is_file()
    kept = list((tmp_path / "hypersack-runs").glob("tuned-*/trial-*/checkpoint-*"))
    assert len(kept) == 1


@pytest.mark.slow
def test_the_logging_example_runs_where_its_extras_are_installed(tmp_path, monkeypatch):
    for module in ("tensorboardX", "mlflow"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (pip install 'hypersack[tensorboard,mlflow]')")
    _files(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_ALLOW_FILE_STORE"}
    done = subprocess.run(command("python logged.py"), cwd=tmp_path, capture_output=True, text=True,
                          env={**env, "PYTHONPATH": str(REPO)}, timeout=300)
    assert done.returncode == 0, done.stderr
    runs = tmp_path / "hypersack-runs"
    assert len(list((runs / "tensorboard" / "logged").iterdir())) == 2
    # the docs' `mlflow ui --backend-store-uri URI`, read back through MLflow's own client
    text = section(SECTION)                         # the page that shows logged.py
    ui = re.search(r"`(mlflow ui --backend-store-uri (\S+))`", text)
    assert ui is not None and "pip install mlflow" in text[ui.start() - 300:ui.start()]
    from mlflow.tracking import MlflowClient
    monkeypatch.chdir(tmp_path)                      # the command is run where the study ran
    client = MlflowClient(tracking_uri=ui.group(2))
    experiment = client.get_experiment_by_name("logged")
    runs_read = client.search_runs([experiment.experiment_id])
    assert sorted(r.info.run_name for r in runs_read) == ["trial-00000", "trial-00001"]
    assert all(len(client.get_metric_history(r.info.run_id, "loss")) == 3 for r in runs_read)
