"""Every GPU path of HyperSack in one command, with the headline figures (issue 17).

    python benchmarks/gpu_suite.py --out DIR [--quick] [--only 1,4] [--save-results]
    python benchmarks/gpu_suite.py --out DIR --device cpu --tiny     # the suite's logic on CPU

Checks, each in its own process group with a hard time limit (a check that overruns is
interrupted, then killed, and fails with "timed out after N s"; a check that crashes fails with
its last error line):

1. ``nvml_monitor``: NVML inventory (``NvmlSource``, ``cluster_from_nvml``: names, memory, the
   architecture's default oversubscription) and the ``DeviceMonitor`` sampling utilisation while a
   ResNet-18 trains in another process.
2. ``mps``: ``MpsDaemon`` start, two co-located trials with ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``
   (each reports the share it got; on a GPU the MPS server must appear), clean stop (no daemon
   process left), recovery of a stale daemon left by a "crashed" run, and the time-slicing
   fallback when MPS is refused.
3. ``profiles``: the Sampler (``profile_trainable``) on each workload: time per iteration, peak
   memory, GPU utilisation.
4. ``sp3_makespan``: an SP3-like study (ResNet-18, ``--trials`` trials of a few seconds each,
   random search over lr, batch size and optimizer) run by ``hypersack.Study`` under
   ``exclusive`` and under ``wfd`` at each oversubscription r with MPS, and at r = 2.5 with time
   slicing only (MPS off); makespan and speed-up against exclusive. Goal: >= 4x with MPS.
5. ``fusion``: for each workload and N, model-steps/s and peak memory of a fused pack
   (``hypersack.fusion.Pack``), of N models in one Python loop and of N concurrent processes
   (one model each); sizes that ``measure_member_memory`` says cannot fit are skipped. Then a
   fused study end to end against a separate one (``execution: fused`` vs ``separate``).
   Goal: fused >= 10x one-process-per-trial at N >= 32 for the image models.
6. ``oom_retry``: two trials that each hold 60% of the device are co-located; the one that runs
   out of memory is retried (the job history raises its demand) and runs alone.
7. ``data_parallel``: one trial on two ranks (RASDA with two devices per trial): NCCL across two
   GPUs, gloo on one GPU (two slots on the same GPU, ``HYPERSACK_DIST_BACKEND=gloo``), gloo on CPU.

Writes ``DIR/gpu_results.json`` (``device_name`` as NVML reports it, driver, date, every check's
figures, goals and pass/fail) and ``DIR/gpu_results.md``, and prints the Markdown table last.
``--save-results`` also copies the JSON to ``benchmarks/results/gpu-<device>-<date>.json``.
Budgets on one H100: full under 20 minutes, ``--quick`` under 8. ``--device cpu`` runs every
check on the CPU with an in-memory FakeNvml (and whatever ``nvidia-cuda-mps-control`` is on PATH:
the tests put a fake one there); ``--tiny`` shrinks every shape so the whole suite takes seconds.
No network is needed: the data is synthetic.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SCHEMA = "hypersack.gpu_suite/1"
CHECK_NAMES = {0: "detect", 1: "nvml_monitor", 2: "mps", 3: "profiles", 4: "sp3_makespan",
               5: "fusion", 6: "oom_retry", 7: "data_parallel"}
WORKLOADS = ("resnet18_cifar", "mobilenet_v3_small", "gpt_lm")
SMALL_MODELS = ("resnet18_cifar", "mobilenet_v3_small")


class CheckFailed(Exception):
    """A check ran and found something wrong; the message is the reason shown in the table."""


# ---- plans: every size the checks use ----------------------------------------------------------

_IMAGES_TINY = {"train_size": 16, "val_size": 8, "image_size": 8, "batch_size": 8, "width": 2}
_GPT_TINY = {"train_size": 16, "val_size": 4, "seq_len": 6, "vocab": 32, "width": 8, "layers": 1,
             "heads": 2, "batch_size": 4}


def workload_configs(tiny: bool) -> dict[str, dict[str, Any]]:
    """Per workload, the config profiled and fused (architecture and data fixed)."""
    if tiny:
        return {"resnet18_cifar": dict(_IMAGES_TINY), "mobilenet_v3_small": dict(_IMAGES_TINY),
                "gpt_lm": dict(_GPT_TINY)}
    return {"resnet18_cifar": {"width": 64, "batch_size": 32, "train_size": 4096},
            "mobilenet_v3_small": {"width": 16, "batch_size": 32, "train_size": 4096},
            "gpt_lm": {"width": 256, "layers": 6, "heads": 8, "vocab": 50304, "seq_len": 128,
                       "batch_size": 8, "train_size": 512, "val_size": 8}}


def make_plan(mode: str, device: str) -> dict[str, Any]:
    """Sizes and time limits (seconds) for ``mode`` in tiny | quick | full."""
    tiny = mode == "tiny"
    plan: dict[str, Any] = {
        "mode": mode, "device": device, "fake_nvml": device == "cpu",
        "workloads": workload_configs(tiny),
        "monitor_job_s": 2.0 if tiny else 8.0,
        "mps_job_s": 1.0 if tiny else 4.0,
        "profile_iters": 3 if tiny else 10,
        "sp3": {"trials": 2 if tiny else (8 if mode == "quick" else 16),
                "epochs": 1 if tiny else 2,
                "trial_s": 0 if tiny else (3.0 if mode == "quick" else 6.0),
                "ratios": [2.0] if tiny else ([2.5, 4.0] if mode == "quick"
                                             else [1.0, 2.0, 2.5, 3.0, 4.0]),
                "time_slicing_ratio": 2.0 if tiny else 2.5,
                "workers": 1 if device == "cpu" else None},
        "fusion": {"workloads": ["gpt_lm"] if tiny else (list(SMALL_MODELS) if mode == "quick"
                                                         else list(WORKLOADS)),
                   "n": [1, 2] if tiny else ([32] if mode == "quick" else [1, 8, 32, 64]),
                   "steps": 2 if tiny else (10 if mode == "quick" else 15),
                   "warmup": 1 if tiny else 3, "procs_max_n": 2 if tiny else 32,
                   "memory_fraction": 0.85,
                   "study": {"trials": 2 if tiny else (16 if mode == "quick" else 32),
                             "epochs": 1 if tiny else 2, "max_members": 2 if tiny else 16,
                             "workers": 1 if device == "cpu" else None}},
        "oom": {"fraction": 0.6, "steps": 3, "step_s": 0.3 if tiny else 1.0,
                "workers": 1 if device == "cpu" else None},
        "dp": {"epochs": 1 if tiny else 2},
    }
    if tiny:
        plan["workloads"]["resnet18_cifar"]["train_size"] = 16
    # Hard caps: their sum bounds the whole run (full < 20 min, quick < 8 min on one GPU).
    limits = {"tiny": {0: 60, 1: 60, 2: 90, 3: 90, 4: 240, 5: 400, 6: 120, 7: 120},
              "quick": {0: 30, 1: 35, 2: 40, 3: 45, 4: 120, 5: 150, 6: 30, 7: 25},
              "full": {0: 40, 1: 50, 2: 50, 3: 90, 4: 380, 5: 480, 6: 45, 7: 50}}[mode]
    plan["limits"] = {str(k): v for k, v in limits.items()}
    return plan


# ---- small helpers -----------------------------------------------------------------------------

def torch_device(plan: dict) -> str:
    return "cuda:0" if plan["device"] == "cuda" else "cpu"


def nvml_source(plan: dict) -> Any:
    """An open NvmlSource: the real NVML on a GPU, a FakeNvml H100 with ``--device cpu``."""
    from hypersack.runtime.nvml import FakeNvml, NvmlSource
    if plan["fake_nvml"]:
        return NvmlSource(FakeNvml([("NVIDIA H100 80GB HBM3 (FakeNvml)", 79.6)])).open()
    return NvmlSource().open()


def python_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT), env.get("PYTHONPATH", "")] if p)
    env.update(extra or {})
    return env


def run_python(code: str, env: dict[str, str] | None = None, timeout: float = 120) -> Any:
    """Run ``code`` in a fresh interpreter; its last stdout line parsed as JSON."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=python_env(env), timeout=timeout)
    if done.returncode != 0:
        raise CheckFailed(f"subprocess failed: {_last_line(done.stderr)}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


@contextlib.contextmanager
def in_dir(path: Path) -> Iterator[Path]:
    """Run with ``path`` (created) as the working directory: studies put their trials there."""
    path.mkdir(parents=True, exist_ok=True)
    old = os.getcwd()
    os.chdir(path)
    try:
        yield path
    finally:
        os.chdir(old)


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
    from hypersack.runtime.inventory import cluster_from_nvml
    from hypersack.runtime.monitor import DeviceMonitor
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
from hypersack.runtime.trainable import resolve_reference
from hypersack.runtime.context import TrialContext
from hypersack.runtime.profiler import NullSampler
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
    from hypersack.runtime.mps import MPS_CONTROL, MpsDaemon, MpsUnavailableWarning
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
    from hypersack.runtime.mps import MpsDaemon
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
    from hypersack.runtime.mps import MpsDaemon
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
    from hypersack.runtime.profiler import profile_trainable
    from hypersack.runtime.trainable import resolve_reference
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


# ---- check 4: makespan of an SP3-like study ----------------------------------------------------

def sp3_space(plan: dict, train_size: int) -> dict[str, Any]:
    base = dict(plan["workloads"]["resnet18_cifar"])
    base.update(train_size=train_size, epochs=plan["sp3"]["epochs"])
    base.pop("batch_size")
    space: dict[str, Any] = dict(base)
    space["lr"] = {"type": "float", "low": 0.001, "high": 0.1, "log": True}
    space["optimizer"] = {"type": "categorical", "choices": ["sgd", "adam"]}
    batches = [8] if plan["mode"] == "tiny" else [32, 64, 128]
    space["batch_size"] = {"type": "categorical", "choices": batches}
    return space


def calibrate_train_size(plan: dict) -> int:
    """Training samples for one SP3 trial to last about ``trial_s`` seconds alone (batch 64).

    Profiled in a child process: this process must hold no CUDA context of its own while the
    studies' MPS daemons serve their trials."""
    if not plan["sp3"]["trial_s"]:
        return plan["workloads"]["resnet18_cifar"]["train_size"]
    config = dict(plan["workloads"]["resnet18_cifar"], batch_size=64, epochs=10**6)
    seconds = run_python(
        "import json\n"
        "from hypersack.runtime.profiler import profile_trainable\n"
        "from hypersack.workloads.vision import train_resnet18\n"
        f"p = profile_trainable(train_resnet18, {config!r}, n_iters=10, "
        f"device={torch_device(plan)!r})\n"
        "print(json.dumps(p.time_per_iter_s))\n", timeout=120)
    steps = plan["sp3"]["trial_s"] / max(float(seconds), 1e-4) / plan["sp3"]["epochs"]
    return int(min(50_000, max(512, steps * 64)))


def run_study(name: str, work: Path, space: dict, trials: int, trainable: Any,
              **options: Any) -> dict[str, Any]:
    """One study through ``hypersack.Study`` in a fresh store; makespan, outcome, MPS use."""
    import hypersack
    from hypersack.runtime.mps import MpsUnavailableWarning
    slots = options.pop("slots", None)
    with in_dir(work / name), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", MpsUnavailableWarning)
        study = hypersack.Study(name=name, space=space, objective=("accuracy", "max"),
                                n_trials=trials, storage=work / name / "study.db",
                                max_steps="epochs", seed=0, **options)
        start = time.perf_counter()
        study.run(trainable, progress=False, slots=slots)
        wall = time.perf_counter() - start
        status = study.status()
        results = study.results()
    mps_off = [str(w.message) for w in caught if issubclass(w.category, MpsUnavailableWarning)]
    return {"study": name, "makespan_s": round(wall, 2),
            "trials_per_min": round(60 * trials / wall, 2), "complete": status.get("complete", 0),
            "failed": status.get("failed", 0), "mps_fallback": mps_off[0][:160] if mps_off else None,
            "results": results}


def _without_mps_on_path() -> str:
    """PATH minus every directory holding ``nvidia-cuda-mps-control`` (forces time slicing)."""
    from hypersack.runtime.mps import MPS_CONTROL
    keep = [d for d in os.environ.get("PATH", "").split(os.pathsep)
            if d and not (Path(d) / MPS_CONTROL).exists()]
    return os.pathsep.join(keep)


def check_makespan(plan: dict, work: Path) -> dict:
    sp3 = plan["sp3"]
    train_size = calibrate_train_size(plan)
    space = sp3_space(plan, train_size)
    common = {"workers": sp3["workers"]}
    rows = [dict(run_study("exclusive", work, space, sp3["trials"], "resnet18_cifar",
                           placement="exclusive", **common), ratio=1.0, mps=False)]
    for r in sp3["ratios"]:
        row = run_study(f"wfd-mps-r{r:g}", work, space, sp3["trials"], "resnet18_cifar",
                        placement="wfd", oversubscription=r, **common)
        uses_mps = plan["device"] == "cuda" and row["mps_fallback"] is None and r > 1
        rows.append(dict(row, ratio=r, mps=uses_mps))
    saved = os.environ.get("PATH", "")
    os.environ["PATH"] = _without_mps_on_path()
    try:
        r = sp3["time_slicing_ratio"]
        row = run_study(f"wfd-timeslice-r{r:g}", work, space, sp3["trials"], "resnet18_cifar",
                        placement="wfd", oversubscription=r, **common)
        rows.append(dict(row, ratio=r, mps=False))
    finally:
        os.environ["PATH"] = saved
    base = rows[0]["makespan_s"]
    for row in rows:
        row.pop("results")
        row["speedup_vs_exclusive"] = round(base / row["makespan_s"], 2)
    best_mps = max((row["speedup_vs_exclusive"] for row in rows if row["mps"]), default=None)
    figures = {"train_size": train_size, "trials": sp3["trials"], "epochs": sp3["epochs"],
               "rows": rows, "best_mps_speedup": best_mps}
    goals = {"wfd_mps_vs_exclusive": {"target": 4.0, "value": best_mps,
                                      "met": best_mps is not None and best_mps >= 4.0}}
    incomplete = [row["study"] for row in rows if row["complete"] != sp3["trials"]]
    if incomplete:
        raise CheckFailed(f"studies with failed trials: {incomplete}", figures, goals)
    if plan["device"] == "cuda" and not any(row["mps"] for row in rows):
        raise CheckFailed("no wfd study ran with MPS (see mps_fallback)", figures, goals)
    return {"figures": figures, "goals": goals}


# ---- check 5: fused packs against a loop and against processes ---------------------------------

def check_fusion(plan: dict, work: Path) -> dict:
    fusion = plan["fusion"]
    rows, errors, memories = [], [], {}
    for name in fusion["workloads"]:
        config = plan["workloads"][name]
        memory = measure_in_child(plan, {"what": "memory", "workload": name, "config": config})
        memories[name] = {"measured": memory["measured"],
                          "per_member_gb": round(memory["per_member_bytes"] / 2**30, 3),
                          "base_gb": round(memory["base_bytes"] / 2**30, 3),
                          "free_gb": round(memory["free_bytes"] / 2**30, 1)}
        for n in fusion["n"]:
            skip = _too_big(memory, n, fusion["memory_fraction"])
            for mode in ("fused", "loop", "procs"):
                if mode == "procs" and n > fusion["procs_max_n"]:
                    continue
                row = {"workload": name, "n": n, "mode": mode}
                if skip:
                    rows.append(dict(row, skipped=skip))
                    continue
                try:
                    got = run_procs(plan, name, config, n) if mode == "procs" else \
                        measure_in_child(plan, {"what": mode, "workload": name,
                                                "config": config, "n": n})
                except CheckFailed as exc:
                    errors.append(f"{name} N={n} {mode}: {exc}")
                    rows.append(dict(row, error=str(exc)))
                    continue
                rows.append(dict(row, model_steps_per_s=round(n * got["steps"] / got["seconds"],
                                                              2),
                                 peak_memory_mb=round(got["peak_mb"], 1)))
    _ratios(rows)
    figures: dict[str, Any] = {"rows": rows, "memory": memories,
                               "study": _fused_study(plan, work)}
    goals = _fusion_goals(rows)
    if errors:
        raise CheckFailed("; ".join(errors)[:600], figures, goals)
    return {"figures": figures, "goals": goals}


def _too_big(memory: dict, n: int, fraction: float) -> str | None:
    if not memory.get("measured"):
        return None
    need = memory["base_bytes"] + n * memory["per_member_bytes"]
    room = memory["free_bytes"] * fraction
    if need <= room:
        return None
    return f"needs {need / 2**30:.1f} GiB, {room / 2**30:.1f} GiB usable"


def _ratios(rows: list[dict]) -> None:
    fused = {(r["workload"], r["n"]): r.get("model_steps_per_s") for r in rows
             if r["mode"] == "fused"}
    for r in rows:
        base = fused.get((r["workload"], r["n"]))
        if r["mode"] != "fused" and base and r.get("model_steps_per_s"):
            r["fused_speedup"] = round(base / r["model_steps_per_s"], 2)


def _fusion_goals(rows: list[dict]) -> dict:
    best: dict[str, float] = {}
    for r in rows:
        if r["mode"] == "procs" and r["n"] >= 32 and "fused_speedup" in r:
            best[r["workload"]] = max(best.get(r["workload"], 0.0), r["fused_speedup"])
    met = bool(best) and all(best.get(name, 0.0) >= 10 for name in SMALL_MODELS)
    return {"fused_vs_procs_at_n32": {"target": 10.0, "value": best or None, "met": met}}


def measure_in_child(plan: dict, job: dict) -> dict:
    """One measurement in a fresh process (its own peak memory); ``--measure JOB``."""
    job = dict(job, device=torch_device(plan), steps=plan["fusion"]["steps"],
               warmup=plan["fusion"]["warmup"])
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--measure",
                           json.dumps(job)], capture_output=True, text=True, env=python_env(),
                          timeout=600)
    if done.returncode != 0:
        raise CheckFailed(_last_line(done.stderr))
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_procs(plan: dict, name: str, config: dict, n: int) -> dict:
    """N processes, one model each, started together behind a file barrier; the time from the
    first one's timed start to the last one's end."""
    with tempfile.TemporaryDirectory() as barrier:
        job = {"what": "loop", "workload": name, "config": config, "n": 1,
               "device": torch_device(plan), "steps": plan["fusion"]["steps"],
               "warmup": plan["fusion"]["warmup"], "barrier": barrier}
        procs = [subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--measure",
                                   json.dumps(dict(job, rank=i))], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=python_env())
                 for i in range(n)]
        deadline = time.monotonic() + 300
        while len(list(Path(barrier).glob("ready-*"))) < n:
            if any(p.poll() not in (None, 0) for p in procs) or time.monotonic() > deadline:
                for p in procs:
                    p.kill()
                bad = next((p for p in procs if p.poll() not in (None, 0)), procs[0])
                raise CheckFailed(f"a process did not get ready: {_last_line(bad.stderr.read())}")
            time.sleep(0.05)
        (Path(barrier) / "go").touch()
        results = []
        for p in procs:
            out, err = p.communicate(timeout=600)
            if p.returncode != 0:
                raise CheckFailed(_last_line(err))
            results.append(json.loads(out.strip().splitlines()[-1]))
    seconds = max(r["end"] for r in results) - min(r["start"] for r in results)
    return {"seconds": seconds, "steps": plan["fusion"]["steps"],
            "peak_mb": sum(r["peak_mb"] for r in results)}


def _fused_study(plan: dict, work: Path) -> dict:
    """The same MobileNet study with ``execution: separate`` and ``fused`` (fixed width)."""
    from hypersack.workloads.synthetic import SyntheticTask
    from hypersack.workloads.vision import MOBILENET_WORKLOAD
    spec = plan["fusion"]["study"]
    config = dict(plan["workloads"]["mobilenet_v3_small"], epochs=spec["epochs"])
    data = {k: config[k] for k in MOBILENET_WORKLOAD.data_keys if k in config}
    task = SyntheticTask(MOBILENET_WORKLOAD, **data)
    space = dict(config, lr={"type": "float", "low": 1e-3, "high": 3e-2, "log": True})
    rows = []
    for execution, trainable in (("separate", "mobilenet_v3_small"), ("fused", task)):
        row = run_study(f"study-{execution}", work, space, spec["trials"], trainable,
                        execution=execution, pack={"max_members": spec["max_members"]},
                        workers=spec["workers"])
        row.pop("results")
        rows.append(dict(row, execution=execution))
    speedup = round(rows[0]["makespan_s"] / rows[1]["makespan_s"], 2)
    return {"rows": rows, "fused_speedup": speedup}


# ---- the measuring child (``--measure``) -------------------------------------------------------

def _sync(device: str) -> None:
    import torch
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _peak_mb(device: str) -> float:
    import resource

    import torch
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _task(job: dict) -> Any:
    from hypersack.workloads import lm, vision
    from hypersack.workloads.synthetic import SyntheticTask
    workload = {"resnet18_cifar": vision.RESNET18_WORKLOAD, "gpt_lm": lm.GPT_WORKLOAD,
                "mobilenet_v3_small": vision.MOBILENET_WORKLOAD}[job["workload"]]
    data = {k: job["config"][k] for k in workload.data_keys if k in job["config"]}
    return workload, SyntheticTask(workload, **data)


def measure(job: dict) -> dict:
    import torch
    from hypersack.fusion.task import Member
    device, steps, warmup = job["device"], job["steps"], job["warmup"]
    workload, task = _task(job)
    if job["what"] == "memory":
        from hypersack.fusion.memory import measure_member_memory
        profile = measure_member_memory(task, job["config"], device)
        if device.startswith("cuda"):
            torch.cuda.empty_cache()      # the probe packs' cached blocks are not "used"
        free = torch.cuda.mem_get_info()[0] if device.startswith("cuda") else 0
        return {"measured": profile.measured, "base_bytes": profile.base_bytes,
                "per_member_bytes": profile.per_member_bytes, "free_bytes": free}
    configs = [dict(job["config"], lr=1e-3 * (1 + i % 7), optimizer="adam")
               for i in range(job["n"])]
    if job["what"] == "fused":
        from hypersack.fusion.runner import Pack
        pack = Pack(task, device)
        for i, config in enumerate(configs):
            pack.load(Member(trial_id=i, config=config, seed=i))
        step: Callable[[int], None] = lambda k: pack.train_iteration()  # noqa: E731
    else:
        step = _loop_step(workload, task, configs, device)
    for k in range(warmup):
        step(k)
    _sync(device)
    if "barrier" in job:
        (Path(job["barrier"]) / f"ready-{job['rank']}").touch()
        while not (Path(job["barrier"]) / "go").exists():
            time.sleep(0.01)
    start, t0 = time.time(), time.perf_counter()
    for k in range(steps):
        step(warmup + k)
    _sync(device)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "steps": steps, "peak_mb": _peak_mb(device), "start": start,
            "end": start + seconds}


def _loop_step(workload: Any, task: Any, configs: list[dict], device: str) -> Callable[[int], None]:
    """N plain models with torch.optim.Adam, trained one after the other at every step."""
    import torch
    x, y = (t.to(device) for t in task.train_data())
    models, optimizers = [], []
    for i, config in enumerate(configs):
        torch.manual_seed(i)
        model = workload.build(workload.with_defaults(config)).to(device).train()
        models.append(model)
        optimizers.append(torch.optim.Adam(model.parameters(), lr=config["lr"]))
    b = int(workload.with_defaults(configs[0])["batch_size"])
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0)).to(device)

    def step(k: int) -> None:
        start = (k * b) % max(len(y) - b, 1)
        idx = order[start:start + b]
        for model, optimizer in zip(models, optimizers):
            optimizer.zero_grad(set_to_none=True)
            workload.per_sample_loss(model(x[idx]), y[idx]).mean().backward()
            optimizer.step()
    return step


# ---- check 6: the OOM retry --------------------------------------------------------------------

def hold_memory(config: dict, ctx: Any) -> None:
    """Hold ``fraction`` of the device's memory for ``steps`` steps of ``step_s`` seconds.

    On CUDA the memory is really allocated (a co-located second holder runs out of memory). On
    the CPU a ledger file stands for the device: a holder that would take it past 1.0 raises the
    error text a CUDA OOM has."""
    import fcntl
    import time as _time
    start = _time.time()
    fraction = float(config["fraction"])
    held = None
    if ctx.device.startswith("cuda"):
        import torch
        total = torch.cuda.mem_get_info()[1]
        held = torch.empty(int(total * fraction), dtype=torch.uint8, device=ctx.device)
    else:
        with open(config["ledger"], "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.seek(0)
            used = float(f.read() or 0)
            if used + fraction > 1.0:
                raise RuntimeError(f"CUDA out of memory (simulated on CPU: {used:.2f} of the "
                                   f"device held, {fraction:.2f} more asked)")
            f.seek(0)
            f.truncate()
            f.write(str(used + fraction))
    try:
        for step in range(1, int(config["steps"]) + 1):
            _time.sleep(float(config["step_s"]))
            ctx.report(step, accuracy=1.0, attempt=ctx.attempt, t_start=start,
                       t_end=_time.time())
    finally:
        del held
        if not ctx.device.startswith("cuda"):
            with open(config["ledger"], "a+") as f:
                fcntl.flock(f, fcntl.LOCK_EX)
                f.seek(0)
                used = float(f.read() or 0)
                f.seek(0)
                f.truncate()
                f.write(str(max(0.0, used - fraction)))


def check_oom(plan: dict, work: Path) -> dict:
    oom = plan["oom"]
    space = {"fraction": oom["fraction"], "steps": oom["steps"], "step_s": oom["step_s"],
             "ledger": str(work / "ledger"), "epochs": oom["steps"]}
    # memory_gb 1: a default of 0 would let the retried trial (whose demand becomes the whole
    # device) still fit beside a holder that declared nothing.
    row = run_study("oom", work, space, 2, hold_memory, placement="wfd", oversubscription=2.0,
                    max_retries=2, workers=oom["workers"], resources={"memory_gb": 1.0})
    last: dict[int, dict] = {}
    for result in row["results"]:
        last[result["trial_id"]] = result
    figures = {"complete": row["complete"], "failed": row["failed"],
               "makespan_s": row["makespan_s"],
               "attempts": {str(t): r["attempt"] for t, r in last.items()}}
    if row["complete"] != 2:
        raise CheckFailed(f"{row['failed']} of 2 trials failed: the OOM was not recovered",
                          figures)
    retried = [t for t, r in last.items() if r["attempt"] > 1]
    if len(retried) != 1:
        raise CheckFailed(f"expected one trial retried after an OOM, got {len(retried)}",
                          figures)
    other = next(t for t in last if t not in retried)
    alone = last[retried[0]]["t_start"] >= last[other]["t_end"] - 0.5
    figures["retry_ran_alone"] = alone
    if not alone:
        raise CheckFailed("the retried trial ran beside the other holder again", figures)
    return {"figures": figures}


# ---- check 7: data-parallel ranks --------------------------------------------------------------

def check_data_parallel(plan: dict, work: Path) -> dict:
    from hypersack.runtime.devices import Slot
    epochs = plan["dp"]["epochs"]
    config = dict(plan["workloads"]["resnet18_cifar"], epochs=epochs)
    config["lr"] = 0.01
    algorithm = {"type": "rasda", "min_t": 1, "max_t": epochs, "sf": 2, "rf": 2,
                 "base_resources": 2, "max_resources": 2}
    options: dict[str, Any] = {"algorithm": algorithm}
    gpus = _gpu_count(plan)
    if plan["device"] == "cpu":
        backend = "gloo"
        options["slots"] = [Slot(i, None, {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"})
                            for i in range(2)]
    elif gpus >= 2:
        backend = "nccl"
    else:
        backend = "gloo"
        env = {"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0],
               "HYPERSACK_DIST_BACKEND": "gloo"}
        options["slots"] = [Slot(i, i, dict(env)) for i in range(2)]
    row = run_study("dp", work, config, 1, "resnet18_cifar", **options)
    workers = [r.get("workers") for r in row["results"]]
    figures = {"backend": backend, "gpus": gpus, "makespan_s": row["makespan_s"],
               "complete": row["complete"], "workers_reported": workers}
    if row["complete"] != 1:
        raise CheckFailed(f"the two-rank trial failed ({backend})", figures)
    if not workers or workers[-1] != 2:
        raise CheckFailed(f"the trial reported workers={workers}, not 2 ranks", figures)
    return {"figures": figures}


def _gpu_count(plan: dict) -> int:
    if plan["device"] != "cuda":
        return 0
    import torch
    return torch.cuda.device_count()


CHECKS: dict[int, Callable[[dict, Path], dict]] = {
    0: check_detect, 1: check_nvml_monitor, 2: check_mps, 3: check_profiles,
    4: check_makespan, 5: check_fusion, 6: check_oom, 7: check_data_parallel}


# ---- running checks with hard limits -----------------------------------------------------------

def run_check_here(number: int, plan: dict, work: Path, result_file: Path) -> int:
    """The child's side: run one check, write its result file (always, even on failure)."""
    work.mkdir(parents=True, exist_ok=True)
    outcome: dict[str, Any] = {"status": "pass", "reason": None, "figures": {}, "goals": {}}
    try:
        outcome.update(CHECKS[number](plan, work))
    except CheckFailed as exc:
        figures = exc.args[1] if len(exc.args) > 1 else {}
        goals = exc.args[2] if len(exc.args) > 2 else {}
        outcome.update(status="fail", reason=str(exc.args[0]), figures=figures, goals=goals)
    except BaseException as exc:   # noqa: BLE001 - every failure becomes a reason in the table
        outcome.update(status="fail", reason=f"{type(exc).__name__}: {exc}"[:600])
    result_file.write_text(json.dumps(outcome, indent=2, default=str))
    return 0 if outcome["status"] == "pass" else 1


def run_check(number: int, plan: dict, out: Path, env: dict[str, str]) -> dict[str, Any]:
    """Run check ``number`` in its own process group under its time limit."""
    limit = float(plan["limits"][str(number)])
    work = out / "work" / f"{number}-{CHECK_NAMES[number]}"
    result_file = out / "work" / f"{number}.json"
    result_file.unlink(missing_ok=True)
    log_path = out / "work" / f"{number}-{CHECK_NAMES[number]}.log"
    plan_file = out / "work" / "plan.json"
    start = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--run-check", str(number),
             "--plan", str(plan_file), "--work", str(work), "--result", str(result_file)],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        timed_out = _wait_or_stop(proc, limit)
    seconds = round(time.perf_counter() - start, 1)
    entry: dict[str, Any] = {"id": number, "name": CHECK_NAMES[number], "seconds": seconds,
                             "limit_s": limit, "log": str(log_path)}
    if timed_out:
        return dict(entry, status="fail", reason=f"timed out after {limit:g} s (hard limit); "
                    f"last output: {_last_line(log_path.read_text(errors='replace'))}",
                    figures={}, goals={})
    if not result_file.exists():
        return dict(entry, status="fail", figures={}, goals={},
                    reason=f"exit code {proc.returncode}: "
                           f"{_last_line(log_path.read_text(errors='replace'))}")
    return dict(entry, **json.loads(result_file.read_text()))


def _wait_or_stop(proc: subprocess.Popen, limit: float) -> bool:
    """Wait up to ``limit`` s; True if it had to be stopped: SIGINT to the group first (context
    managers stop MPS, studies end their workers), SIGKILL 15 s later. Whatever is left of the
    group afterwards (orphaned workers) is killed either way."""
    timed_out = False
    try:
        proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        timed_out = True
        _signal_group(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=15.0)
        except subprocess.TimeoutExpired:
            pass
    _signal_group(proc.pid, signal.SIGKILL)
    proc.wait()
    return timed_out


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# ---- the report --------------------------------------------------------------------------------

def headline(check: dict) -> str:
    """The figures of one check in one short line for the table."""
    f = check.get("figures") or {}
    name = check["name"]
    try:
        if name == "detect":
            return f"{f.get('device_name')}, driver {f.get('driver')}, torch {f.get('torch')}"
        if name == "nvml_monitor":
            return (f"{len(f.get('inventory', []))} GPU(s), {f.get('samples')} samples, "
                    f"util mean {_fmt(f.get('mean_utilization'))}% max "
                    f"{_fmt(f.get('max_utilization'))}%")
        if name == "mps":
            return (f"shares {[t['share'] for t in f.get('trials', [])]}, MPS procs "
                    f"{f.get('pids_while_running')}, stale recovered {f.get('stale_recovered')}")
        if name == "profiles":
            return "; ".join(f"{k}: {v['time_per_iter_ms']} ms/it, {v['peak_memory_gb']} GiB, "
                             f"util {_fmt(v['gpu_util_percent'])}%" for k, v in f.items())
        if name == "sp3_makespan":
            return "; ".join(f"{r['study']} {r['makespan_s']} s ({r['speedup_vs_exclusive']}x)"
                             for r in f.get("rows", []))
        if name == "fusion":
            goal = (check.get("goals") or {}).get("fused_vs_procs_at_n32", {})
            study = f.get("study", {})
            return (f"fused/procs at N>=32: {goal.get('value')}; fused study "
                    f"{study.get('fused_speedup')}x separate")
        if name == "oom_retry":
            return f"attempts {f.get('attempts')}, retry alone {f.get('retry_ran_alone')}"
        if name == "data_parallel":
            return f"{f.get('backend')}, workers {f.get('workers_reported')}"
    except (KeyError, TypeError):
        pass
    return ""


def _fmt(value: Any) -> str:
    return "n/a" if value is None else f"{value:.0f}"


def markdown(results: dict) -> str:
    lines = [f"GPU suite ({results['mode']}) on {results['device_name']} "
             f"(driver {results['driver']}), {results['date']}", "",
             "| # | check | result | seconds | figures | reason |",
             "|---|---|---|---|---|---|"]
    for c in results["checks"]:
        reason = (c.get("reason") or "").replace("|", "/")
        lines.append(f"| {c['id']} | {c['name']} | {c['status'].upper()} | {c['seconds']} | "
                     f"{headline(c).replace('|', '/')} | {reason} |")
    lines.append("")
    for name, goal in results["goals"].items():
        verdict = "not measured" if goal["value"] is None else \
            ("met" if goal["met"] else "NOT met")
        lines.append(f"- goal {name}: target {goal['target']}, measured {goal['value']}, "
                     f"{verdict}")
    return "\n".join(lines)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "unknown"


def run_suite(args: argparse.Namespace) -> int:
    out = Path(args.out).resolve()
    (out / "work").mkdir(parents=True, exist_ok=True)
    device = args.device
    if device == "auto":
        device = "cuda" if _cuda_available() else "none"
    mode = "tiny" if args.tiny else ("quick" if args.quick else "full")
    plan = make_plan(mode, "cpu" if device == "none" else device)
    for key, value in (args.limit or []):
        plan["limits"][str(key)] = value
    if args.fusion_n:
        plan["fusion"]["n"] = args.fusion_n
    (out / "work" / "plan.json").write_text(json.dumps(plan, indent=2))
    wanted = [0] + [n for n in range(1, 8) if not args.only or n in args.only]
    checks = []
    for number in wanted:
        if device == "none":
            checks.append({"id": number, "name": CHECK_NAMES[number], "status": "skipped",
                           "seconds": 0.0, "limit_s": plan["limits"][str(number)],
                           "reason": "no CUDA GPU here (torch.cuda.is_available() is False); "
                                     "--device cpu exercises the suite on the CPU",
                           "figures": {}, "goals": {}})
            continue
        env = python_env()
        if device == "cpu":
            env.setdefault("OMP_NUM_THREADS", "1")   # CPU mode: no thread-pool contention
        if number != 7 and device == "cuda" and "CUDA_VISIBLE_DEVICES" not in os.environ:
            env["CUDA_VISIBLE_DEVICES"] = "0"     # one GPU for every check but the two ranks
        print(f"[gpu_suite] check {number} {CHECK_NAMES[number]} (limit "
              f"{plan['limits'][str(number)]} s) ...", flush=True)
        checks.append(run_check(number, plan, out, env))
        print(f"[gpu_suite]   {checks[-1]['status']} in {checks[-1]['seconds']} s "
              f"{checks[-1].get('reason') or ''}", flush=True)
    detect = checks[0].get("figures") or {}
    goals = {k: v for c in checks for k, v in (c.get("goals") or {}).items()}
    results = {"schema": SCHEMA, "date": _dt.date.today().isoformat(), "mode": mode,
               "device": device, "fake_nvml": plan["fake_nvml"] and device == "cpu",
               "device_name": detect.get("device_name", "no GPU"),
               "driver": detect.get("driver", "n/a"), "torch": detect.get("torch"),
               "host": platform.node(), "checks": checks, "goals": goals,
               "passed": all(c["status"] == "pass" for c in checks)}
    (out / "gpu_results.json").write_text(json.dumps(results, indent=2, default=str))
    table = markdown(results)
    (out / "gpu_results.md").write_text(table + "\n")
    if args.save_results:
        target = ROOT / "benchmarks" / "results" / \
            f"gpu-{_slug(results['device_name'])}-{results['date']}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out / "gpu_results.json", target)
        print(f"[gpu_suite] saved {target}")
    _print_failed_logs(checks)
    print(table)
    return 0 if results["passed"] else 1


def _print_failed_logs(checks: list[dict], lines: int = 12) -> None:
    """The end of each failed check's log (before the table, which stays last): on a leased
    machine the printed output may be all that comes back."""
    for check in checks:
        log = check.get("log")
        if check["status"] != "fail" or not log or not Path(log).exists():
            continue
        tail = Path(log).read_text(errors="replace").strip().splitlines()[-lines:]
        print(f"--- check {check['id']} {check['name']}: last {len(tail)} lines of {log}")
        print("\n".join(tail))


def _cuda_available() -> bool:
    try:
        return bool(run_python("import json, torch; print(json.dumps(torch.cuda.is_available()))",
                               timeout=120))
    except (CheckFailed, subprocess.TimeoutExpired, json.JSONDecodeError):
        return False


def _limit(text: str) -> tuple[int, float]:
    number, _, seconds = text.partition("=")
    return int(number), float(seconds)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__)
    p.add_argument("--out", help="folder for gpu_results.json / .md and the checks' logs")
    p.add_argument("--quick", action="store_true", help="smaller studies and N (under 8 min)")
    p.add_argument("--tiny", action="store_true", help="tiny shapes (CPU tests, seconds)")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--only", type=lambda s: [int(x) for x in s.split(",") if x],
                   help="comma-separated check numbers (1-7); detection always runs")
    p.add_argument("--limit", type=_limit, action="append",
                   help="override a check's time limit: N=SECONDS (repeatable)")
    p.add_argument("--fusion-n", type=lambda s: [int(x) for x in s.split(",") if x],
                   help="check 5's pack sizes, e.g. 1,2,4,8,16,32,64 (default: by mode)")
    p.add_argument("--save-results", action="store_true",
                   help="also copy the JSON to benchmarks/results/gpu-<device>-<date>.json")
    p.add_argument("--run-check", type=int, help=argparse.SUPPRESS)
    p.add_argument("--plan", help=argparse.SUPPRESS)
    p.add_argument("--work", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    p.add_argument("--measure", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(json.loads(args.measure))))
        return 0
    if args.run_check is not None:
        plan = json.loads(Path(args.plan).read_text())
        return run_check_here(args.run_check, plan, Path(args.work), Path(args.result))
    if not args.out:
        p.error("--out DIR is required")
    return run_suite(args)


if __name__ == "__main__":
    sys.exit(main())
