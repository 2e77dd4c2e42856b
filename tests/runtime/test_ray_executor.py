"""The Ray executor in a study: a node that crashes mid-study (its trials resume from their
checkpoints on another node, without a retry, steps gap-free), a node that joins (it gets
work), and bad input refused before any trial starts."""
from __future__ import annotations

import sqlite3
import sys
import threading
import time
from pathlib import Path

import pytest

from hypersack.errors import ConfigError, MissingDependencyError

from algorithm_helpers import GrowOnce


def _rows(db: Path, query: str) -> list[tuple]:
    if not db.exists():
        return []
    con = sqlite3.connect(db)
    try:
        return con.execute(query).fetchall()
    except sqlite3.OperationalError:       # tables not made yet
        return []
    finally:
        con.close()


def _wait(condition, what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.ray
@pytest.mark.slow
def test_trials_of_a_lost_node_resume_elsewhere_and_a_joining_node_gets_work(ray_cluster, tmp_path):
    from hypersack import Study
    db, gate = tmp_path / "s.db", tmp_path / "gate"
    # Every trial holds after its second report until the gate opens: no trial ends before
    # the node has joined and the other has left, whatever the load.
    study = Study({"x": {"type": "float", "low": 0.1, "high": 1.0}, "steps": 3, "hold": 2,
                   "gate": str(gate)}, ("score", "max"), name="nodes", algorithm="random",
                  n_trials=4, storage=db, trainable="ray_helpers:held_at_a_gate",
                  max_steps="steps", executor="ray")
    lost = next(iter(ray_cluster.worker_nodes))
    lost_id = lost.node_id[:12]
    ended: list = []
    runner = threading.Thread(target=lambda: ended.append(study.run(progress=False)))
    runner.start()
    try:
        # Both nodes' slots hold a trial; a node joins and gets a waiting trial (the study
        # places one there as soon as the node's agent reports its device).
        _wait(lambda: _rows(db, "SELECT 1 FROM trials t JOIN results r USING (trial_id) WHERE "
                                f"t.device LIKE '{lost_id}/%' AND r.step = 2"),
              "a durable report (and checkpoint) at step 2 on the node to be removed")
        (held,), = _rows(db, f"SELECT trial_id FROM trials WHERE device LIKE '{lost_id}/%'")
        joined = ray_cluster.add_node(num_cpus=1)
        joined_id = joined.node_id[:12]
        _wait(lambda: _rows(db, f"SELECT 1 FROM trials WHERE device LIKE '{joined_id}/%'"),
              "a trial on the joining node", timeout=150)
        # A crash (the raylet killed: no goodbye to Ray). The gate opens once the study has
        # taken the lost node's trial off it, so that trial can end nowhere else.
        ray_cluster.remove_node(lost, allow_graceful=False)
        _wait(lambda: _rows(db, f"SELECT 1 FROM trials WHERE trial_id = {held} AND "
                                "state <> 'running'"), "the lost node's trial taken off it")
    finally:
        gate.touch()
        runner.join(240)
        # The next test shares the cluster: it must not find the crashed node still listed as
        # alive (Ray declares it dead only after its missed health checks).
        import ray
        _wait(lambda: not any(n["NodeID"] == lost.node_id and n["Alive"] for n in ray.nodes()),
              "Ray to declare the crashed node dead")
    assert ended and ended[0].status == "complete"
    status = study.status()
    assert status["complete"] == 4
    assert all(t["retries"] == 0 for t in status["trials"])      # node loss charges no retry
    for t in status["trials"]:
        steps = [r["step"] for r in study.results(t["trial_id"])]
        assert steps == [1, 2, 3]                             # gap-free, no step twice
    resumed = [t for t in status["trials"] if t["metrics"]["starts"] > 1]
    assert [t["trial_id"] for t in resumed] == [held]             # from its checkpoint
    assert not resumed[0]["device"].startswith(lost_id)
    assert any(t["device"].startswith(joined_id) for t in status["trials"])


@pytest.mark.ray
@pytest.mark.slow
def test_a_trial_grown_to_two_data_parallel_workers_spans_both_nodes(ray_cluster, tmp_path):
    """RASDA's growth across nodes: each node has one CPU slot, so the grown trial's two ranks
    run on two nodes and rendezvous (gloo) at rank 0's node."""
    pytest.importorskip("torch")
    import hypersack
    space = hypersack.SearchSpace({"steps": 2})
    study = hypersack.Study(name="grow", space=space, objective=("score", "max"), n_trials=1,
                            storage=tmp_path / "s.db", executor="ray",
                            algorithm=GrowOnce(space, hypersack.Objective.parse(("score", "max")),
                                               {"steps": 2}, at_step=1))
    study.run("trainables:sums_over_ranks", progress=False)
    results = study.results(0)
    assert [r["step"] for r in results] == [1, 2]
    assert [(r["world"], r["summed"]) for r in results] == [(1, 1), (2, 2)]   # both ranks met
    trial = study.status()["trials"][0]
    assert trial["state"] == "complete" and trial["attempts"] == 1 and trial["resumes"] == 1  # grown: a resume


@pytest.mark.ray
def test_an_unreachable_address_is_refused_before_any_trial(tmp_path):
    pytest.importorskip("ray", reason="ray is not installed (pip install 'hypersack[ray]')")
    from hypersack import Study
    study = Study({"x": 0.5}, ("score", "max"), n_trials=1, storage=tmp_path / "s.db",
                  trainable="trainables:quick",
                  executor={"backend": "ray", "address": "127.0.0.1:1"})
    with pytest.raises(ConfigError, match=r"executor.address.*127.0.0.1:1.*unreachable"):
        study.run(progress=False)
    assert study.status()["total"] == 0


def test_a_missing_ray_names_the_extra(tmp_path, monkeypatch):
    from hypersack.runtime.executors.ray import require_ray
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(MissingDependencyError, match=r"hypersack\[ray\]"):
        require_ray()


def test_the_executor_option_is_checked(tmp_path):
    from hypersack import Study
    with pytest.raises(ConfigError, match="executor.backend.*'slurm'"):
        Study({"x": 0.5}, ("score", "max"), n_trials=1, executor="slurm")
    with pytest.raises(ConfigError, match="executor.address.*backend is 'local'"):
        Study({"x": 0.5}, ("score", "max"), n_trials=1,
              executor={"backend": "local", "address": "auto"})
    with pytest.raises(ConfigError, match="executor.adress"):
        Study({"x": 0.5}, ("score", "max"), n_trials=1, executor={"adress": "auto"})
    spec = Study({"x": 0.5}, ("score", "max"), n_trials=1,
                 executor={"backend": "ray", "address": "ray://head:10001"}).spec
    assert spec.to_dict()["executor"]["address"] == "ray://head:10001"
    assert "backend" not in Study({"x": 0.5}, ("score", "max"), n_trials=1).spec.to_dict()["executor"]


def test_a_node_that_cannot_serve_is_a_cluster_error_naming_it(tmp_path):
    from hypersack.runtime.executors.ray_agent import _check_storage
    check = tmp_path / "check"
    check.write_text("token-a")
    _check_storage((str(check), "token-a"))
    with pytest.raises(RuntimeError, match="shared file system"):
        _check_storage((str(check), "token-b"))
    with pytest.raises(RuntimeError, match="shared file system"):
        _check_storage((str(tmp_path / "missing"), "token-a"))


def test_a_study_file_names_the_line_of_a_bad_executor_option(tmp_path):
    from hypersack.config import load_study_file
    text = (Path(__file__).parents[2] / "examples" / "digits_ray.yaml").read_text()
    good = tmp_path / "ray.yaml"
    good.write_text(text)
    assert load_study_file(good)["executor"]["backend"] == "ray"
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("address: auto", "address: ray//head"))
    line = text.splitlines().index("  address: auto") + 1
    with pytest.raises(ConfigError, match=rf"bad.yaml:{line}: The value of executor.address is "
                                          r"'ray//head'"):
        load_study_file(bad)
