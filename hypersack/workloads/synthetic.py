"""What the GPU-sized workloads share: synthetic data, settings, one training loop, one fused task.

The GPU workloads (``hypersack.workloads.vision``: ResNet-18 and MobileNet-v3-small on
CIFAR-10-shaped images; ``hypersack.workloads.lm``: a Pythia-31M-class GPT) are each a
:class:`Workload`: a model factory, a data generator and a per-sample loss. From one workload come
both a plain trainable (``fit``: ``train(config, ctx)``) and a :class:`SyntheticTask` (a
``hypersack.fusion.FusableTask``) that take the same configs, the same data, the same
initialisation (torch seeded with the trial seed) and the same per-epoch shuffling
(``randperm`` seeded by ``epoch_seed(seed, epoch)``), so a member trained alone in a pack follows
the plain trainable to rounding (optimizers: torch.optim against the fused ones; dropout masks
differ by design, see ``hypersack.fusion.layers``).

Data is synthetic and needs no download: it is drawn from a fixed seed (``DATA_SEED``) with a CPU
generator, the same on every machine, and moved to the device once; every batch is an index into
the device-resident tensors, so no input pipeline ever stalls the GPU. The task is learnable
(images: class prototypes plus noise; tokens: a noisy fixed bigram chain), so accuracy and loss
move like a real study's.

Config keys shared by every GPU workload (anything unknown is ignored):

- ``lr`` (1e-3) > 0; ``weight_decay`` (0.0) >= 0; ``optimizer`` ("adam"): "adam", "adamw",
  "sgd", "rmsprop"; ``momentum`` (0.9, "sgd" only) in [0, 1).
- ``batch_size`` (workload default) >= 1: the training mini-batch.
- ``epochs`` (``ctx.max_steps`` if set, else 2) >= 1: one step of the study is one epoch over
  ``train_size`` samples.
- ``width`` (workload default) >= 1: the model's width (see each workload).
- ``train_size`` / ``val_size`` (workload defaults) >= 1: samples drawn for training / validation.
  They shape the data, so in a fused pack they must equal the task's own.

``data`` ("synthetic") selects the input: "synthetic" as above, or "pipeline": host-memory data
(uint8 images, token sequences) through a DataLoader with ``cpus`` - 1 worker processes and the
usual CPU augmentation (``hypersack.workloads.pipeline``); ``cpus`` (3 with a pipeline, else 1)
is also the trial's host-core demand in placement. Fused packs use the synthetic data.

``fit(..., precision)``: "fp32" (default, exact), "bf16" or "fp16" (a study's ``precision``,
through ``hypersack.workloads.at_precision``): the training step under
``hypersack.fusion.precision.PlainPrecision``, as a fused pack of the same study trains;
validation runs in fp32, as a pack's does.

Every epoch reports ``loss`` (validation), ``train_loss`` (mean over the epoch's batches),
``steps`` (optimizer steps so far), ``workers`` and the workload's own metrics (``accuracy`` for
the image models, ``perplexity`` for the language model). Data-parallel trials
(``ctx.world.size`` = k > 1) wrap the model in DistributedDataParallel and split each global batch
of ``batch_size`` x k samples between the ranks, as the digits trainables do.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from hypersack.errors import ConfigError, MissingDependencyError, TrialStopped

try:
    import torch
    from torch import nn
except ImportError as exc:  # pragma: no cover - exercised only without the extra installed
    raise MissingDependencyError("The GPU workloads", "torch", "workloads") from exc

from hypersack.fusion.optim import OptimizerConfig
from hypersack.fusion.precision import PlainPrecision
from hypersack.fusion.task import FusableTask
from hypersack.workloads.digits import (_choice, _count, _epoch_seed, _number, build_optimizer,
                                        _optimizer_name)

__all__ = ["Workload", "Settings", "SyntheticTask", "fit", "parse_settings", "save_and_report",
           "train_epoch", "evaluate", "build_optimizer", "DATA_SEED"]

DATA_SEED = 0
Data = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class Settings:
    """The validated config keys every GPU workload shares."""
    lr: float
    weight_decay: float
    optimizer: str
    momentum: float
    batch_size: int
    epochs: int
    train_size: int
    val_size: int


@dataclass(frozen=True)
class Workload:
    """One GPU workload: how to build its model and data from a config, and its loss.

    ``build(config)``: a new ``nn.Module`` (torch's RNG is seeded by the caller).
    ``data(config)``: ``(x_train, y_train, x_val, y_val)`` on the CPU for the config's data keys.
    ``per_sample_loss(outputs, targets)``: loss ``[B]`` without reduction.
    ``metrics(outputs, targets)``: validation metrics (``loss`` included) of one model.
    ``model_keys``: config keys that shape the model; ``data_keys``: keys that shape the data
    (both must be equal within a pack). ``defaults``: this workload's defaults for shared keys.
    """
    name: str
    build: Callable[[Mapping[str, Any]], nn.Module]
    data: Callable[[Mapping[str, Any]], Data]
    per_sample_loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    metrics: Callable[[torch.Tensor, torch.Tensor], dict[str, float]]
    model_keys: tuple[str, ...]
    data_keys: tuple[str, ...]
    defaults: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)
    eval_batch: int = 256
    inputs: str = "images"    # what ``data: pipeline`` loads: "images" (uint8, augmented) or "tokens"

    def with_defaults(self, config: Mapping[str, Any]) -> dict[str, Any]:
        return {**self.defaults, **config}


# ---- config ------------------------------------------------------------------------------------

def parse_settings(config: Mapping[str, Any], max_steps: int | None) -> Settings:
    """Validate the shared keys of a config that already carries the workload's defaults."""
    return Settings(
        lr=_number(config, "lr", 1e-3, low=0.0, low_open=True),
        weight_decay=_number(config, "weight_decay", 0.0, low=0.0),
        optimizer=_optimizer_name(config),
        momentum=_number(config, "momentum", 0.9, low=0.0, high=1.0, high_open=True),
        batch_size=_count(config, "batch_size", 32),
        epochs=_count(config, "epochs", max_steps if max_steps else 2),
        train_size=_count(config, "train_size", 1024),
        val_size=_count(config, "val_size", 256))


def dropout_rate(config: Mapping[str, Any]) -> float:
    return _number(config, "dropout", 0.0, low=0.0, high=1.0, high_open=True)


def count(config: Mapping[str, Any], key: str, default: int) -> int:
    """A positive integer config value (re-exported for the workload modules)."""
    return _count(config, key, default)


def choice(config: Mapping[str, Any], key: str, default: str, allowed: tuple[str, ...]) -> str:
    return _choice(config, key, default, allowed)


# ---- the plain trainable -----------------------------------------------------------------------

def save_and_report(ctx: Any, step: int, state: Mapping[str, Any], **metrics: Any) -> None:
    """The one place the GPU workloads pair a step's checkpoint with its report: both become
    durable together (``ctx.report(step, checkpoint=...)``), so a restore returns the state of
    the last durable report, never a newer one."""
    ctx.report(step, checkpoint=dict(state), **metrics)


def train_epoch(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor,
                y: torch.Tensor, batch_size: int, seed: int,
                loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                world: Any = None, profiler: Any = None,
                amp: PlainPrecision | None = None) -> tuple[float, int]:
    """One shuffled pass (``randperm`` seeded by ``seed``); returns (mean batch loss, steps).

    ``loss_fn`` gives per-sample losses; each step minimises their mean over the batch. With a
    ``world`` of size k each step takes ``batch_size`` x k samples and this rank its slice.
    ``amp``: the step's precision (None: fp32)."""
    from hypersack.runtime.devices.profiler import NullProfiler
    profiler = profiler if profiler is not None else NullProfiler()
    amp = amp if amp is not None else PlainPrecision("fp32", x.device)
    rank, size = (world.rank, world.size) if world is not None else (0, 1)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed)).to(x.device)
    model.train()
    losses, step_size = [], batch_size * size
    for start in range(0, len(y), step_size):
        with profiler.iteration():
            batch = torch.tensor_split(order[start:start + step_size], size)[rank]
            inputs, targets = x[batch], y[batch]
            profiler.data_loaded()
            optimizer.zero_grad(set_to_none=True)
            with amp.autocast():
                if len(batch):
                    loss = loss_fn(model(amp.inputs(inputs)), targets).mean()
                else:   # a short last batch left this rank nothing: join the all-reduce with 0
                    loss = model(amp.inputs(x[:1])).sum() * 0.0
            amp.step(loss, model, optimizer)
        losses.append(loss.detach())
    return torch.stack(losses).mean().item(), len(losses)


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor,
             metrics: Callable[[torch.Tensor, torch.Tensor], dict[str, float]],
             batch: int) -> dict[str, float]:
    """``metrics`` of the whole validation set (outputs computed ``batch`` samples at a time)."""
    model.eval()
    outputs = torch.cat([model(x[i:i + batch]) for i in range(0, len(x), batch)])
    return metrics(outputs, y)


def fit(workload: Workload, config: Mapping[str, Any], ctx: Any, precision: str = "fp32") -> None:
    """Train ``workload`` for ``epochs`` epochs on ``ctx.device`` at ``precision``, resuming
    from ``ctx.restore()``."""
    config = workload.with_defaults(config)
    s = parse_settings(config, ctx.max_steps)
    amp = PlainPrecision(precision, ctx.device)
    train_one_epoch, x_val, y_val = _epoch_runner(workload, config, s, ctx, amp)
    torch.manual_seed(ctx.seed)
    model = amp.prepare(workload.build(config).to(ctx.device))
    optimizer = build_optimizer(model, s)
    first_epoch, steps, workers = 1, 0, ctx.world.size
    state = ctx.restore()
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        amp.load_state_dict(state.get("loss_scale", {}))
        first_epoch, steps = int(state["epoch"]) + 1, int(state["steps"])
    trained = model
    if workers > 1:
        from torch.nn.parallel import DistributedDataParallel
        trained = DistributedDataParallel(model)
    for epoch in range(first_epoch, s.epochs + 1):
        if ctx.should_stop():   # a stop asked after the last report: skip the wasted epoch
            raise TrialStopped()
        train_loss, taken = train_one_epoch(trained, optimizer, _epoch_seed(ctx.seed, epoch))
        steps += taken
        metrics = evaluate(model, x_val, y_val, workload.metrics, workload.eval_batch)
        save_and_report(ctx, epoch, {"epoch": epoch, "steps": steps, "model": model.state_dict(),
                                     "optimizer": optimizer.state_dict(),
                                     **_scale_state(amp)},
                        train_loss=train_loss, steps=steps, workers=workers, **metrics)


def _scale_state(amp: PlainPrecision) -> dict[str, Any]:
    """The checkpoint's ``loss_scale`` entry (fp16 only: fp32 checkpoints keep their keys)."""
    scale = amp.state_dict()
    return {"loss_scale": scale} if scale else {}


EpochRunner = Callable[[nn.Module, torch.optim.Optimizer, int], tuple[float, int]]


def _epoch_runner(workload: Workload, config: Mapping[str, Any], s: Settings,
                  ctx: Any, amp: PlainPrecision) -> tuple[EpochRunner, torch.Tensor, torch.Tensor]:
    """``(run, x_val, y_val)``: ``run(model, optimizer, epoch_seed) -> (train loss, steps)`` for
    the config's ``data`` mode (``synthetic``: device-resident tensors; ``pipeline``:
    ``workloads.pipeline``), and the validation tensors on the device."""
    from hypersack.core.demand import data_mode
    profiler = getattr(ctx, "profiler", None)
    if data_mode(config) == "pipeline":
        from hypersack.workloads.pipeline import pipeline_data, train_epoch_loader
        host = cached_data(workload, config) if workload.inputs == "tokens" else None
        dataset, x_val, y_val = pipeline_data(config, workload.inputs, host, DATA_SEED)

        def run(model: nn.Module, optimizer: torch.optim.Optimizer, seed: int) -> tuple[float, int]:
            return train_epoch_loader(model, optimizer, dataset, config, s.batch_size, seed,
                                      workload.per_sample_loss, ctx.device, ctx.world, profiler,
                                      amp)
    else:
        x_train, y_train, x_val, y_val = cached_data(workload, config)
        x_train, y_train = x_train.to(ctx.device), y_train.to(ctx.device)

        def run(model: nn.Module, optimizer: torch.optim.Optimizer, seed: int) -> tuple[float, int]:
            return train_epoch(model, optimizer, x_train, y_train, s.batch_size, seed,
                               workload.per_sample_loss, ctx.world, profiler, amp)
    return run, x_val.to(ctx.device), y_val.to(ctx.device)


_DATA: dict[tuple, Data] = {}
_DATA_KEEP = 2     # data sets kept per process (a worker usually sees one)


def cached_data(workload: Workload, config: Mapping[str, Any]) -> Data:
    """The workload's data for ``config``'s data keys, generated once per process."""
    signature = (workload.name,) + tuple((k, config.get(k)) for k in workload.data_keys)
    if signature not in _DATA:
        while len(_DATA) >= _DATA_KEEP:
            _DATA.pop(next(iter(_DATA)))
        _DATA[signature] = workload.data(dict(config))
    return _DATA[signature]


# ---- the fusable task --------------------------------------------------------------------------

class SyntheticTask(FusableTask):
    """A GPU workload as a ``hypersack.fusion.FusableTask`` over one fixed data set.

    ``data``: values of the workload's data keys for this task (unset keys take the workload's
    defaults); a member whose config asks for other data is refused (ConfigError naming the key).
    Architecture keys: the workload's model and data keys.
    """

    def __init__(self, workload: Workload, **data: Any):
        unknown = set(data) - set(workload.data_keys)
        if unknown:
            raise ConfigError("task.data", sorted(unknown),
                              f"are not data keys of {workload.name} ({list(workload.data_keys)})")
        self.workload = workload
        self.name = workload.name
        self.architecture_keys = tuple(workload.model_keys) + tuple(workload.data_keys)
        self.data = {k: workload.defaults.get(k) for k in workload.data_keys}
        self.data.update(data)
        parse_settings(workload.with_defaults(self.data), None)   # validates the sizes

    def _config(self, config: Mapping[str, Any]) -> dict[str, Any]:
        full = self.workload.with_defaults(config)
        for key, value in self.data.items():
            if full.get(key) != value:
                raise ConfigError(f"config.{key}", full.get(key),
                                  f"must be {value!r}, the data of this fused {self.name} task")
        return full

    def build_model(self, config: Mapping[str, Any]) -> nn.Module:
        return self.workload.build(self._config(config))

    def optimizer(self, config: Mapping[str, Any], steps_per_epoch: int) -> OptimizerConfig:
        s = parse_settings(self._config(config), None)
        return OptimizerConfig(kind=s.optimizer, lr=s.lr, weight_decay=s.weight_decay,
                               momentum=s.momentum if s.optimizer == "sgd" else 0.0)

    def batch_size(self, config: Mapping[str, Any]) -> int:
        return parse_settings(self._config(config), None).batch_size

    def max_steps(self, config: Mapping[str, Any], default: int | None) -> int:
        return parse_settings(self._config(config), default).epochs

    def train_data(self) -> tuple[torch.Tensor, torch.Tensor]:
        x, y, _, _ = cached_data(self.workload, self.workload.with_defaults(self.data))
        return x, y

    def val_data(self) -> tuple[torch.Tensor, torch.Tensor]:
        _, _, x, y = cached_data(self.workload, self.workload.with_defaults(self.data))
        return x, y

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.workload.per_sample_loss(outputs, targets)

    def metrics(self, outputs: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
        return self.workload.metrics(outputs, targets)

    def __repr__(self) -> str:
        return f"SyntheticTask({self.name}, {self.data})"
