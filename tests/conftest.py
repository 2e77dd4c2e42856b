"""Shared fixtures. ``tests/`` is on sys.path (and so on the spawned workers' path), which lets
studies name the trainables in ``tests/trainables.py`` as ``trainables:NAME``."""
from __future__ import annotations

import contextlib
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
    """The MPS tests' fake ``nvidia-cuda-mps-control`` first on PATH (benchmarks/gpu/fake_mps.py
    has the program); returns a function giving its recorded calls."""
    import json

    from hypersack.runtime.devices import mps as mps_module
    if str(TESTS_DIR.parent / "benchmarks" / "gpu") not in sys.path:
        sys.path.insert(0, str(TESTS_DIR.parent / "benchmarks" / "gpu"))
    from fake_mps import install

    env = install(tmp_path)
    record = Path(env["FAKE_MPS_RECORD"])
    monkeypatch.setenv("PATH", env["PATH"])
    monkeypatch.setenv("FAKE_MPS_RECORD", str(record))
    monkeypatch.setattr(mps_module, "_warned", set())

    def calls() -> list[dict]:
        return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
    return calls



# The session's Ray cluster, closed as soon as the last test of the Ray unit is done (see
# pytest_runtest_teardown below), not at the end of the session: its raylets, GCS and agents
# otherwise keep ~4% of a core busy, and their memory held, while the xdist worker that ran the
# Ray files goes on to other files for minutes.
_RAY_CLUSTER = contextlib.ExitStack()


def _unit(nodeid: str) -> str:
    """The scheduling unit of a test: its file, or ``ray-cluster`` for every Ray cluster file."""
    from ray_helpers import RAY_CLUSTER_FILES
    path = nodeid.split("::")[0]
    return "ray-cluster" if path in RAY_CLUSTER_FILES else path


@pytest.fixture(scope="session")
def ray_cluster():
    """A real local Ray cluster of two raylets, one CPU and no GPU each (``ray_helpers``: its
    shape and health-check settings), started once for the session (every Ray test file runs
    in one xdist worker, one after the other) and stopped after the last of them; the driver is
    connected. A test may add and remove nodes, as long as two live nodes of one CPU remain."""
    pytest.importorskip("ray", reason="ray is not installed (pip install 'hypersack[ray]')")
    from hypersack.runtime.executors.ray_cluster import local_cluster
    from ray_helpers import CPUS, GPUS, NODES, SYSTEM_CONFIG
    yield _RAY_CLUSTER.enter_context(local_cluster(NODES, CPUS, GPUS, system_config=SYSTEM_CONFIG))
    _RAY_CLUSTER.close()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """After the last test of the Ray unit (its module fixtures already torn down: this runs
    after pytest's own teardown), the cluster stops. The unit's tests run one after the other
    (pytest_collection_modifyitems keeps them together), so no later test asks for it again."""
    if _unit(item.nodeid) == "ray-cluster" and (nextitem is None
                                                or _unit(nextitem.nodeid) != "ray-cluster"):
        _RAY_CLUSTER.close()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile``, but the Ray test files are one unit (one xdist worker), so the
    session's one Ray cluster serves them all."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    from ray_helpers import RAY_CLUSTER_FILES

    class RayFilesTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return "ray-cluster" if scope in RAY_CLUSTER_FILES else scope

    return RayFilesTogether(config, log)


def pytest_collection_modifyitems(session, config, items):
    """Files with more ``slow`` tests (real studies, browsers, subprocesses) first, each file's
    tests kept together and in order: ``make test`` (``--dist loadfile --no-loadscope-reorder``)
    then hands the long files out first and ends on short ones, so neither xdist worker is left
    alone with a long file at the end (longest-first scheduling). Without xdist only the order
    of the files changes."""
    slow: dict[str, int] = {}
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        unit = _unit(item.nodeid)
        first.setdefault(unit, index)
        slow[unit] = slow.get(unit, 0) + (item.get_closest_marker("slow") is not None)
    # The Ray files are one unit: kept together here too, so the session cluster starts once.
    items.sort(key=lambda item: (-slow[_unit(item.nodeid)], first[_unit(item.nodeid)]))
