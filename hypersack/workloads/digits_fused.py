"""The digits MLP and CNN as fusable tasks (``hypersack.fusion``): many trials, one process.

``DIGITS_MLP`` and ``DIGITS_CNN`` take the configs of the ``digits_mlp`` / ``digits_cnn``
trainables (``hypersack.workloads.digits``; same keys, defaults, validation, data split, model
definitions and per-epoch shuffling) and report the same metrics per epoch: ``accuracy``,
``loss`` (validation) and ``train_loss``. Architecture keys, which must be equal within a pack:
``hidden`` (MLP); ``hidden`` and ``channels`` (CNN). Everything else may differ per member.

Extra keys understood here (ignored by the plain trainables):

- ``optimizer`` may also be ``"adagrad"``; ``nesterov`` (False): Nesterov momentum for "sgd".
- ``lr_schedule`` ("constant"): "constant", "step" (x ``lr_gamma`` (0.1) every
  ``lr_step_epochs`` (1) epochs) or "cosine" (down to ``lr_min_factor`` (0.0) x lr at the end of
  ``epochs``); ``warmup_epochs`` (0): linear warm-up from lr / 3. Schedules advance per
  mini-batch step, with ``steps_per_epoch = ceil(1437 / batch_size)``.

Differences from the plain trainables, by design: the optimizers are the fused functional ones
(equal to torch.optim up to rounding), and dropout masks come from each member's own counter-based
stream (``hypersack.fusion.layers``), not from torch's global generator.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import nn

from hypersack.errors import ConfigError
from hypersack.validation import check_bool, check_integer
from hypersack.fusion.optim import OptimizerConfig, Schedule
from hypersack.fusion.task import FusableTask
from hypersack.workloads.digits import (OPTIMIZERS, _count, _number, build_cnn, build_mlp,
                                        load_digits_split, parse_settings)

__all__ = ["DigitsFusedTask", "DIGITS_MLP", "DIGITS_CNN"]

FUSED_OPTIMIZERS = OPTIMIZERS + ("adagrad",)
_SCHEDULES = ("constant", "step", "cosine")


def _optimizer_name(config: Mapping[str, Any]) -> str:
    value = config.get("optimizer", "adam")
    if not isinstance(value, str) or value.lower() not in FUSED_OPTIMIZERS:
        raise ConfigError("config.optimizer", value, f"must be one of {list(FUSED_OPTIMIZERS)}")
    return value.lower()


def _flag(config: Mapping[str, Any], key: str) -> bool:
    return check_bool(f"config.{key}", config.get(key, False))


def _schedule(config: Mapping[str, Any], epochs: int, steps_per_epoch: int) -> Schedule:
    kind = config.get("lr_schedule", "constant")
    if kind not in _SCHEDULES:
        raise ConfigError("config.lr_schedule", kind, f"must be one of {list(_SCHEDULES)}")
    warmup = check_integer("config.warmup_epochs", config.get("warmup_epochs", 0), low=0)
    return Schedule(
        kind=kind, warmup_steps=warmup * steps_per_epoch,
        step_size=_count(config, "lr_step_epochs", 1) * steps_per_epoch,
        gamma=_number(config, "lr_gamma", 0.1, low=0.0, low_open=True),
        total_steps=epochs * steps_per_epoch,
        min_factor=_number(config, "lr_min_factor", 0.0, low=0.0, high=1.0))


class DigitsFusedTask(FusableTask):
    """The digits MLP (``kind="mlp"``) or CNN (``kind="cnn"``) as a fusable task."""

    def __init__(self, kind: str):
        if kind not in ("mlp", "cnn"):
            raise ConfigError("task.kind", kind, "must be 'mlp' or 'cnn'")
        self.kind = kind
        self.name = f"digits_{kind}"
        self.architecture_keys = ("hidden",) if kind == "mlp" else ("channels", "hidden")

    def _settings(self, config: Mapping[str, Any], max_steps: int | None = None):
        _optimizer_name(config)  # validated here: parse_settings knows only the plain four
        rest = {k: v for k, v in config.items() if k != "optimizer"}
        return parse_settings(rest, max_steps)

    def build_model(self, config: Mapping[str, Any]) -> nn.Module:
        s = self._settings(config)
        if self.kind == "mlp":
            return build_mlp(s.hidden, s.dropout)
        return build_cnn(_count(config, "channels", 16), s.hidden, s.dropout)

    def optimizer(self, config: Mapping[str, Any], steps_per_epoch: int) -> OptimizerConfig:
        s, kind = self._settings(config), _optimizer_name(config)
        nesterov = _flag(config, "nesterov")
        if nesterov and kind != "sgd":
            raise ConfigError("config.nesterov", nesterov, "applies to optimizer 'sgd' only")
        return OptimizerConfig(kind=kind, lr=s.lr, weight_decay=s.weight_decay,
                               momentum=s.momentum if kind == "sgd" else 0.0,
                               nesterov=nesterov,
                               schedule=_schedule(config, s.epochs, steps_per_epoch))

    def batch_size(self, config: Mapping[str, Any]) -> int:
        return self._settings(config).batch_size

    def max_steps(self, config: Mapping[str, Any], default: int | None) -> int:
        return self._settings(config, default).epochs

    def train_data(self) -> tuple[torch.Tensor, torch.Tensor]:
        x, y, _, _ = load_digits_split()
        return x, y

    def val_data(self) -> tuple[torch.Tensor, torch.Tensor]:
        _, _, x, y = load_digits_split()
        return x, y

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(outputs, targets, reduction="none")

    def metrics(self, outputs: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
        loss = nn.functional.cross_entropy(outputs, targets).item()
        accuracy = (outputs.argmax(dim=1) == targets).to(outputs.dtype).mean().item()
        return {"accuracy": accuracy, "loss": loss}


DIGITS_MLP = DigitsFusedTask("mlp")
DIGITS_CNN = DigitsFusedTask("cnn")
