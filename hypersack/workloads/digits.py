"""Built-in trainables on scikit-learn's bundled digits (1797 images of 8x8 pixels, 10 classes).

``train_mlp`` (``digits_mlp``) and ``train_cnn`` (``digits_cnn``) follow the contract of
``hypersack.runtime.worker.context``: one step per epoch, a checkpoint with every report, and a resume
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
- ``lr_scaling`` ("auto"): how the learning rate grows with data-parallel workers k: "linear"
  (lr x k), "sqrt" (lr x sqrt(k)), "none"; "auto" is linear for SGD, sqrt for the adaptive ones.
- ``lr_warmup_epochs`` (1.0): after the worker count changes, the learning rate moves linearly
  from its old to its new value over this many epochs (0: at once).

Each epoch reports ``accuracy`` and ``loss`` (validation accuracy and mean cross-entropy),
``train_loss`` (mean training cross-entropy over the epoch's batches), ``steps`` (optimizer
steps so far) and ``workers`` (data-parallel workers this epoch).

Data-parallel (``ctx.world.size`` = k > 1): the model is wrapped in DistributedDataParallel; each
optimizer step takes a global batch of ``batch_size`` x k samples, rank r training on the r-th
slice, so an epoch has ceil(n / (batch_size x k)) steps. A trial resized between epochs (RASDA)
continues from its checkpoint with the new k: same model, optimizer state, epoch and step count.
"""
from __future__ import annotations

import functools
import gzip
import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from hypersack.errors import ConfigError, MissingDependencyError, TrialStopped
from hypersack.validation import check_integer, check_number, is_finite

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
    lr_scaling: str = "auto"
    lr_warmup_epochs: float = 1.0


# ---- config ------------------------------------------------------------------------------------

def _number(config: Mapping[str, Any], key: str, default: float, **bounds: Any) -> float:
    """``config[key]`` (``default`` when absent) as a float: a finite number within ``bounds``
    (``check_number``'s ``low``, ``high``, ``low_open``, ``high_open``, ``hint``)."""
    return check_number(f"config.{key}", config.get(key, default), **bounds)


def _count(config: Mapping[str, Any], key: str, default: int) -> int:
    """A positive integer; integral floats (32.0) are accepted."""
    value = config.get(key, default)
    if is_finite(value) and float(value).is_integer():
        value = int(value)
    return check_integer(f"config.{key}", value, low=1)


def _optimizer_name(config: Mapping[str, Any]) -> str:
    value = config.get("optimizer", "adam")
    if not isinstance(value, str) or value.lower() not in OPTIMIZERS:
        raise ConfigError("config.optimizer", value, f"must be one of {list(OPTIMIZERS)}")
    return value.lower()


def parse_settings(config: Mapping[str, Any], max_steps: int | None) -> Settings:
    """Validate the shared config keys; ``max_steps`` is the default number of epochs."""
    return Settings(
        lr=_number(config, "lr", 1e-3, low=0.0, low_open=True),
        weight_decay=_number(config, "weight_decay", 0.0, low=0.0),
        batch_size=_count(config, "batch_size", 32),
        hidden=_count(config, "hidden", 64),
        optimizer=_optimizer_name(config),
        momentum=_number(config, "momentum", 0.9, low=0.0, high=1.0, high_open=True),
        epochs=_count(config, "epochs", max_steps if max_steps else 10),
        dropout=_number(config, "dropout", 0.0, low=0.0, high=1.0, high_open=True),
        lr_scaling=_choice(config, "lr_scaling", "auto", ("auto", "linear", "sqrt", "none")),
        lr_warmup_epochs=_number(config, "lr_warmup_epochs", 1.0, low=0.0, hint="(epochs)"),
    )


def _choice(config: Mapping[str, Any], key: str, default: str, allowed: tuple[str, ...]) -> str:
    value = config.get(key, default)
    if not isinstance(value, str) or value.lower() not in allowed:
        raise ConfigError(f"config.{key}", value, f"must be one of {list(allowed)}")
    return value.lower()


# ---- data --------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def load_digits_split() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(x_train, y_train, x_val, y_val)`` on the CPU, loaded once per process.

    Inputs are float32 of shape (n, 64) scaled to [0, 1]; labels are int64.
    """
    pixels, target = _digits_data()
    order = np.random.default_rng(SPLIT_SEED).permutation(len(target))
    n_val = math.ceil(len(order) * VALIDATION_FRACTION)  # 360 of 1797
    train_idx, val_idx = order[:-n_val], order[-n_val:]
    x = torch.as_tensor(pixels / 16.0, dtype=torch.float32)
    y = torch.as_tensor(target, dtype=torch.int64)
    return x[train_idx], y[train_idx], x[val_idx], y[val_idx]


def _digits_data() -> tuple[np.ndarray, np.ndarray]:
    """``(pixels (1797, 64) float64 in 0..16, labels (1797,) int)``: scikit-learn's bundled
    ``digits.csv.gz`` read as ``sklearn.datasets.load_digits`` reads it, without importing
    scikit-learn (1.5 s of CPU in every worker process); through ``load_digits`` where that
    file is not where it is expected."""
    import importlib.util
    spec = importlib.util.find_spec("sklearn")
    if spec is None:
        raise MissingDependencyError("The digits workloads", "scikit-learn", "workloads")
    for folder in spec.submodule_search_locations or ():
        path = os.path.join(folder, "datasets", "data", "digits.csv.gz")
        if os.path.isfile(path):
            with gzip.open(path, mode="rt", encoding="utf-8") as f:
                data = np.loadtxt(f, delimiter=",")
            return data[:, :-1], data[:, -1].astype(int, copy=False)
    from sklearn.datasets import load_digits
    bunch = load_digits()
    return bunch.data, bunch.target


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


def build_optimizer(model: nn.Module, settings: Any) -> torch.optim.Optimizer:
    """The torch optimizer ``settings`` names (anything with ``optimizer``, ``lr``,
    ``weight_decay`` and ``momentum``: the digits and GPU workloads' settings alike)."""
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
                 y: torch.Tensor, batch_size: int, seed: int, world: Any = None,
                 lr_at: Callable[[float], float] | None = None,
                 profiler: Any = None, amp: Any = None) -> tuple[float, int]:
    """One shuffled pass over (x, y); returns (mean batch loss, optimizer steps taken).

    With ``world`` of size k, each step's global batch is ``batch_size`` x k samples and this
    rank trains on its slice. ``lr_at(fraction of the epoch done)`` sets the learning rate;
    ``profiler`` (``ctx.profiler``) times each step for the job history; ``amp``: the step's
    precision (``hypersack.fusion.precision.PlainPrecision``; None: fp32)."""
    from hypersack.fusion.precision import PlainPrecision
    from hypersack.runtime.devices.profiler import NullProfiler
    profiler = profiler if profiler is not None else NullProfiler()
    amp = amp if amp is not None else PlainPrecision("fp32", x.device)
    rank, size = (world.rank, world.size) if world is not None else (0, 1)
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(y), generator=generator).to(x.device)
    torch.manual_seed(seed + rank)  # dropout masks: reproducible per epoch, hence across a resume
    model.train()
    losses, step_size = [], batch_size * size
    for start in range(0, len(y), step_size):
        if lr_at is not None:
            for group in optimizer.param_groups:
                group["lr"] = lr_at(start / len(y))
        with profiler.iteration():
            batch = torch.tensor_split(order[start:start + step_size], size)[rank]
            inputs, targets = x[batch], y[batch]
            profiler.data_loaded()
            optimizer.zero_grad(set_to_none=True)
            with amp.autocast():
                if len(batch):
                    loss = nn.functional.cross_entropy(model(amp.inputs(inputs)), targets)
                else:   # a short last batch left this rank nothing: join the all-reduce with 0
                    loss = model(amp.inputs(x[:1])).sum() * 0.0
            amp.step(loss, model, optimizer)
        losses.append(loss.detach())
    return torch.stack(losses).mean().item(), len(losses)


def _lr_schedule(settings: Settings, epoch: int, workers: int, since: dict[str, Any]):
    """``lr_at(fraction)`` for ``epoch``: the rate scaled for ``workers`` (RASDA's rule: linear for
    SGD, square root for the adaptive optimizers, or ``lr_scaling``), warmed up from the previous
    worker count's rate over ``lr_warmup_epochs`` epochs after the count changed at ``since``."""
    from hypersack.core.algorithms.rasda import lr_rule, warmup_factor
    rule = lr_rule(settings.optimizer) if settings.lr_scaling == "auto" else settings.lr_scaling

    def lr_at(fraction: float) -> float:
        done = (epoch - since["epoch"]) + fraction       # epochs since the change
        return settings.lr * warmup_factor(done, settings.lr_warmup_epochs, workers, rule,
                                           since["from_workers"])
    return lr_at


@torch.no_grad()
def _evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """``(accuracy, mean cross-entropy)`` on the whole of (x, y)."""
    model.eval()
    logits = model(x)
    loss = nn.functional.cross_entropy(logits, y).item()
    accuracy = (logits.argmax(dim=1) == y).float().mean().item()
    return accuracy, loss


def _fit(build: Callable[[], nn.Module], settings: Settings, ctx: Any,
         precision: str = "fp32") -> None:
    """Train ``build()`` for ``settings.epochs`` epochs at ``precision`` (fp32 | bf16 | fp16,
    ``hypersack.fusion.precision.PlainPrecision``), resuming from ``ctx.restore()``."""
    from hypersack.fusion.precision import PlainPrecision
    amp = PlainPrecision(precision, ctx.device)
    x_train, y_train, x_val, y_val = (t.to(ctx.device) for t in load_digits_split())
    torch.manual_seed(ctx.seed)
    model = amp.prepare(build().to(ctx.device))
    optimizer = build_optimizer(model, settings)
    workers = ctx.world.size
    first_epoch, steps = 1, 0
    since = {"epoch": 1, "from_workers": workers}     # when the worker count last changed
    state = ctx.restore()
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        amp.load_state_dict(state.get("loss_scale", {}))
        first_epoch, steps = int(state["epoch"]) + 1, int(state.get("steps", 0))
        since = dict(state.get("since", since))
        if int(state.get("workers", workers)) != workers:
            since = {"epoch": first_epoch, "from_workers": int(state.get("workers", workers))}
    trained = _data_parallel(model, ctx)
    for epoch in range(first_epoch, settings.epochs + 1):
        if ctx.should_stop():  # a stop asked after the last report: skip the wasted epoch
            raise TrialStopped()
        train_loss, taken = _train_epoch(trained, optimizer, x_train, y_train, settings.batch_size,
                                         _epoch_seed(ctx.seed, epoch), ctx.world,
                                         _lr_schedule(settings, epoch, workers, since),
                                         getattr(ctx, "profiler", None), amp)
        steps += taken
        accuracy, loss = _evaluate(model, x_val, y_val)
        state = {"epoch": epoch, "model": model.state_dict(), "steps": steps,
                 "optimizer": optimizer.state_dict(), "workers": workers, "since": since}
        if amp.state_dict():
            state["loss_scale"] = amp.state_dict()
        ctx.report(epoch, checkpoint=state, accuracy=accuracy, loss=loss, train_loss=train_loss,
                   steps=steps, workers=workers)


def _data_parallel(model: nn.Module, ctx: Any) -> nn.Module:
    """``model`` wrapped for data-parallel training when the trial has several workers."""
    if ctx.world.size <= 1:
        return model
    from torch.nn.parallel import DistributedDataParallel
    return DistributedDataParallel(model)


def train_mlp(config: Mapping[str, Any], ctx: Any, precision: str = "fp32") -> None:
    """An MLP 64 -> hidden -> hidden -> 10 (ReLU, optional dropout) on the digits, trained at
    ``precision`` (a study's ``precision``; fp32 is exact)."""
    settings = parse_settings(config, ctx.max_steps)
    _fit(lambda: build_mlp(settings.hidden, settings.dropout), settings, ctx, precision)


def train_cnn(config: Mapping[str, Any], ctx: Any, precision: str = "fp32") -> None:
    """A two-convolution CNN on the digits as 1x8x8 images (see the module docstring), trained
    at ``precision``."""
    settings = parse_settings(config, ctx.max_steps)
    channels = _count(config, "channels", 16)
    _fit(lambda: build_cnn(channels, settings.hidden, settings.dropout), settings, ctx, precision)
