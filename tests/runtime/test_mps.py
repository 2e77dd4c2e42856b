"""MPS control with a fake ``nvidia-cuda-mps-control`` first on PATH.

The fake records every invocation (JSON lines in $FAKE_MPS_RECORD). ``-d`` forks a background
"daemon" (the same script with ``--serve``) that creates ``$CUDA_MPS_PIPE_DIRECTORY/control`` and
lives until a ``quit`` arrives; $FAKE_MPS_MODE=refuse makes ``-d`` fail as without permission,
=deaf makes the daemon ignore ``quit`` (it must then be killed).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from hypersack.errors import ConfigError, HyperSackError
from hypersack.runtime.devices import mps as mps_module
from hypersack.runtime.devices.mps import MpsDaemon, MpsUnavailableWarning

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MPS is Linux-only")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "gpu"))
from fake_mps import FAKE  # noqa: E402, F401  (the program: benchmarks/gpu/fake_mps.py)


def wait_until(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_start_env_and_quit_on_exit(fake_mps, tmp_path):
    study = tmp_path / "hypersack-runs" / "s"
    with MpsDaemon(study, timeout_s=5) as daemon:
        assert daemon.active
        pipe = study.resolve() / "mps" / "pipe"
        assert (pipe / "control").exists()
        assert daemon._daemon_pids()                      # the fake daemon is found by its env
        lock = json.loads(daemon.lock_file.read_text())
        assert lock["owner_pid"] == os.getpid()
        env = daemon.env_for(33.4)
        assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "34"
        assert env["CUDA_MPS_LOG_DIRECTORY"] == str(study.resolve() / "mps" / "log")
        assert Path(env["CUDA_MPS_PIPE_DIRECTORY"]).resolve() == pipe
    assert not daemon.active
    assert [c["what"] for c in fake_mps()] == ["start", "quit"]
    assert all(c["pipe"] == env["CUDA_MPS_PIPE_DIRECTORY"] for c in fake_mps())
    assert not (pipe / "control").exists()
    assert not daemon.lock_file.exists()
    assert daemon._daemon_pids() == []
    daemon.stop()                                          # idempotent
    assert len(fake_mps()) == 2


def test_quit_on_ctrl_c(fake_mps, tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with MpsDaemon(tmp_path / "s", timeout_s=5) as daemon:
            raise KeyboardInterrupt
    assert [c["what"] for c in fake_mps()] == ["start", "quit"]
    assert daemon._daemon_pids() == []


def test_stale_daemon_of_a_crashed_run_is_cleaned(fake_mps, tmp_path):
    crashed = MpsDaemon(tmp_path / "s", timeout_s=5)
    assert crashed.start()
    stale_pids = crashed._daemon_pids()
    # the driver "dies": its lock names a process that no longer exists, nothing was quit
    dead = subprocess.Popen(["true"])
    dead.wait()
    lock = json.loads(crashed.lock_file.read_text())
    crashed.lock_file.write_text(json.dumps({**lock, "owner_pid": dead.pid}))
    crashed.active = False

    with MpsDaemon(tmp_path / "s", timeout_s=5) as fresh:
        assert fresh.active
        assert not set(stale_pids) & set(fresh._daemon_pids())   # the old daemon is gone
        assert json.loads(fresh.lock_file.read_text())["owner_pid"] == os.getpid()
    assert [c["what"] for c in fake_mps()] == ["start", "quit", "start", "quit"]


def test_daemon_deaf_to_quit_is_killed(fake_mps, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_MPS_MODE", "deaf")
    daemon = MpsDaemon(tmp_path / "s", timeout_s=60)    # the fake is a Python program: its
    assert daemon.start()                                 # start takes seconds at load 20
    pids = daemon._daemon_pids()
    assert pids
    daemon.timeout_s = 0.5                 # the quit it ignores is waited for 0.5 s, then kill
    daemon.stop()
    assert wait_until(lambda: daemon._daemon_pids() == [])
    assert not (daemon.pipe_dir / "control").exists()


def test_lock_of_a_live_owner_is_refused(fake_mps, tmp_path):
    root = (tmp_path / "s").resolve() / "mps"
    root.mkdir(parents=True)
    (root / "daemon.json").write_text(json.dumps({"owner_pid": 424242}))
    daemon = MpsDaemon(tmp_path / "s", timeout_s=1, pid_alive=lambda pid: True)
    with pytest.raises(HyperSackError, match="already running"):
        daemon.start()


def test_refused_daemon_falls_back_with_one_warning(fake_mps, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_MPS_MODE", "refuse")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = MpsDaemon(tmp_path / "s", timeout_s=1)
        assert first.start() is False
        assert MpsDaemon(tmp_path / "s", timeout_s=1).start() is False   # same study: no repeat
        assert first.env_for(50) == {}
    mps_warnings = [w for w in caught if issubclass(w.category, MpsUnavailableWarning)]
    assert len(mps_warnings) == 1
    assert "Insufficient Permissions" in str(mps_warnings[0].message)
    assert "time-sliced" in str(mps_warnings[0].message)
    assert "Insufficient Permissions" in first.reason


def test_missing_binary_falls_back(tmp_path, monkeypatch):
    monkeypatch.setattr(mps_module, "_warned", set())
    with pytest.warns(MpsUnavailableWarning, match="not on PATH"):
        daemon = MpsDaemon(tmp_path / "s", binary="no-such-mps-control-binary")
        assert daemon.start() is False
    assert not daemon.active and daemon.env_for(100) == {}
    daemon.stop()


def test_long_study_path_uses_a_short_symlink(fake_mps, tmp_path):
    study = tmp_path / ("very-long-study-directory-name-" * 4) / "s"
    with MpsDaemon(study, timeout_s=5) as daemon:
        pipe_env = daemon.env_for(10)["CUDA_MPS_PIPE_DIRECTORY"]
        assert len(pipe_env) <= 80
        assert Path(pipe_env).resolve() == daemon.pipe_dir
        assert daemon._daemon_pids()
    assert not Path(pipe_env).exists()


@pytest.mark.parametrize("share", [0, -5, 101, float("nan"), True, "50"])
def test_env_for_validates_the_share(share, tmp_path):
    with pytest.raises(ConfigError, match="compute_share"):
        MpsDaemon(tmp_path).env_for(share)


# ---- a study's machine: GPUs from (fake) NVML, MPS when trials share them ------------------------

def _spec(**extra):
    from hypersack.core.spec import StudySpec
    return StudySpec.from_dict({"name": "s", "space": {"x": 1.0}, "objective": {"metric": "score", "mode": "max"},
                                "budget": {"trials": 1}, **extra})


def _nvml():
    from hypersack.runtime.devices.nvml import FakeNvml
    return FakeNvml([("NVIDIA H100 80GB HBM3", 79.6), ("NVIDIA A100-SXM4-40GB", 39.4)])


def test_gpus_sharing_a_study_get_one_mps_daemon_and_thread_percentages(fake_mps, tmp_path, monkeypatch):
    from hypersack.runtime.devices.machine import prepare_machine
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with prepare_machine(_spec(), tmp_path / "runs" / "s", tmp_path / "s.db", trainable_name="t",
                         nvml=_nvml()) as machine:
        assert [(s.key, s.env["CUDA_VISIBLE_DEVICES"]) for s in machine.slots] == [("gpu0", "0"), ("gpu1", "1")]
        ratios = {g.arch: g.oversubscription for _, g in machine.cluster.gpus()}
        assert ratios == {"H100": 2.5, "A100": 3.0}          # the paper's profiled defaults
        env = machine.share_env(machine.slots[0], 30.0)
        assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "30"
        pipe = env["CUDA_MPS_PIPE_DIRECTORY"]      # short fallback when tmp_path is too long
        assert pipe.endswith("mps/pipe") or "/hs-mps-" in pipe
        assert machine.device_events is not None and machine.device_events() == []
    assert [c["what"] for c in fake_mps()] == ["start", "quit"]


@pytest.mark.parametrize("placement", ["exclusive", {"policy": "exclusive"}])
def test_exclusive_placement_starts_no_mps_and_a_ratio_applies_to_every_gpu(fake_mps, tmp_path,
                                                                            monkeypatch, placement):
    from hypersack.runtime.devices.machine import prepare_machine
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with prepare_machine(_spec(placement=placement, oversubscription=2), tmp_path / "runs" / "s",
                         tmp_path / "s.db", trainable_name="t", nvml=_nvml()) as machine:
        assert {g.oversubscription for _, g in machine.cluster.gpus()} == {2.0}
        assert machine.share_env is None
    assert fake_mps() == []


def test_without_mps_gpus_are_shared_by_time_slicing_with_one_warning(tmp_path, monkeypatch):
    from hypersack.runtime.devices.machine import prepare_machine
    monkeypatch.setenv("PATH", str(tmp_path))            # no nvidia-cuda-mps-control anywhere
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(mps_module, "_warned", set())
    with pytest.warns(MpsUnavailableWarning):
        with prepare_machine(_spec(), tmp_path / "runs" / "s", tmp_path / "s.db", trainable_name="t",
                             nvml=_nvml()) as machine:
            assert machine.share_env is None and len(machine.slots) == 2
