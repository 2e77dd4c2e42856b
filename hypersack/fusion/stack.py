"""One fused stack: N members of one architecture and one optimizer kind as one vmapped model.

Every per-member quantity is a row of a stacked tensor (first dimension = member): parameters,
buffers (BatchNorm running statistics), optimizer state, hyperparameters, schedule, dropout
rates, the member's shuffled order of the training set for its current epoch, its optimizer-step
count and its running training loss. Loading a member appends a row to every tensor; freeing
removes it. Nothing else in the stack depends on N, so members come and go between iterations
without restarting anything.

One training iteration (``train_iteration``):

1. Members whose epoch ended start the next one: their order is ``randperm(n)`` from a
   ``torch.Generator`` seeded with ``epoch_seed(seed, epoch)`` (the digits trainables' rule).
2. Each member takes its next ``b_i`` indices (fewer at the end of the epoch); the pack batch is
   padded to ``B = max b_i``, and one gather reads the batch of all N members from the data set,
   which sits on the device once for the whole pack.
3. One vmapped forward; each member's loss is the mean over its own valid rows (padding has
   weight 0), so its gradient is exactly that of a lone step on its own batch.
4. One fused optimizer step (``hypersack.fusion.optim``) with each member's own learning rate
   from its schedule at its own step count.

A member's epoch ends when it has seen each training sample exactly once; members with
different batch sizes end epochs at different iterations and simply go on with their next epoch,
so no slot ever idles.

"Alone" means this same stack with N = 1: a member's parameters after k steps are the same
(to floating-point rounding of batched versus single matrix products) whichever members share
its pack, its slot, and whether it was checkpointed and resumed in between.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any, Mapping, cast

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, vmap

from hypersack.errors import ConfigError
from hypersack.fusion.layers import (batchnorm_layers, dropout_feature_shapes, dropout_layers,
                                     member_key, uniform_stream)
from hypersack.fusion.optim import OptimizerConfig, fused_step, hparam_rows, init_state
from hypersack.fusion.task import FusableTask, Member

__all__ = ["PackData", "FusedStack", "epoch_seed", "CHECKPOINT_FORMAT"]

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


class FusedStack:
    """Members of one architecture and optimizer kind, trained together (see module docstring).

    ``template`` is any member's model after ``prepare_module``; it fixes the architecture.
    """

    def __init__(self, task: FusableTask, kind: str, template: nn.Module, data: PackData):
        self.task, self.kind, self.data = task, kind, data
        self.base = copy.deepcopy(template).train()
        self.param_names = [n for n, _ in template.named_parameters()]
        self.buffer_names = [n for n, _ in template.named_buffers()]
        self._dropouts = [m for _, m in dropout_layers(self.base)]
        self._norms = [m for _, m in batchnorm_layers(self.base)]
        self._drop_shapes = dropout_feature_shapes(template, data.x_train[0])
        # The pack's floating type: the parameters', since inputs may be integers (token ids).
        self.dtype = next((p.dtype for p in template.parameters() if p.is_floating_point()),
                          data.x_train.dtype)
        self.rows: dict[str, torch.Tensor] = {}
        self.host: dict[str, np.ndarray] = {}
        self.slots: list[Slot] = []
        self._arange = torch.arange(data.n, device=data.x_train.device)

    def __len__(self) -> int:
        return len(self.slots)

    # ---- load and free -------------------------------------------------------------------------

    def add(self, member: Member, model: nn.Module, optimizer: OptimizerConfig, batch_size: int,
            max_steps: int) -> None:
        """Append ``member`` (its prepared model on the pack's device and dtype)."""
        rows, host = self._member_rows(member, model, optimizer, batch_size)
        for k, v in rows.items():
            old = self.rows.get(k)
            self.rows[k] = v.unsqueeze(0) if old is None else torch.cat([old.detach(), v[None]])
        for name, values in host.items():
            self.host[name] = np.append(self.host.get(name, np.zeros(0, dtype=values.dtype)), values)
        self.slots.append(Slot(member, max_steps, optimizer))
        self._releaf()

    def remove(self, indices: list[int]) -> None:
        """Free the members at ``indices`` (rows of every stacked tensor)."""
        drop = set(indices)
        keep = [i for i in range(len(self.slots)) if i not in drop]
        sel = torch.tensor(keep, dtype=torch.int64, device=self._arange.device)
        self.rows = {k: v.detach()[sel] for k, v in self.rows.items()}
        self.host = {k: v[keep] for k, v in self.host.items()}
        self.slots = [self.slots[i] for i in keep]
        self._releaf()

    def _releaf(self) -> None:
        for name in self.param_names:
            key = "p." + name
            self.rows[key] = self.rows[key].detach().requires_grad_(True)

    def _member_rows(self, member: Member, model: nn.Module, optimizer: OptimizerConfig,
                     batch_size: int) -> tuple[dict[str, torch.Tensor], dict[str, np.ndarray]]:
        state = model.state_dict()
        device, dtype = self._arange.device, self.dtype
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
        for i in np.flatnonzero(self.host["pos"] >= n):
            seed = epoch_seed(int(self.host["seed"][i]), int(self.host["epoch"][i]) + 1)
            order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
            with torch.no_grad():
                self.rows["order"][i] = order.to(self._arange.device)
                self.rows["loss_sum"][i] = 0
            self.host["pos"][i] = 0
            self.host["loss_count"][i] = 0

    def train_iteration(self) -> list[int]:
        """One optimizer step for every member; returns the members whose epoch just ended."""
        self._start_epochs()
        n, rows, device = self.data.n, self.rows, self._arange.device
        counts_h = np.minimum(self.host["batch"], n - self.host["pos"])
        width = int(self.host["batch"].max())
        pos = torch.as_tensor(self.host["pos"], device=device)
        counts = torch.as_tensor(counts_h, device=device)
        span = self._arange[:width]
        idx = rows["order"].gather(1, (pos[:, None] + span[None]).clamp(max=n - 1))
        valid = (span[None] < counts[:, None]).to(self.dtype)
        outputs = self._forward(self.data.x_train[idx], self._dropout_masks(width), valid)
        per_sample = self.task.loss(outputs.flatten(0, 1), self.data.y_train[idx].flatten(0, 1))
        member_loss = (per_sample.view(len(self), width) * valid).sum(1) / counts.to(valid.dtype)
        member_loss.sum().backward()
        params = self._params()
        fused_step(self.kind, params, {k: cast(torch.Tensor, p.grad) for k, p in params.items()},
                   self._prefixed("o."), self._prefixed("h."), rows["iter"])
        for p in params.values():
            p.grad = None
        with torch.no_grad():
            rows["iter"] += 1
            rows["loss_sum"] += member_loss.detach()
        self.host["pos"] = self.host["pos"] + counts_h
        self.host["loss_count"] = self.host["loss_count"] + 1
        ended = self.host["pos"] >= n
        self.host["epoch"] = self.host["epoch"] + ended
        return np.flatnonzero(ended).tolist()

    def _params(self) -> dict[str, torch.Tensor]:
        return {n: self.rows["p." + n] for n in self.param_names}

    def _buffers(self) -> dict[str, torch.Tensor]:
        return {n: self.rows["b." + n] for n in self.buffer_names}

    def _prefixed(self, prefix: str) -> dict[str, torch.Tensor]:
        return {k[len(prefix):]: v for k, v in self.rows.items() if k.startswith(prefix)}

    def _dropout_masks(self, width: int) -> dict[int, torch.Tensor]:
        """Scaled keep-masks ``[N, width, *features]`` per dropout layer some member uses."""
        masks = {}
        dtype = self.dtype
        for i, shape in enumerate(self._drop_shapes):
            if shape is None or not np.any(self.host[f"drop.{i}"] > 0):
                continue
            p = self.rows[f"drop.{i}"].view((-1,) + (1,) * (len(shape) + 1))
            u = uniform_stream(self.rows["key"], self.rows["iter"], i, (width, *shape), dtype)
            masks[i] = (u >= p).to(dtype) / (1 - p)
        return masks

    def _forward(self, x: torch.Tensor, masks: dict[int, torch.Tensor],
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
        sel = torch.tensor(indices, dtype=torch.int64, device=self._arange.device)
        params = {k: v.detach()[sel] for k, v in self._params().items()}
        buffers = {k: v[sel] for k, v in self._buffers().items()}
        self.base.eval()
        try:
            outputs = vmap(lambda p, b, x: functional_call(self.base, (p, b), (x,)),
                           in_dims=(0, 0, None))(params, buffers, self.data.x_val)
        finally:
            self.base.train()
        train_loss = (self.rows["loss_sum"][sel].cpu() / torch.as_tensor(
            self.host["loss_count"][indices]).clamp(min=1)).tolist()
        results = []
        for j in range(len(indices)):
            metrics = dict(self.task.metrics(outputs[j], self.data.y_val))
            metrics["train_loss"] = float(train_loss[j])
            results.append(metrics)
        return results

    def member_state(self, i: int) -> dict[str, Any]:
        """The checkpoint of member ``i`` at an epoch boundary (CPU tensors, plain numbers).

        ``model`` is a ``state_dict`` of the task's own architecture (loadable into
        ``task.build_model(config)``); ``optimizer.state`` has the rows of ``init_state``.
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
