"""Every code block of README.md and the docs site (``docs/**/*.md``) is run or checked.

A block whose first line is ``# NAME.py`` (or ``# NAME.yaml``) is a file a reader saves: it is
run verbatim, either by the test named for it in ``RUN_ELSEWHERE`` or here (``RUN_HERE``), and a
new named block that is in neither fails ``test_every_named_block_is_run``. The other blocks are
fragments, checked for what they can be checked for: Python compiles; a YAML block parses, and
one that declares a whole study (``name`` and ``space``) passes the study's validation; each
``hypersack ...`` command line parses with the real command-line parser, and each
``python benchmarks/...`` or ``python examples/...`` line names a script that exists.
"""
from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from test_readme import FENCE, REPO, command, pages

# Named blocks run verbatim by other tests (the test file says which sections it runs).
RUN_ELSEWHERE = {
    "quickstart.py": "tests/test_readme.py", "mymodel.py": "tests/test_readme.py",
    "study.yaml": "tests/test_readme.py", "multi.py": "tests/test_readme.py",
    "warm_start.py": "tests/test_readme_ecosystem.py",
    "my_algorithm.py": "tests/test_readme_ecosystem.py",
    "tuned.py": "tests/test_readme_ecosystem.py", "tuned.yaml": "tests/test_readme_ecosystem.py",
    "logged.py": "tests/test_readme_ecosystem.py",
    "lit.py": "tests/test_readme_integrations.py", "hf.py": "tests/test_readme_integrations.py",
    "wandb_logged.py": "tests/test_readme_integrations.py",
}
# Named blocks this file runs: the script, and what its last line of output must hold.
RUN_HERE = {"from_ray.py": r"^\{'lr': [0-9.e-]+, 'width': (16|32|64)\}$",
            "ask_tell.py": r"^13 0\.\d+$"}


def all_blocks() -> list[tuple[Path, str, str]]:
    return [(page, m.group(1), m.group(2)) for page in pages()
            for m in FENCE.finditer(page.read_text())]


def _name(body: str) -> str | None:
    first = body.splitlines()[0] if body.strip() else ""
    match = re.fullmatch(r"# ([\w.-]+\.(py|yaml))", first.strip())
    return match.group(1) if match else None


def test_every_named_block_is_run():
    named = {_name(body) for _, _, body in all_blocks()} - {None}
    assert named, "no named example found: the block format changed?"
    unrun = named - set(RUN_ELSEWHERE) - set(RUN_HERE)
    assert not unrun, f"named examples no test runs: {sorted(unrun)}"
    for name, test in RUN_ELSEWHERE.items():
        assert (REPO / test).is_file() and name in named, (name, test)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(RUN_HERE))
def test_named_block_runs_verbatim(name, tmp_path):
    (page, _, body), = [b for b in all_blocks() if _name(b[2]) == name]
    (tmp_path / name).write_text(body)
    done = subprocess.run(command(f"python {name}"), cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)
    assert done.returncode == 0, f"{page}: {name}\n{done.stderr[-3000:]}"
    last = done.stdout.strip().splitlines()[-1]
    assert re.match(RUN_HERE[name], last), f"{page}: {name} printed {last!r}"


def test_python_fragments_compile():
    for page, kind, body in all_blocks():
        if kind == "python" and _name(body) is None:
            ast.parse(body, filename=str(page))


def test_yaml_fragments_parse_and_whole_studies_validate():
    from hypersack.core.spec import StudySpec
    for page, kind, body in all_blocks():
        if kind != "yaml":
            continue
        # a block may show alternatives of one key, one per line (algorithm: ..., algorithm: ...)
        docs = [body] if _unique_keys(body) else body.splitlines()
        for doc in docs:
            data = yaml.safe_load(doc)
            if isinstance(data, dict) and {"name", "space"} <= set(data):
                StudySpec.from_dict(data)      # raises ConfigError naming the field


def _unique_keys(body: str) -> bool:
    keys = re.findall(r"^(\w+):", body, re.M)
    return len(keys) == len(set(keys))


def _command_lines() -> list[tuple[Path, str]]:
    lines = []
    for page, kind, body in all_blocks():
        if kind not in ("bash", "text", ""):
            continue
        for raw in body.splitlines():
            line = raw.split("  #")[0].strip()
            if line and not line.startswith("#"):
                lines.append((page, line))
    return lines


def test_command_lines_parse_with_the_real_parser():
    from hypersack.cli import _parser
    checked = 0
    for page, line in _command_lines():
        words = shlex.split(line)
        if words[0].endswith("hypersack") and not any("[" in w or "..." in w for w in words):
            try:
                _parser().parse_args(words[1:])
            except SystemExit as exc:
                raise AssertionError(f"{page}: the parser refuses {line!r}") from exc
            checked += 1
        elif words[0] in ("python", "python3") and len(words) > 1 and words[1].endswith(".py"):
            assert (REPO / words[1]).is_file() or words[1] in RUN_HERE or \
                words[1] in RUN_ELSEWHERE, f"{page}: {line!r} names a missing script"
    assert checked >= 10
