"""The README's "Training frameworks" section, run verbatim (as tests/test_readme.py runs the
quick start): each python block is written to the file its first line names and run, where the
extra it needs is installed (skipped with the reason otherwise)."""
from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

from test_readme import REPO, blocks, command

SECTION = "Training frameworks: Lightning, Hugging Face, W&B"
NEEDS = {"lit.py": (("lightning",), "lightning"),
         "hf.py": (("transformers", "accelerate"), "huggingface"),
         "wandb_logged.py": (("wandb",), "wandb")}


def _files(folder: Path) -> list[str]:
    names = []
    for kind, body in blocks(SECTION):
        name = body.splitlines()[0].removeprefix("# ").strip()
        (folder / name).write_text(body)
        names.append(name)
    return names


def test_the_section_has_the_scripts_it_names(tmp_path):
    assert _files(tmp_path) == list(NEEDS)
    assert [kind for kind, _ in blocks(SECTION)] == ["python"] * 3


@pytest.mark.slow
@pytest.mark.parametrize("script", list(NEEDS))
def test_each_script_runs_where_its_extra_is_installed(tmp_path, script):
    modules, extra = NEEDS[script]
    for module in modules:
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (pip install 'hypersack[{extra}]')")
    _files(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(command(f"python {script}"), cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, f"{script}\n{done.stdout}\n{done.stderr}"
    if script == "wandb_logged.py":
        assert len(list((tmp_path / "hypersack-runs" / "wandb" / "wandb").glob("offline-run-*"))) == 2
    else:
        assert float(done.stdout.strip().splitlines()[-1]) >= 0.0
