"""``local_cluster``'s own bookkeeping, with its start and stop stood in (no Ray, milliseconds):
bad sizes refused, a failed start retried once from scratch, its temp folder and RAY_TMPDIR
undone whatever happens. The real cluster runs in the Ray tests (conftest's ``ray_cluster``)."""
from __future__ import annotations

import os

import pytest

from hypersack.errors import ConfigError
from hypersack.runtime.executors import ray_cluster


@pytest.fixture
def stand_in(monkeypatch):
    """``_start`` records RAY_TMPDIR and fails the first ``fails`` times; ``_stop`` records."""
    record: dict = {"folders": [], "stopped": [], "fails": 0}

    def start(ray, nodes, cpus, gpus, connect, system_config):
        record["folders"].append(os.environ["RAY_TMPDIR"])
        if len(record["folders"]) <= record["fails"]:
            raise RuntimeError("a port was taken")
        return ("cluster", nodes, cpus, gpus, connect, system_config)

    monkeypatch.setattr(ray_cluster, "require_ray", lambda: None)
    monkeypatch.setattr(ray_cluster, "_start", start)
    monkeypatch.setattr(ray_cluster, "_stop", lambda ray, cluster: record["stopped"].append(cluster))
    monkeypatch.setenv("RAY_TMPDIR", "/elsewhere")
    return record


def test_a_failed_start_is_retried_once_and_everything_is_undone_after(stand_in):
    stand_in["fails"] = 1
    with ray_cluster.local_cluster(3, 2, 1, system_config={"a": 1}) as cluster:
        assert cluster == ("cluster", 3, 2, 1, True, {"a": 1})
        folder = stand_in["folders"][-1]
        assert len(stand_in["folders"]) == 2 and os.path.isdir(folder)
        assert os.path.basename(folder).startswith("hsray")
    assert stand_in["stopped"] == [cluster]
    assert not os.path.exists(folder) and os.environ["RAY_TMPDIR"] == "/elsewhere"


def test_a_second_failure_is_raised_and_everything_is_undone(stand_in):
    stand_in["fails"] = 2
    with pytest.raises(RuntimeError, match="port"):
        with ray_cluster.local_cluster():
            pass
    assert len(stand_in["folders"]) == 2 and not os.path.exists(stand_in["folders"][0])
    assert os.environ["RAY_TMPDIR"] == "/elsewhere"


@pytest.mark.parametrize("field, kwargs", [("nodes", {"nodes": 0}), ("cpus", {"cpus": -1}),
                                           ("gpus", {"gpus": 1.5})])
def test_bad_sizes_are_refused_naming_the_field(stand_in, field, kwargs):
    with pytest.raises(ConfigError, match=rf"{field} is"):
        with ray_cluster.local_cluster(**kwargs):
            pass
    assert stand_in["folders"] == []
