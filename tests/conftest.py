"""Shared fixtures. ``tests/`` is on sys.path (and so on the spawned workers' path), which lets
studies name the trainables in ``tests/trainables.py`` as ``trainables:NAME``."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# One intra-op thread per test process (and its children), set before anything imports torch:
# the suite runs two test processes on two cores, and torch's default of a thread per core
# oversubscribes them; its OpenMP threads then spin, burning CPU: 30x on the tiny models of
# tests/workloads under load. Worker slots set their own OMP_NUM_THREADS.
os.environ.setdefault("OMP_NUM_THREADS", "1")

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


@pytest.fixture
def fake_mps(tmp_path, monkeypatch):
    """The MPS tests' fake ``nvidia-cuda-mps-control`` first on PATH (tests/runtime/test_mps.py
    has the program); returns a function giving its recorded calls."""
    import json

    from hypersack.runtime import mps as mps_module
    if str(TESTS_DIR / "runtime") not in sys.path:
        sys.path.insert(0, str(TESTS_DIR / "runtime"))
    from test_mps import FAKE

    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "nvidia-cuda-mps-control"
    script.write_text(FAKE.format(python=sys.executable))
    script.chmod(0o755)
    record = tmp_path / "calls.jsonl"
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_MPS_RECORD", str(record))
    monkeypatch.setattr(mps_module, "_warned", set())

    def calls() -> list[dict]:
        return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
    return calls



@pytest.fixture(scope="module")
def ray_cluster():
    """A real local Ray cluster of two raylets (1 CPU and 2 fake GPUs each; see
    ``ray_helpers.local_cluster``), shared by a test module; the driver is connected."""
    pytest.importorskip("ray", reason="ray is not installed (pip install 'hypersack[ray]')")
    from ray_helpers import local_cluster
    with local_cluster(num_cpus=1, num_gpus=2) as cluster:
        yield cluster
