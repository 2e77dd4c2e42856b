"""Built-in trainables on scikit-learn's bundled digits (1797 images of 8x8 pixels, 10 classes).

``train_mlp`` (``digits_mlp``) and ``train_cnn`` (``digits_cnn``) follow the contract of
``hypersack.runtime.context``: one step per epoch, a checkpoint before every report, and a resume
from ``ctx.restore()`` that continues exactly as an uninterrupted run would.

The data never needs a download: the last 20% (360 samples) of a fixed permutation (numpy
Generator, seed 0) is the validation set, the rest trains; pixels are scaled to [0, 1].

Config keys (anything else is ignored):

- ``lr`` (1e-3): learning rate, > 0.
- ``weight_decay`` (0.0): L2 penalty (decoupled for ``adamw``), >= 0.
- ``batch_size`` (32): training mini-batch size, >= 1.
- ``hidden`` (64): width of the hidden layers (both MLP layers; the CNN's dense layer), >= 1.
- ``optimizer`` ("adam"): one of "adam", "adamw", "sgd", "rmsprop".
- ``momentum`` (0.9): momentum of "sgd" only, in [0, 1).
- ``epochs`` (``ctx.max_steps`` if set, else 10): epochs to train, >= 1. One epoch is one step.
- ``dropout`` (0.0): dropout probability after each hidden layer, in [0, 1).
- ``channels`` (16, CNN only): channels of the first convolution (the second has twice as many).

Each epoch reports ``accuracy`` and ``loss`` (validation accuracy and mean cross-entropy) and
``train_loss`` (mean training cross-entropy over the epoch's batches).
"""
from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from hypersack.errors import ConfigError, MissingDependencyError, TrialStopped

try:
    import torch
    from torch import nn
except ImportError as exc:  # pragma: no cover - exercised only without the extra installed
    raise MissingDependencyError("The digits workloads", "torch", "workloads") from exc

__all__ = ["train_mlp", "train_cnn", "load_digits_split"]

OPTIMIZERS = ("adam", "adamw", "sgd", "rmsprop")
VALIDATION_FRACTION = 0.2
SPLIT_SEED = 0


@dataclass(frozen=True)
class Settings:
    """The config keys every digits trainable shares, validated."""
    lr: float
    weight_decay: float
    batch_size: int
    hidden: int
    optimizer: str
    momentum: float
    epochs: int
    dropout: float


# ---- config ------------------------------------------------------------------------------------

def _number(config: Mapping[str, Any], key: str, default: float,
            ok: Callable[[float], bool], problem: str) -> float:
    value = config.get(key, default)
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not ok(float(value)):
        raise ConfigError(f"config.{key}", value, problem)
    return float(value)


def _count(config: Mapping[str, Any], key: str, default: int) -> int:
    """A positive integer; integral floats (32.0) are accepted."""
    value = config.get(key, default)
    integral = isinstance(value, numbers.Real) and not isinstance(value, bool) \
        and float(value).is_integer()
    if not integral or value < 1:
        raise ConfigError(f"config.{key}", value, "must be an integer >= 1")
    return int(value)


def _optimizer_name(config: Mapping[str, Any]) -> str:
    value = config.get("optimizer", "adam")
    if not isinstance(value, str) or value.lower() not in OPTIMIZERS:
        raise ConfigError("config.optimizer", value, f"must be one of {list(OPTIMIZERS)}")
    return value.lower()


def parse_settings(config: Mapping[str, Any], max_steps: int | None) -> Settings:
    """Validate the shared config keys; ``max_steps`` is the default number of epochs."""
    return Settings(
        lr=_number(config, "lr", 1e-3, lambda v: v > 0, "must be a number > 0"),
        weight_decay=_number(config, "weight_decay", 0.0, lambda v: v >= 0,
                             "must be a number >= 0"),
        batch_size=_count(config, "batch_size", 32),
        hidden=_count(config, "hidden", 64),
        optimizer=_optimizer_name(config),
        momentum=_number(config, "momentum", 0.9, lambda v: 0 <= v < 1,
                         "must be a number in [0, 1)"),
        epochs=_count(config, "epochs", max_steps if max_steps else 10),
        dropout=_number(config, "dropout", 0.0, lambda v: 0 <= v < 1,
                        "must be a number in [0, 1)"),
    )


# ---- data --------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def load_digits_split() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(x_train, y_train, x_val, y_val)`` on the CPU, loaded once per process.

    Inputs are float32 of shape (n, 64) scaled to [0, 1]; labels are int64.
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:
        raise MissingDependencyError("The digits workloads", "scikit-learn", "workloads") from exc
    data = load_digits()
    order = np.random.default_rng(SPLIT_SEED).permutation(len(data.target))
    n_val = math.ceil(len(order) * VALIDATION_FRACTION)  # 360 of 1797
    train_idx, val_idx = order[:-n_val], order[-n_val:]
    x = torch.as_tensor(data.data / 16.0, dtype=torch.float32)
    y = torch.as_tensor(data.target, dtype=torch.int64)
    return x[train_idx], y[train_idx], x[val_idx], y[val_idx]


def _epoch_seed(seed: int, epoch: int) -> int:
    """A 63-bit seed derived from (trial seed, epoch), so each epoch's randomness is reproducible."""
    sequence = np.random.SeedSequence([seed & 0xFFFF_FFFF_FFFF_FFFF, epoch])
    return int(sequence.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))


# ---- models ------------------------------------------------------------------------------------

def build_mlp(hidden: int, dropout: float) -> nn.Module:
    return nn.Sequential(
        nn.Linear(64, hidden), nn.ReLU(), nn.Dropout(dropout),
        nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(dropout),
        nn.Linear(hidden, 10),
    )


def build_cnn(channels: int, hidden: int, dropout: float) -> nn.Module:
    return nn.Sequential(
        nn.Unflatten(1, (1, 8, 8)),
        nn.Conv2d(1, channels, 3, padding=1), nn.ReLU(),
        nn.Conv2d(channels, 2 * channels, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(2 * channels * 4 * 4, hidden), nn.ReLU(), nn.Dropout(dropout),
        nn.Linear(hidden, 10),
    )


def build_optimizer(model: nn.Module, settings: Settings) -> torch.optim.Optimizer:
    params, lr, wd = model.parameters(), settings.lr, settings.weight_decay
    if settings.optimizer == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=wd)
    if settings.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=wd)
    if settings.optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=settings.momentum, weight_decay=wd)
    return torch.optim.RMSprop(params, lr=lr, weight_decay=wd)


# ---- training ----------------------------------------------------------------------------------

def _train_epoch(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor,
                 y: torch.Tensor, batch_size: int, seed: int) -> float:
    """One shuffled pass over (x, y); returns the mean batch loss."""
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(y), generator=generator).to(x.device)
    torch.manual_seed(seed)  # dropout masks: reproducible per epoch, hence across a resume
    model.train()
    losses = []
    for start in range(0, len(y), batch_size):
        batch = order[start:start + batch_size]
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x[batch]), y[batch])
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return torch.stack(losses).mean().item()


@torch.no_grad()
def _evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """``(accuracy, mean cross-entropy)`` on the whole of (x, y)."""
    model.eval()
    logits = model(x)
    loss = nn.functional.cross_entropy(logits, y).item()
    accuracy = (logits.argmax(dim=1) == y).float().mean().item()
    return accuracy, loss


def _fit(build: Callable[[], nn.Module], settings: Settings, ctx: Any) -> None:
    """Train ``build()`` for ``settings.epochs`` epochs, resuming from ``ctx.restore()``."""
    x_train, y_train, x_val, y_val = (t.to(ctx.device) for t in load_digits_split())
    torch.manual_seed(ctx.seed)
    model = build().to(ctx.device)
    optimizer = build_optimizer(model, settings)
    first_epoch = 1
    state = ctx.restore()
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        first_epoch = int(state["epoch"]) + 1
    for epoch in range(first_epoch, settings.epochs + 1):
        if ctx.should_stop():  # a stop asked after the last report: skip the wasted epoch
            raise TrialStopped()
        train_loss = _train_epoch(model, optimizer, x_train, y_train, settings.batch_size,
                                  _epoch_seed(ctx.seed, epoch))
        accuracy, loss = _evaluate(model, x_val, y_val)
        ctx.checkpoint({"epoch": epoch, "model": model.state_dict(),
                        "optimizer": optimizer.state_dict()})
        ctx.report(epoch, accuracy=accuracy, loss=loss, train_loss=train_loss)


def train_mlp(config: Mapping[str, Any], ctx: Any) -> None:
    """An MLP 64 -> hidden -> hidden -> 10 (ReLU, optional dropout) on the digits."""
    settings = parse_settings(config, ctx.max_steps)
    _fit(lambda: build_mlp(settings.hidden, settings.dropout), settings, ctx)


def train_cnn(config: Mapping[str, Any], ctx: Any) -> None:
    """A two-convolution CNN on the digits as 1x8x8 images (see the module docstring)."""
    settings = parse_settings(config, ctx.max_steps)
    channels = _count(config, "channels", 16)
    _fit(lambda: build_cnn(channels, settings.hidden, settings.dropout), settings, ctx)
