"""Shared fixtures. ``tests/`` is on sys.path (and so on the spawned workers' path), which lets
studies name the trainables in ``tests/trainables.py`` as ``trainables:NAME``."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "study.db"


@pytest.fixture
def subprocess_env() -> dict[str, str]:
    """Environment for CLI subprocesses: can import hypersack and tests/trainables.py."""
    env = dict(os.environ)
    root = str(TESTS_DIR.parent)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), root, env.get("PYTHONPATH", "")])
    return env
