"""Checks 0-3 of the GPU suite: detection, NVML inventory and monitor, MPS, Profiler profiles."""
from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from gpu_common import (CheckFailed, _last_line, nvml_source, python_env, torch_device)

# ---- check 0: what is here ---------------------------------------------------------------------

def check_detect(plan: dict, work: Path) -> dict:
    """Device name and driver as NVML reports them, CUDA as torch sees it."""
    import torch
    figures: dict[str, Any] = {"torch": torch.__version__, "cuda_available":
                               torch.cuda.is_available(), "python": platform.python_version(),
                               "host": platform.node()}
    figures["cuda_runtime"] = torch.version.cuda
    if plan["device"] == "cuda" and not torch.cuda.is_available():
        raise CheckFailed("torch.cuda.is_available() is False: install a CUDA build of torch "
                          "or run with --device cpu")
    source = nvml_source(plan)
    try:
        devices = source.snapshot()
        module = source.module
        driver = getattr(module, "nvmlSystemGetDriverVersion", None)
        figures["driver"] = _text(driver()) if driver else "FakeNvml"
    finally:
        source.close()
    if not devices:
        raise CheckFailed("NVML sees no GPU")
    figures["device_name"] = devices[0].name
    figures["devices"] = [{"index": d.index, "name": d.name, "memory_gb":
                           round(d.memory_total_gb, 1)} for d in devices]
    return {"figures": figures}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# ---- check 1: NVML inventory and the monitor ---------------------------------------------------

def check_nvml_monitor(plan: dict, work: Path) -> dict:
    from hypersack.runtime.devices.inventory import cluster_from_nvml
    from hypersack.runtime.devices.monitor import DeviceMonitor
    source = nvml_source(plan)
    try:
        cluster = cluster_from_nvml(source, node_id="local")
        gpus = [{"id": g.id, "arch": g.arch, "memory_gb": round(g.memory_gb, 1),
                 "oversubscription": g.oversubscription} for _, g in cluster.gpus()]
        if not gpus:
            raise CheckFailed("the inventory holds no GPU (CUDA_VISIBLE_DEVICES hides them?)")
        monitor = DeviceMonitor(source, "local", interval_s=0.25, initial=source.snapshot())
        with monitor:
            seconds = _run_monitored_job(plan, source)
        report = monitor.report()
    finally:
        source.close()
    gpu_id = gpus[0]["id"]
    summary = report.get(gpu_id, {})
    figures = {"inventory": gpus, "job_s": round(seconds, 1), "samples": summary.get("samples"),
               "mean_utilization": summary.get("mean_utilization"),
               "max_utilization": summary.get("max_utilization"),
               "peak_memory_gb": summary.get("peak_memory_gb"), "poll_errors": monitor.errors}
    if not summary or summary["samples"] < 3:
        raise CheckFailed(f"the monitor took {summary.get('samples', 0)} samples of {gpu_id} "
                          f"during a {seconds:.1f} s job (expected >= 3)")
    if not summary["max_utilization"]:
        raise CheckFailed(f"the monitor saw no utilisation on {gpu_id} while a job trained")
    return {"figures": figures}


_TRAIN_FOR = """
import json, sys, time, torch
from hypersack.runtime.worker.trainable import resolve_reference
from hypersack.runtime.worker.context import TrialContext
from hypersack.runtime.devices.profiler import NullProfiler
name, config, device, seconds = {name!r}, {config!r}, {device!r}, {seconds!r}
class Channel:
    def __init__(self): self.start = time.time()
    def send(self, message): pass
    def request(self, message): pass
    def stop_requested(self): return time.time() - self.start > seconds
ctx = TrialContext(trial_id=0, seed=0, device=device, attempt=1, trial_dir={trial_dir!r},
                   channel=Channel())
import os
share = os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
try:
    resolve_reference(name)(dict(config, epochs=10**6), ctx)
except BaseException as exc:
    if type(exc).__name__ != "TrialStopped":
        raise
print(json.dumps({{"share": share, "pid": os.getpid(),
                   "cuda": torch.cuda.is_available() and device.startswith("cuda")}}))
"""


def train_for_code(plan: dict, seconds: float, trial_dir: Path, name: str = "resnet18_cifar") -> str:
    """Python source that trains workload ``name`` for about ``seconds`` (stops at an epoch end)."""
    config = dict(plan["workloads"][name], train_size=min(plan["workloads"][name].get(
        "train_size", 512), 512 if plan["mode"] != "tiny" else 16))
    return _TRAIN_FOR.format(name=name, config=config, device=torch_device(plan),
                             seconds=seconds, trial_dir=str(trial_dir))


def _run_monitored_job(plan: dict, source: Any) -> float:
    """Train for ``monitor_job_s`` in a subprocess (with a FakeNvml, mirror it as load)."""
    import threading
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen([sys.executable, "-c", train_for_code(
            plan, plan["monitor_job_s"], Path(tmp))], env=python_env(), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        stop = threading.Event()
        if plan["fake_nvml"]:
            fake = source.module
            uuid = fake.devices[0].uuid

            def mirror() -> None:      # the fake GPU is "busy" while the job's process lives
                while not stop.wait(0.05):
                    fake.set_load(uuid, utilization=90.0, memory_used_gb=1.5,
                                  processes={proc.pid: 2**30})
                fake.set_load(uuid, utilization=0.0, memory_used_gb=0.0, processes={})
            threading.Thread(target=mirror, daemon=True).start()
        out, err = proc.communicate(timeout=plan["monitor_job_s"] + 120)
        stop.set()
    if proc.returncode != 0:
        raise CheckFailed(f"the monitored training job failed: {_last_line(err)}")
    return time.perf_counter() - start


# ---- check 2: MPS ------------------------------------------------------------------------------

def check_mps(plan: dict, work: Path) -> dict:
    from hypersack.runtime.devices.mps import MPS_CONTROL, MpsDaemon, MpsUnavailableWarning
    if shutil.which(MPS_CONTROL) is None:
        raise CheckFailed(f"{MPS_CONTROL} is not on PATH: MPS cannot be tested here")
    figures: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MpsUnavailableWarning)
        daemon = MpsDaemon(work / "study", timeout_s=20)
        if not daemon.start():
            raise CheckFailed(f"the MPS daemon did not start: {daemon.reason}")
        try:
            figures["daemon_pids_at_start"] = len(daemon._daemon_pids())
            figures["trials"], figures["pids_while_running"] = _colocated(plan, daemon, work)
        finally:
            daemon.stop()
        figures["pids_after_stop"] = len(daemon._daemon_pids())
        figures["control_socket_left"] = (daemon.pipe_dir / "control").exists()
        figures["stale_recovered"] = _stale_recovery(work / "crashed")
        figures["fallback"] = _refused(work)
    shares = sorted(t["share"] for t in figures["trials"])
    problems = []
    if shares != ["50", "50"]:
        problems.append(f"trials got CUDA_MPS_ACTIVE_THREAD_PERCENTAGE {shares}, not 50 each")
    if plan["device"] == "cuda" and figures["pids_while_running"] < 2:
        problems.append("no MPS server appeared while two CUDA trials ran (clients not on MPS)")
    if figures["pids_after_stop"] or figures["control_socket_left"]:
        problems.append("the daemon was not stopped cleanly")
    if not figures["stale_recovered"]:
        problems.append("a stale daemon of a crashed run was not cleaned up by the next start")
    if not figures["fallback"]["ok"]:
        problems.append(f"refused MPS did not fall back to time slicing: {figures['fallback']}")
    if problems:
        raise CheckFailed("; ".join(problems))
    return {"figures": figures}


def _colocated(plan: dict, daemon: Any, work: Path) -> tuple[list[dict], int]:
    """Two trials at 50% each through the daemon's env; the MPS processes seen meanwhile."""
    env = python_env(daemon.env_for(50.0))
    procs = [subprocess.Popen([sys.executable, "-c", train_for_code(
        plan, plan["mps_job_s"], work / f"trial{i}")], env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True) for i in range(2)]
    seen = 0
    while any(p.poll() is None for p in procs):
        seen = max(seen, len(daemon._daemon_pids()))
        time.sleep(0.1)
    results = []
    for p in procs:
        out, err = p.communicate()
        if p.returncode != 0:
            raise CheckFailed(f"a co-located trial failed under MPS: {_last_line(err)}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results, seen


def _stale_recovery(study: Path) -> bool:
    """Start a daemon, 'crash' its owner (the lock names a dead pid), start again."""
    from hypersack.runtime.devices.mps import MpsDaemon
    crashed = MpsDaemon(study, timeout_s=20)
    if not crashed.start():
        return False
    stale = set(crashed._daemon_pids())
    dead = subprocess.Popen(["true"])
    dead.wait()
    lock = json.loads(crashed.lock_file.read_text())
    crashed.lock_file.write_text(json.dumps({**lock, "owner_pid": dead.pid}))
    crashed.active = False
    fresh = MpsDaemon(study, timeout_s=20)
    try:
        started = fresh.start()
        return started and not (stale & set(fresh._daemon_pids()))
    finally:
        fresh.stop()


def _refused(work: Path) -> dict:
    """A control program that refuses (as without permission): start() falls back."""
    from hypersack.runtime.devices.mps import MpsDaemon
    refusing = work / "refusing-mps-control"
    refusing.write_text("#!/bin/sh\necho 'Insufficient Permissions' >&2\nexit 1\n")
    refusing.chmod(0o755)
    daemon = MpsDaemon(work / "refused", binary=str(refusing), timeout_s=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        started = daemon.start()
    return {"ok": started is False and daemon.env_for(50.0) == {} and bool(daemon.reason),
            "reason": daemon.reason}


# ---- check 3: profiles -------------------------------------------------------------------------

def check_profiles(plan: dict, work: Path) -> dict:
    from hypersack.runtime.devices.profile_trainable import profile_trainable
    from hypersack.runtime.worker.trainable import resolve_reference
    rows = {}
    for name, config in plan["workloads"].items():
        profile = profile_trainable(resolve_reference(name), dict(config, epochs=10**6),
                                    n_iters=plan["profile_iters"], device=torch_device(plan))
        rows[name] = {"time_per_iter_ms": round(profile.time_per_iter_s * 1e3, 2),
                      "peak_memory_gb": round(profile.peak_memory_gb, 3),
                      "gpu_util_percent": profile.gpu_util_percent,
                      "iters_measured": profile.iters_measured, "arch": profile.device_arch}
    missing = [n for n, r in rows.items() if r["iters_measured"] < plan["profile_iters"]]
    if missing:
        raise CheckFailed(f"too few iterations profiled for {missing}")
    if plan["device"] == "cuda" and any(r["gpu_util_percent"] is None for r in rows.values()):
        raise CheckFailed("no GPU utilisation in the profiles: is nvidia-ml-py installed "
                          "(pip install 'hypersack[gpu]')?")
    return {"figures": rows}


