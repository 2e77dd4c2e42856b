"""The README's quick start, run verbatim: every code block of its "Quick start" section.

``section(title)`` finds a ``## title`` section in README.md or in a page of the docs site
(``docs/**/*.md``): the other example tests read their sections through it, wherever a page
keeps them.

Blocks whose first line is ``# NAME`` (python, yaml) are written to NAME in a fresh folder; each
line of a bash block is then run there as a newcomer would type it (``python`` and ``hypersack``
are this interpreter and ``python -m hypersack``), with only the repository on PYTHONPATH.
"""
from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def section(title: str, page: Path | None = None) -> str:
    for path in [page] if page else pages():
        text = "\n" + path.read_text()
        start = text.find(f"\n## {title}\n")
        if start != -1:
            end = text.find("\n## ", start + 1)
            return text[start:end if end != -1 else None]
    raise AssertionError(f"no section '## {title}' in README.md or docs/")


def blocks(title: str, page: Path | None = None) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(section(title, page))]


def command(line: str) -> list[str]:
    words = shlex.split(line)
    if words[0] == "python":
        return [sys.executable, *words[1:]]
    if words[0] == "hypersack":
        return [sys.executable, "-m", "hypersack", *words[1:]]
    raise AssertionError(f"the quick start runs an unexpected command: {line!r}")


def test_the_readme_quick_start_is_the_tutorial_s():
    """README.md and the first tutorial show one quick start: running one runs both."""
    tutorial = REPO / "docs" / "tutorials" / "first-study.md"
    assert blocks("Quick start", REPO / "README.md") == blocks("Quick start", tutorial)


def test_quick_start_blocks_are_files_and_commands():
    kinds = [kind for kind, _ in blocks("Quick start")]
    assert kinds == ["python", "python", "yaml", "bash"]
    names = [body.splitlines()[0] for kind, body in blocks("Quick start") if kind != "bash"]
    assert names == ["# quickstart.py", "# mymodel.py", "# study.yaml"]


# Commands that only read the store: run through the console entry point in this process, from
# the folder (``hypersack run`` and ``python`` lines, which start workers, are subprocesses).
READ_COMMANDS = {"best", "status"}


def _in_process(folder: Path, capsys, args: list[str]) -> tuple[int, str, str]:
    from hypersack._entry import main
    here = os.getcwd()
    os.chdir(folder)
    try:
        capsys.readouterr()
        code = main(args)
    finally:
        os.chdir(here)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.slow
def test_quick_start_runs_verbatim(tmp_path, capsys):
    for kind, body in blocks("Quick start"):
        if kind != "bash":
            (tmp_path / body.splitlines()[0].removeprefix("# ").strip()).write_text(body)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    outputs = {}
    for kind, body in blocks("Quick start"):
        if kind != "bash":
            continue
        for line in filter(None, (raw.strip() for raw in body.splitlines())):
            words = shlex.split(line)
            if words[0] == "hypersack" and words[1] in READ_COMMANDS:
                code, out, err = _in_process(tmp_path, capsys, words[1:])
            else:
                done = subprocess.run(command(line), cwd=tmp_path, env=env, capture_output=True,
                                      text=True, timeout=300)
                code, out, err = done.returncode, done.stdout, done.stderr
            assert code == 0, f"{line}\n{out}\n{err}"
            outputs[line] = out
    best = outputs["python quickstart.py"].strip().splitlines()[-1]
    assert best.startswith("{'trial_id': ") and "'metric': 'loss'" in best
    assert "Best trial of 'yaml-quickstart'" in outputs["hypersack best yaml-quickstart"]
    assert "yaml-quickstart" in outputs["hypersack status yaml-quickstart"]
    code, out, err = _in_process(tmp_path, capsys, ["status", "yaml-quickstart", "--json"])
    assert code == 0, err
    info = json.loads(out)
    assert info["total"] == 8 and info["complete"] >= 1      # ASHA's best trial trains to the end
    assert info["best"]["metric"] == "loss"


def test_the_intro_and_the_demo_commands_tell_the_truth():
    """Ray is built; right after ``make demo`` the demo's own next command must not be refused
    ("already exists"); ``help(Study)`` names the run folder as it is made."""
    import hypersack
    intro = (REPO / "README.md").read_text().split("\n## ")[0]
    assert "Ray" in intro and "Ray comes next" not in intro
    assert len((REPO / "README.md").read_text().splitlines()) <= 260   # a short README
    demo = [line for kind, body in blocks("The demo study") for line in body.splitlines()
            if " run examples/digits.yaml" in line]
    assert demo and all("--replace" in line or "--resume" in line for line in demo)
    assert "hypersack-runs/<name>-<id>/" in hypersack.Study.__doc__


@pytest.mark.slow
def test_the_multi_objective_example_runs_verbatim_and_prints_its_front(tmp_path):
    (kind, body), = blocks("Multi-objective")
    assert kind == "python" and body.splitlines()[0] == "# multi.py"
    (tmp_path / "multi.py").write_text(body)
    done = subprocess.run(command("python multi.py"), cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = [line.split(" ", 1) for line in done.stdout.strip().splitlines()[-8:]
            if re.match(r"^\d+ \{'loss'", line)]
    assert rows
    values = [ast.literal_eval(v) for _, v in rows]     # dicts printed by the snippet
    for v in values:                                 # none beats another in both objectives
        assert not any(o["loss"] <= v["loss"] and o["latency_ms"] <= v["latency_ms"] and o != v
                       for o in values)
    ids = [int(i) for i, _ in rows]
    assert ids == sorted(ids)
