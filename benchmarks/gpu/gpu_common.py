"""What the GPU suite's checks share (``benchmarks/gpu/gpu_suite.py``): the failure type, the child
environment, the device names, and one study run through ``hypersack.Study``."""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

WORKLOADS = ("resnet18_cifar", "mobilenet_v3_small", "gpt_lm")
SMALL_MODELS = ("resnet18_cifar", "mobilenet_v3_small")


class CheckFailed(Exception):
    """A check ran and found something wrong; the message is the reason shown in the table."""


# ---- small helpers -----------------------------------------------------------------------------

def torch_device(plan: dict) -> str:
    return "cuda:0" if plan["device"] == "cuda" else "cpu"


def nvml_source(plan: dict) -> Any:
    """An open NvmlSource: the real NVML on a GPU, a FakeNvml H100 with ``--device cpu``."""
    from hypersack.runtime.devices.nvml import FakeNvml, NvmlSource
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


def run_study(name: str, work: Path, space: dict, trials: int, trainable: Any,
              **options: Any) -> dict[str, Any]:
    """One study through ``hypersack.Study``; makespan, outcome, MPS use, trials per GPU-hour,
    mean GPU utilisation (NVML samples; None without a monitor) and the best ``accuracy``.
    ``storage`` (optional): the SQLite file, shared by studies that should share the job
    history; default a fresh store per study."""
    import hypersack
    from hypersack.runtime.devices.mps import MpsUnavailableWarning
    slots = options.pop("slots", None)
    gpus = options.pop("gpus", 1)
    storage = options.pop("storage", None) or work / name / "study.db"
    with in_dir(work / name), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", MpsUnavailableWarning)
        study = hypersack.Study(name=name, space=space, objective=("accuracy", "max"),
                                n_trials=trials, storage=storage,
                                max_steps="epochs", seed=0, **options)
        start = time.perf_counter()
        study.run(trainable, progress=False, slots=slots)
        wall = time.perf_counter() - start
        status = study.status()
        results = study.results()
    mps_off = [str(w.message) for w in caught if issubclass(w.category, MpsUnavailableWarning)]
    accuracies = [r["accuracy"] for r in results if isinstance(r.get("accuracy"), (int, float))]
    return {"study": name, "makespan_s": round(wall, 2),
            "trials_per_min": round(60 * trials / wall, 2),
            "trials_per_gpu_hour": round(3600 * trials / wall / max(1, gpus), 1),
            "mean_gpu_util": mean_utilization(storage, name),
            "best_accuracy": round(max(accuracies), 4) if accuracies else None,
            "complete": status.get("complete", 0),
            # trials that ended (early-stopped or paused by the algorithm count too)
            "ended": sum(status.get(k, 0) for k in ("complete", "pruned", "paused")),
            "failed": status.get("failed", 0), "mps_fallback": mps_off[0][:160] if mps_off else None,
            "results": results}


def mean_utilization(storage: Path, name: str) -> float | None:
    """Mean NVML utilisation (percent) over the study's stored samples, None if none."""
    from hypersack.runtime.storage.sqlite import Storage
    with Storage(storage, readonly=True) as store:
        samples = store.load_samples(store.get_study(name).study_id)
    values = [s["utilization"] for s in samples if s["utilization"] is not None]
    return round(sum(values) / len(values), 1) if values else None
