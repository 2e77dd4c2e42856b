"""A small fusable task for fused studies in tests, importable by pack workers as
``fused_tasks:SMALL`` (``tests/`` is on their path). It imports torch: only pack workers and the
fused tests import this module (``trainables.py`` stays torch-free for the plain workers).

``DIE_AFTER_VAR``: when set in a worker's environment to ``"N:PATH"``, the first pack process to
compute its N-th member evaluation creates the file PATH and kills itself with SIGKILL (once
per study: a later process sees PATH and goes on). The kill comes after the evaluations of
earlier epochs were reported and acknowledged, so it is deterministic, not a race with a timer.
``STOP_AFTER_VAR``: the same, but the process stops itself (SIGSTOP: every thread, its heartbeat
thread's too) instead of dying.
"""
from __future__ import annotations

import os
import signal
from typing import Any, Mapping

import torch
from torch import nn

from hypersack.fusion.optim import OptimizerConfig
from hypersack.fusion.task import FusableTask

__all__ = ["SmallTask", "SMALL", "DIE_AFTER_VAR", "STOP_AFTER_VAR"]

DIE_AFTER_VAR = "HYPERSACK_TEST_PACK_DIES_AFTER"
STOP_AFTER_VAR = "HYPERSACK_TEST_PACK_STOPS_AFTER"
N_TRAIN, N_VAL, FEATURES, CLASSES = 64, 32, 8, 3
_evaluations = 0


class SmallTask(FusableTask):
    """Linear -> ReLU -> Linear on fixed random data (``hidden`` is the architecture key).

    Config: hidden, batch_size (default 16), epochs (default 2), optimizer (default adam), lr."""

    name = "small"
    architecture_keys = ("hidden",)

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(7)
        self._x = torch.randn(N_TRAIN + N_VAL, FEATURES, generator=g)
        self._y = (self._x[:, :CLASSES] * 2 + 0.5 * torch.randn(N_TRAIN + N_VAL, CLASSES,
                                                                generator=g)).argmax(dim=1)

    def build_model(self, config: Mapping[str, Any]) -> nn.Module:
        hidden = config.get("hidden", 8)
        return nn.Sequential(nn.Linear(FEATURES, hidden), nn.ReLU(), nn.Linear(hidden, CLASSES))

    def optimizer(self, config: Mapping[str, Any], steps_per_epoch: int) -> OptimizerConfig:
        return OptimizerConfig(kind=config.get("optimizer", "adam"), lr=config.get("lr", 0.01))

    def batch_size(self, config: Mapping[str, Any]) -> int:
        return int(config.get("batch_size", 16))

    def max_steps(self, config: Mapping[str, Any], default: int | None) -> int:
        return int(config.get("epochs", default or 2))

    def train_data(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._x[:N_TRAIN], self._y[:N_TRAIN]

    def val_data(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._x[N_TRAIN:], self._y[N_TRAIN:]

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(outputs, targets, reduction="none")

    def metrics(self, outputs: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
        _maybe_die()
        return {"loss": nn.functional.cross_entropy(outputs, targets).item(),
                "accuracy": (outputs.argmax(dim=1) == targets).float().mean().item()}


def _maybe_die() -> None:
    global _evaluations
    setting = os.environ.get(DIE_AFTER_VAR) or os.environ.get(STOP_AFTER_VAR)
    if not setting:
        return
    _evaluations += 1
    count, _, marker = setting.partition(":")
    if _evaluations == int(count) and not os.path.exists(marker):
        with open(marker, "w"):
            pass
        os.kill(os.getpid(), signal.SIGKILL if os.environ.get(DIE_AFTER_VAR) else
                signal.SIGSTOP)


SMALL = SmallTask()
