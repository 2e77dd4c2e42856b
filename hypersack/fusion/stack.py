"""One fused stack: up to C members of one architecture and one optimizer kind as one model.

Every per-member quantity is a row of a stacked tensor (first dimension = slot): parameters,
buffers (BatchNorm running statistics), optimizer state, hyperparameters, schedule, dropout
rates, the member's shuffled order of the training set for its current epoch, its optimizer-step
count and its running training loss. The stack has C fixed slots; loading a member writes its
rows into a free slot, freeing one clears its mask (``rows["active"]``): a free slot trains on
nothing (loss weight 0) and its optimizer update is skipped (``fused_step``'s ``keep``), so
tensor shapes never change while members come and go (C doubles only when a member finds every
slot taken).

The forward is the horizontally fused model (``hypersack.fusion.hfused``: grouped convolutions,
batched matmuls, per-member BatchNorm over N x C channels) or, for a model that does not fuse,
the vmapped one (``torch.func``); which one never changes a result.

One training iteration (``train_iteration``):

1. Members whose epoch ended start the next one: their order is ``randperm(n)`` from a
   ``torch.Generator`` seeded with ``epoch_seed(seed, epoch)`` (the digits trainables' rule).
2. Each member takes its next ``b_i`` indices (fewer at the end of the epoch); the pack batch is
   padded to ``B = max b_i``, and one gather reads the batch of all members from the data set,
   which sits on the device once for the whole pack.
3. One fused forward; each member's loss is the mean over its own valid rows (padding has
   weight 0, BatchNorm statistics skip it), so its gradient is exactly that of a lone step.
4. One fused optimizer step (``hypersack.fusion.optim``) with each member's own learning rate
   from its schedule at its own step count.

Steps 2-4 are one function of persistent tensors (``_device_step``) that runs eagerly or as a
replayed CUDA graph (``hypersack.fusion.graphs``), under the pack's precision
(``hypersack.fusion.precision``).

A member's epoch ends when it has seen each training sample exactly once; members with
different batch sizes end epochs at different iterations and simply go on with their next epoch.

"Alone" means this same stack with one member: in fp32 (float64 in the tests) a member's
parameters after k steps are the same (to floating-point rounding of batched versus single
kernels) whichever members share its pack, its slot, and whether it was checkpointed and
resumed in between, with either engine.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any, Hashable, Iterator, Mapping, cast

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, vmap

from hypersack.errors import ConfigError
from hypersack.validation import check_integer
from hypersack.fusion.fused_ops import FuseContext
from hypersack.fusion.graphs import StepRunner, check_graphs
from hypersack.fusion.hfused import ENGINES, FusedProgram, choose_engine
from hypersack.fusion.layers import (batchnorm_layers, dropout_feature_shapes, dropout_layers,
                                     member_key, uniform_stream)
from hypersack.fusion.optim import (OptimizerConfig, fused_step, hparam_rows, init_state,
                                    rule_features)
from hypersack.fusion.precision import LossScale, autocast, check_precision
from hypersack.fusion.task import FusableTask, Member

__all__ = ["PackData", "FusedStack", "StackOptions", "epoch_seed", "CHECKPOINT_FORMAT"]

CHECKPOINT_FORMAT = "hypersack.fusion.member/1"


def epoch_seed(seed: int, epoch: int) -> int:
    """A 63-bit seed for (trial seed, epoch), the same derivation as the digits trainables."""
    sequence = np.random.SeedSequence([seed & 0xFFFF_FFFF_FFFF_FFFF, epoch])
    return int(sequence.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))


@dataclass
class PackData:
    """The task's data on the pack's device, loaded once and shared by every member."""
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor

    @classmethod
    def from_task(cls, task: FusableTask, device: torch.device | str,
                  dtype: torch.dtype) -> "PackData":
        def move(t: torch.Tensor) -> torch.Tensor:
            return t.to(device=device, dtype=dtype if t.is_floating_point() else t.dtype)
        x_train, y_train = task.train_data()
        x_val, y_val = task.val_data()
        return cls(move(x_train), move(y_train), move(x_val), move(y_val))

    @property
    def n(self) -> int:
        return int(self.y_train.shape[0])


@dataclass(frozen=True)
class Slot:
    """The host-side facts of one member in a stack."""
    member: Member
    max_steps: int
    optimizer: OptimizerConfig


class SlotTable:
    """A stack's members by slot: ``table[i]`` is slot i's ``Slot`` (IndexError when it is
    free); iterating yields ``Slot | None`` for every slot; ``len`` is the capacity."""

    def __init__(self, capacity: int):
        self._slots: list[Slot | None] = [None] * capacity

    def __getitem__(self, i: int) -> Slot:
        slot = self._slots[i]
        if slot is None:
            raise IndexError(f"slot {i} is free")
        return slot

    def __setitem__(self, i: int, slot: Slot | None) -> None:
        self._slots[i] = slot

    def __len__(self) -> int:
        return len(self._slots)

    def __iter__(self) -> Iterator[Slot | None]:
        return iter(self._slots)

    def free(self) -> list[int]:
        return [i for i, s in enumerate(self._slots) if s is None]

    def occupied(self) -> int:
        return sum(s is not None for s in self._slots)


@dataclass(frozen=True)
class StackOptions:
    """How a stack trains (all results equal in fp32 whatever the engine and graph mode).

    ``capacity``: slots allocated up front (doubled when a member finds none free).
    ``engine``: "auto" (horizontally fused, vmap where the model does not fuse), "hfused" or
    "vmap". ``precision``: "fp32" | "bf16" | "fp16" (``hypersack.fusion.precision``).
    ``graphs``: "auto" | "on" | "off" (``hypersack.fusion.graphs``).
    """
    capacity: int = 4
    engine: str = "auto"
    precision: str = "fp32"
    graphs: str = "auto"

    def __post_init__(self) -> None:
        check_integer("pack.capacity", self.capacity, low=1)
        if self.engine not in ENGINES:
            raise ConfigError("pack.engine", self.engine, f"must be one of {list(ENGINES)}")
        check_precision(self.precision, "pack.precision")
        check_graphs(self.graphs)


class FusedStack:
    """Members of one architecture and optimizer kind, trained together (see module docstring).

    ``template`` is any member's model after ``prepare_module``; it fixes the architecture.
    ``slots[i]`` is the member in slot i (``SlotTable``); ``len(stack)`` counts members.
    """

    def __init__(self, task: FusableTask, kind: str, template: nn.Module, data: PackData,
                 options: StackOptions | None = None):
        self.task, self.kind, self.data = task, kind, data
        self.options = options or StackOptions()
        self.base = copy.deepcopy(template).train()
        self.param_names = [n for n, _ in template.named_parameters()]
        self.buffer_names = [n for n, _ in template.named_buffers()]
        self._dropouts = [m for _, m in dropout_layers(self.base)]
        self._norms = [m for _, m in batchnorm_layers(self.base)]
        self._drop_shapes = dropout_feature_shapes(template, data.x_train[0])
        # The pack's floating type: the parameters', since inputs may be integers (token ids).
        self.dtype = next((p.dtype for p in template.parameters() if p.is_floating_point()),
                          data.x_train.dtype)
        self.device = data.x_train.device
        self.rows: dict[str, torch.Tensor] = {}
        self.host: dict[str, np.ndarray] = {}
        self.slots = SlotTable(0)
        self._arange = torch.arange(data.n, device=self.device)
        self._pos = torch.zeros(0, dtype=torch.int64, device=self.device)
        self._counts = torch.zeros(0, dtype=torch.int64, device=self.device)
        self._padded = True
        # Parts of the update rule the members use (grows as members join; graph key).
        self._features: frozenset[str] = frozenset()
        self._views: dict = {}       # FuseContext.views: reshaped buffers, kept across steps
        self._scaler = LossScale() if self.options.precision == "fp16" else None
        self.program = self._choose_engine()
        self.engine = "vmap" if self.program is None else "hfused"
        self.runner = StepRunner(self._device_step, self.options.graphs, self.device)

    def _choose_engine(self) -> FusedProgram | None:
        sample = self.data.x_train[:2].unsqueeze(0).expand(2, *self.data.x_train[:2].shape)
        rtol = 1e-9 if self.dtype == torch.float64 else 1e-3

        def vmapped(params: dict, buffers: dict, x: torch.Tensor) -> torch.Tensor:
            return vmap(lambda p, b, x: functional_call(self.base, (p, b), (x,)),
                        randomness="different")(params, buffers, x)
        return choose_engine(self.options.engine, self.base, sample, vmapped, rtol)

    def __len__(self) -> int:
        return self.slots.occupied()

    @property
    def capacity(self) -> int:
        return len(self.slots)

    # ---- load and free -------------------------------------------------------------------------

    def add(self, member: Member, model: nn.Module, optimizer: OptimizerConfig, batch_size: int,
            max_steps: int) -> int:
        """Write ``member`` (its prepared model on the pack's device and dtype) into a free slot;
        returns the slot. Shapes change only when no slot is free (capacity doubles)."""
        rows, host = self._member_rows(member, model, optimizer, batch_size)
        if len(self.slots) == 0:
            self._allocate(rows, host, self.options.capacity)
        free = self.slots.free()
        if not free:
            self._grow(rows, host)
            free = self.slots.free()
        slot = free[0]
        with torch.no_grad():
            for k, v in rows.items():
                self.rows[k][slot] = v
            self.rows["active"][slot] = True
        for name, values in host.items():
            self.host[name][slot] = values[0]
        self.host["active"][slot] = True
        self.slots[slot] = Slot(member, max_steps, optimizer)
        self._features = self._features | rule_features([optimizer])
        return slot

    def remove(self, indices: list[int]) -> None:
        """Free the slots at ``indices``: masked from now on, their rows kept until reused."""
        for i in indices:
            self.slots[i] = None
            self.host["active"][i] = False
        with torch.no_grad():
            self.rows["active"][torch.as_tensor(indices, device=self.device)] = False

    def _allocate(self, rows: dict[str, torch.Tensor], host: dict[str, np.ndarray],
                  capacity: int) -> None:
        self.rows = {k: torch.zeros((capacity, *v.shape), dtype=v.dtype, device=v.device)
                     for k, v in rows.items()}
        self.rows["active"] = torch.zeros(capacity, dtype=torch.bool, device=self.device)
        self.host = {k: np.zeros(capacity, dtype=v.dtype) for k, v in host.items()}
        self.host["active"] = np.zeros(capacity, dtype=bool)
        self.slots = SlotTable(capacity)
        self._static_buffers(capacity)
        self._releaf()

    def _grow(self, rows: dict[str, torch.Tensor], host: dict[str, np.ndarray]) -> None:
        old_rows, old_host, old_slots = self.rows, self.host, self.slots
        capacity = 2 * len(old_slots)
        self._allocate(rows, host, capacity)
        with torch.no_grad():
            for k, tensor in old_rows.items():
                self.rows[k][:len(old_slots)] = tensor.detach()
        for k, array in old_host.items():
            self.host[k][:len(old_slots)] = array
        for i, old in enumerate(old_slots):
            self.slots[i] = old
        self.runner.reset()

    def shrink(self, capacity: int) -> bool:
        """Fewer slots: the members move, in slot order, to the first ``capacity`` slots (slot
        numbers change; each member's rows, hence its results, do not). False, and nothing
        changes, when ``capacity`` is not below the capacity or is below the members held."""
        if capacity >= len(self.slots) or capacity < len(self) or capacity < 1:
            return False
        keep = [i for i, slot in enumerate(self.slots) if slot is not None]
        old_rows, old_host, old_slots = self.rows, self.host, self.slots
        template = {k: v[0] for k, v in old_rows.items() if k != "active"}
        self._allocate(template, {k: v for k, v in old_host.items() if k != "active"}, capacity)
        index = torch.as_tensor(keep, dtype=torch.int64, device=self.device)
        with torch.no_grad():
            for k, tensor in old_rows.items():
                self.rows[k][:len(keep)] = tensor.detach()[index]
        for k, array in old_host.items():
            self.host[k][:len(keep)] = array[keep]
        for new, old in enumerate(keep):
            self.slots[new] = old_slots[old]
        self.runner.reset()
        return True

    def _static_buffers(self, capacity: int) -> None:
        self._pos = torch.zeros(capacity, dtype=torch.int64, device=self.device)
        self._counts = torch.zeros(capacity, dtype=torch.int64, device=self.device)

    def _releaf(self) -> None:
        for name in self.param_names:
            key = "p." + name
            self.rows[key] = self.rows[key].detach().requires_grad_(True)

    def _member_rows(self, member: Member, model: nn.Module, optimizer: OptimizerConfig,
                     batch_size: int) -> tuple[dict[str, torch.Tensor], dict[str, np.ndarray]]:
        state = model.state_dict()
        device, dtype = self.device, self.dtype
        params = {n: state[n].detach().clone() for n in self.param_names}
        ckpt = _checked_checkpoint(member, self.kind, self.param_names)
        opt_state = init_state(optimizer, params) if ckpt is None else ckpt["optimizer"]["state"]
        rows = {"p." + n: v for n, v in params.items()}
        rows.update({"b." + n: state[n].detach().clone() for n in self.buffer_names})
        rows.update({"o." + k: v.to(device=device, dtype=params[k.split("/", 1)[1]].dtype)
                     for k, v in opt_state.items()})
        rows.update({"h." + k: v[0] for k, v in hparam_rows([optimizer], dtype, device).items()})
        iteration = 0 if ckpt is None else int(ckpt["iteration"])
        rows["iter"] = torch.tensor(iteration, dtype=torch.int64, device=device)
        rows["key"] = torch.tensor(member_key(member.seed), dtype=torch.int64, device=device)
        rows["loss_sum"] = torch.zeros((), dtype=dtype, device=device)
        rows["order"] = torch.zeros(self.data.n, dtype=torch.int64, device=device)
        if self._scaler is not None:
            rows.update({"amp." + k: v for k, v in self._scaler.rows(device).items()})
        drop_p = [float(m.p) for _, m in dropout_layers(model)]
        for i, p in enumerate(drop_p):
            rows[f"drop.{i}"] = torch.tensor(p, dtype=dtype, device=device)
        host = {"pos": np.array([self.data.n]), "batch": np.array([batch_size]),
                "epoch": np.array([0 if ckpt is None else int(ckpt["epoch"])]),
                "loss_count": np.array([0]), "seed": np.array([member.seed], dtype=object)}
        host.update({f"drop.{i}": np.array([p]) for i, p in enumerate(drop_p)})
        return rows, host

    # ---- training ------------------------------------------------------------------------------

    def epoch(self, i: int) -> int:
        """Epochs member ``i`` has completed."""
        return int(self.host["epoch"][i])

    def _start_epochs(self) -> None:
        n = self.data.n
        for i in np.flatnonzero((self.host["pos"] >= n) & self.host["active"]):
            seed = epoch_seed(int(self.host["seed"][i]), int(self.host["epoch"][i]) + 1)
            order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
            with torch.no_grad():
                self.rows["order"][i] = order.to(self.device)
                self.rows["loss_sum"][i] = 0
            self.host["pos"][i] = 0
            self.host["loss_count"][i] = 0

    def train_iteration(self) -> list[int]:
        """One optimizer step for every member; returns the slots whose epoch just ended."""
        self._start_epochs()
        n, active = self.data.n, self.host["active"]
        counts_h = np.where(active, np.minimum(self.host["batch"], n - self.host["pos"]), 0)
        width = int(self.host["batch"][active].max())
        padded = bool(np.any(counts_h[active] < width))
        with torch.no_grad():
            self._pos.copy_(torch.as_tensor(self.host["pos"].astype(np.int64)))
            self._counts.copy_(torch.as_tensor(counts_h.astype(np.int64)))
        self.runner((width, padded, self._mask_layers(), self._features))
        self.host["pos"] = np.where(active, self.host["pos"] + counts_h, self.host["pos"])
        self.host["loss_count"] = self.host["loss_count"] + active
        ended = active & (self.host["pos"] >= n)
        self.host["epoch"] = self.host["epoch"] + ended
        return np.flatnonzero(ended).tolist()

    def _mask_layers(self) -> tuple[int, ...]:
        """Dropout layers that need masks this step: all on graphs (static), else those some
        member uses (p = 0 everywhere is the identity)."""
        active = self.host["active"]
        return tuple(i for i, shape in enumerate(self._drop_shapes) if shape is not None and (
            self.runner.enabled or np.any(self.host[f"drop.{i}"][active] > 0)))

    def _device_step(self, key: Hashable) -> None:
        """The static step: gather, forward, backward, optimizer; device tensors only.
        ``key``: (padded width, any padding, dropout layers with masks, optimizer features)."""
        width, padded, layers, _ = cast(tuple, key)
        rows, n = self.rows, self.data.n
        span = self._arange[:width]
        idx = rows["order"].gather(1, (self._pos[:, None] + span[None]).clamp(max=n - 1))
        valid_b = span[None] < self._counts[:, None]
        valid = valid_b.to(self.dtype)
        self._padded = padded
        with autocast(self.options.precision, self.device):
            outputs = self._forward(self.data.x_train[idx], self._dropout_masks(width, layers),
                                    valid)
            per_sample = self.task.loss(outputs.flatten(0, 1),
                                        self.data.y_train[idx].flatten(0, 1))
        per_sample = per_sample.to(self.dtype).view(self.capacity, width)
        member_loss = torch.where(valid_b, per_sample, 0).sum(1) \
            / self._counts.clamp(min=1).to(self.dtype)
        keep = self._optimize(member_loss)
        with torch.no_grad():
            rows["iter"] += keep.to(torch.int64)
            rows["loss_sum"] += torch.where(keep, member_loss.detach(), 0)

    def _optimize(self, member_loss: torch.Tensor) -> torch.Tensor:
        """Backward and the fused update of the active slots; returns the slots updated (fp16:
        an overflowing member skips its update, parameters and state untouched)."""
        params = self._params()
        names = list(params)
        loss = member_loss if self._scaler is None else \
            self._scaler.scale(member_loss, self.rows["amp.scale"])
        found = torch.autograd.grad(loss.sum(), [params[k] for k in names], allow_unused=True)
        grads = {k: g for k, g in zip(names, found) if g is not None}
        keep = self.rows["active"]
        if self._scaler is not None:
            grads, finite = self._scaler.unscale(grads, self.rows["amp.scale"])
            self._scaler.update(self.rows["amp.scale"], self.rows["amp.growth"], finite, keep)
            keep = keep & finite
        fused_step(self.kind, params, grads, self._prefixed("o."), self._prefixed("h."),
                   self.rows["iter"], keep=keep, restore=self._scaler is not None,
                   features=self._features)
        return keep

    def _params(self) -> dict[str, torch.Tensor]:
        return {n: self.rows["p." + n] for n in self.param_names}

    def _buffers(self) -> dict[str, torch.Tensor]:
        return {n: self.rows["b." + n] for n in self.buffer_names}

    def _prefixed(self, prefix: str) -> dict[str, torch.Tensor]:
        return {k[len(prefix):]: v for k, v in self.rows.items() if k.startswith(prefix)}

    def _dropout_masks(self, width: int, layers: tuple[int, ...]) -> dict[int, torch.Tensor]:
        """Scaled keep-masks ``[C, width, *features]`` of the dropout ``layers``."""
        masks = {}
        dtype = self.dtype
        for i in layers:
            shape = self._drop_shapes[i]
            assert shape is not None
            p = self.rows[f"drop.{i}"].view((-1,) + (1,) * (len(shape) + 1))
            u = uniform_stream(self.rows["key"], self.rows["iter"], i, (width, *shape), dtype)
            masks[i] = (u >= p).to(dtype) / (1 - p)
        return masks

    def _forward(self, x: torch.Tensor, masks: dict[int, torch.Tensor],
                 valid: torch.Tensor) -> torch.Tensor:
        """Outputs ``[C, width, ...]`` of every slot; ``valid`` [C, width] marks real rows."""
        if self.program is not None:
            ctx = FuseContext(n=x.shape[0], params=self._params(), buffers=self._buffers(),
                              training=True, masks=masks,
                              row_weight=valid if self._padded else None,
                              dropout_index=self.program.dropout_index,
                              channels_last=self.options.precision != "fp32",
                              views=self._views)
            return self.program.run(ctx, x)
        return self._vmap_forward(x, masks, valid)

    def _vmap_forward(self, x: torch.Tensor, masks: dict[int, torch.Tensor],
                      valid: torch.Tensor) -> torch.Tensor:
        def member(params, buffers, x, masks, weight):
            for i, layer in enumerate(self._dropouts):
                layer.fused_mask = masks.get(i)
            for layer in self._norms:
                layer.row_weight = weight
            try:
                return functional_call(self.base, (params, buffers), (x,))
            finally:
                for layer in self._dropouts:
                    layer.fused_mask = None
                for layer in self._norms:
                    layer.row_weight = None
        return vmap(member, randomness="different")(self._params(), self._buffers(), x, masks,
                                                      valid)

    # ---- evaluation and state ------------------------------------------------------------------

    @torch.no_grad()
    def evaluate(self, indices: list[int]) -> list[dict[str, float]]:
        """Validation metrics (plus ``train_loss``, the epoch's mean batch loss) per member."""
        sel = torch.tensor(indices, dtype=torch.int64, device=self.device)
        params = {k: v.detach()[sel] for k, v in self._params().items()}
        buffers = {k: v[sel] for k, v in self._buffers().items()}
        outputs = self._eval_forward(params, buffers)
        train_loss = (self.rows["loss_sum"][sel].cpu() / torch.as_tensor(
            self.host["loss_count"][indices]).clamp(min=1)).tolist()
        results = []
        for j in range(len(indices)):
            metrics = dict(self.task.metrics(outputs[j], self.data.y_val))
            metrics["train_loss"] = float(train_loss[j])
            results.append(metrics)
        return results

    def _eval_forward(self, params: dict, buffers: dict) -> torch.Tensor:
        x_val, k = self.data.x_val, len(next(iter(params.values())))
        if self.program is not None:
            ctx = FuseContext(n=k, params=params, buffers=buffers, training=False,
                              dropout_index=self.program.dropout_index)
            return self.program.run(ctx, x_val.unsqueeze(0).expand(k, *x_val.shape))
        self.base.eval()
        try:
            return vmap(lambda p, b, x: functional_call(self.base, (p, b), (x,)),
                        in_dims=(0, 0, None))(params, buffers, x_val)
        finally:
            self.base.train()

    def member_state(self, i: int) -> dict[str, Any]:
        """The checkpoint of member ``i`` at an epoch boundary (CPU tensors, plain numbers).

        ``model`` is a ``state_dict`` of the task's own architecture (loadable into
        ``task.build_model(config)``); ``optimizer.state`` has the rows of ``init_state``. The
        format is the same whichever engine trained the member.
        """
        def cpu(t: torch.Tensor) -> torch.Tensor:
            return t.detach()[i].to("cpu", copy=True)
        model = {n: cpu(self.rows["p." + n]) for n in self.param_names}
        model.update({n: cpu(self.rows["b." + n]) for n in self.buffer_names})
        state = {k: cpu(v) for k, v in self._prefixed("o.").items()}
        return {"format": CHECKPOINT_FORMAT, "epoch": self.epoch(i),
                "iteration": int(self.rows["iter"][i]), "position": 0, "model": model,
                "optimizer": {"kind": self.kind, "state": state}}


def _checked_checkpoint(member: Member, kind: str, param_names: list[str]) -> Mapping | None:
    """The member's checkpoint if it is a fused-member state for this optimizer kind."""
    ckpt = member.checkpoint
    if ckpt is None:
        return None
    if not isinstance(ckpt, Mapping) or ckpt.get("format") != CHECKPOINT_FORMAT:
        raise ConfigError(f"member[{member.trial_id}].checkpoint", type(ckpt).__name__,
                          f"must be a state saved by a fused pack ({CHECKPOINT_FORMAT})")
    if ckpt["optimizer"]["kind"] != kind:
        raise ConfigError(f"member[{member.trial_id}].config.optimizer", kind,
                          f"differs from the checkpoint's optimizer {ckpt['optimizer']['kind']!r}")
    expected = set(init_state(OptimizerConfig(kind=kind), {n: torch.zeros(0) for n in param_names}))
    if set(ckpt["optimizer"]["state"]) != expected:
        raise ConfigError(f"member[{member.trial_id}].checkpoint", "optimizer.state",
                          "does not match the model's parameters")
    return ckpt


def steps_per_epoch(n: int, batch_size: int) -> int:
    """Optimizer steps in one epoch of ``n`` samples (the last batch may be smaller)."""
    return math.ceil(n / batch_size)
