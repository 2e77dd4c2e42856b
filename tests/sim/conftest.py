"""Small scenarios for the simulator's tests (a few trials, seconds of wall time at most)."""
from __future__ import annotations

import copy
from typing import Any

import pytest

BASE: dict[str, Any] = {
    "name": "mini",
    "seed": 0,
    "cluster": {"nodes": [{"id": "n0", "cpus": 16,
                           "gpus": [{"id": "0", "arch": "A100", "memory_gb": 40, "oversubscription": 2},
                                    {"id": "1", "arch": "A100", "memory_gb": 40, "oversubscription": 2}]}]},
    "study": {
        "space": {"lr": {"type": "float", "low": 1e-4, "high": 0.1, "log": True},
                  "batch_size": {"type": "categorical", "choices": [64, 128]}},
        "objective": {"metric": "accuracy", "mode": "max"},
        "algorithm": {"type": "random"},
        "budget": {"trials": 8},
        "max_steps": 4},
    "workload": {"model": "resnet18", "batch_size_key": "batch_size", "profiles": [
        {"arch": "A100", "batch_size": 64, "step_time_s": 10, "utilization": 40, "memory_gb": 4, "cpus": 2},
        {"arch": "A100", "batch_size": 128, "step_time_s": 8, "utilization": 60, "memory_gb": 7, "cpus": 2}]},
    "perf": {"startup_s": 1.0, "checkpoint_s": 0.0, "restore_s": 0.5, "interference": 0.05,
             "saturation": {"A100": 1.5}},
    "curves": {"type": "parametric", "metric": "accuracy", "start": 0.1, "best": 0.9, "worst": 0.2,
               "lr_optimum": 0.01, "tau": 2, "noise": 0.01, "clip": [0, 1]},
}


@pytest.fixture
def mini() -> dict[str, Any]:
    """A fresh copy of a 2-GPU, 8-trial scenario dict to modify."""
    return copy.deepcopy(BASE)
