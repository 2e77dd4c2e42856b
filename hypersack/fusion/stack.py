"""One fused stack: up to C members of one architecture as one model, whatever their optimizers.

Every per-member quantity is a row of a stacked tensor (first dimension = slot): parameters,
buffers (BatchNorm running statistics), optimizer state, hyperparameters, schedule, dropout
rates, the member's shuffled order of the training set for its current epoch, its optimizer-step
count and its running training loss. The stack has C fixed slots; loading a member writes its
rows into a free slot, freeing one clears its mask (``rows["active"]``): a free slot trains on
nothing (loss weight 0) and its optimizer update is skipped (``fused_step``'s ``keep``), so
tensor shapes never change while members come and go (C doubles only when a member finds every
slot taken, up to ``StackOptions.max_capacity``; ``shrink`` compacts the live members into fewer
slots, which ``hypersack.core.packs.compacted_capacity`` decides).

Members may use different optimizer kinds (sgd, adam, ...): each kind present has its own
state rows (``o.<kind>.<state>/<param>``) and hyperparameter rows (``h.<kind>.<name>``; the
schedule's rows are shared), and the optimizer step runs the update of each kind present
with the slots of the other kinds masked (lr 0, zero gradient: their parameters stay bit for
bit, and their rows of that kind's state, which nothing reads, hold only finite numbers).

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
4. One fused optimizer step per optimizer kind present (``hypersack.fusion.optim``) with each
   member's own learning rate from its schedule at its own step count.

Steps 2-4 are one function of persistent tensors (``_device_step``) that runs eagerly or as a
replayed CUDA graph (``hypersack.fusion.graphs``), under the pack's precision
(``hypersack.fusion.precision``). It never waits for the host: the per-step host facts (each
slot's position and row count, one [2, C] tensor) and a new epoch's orders are staged in
pinned memory on CUDA and copied non-blocking, and nothing in the step reads a device value
back (``tests/fusion/test_host_syncs.py`` counts). Under graphs the padded width is rounded up
to a bucket (``bucket_width``) so a new mix of batch sizes rarely needs a new capture.

A member's epoch ends when it has seen each training sample exactly once; members with
different batch sizes end epochs at different iterations and simply go on with their next epoch.

A model that neither engine can run (a layer outside the fused table that vmap cannot batch,
e.g. ``nn.GRU``) is found at build time by a dry training step on two members, and then
trains on the ``loop`` engine: each member's model runs separately, one after the other, in
the same step (one line says which layer and why).

"Alone" means this same stack with one member: in fp32 (float64 in the tests) a member's
parameters after k steps are the same (to floating-point rounding of batched versus single
kernels) whichever members share its pack, its slot, and whether it was checkpointed and
resumed in between, with either engine.
"""
from __future__ import annotations

import copy
import math
import warnings
from dataclasses import dataclass
from typing import Any, Hashable, Iterator, Mapping, cast

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, vmap

from hypersack.core.packs import bucket_width, grown_capacity
from hypersack.errors import ConfigError
from hypersack.validation import check_integer
from hypersack.fusion.fused_ops import CONV_FORMS, FuseContext
from hypersack.fusion.graphs import StepRunner, check_graphs
from hypersack.fusion.hfused import ENGINES, FusedProgram, choose_engine
from hypersack.fusion.layers import (batchnorm_layers, dropout_feature_shapes, dropout_layers,
                                     member_key, uniform_stream)
from hypersack.fusion.optim import (KINDS, OptimizerConfig, Schedule, fused_step, hparam_rows,
                                    init_state, rule_features)
from hypersack.fusion.precision import LossScale, autocast, check_precision
from hypersack.fusion.task import FusableTask, Member

__all__ = ["PackData", "FusedStack", "StackOptions", "epoch_seed", "CHECKPOINT_FORMAT"]

CHECKPOINT_FORMAT = "hypersack.fusion.member/1"
_SCHEDULE_ROWS = frozenset(Schedule().values())     # hyperparameter rows every kind shares


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

    ``capacity``: slots allocated up front (doubled when a member finds none free, up to
    ``max_capacity``, None: no bound). ``engine``: "auto" (horizontally fused, vmap where the
    model does not fuse, the per-member loop where vmap cannot run it either), "hfused" or
    "vmap". ``precision``: "fp32" | "bf16" | "fp16" (``hypersack.fusion.precision``).
    ``graphs``: "auto" | "on" | "off" (``hypersack.fusion.graphs``). ``conv``: how the
    horizontally fused engine runs dense Conv2d layers, "grouped" (one grouped convolution)
    or "bmm" (im2col and one batched GEMM over the members, ``fused_ops.conv2d_bmm``); the
    results agree up to summation order.
    """
    capacity: int = 4
    engine: str = "auto"
    precision: str = "fp32"
    graphs: str = "auto"
    max_capacity: int | None = None
    conv: str = "grouped"

    def __post_init__(self) -> None:
        check_integer("pack.capacity", self.capacity, low=1)
        if self.max_capacity is not None:
            check_integer("pack.max_capacity", self.max_capacity, low=1)
        if self.engine not in ENGINES:
            raise ConfigError("pack.engine", self.engine, f"must be one of {list(ENGINES)}")
        check_precision(self.precision, "pack.precision")
        check_graphs(self.graphs)
        if self.conv not in CONV_FORMS:
            raise ConfigError("pack.conv", self.conv, f"must be one of {list(CONV_FORMS)}")


class FusedStack:
    """Members of one architecture, trained together (see module docstring).

    ``template`` is any member's model after ``prepare_module``; it fixes the architecture.
    ``slots[i]`` is the member in slot i (``SlotTable``); ``len(stack)`` counts members;
    ``kinds`` the optimizer kinds with rows; ``engine`` "hfused" | "vmap" | "loop";
    ``engine_note`` why it is not "hfused" (None when it is).
    """

    def __init__(self, task: FusableTask, template: nn.Module, data: PackData,
                 options: StackOptions | None = None):
        self.task, self.data = task, data
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
        self.kinds: list[str] = []
        self._arange = torch.arange(data.n, device=self.device)
        self._steps = torch.zeros((2, 0), dtype=torch.int64, device=self.device)
        self._padded = True
        self._pinned = self.device.type == "cuda"
        # Parts of the update rules the members use (grows as members join; graph key).
        self._features: frozenset[str] = frozenset()
        self._views: dict = {}       # FuseContext.views: reshaped buffers, kept across steps
        self._scaler = LossScale() if self.options.precision == "fp16" else None
        self.engine_note: str | None = None
        self.program = self._choose_engine()
        self.runner = StepRunner(self._device_step, self.options.graphs, self.device)

    def _choose_engine(self) -> FusedProgram | None:
        """The fused program, or None for vmap or (``engine`` "loop") the per-member loop; a
        dry training step on two members shows vmap can run the model (see module doc)."""
        sample = self.data.x_train[:2].unsqueeze(0).expand(2, *self.data.x_train[:2].shape)
        rtol = 1e-9 if self.dtype == torch.float64 else 1e-3

        def vmapped(params: dict, buffers: dict, x: torch.Tensor) -> torch.Tensor:
            return vmap(lambda p, b, x: functional_call(self.base, (p, b), (x,)),
                        randomness="different")(params, buffers, x)
        prefix = "fused pack runs under vmap: "     # choose_engine's line, said once below
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            program = choose_engine(self.options.engine, self.base, sample, vmapped, rtol)
        for w in caught:
            if not str(w.message).startswith(prefix):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        self.engine = "hfused" if program is not None else "vmap"
        if program is not None:
            return program
        self.engine_note = next((str(w.message).removeprefix(prefix) for w in caught
                                 if str(w.message).startswith(prefix)), "engine: vmap")
        try:
            self._dry_step(sample, vmapped)
        except Exception as exc:     # vmap cannot batch it: each member runs on its own
            if self.options.engine == "vmap":
                raise
            self.engine = "loop"
            self.engine_note += (f", and vmap cannot run it ({type(exc).__name__}: "
                                 f"{str(exc).splitlines()[0][:200]})")
        if self.options.engine == "auto":
            where = "one after another, each on its own (engine 'loop')" if self.engine == "loop" \
                else "under vmap"
            warnings.warn(f"fused pack: {self.engine_note}: its members train {where}",
                          RuntimeWarning, stacklevel=3)
        return None

    def _dry_step(self, sample: torch.Tensor, vmapped: Any) -> None:
        """Forward and backward of two members under vmap, on copies (state untouched)."""
        params = {k: torch.stack([v.detach(), v.detach()]).requires_grad_(v.is_floating_point())
                  for k, v in self.base.named_parameters()}
        buffers = {k: torch.stack([v.detach(), v.detach()]).clone()
                   for k, v in self.base.named_buffers()}
        out = vmapped(params, buffers, sample)
        grads = [p for p in params.values() if p.requires_grad]
        if grads and out.is_floating_point():
            torch.autograd.grad(out.float().sum(), grads, allow_unused=True)

    def __len__(self) -> int:
        return self.slots.occupied()

    @property
    def capacity(self) -> int:
        return len(self.slots)

    # ---- load and free -------------------------------------------------------------------------

    def add(self, member: Member, model: nn.Module, optimizer: OptimizerConfig, batch_size: int,
            max_steps: int) -> int:
        """Write ``member`` (its prepared model on the pack's device and dtype) into a free slot;
        returns the slot. Shapes change only when no slot is free (capacity doubles, up to
        ``max_capacity``) or the member's optimizer kind is new to the stack (its rows)."""
        rows, host = self._member_rows(member, model, optimizer, batch_size)
        if len(self.slots) == 0:
            self._allocate(rows, host, self.options.capacity)
        if optimizer.kind not in self.kinds:
            self._add_kind(optimizer.kind, rows)
        free = self.slots.free()
        if not free:
            self._grow(rows, host)
            free = self.slots.free()
        slot = free[0]
        with torch.no_grad():
            self._reset_kinds(slot)
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
        """Fresh rows for ``capacity`` slots, shaped like ``rows`` (one member's), all free;
        every kind's hyperparameter rows hold that kind's defaults (finite updates of free
        slots)."""
        self.rows = {k: torch.zeros((capacity, *v.shape), dtype=v.dtype, device=v.device)
                     for k, v in rows.items()}
        self.rows["active"] = torch.zeros(capacity, dtype=torch.bool, device=self.device)
        self.host = {k: np.zeros(capacity, dtype=v.dtype) for k, v in host.items()}
        self.host["active"] = np.zeros(capacity, dtype=bool)
        self.slots = SlotTable(capacity)
        self.kinds = sorted({k.split(".")[1] for k in rows if k.startswith("o.")}
                            | {k.split(".")[1] for k in rows if k.count(".") == 2
                               and k.startswith("h.")})
        with torch.no_grad():
            for kind in self.kinds:
                self._default_rows(kind, slice(None))
        self._static_buffers(capacity)
        self._releaf()

    def _kind_rows(self, kind: str) -> list[str]:
        return [k for k in self.rows if k.startswith((f"o.{kind}.", f"h.{kind}."))]

    def _default_rows(self, kind: str, where: Any) -> None:
        """Rows of ``kind`` at slots ``where`` back to a fresh member's: zero state, default
        hyperparameters (their values never move a parameter of another kind's member)."""
        defaults = hparam_rows([OptimizerConfig(kind=kind)], self.dtype, self.device)
        for key in self._kind_rows(kind):
            name = key.split(".", 2)[2]
            self.rows[key][where] = defaults[name][0] if key.startswith("h.") else 0

    def _reset_kinds(self, slot: int) -> None:
        for kind in self.kinds:
            self._default_rows(kind, slot)

    def _add_kind(self, kind: str, rows: dict[str, torch.Tensor]) -> None:
        """Rows for a new optimizer kind (``rows``: a member's of that kind); recaptures."""
        capacity = len(self.slots)
        with torch.no_grad():
            for k, v in rows.items():
                if k.startswith((f"o.{kind}.", f"h.{kind}.")):
                    self.rows[k] = torch.zeros((capacity, *v.shape), dtype=v.dtype,
                                               device=v.device)
            self.kinds = sorted(set(self.kinds) | {kind})
            self._default_rows(kind, slice(None))
        self.runner.reset()

    def _grow(self, rows: dict[str, torch.Tensor], host: dict[str, np.ndarray]) -> None:
        old_rows, old_host, old_slots = self.rows, self.host, self.slots
        capacity = grown_capacity(len(old_slots), len(old_slots) + 1, self.options.max_capacity)
        self._allocate({k: v[0] for k, v in old_rows.items() if k != "active"}, host, capacity)
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
        numbers change; each member's rows, hence its results, do not; the rows of optimizer
        kinds no member uses any more go). False, and nothing changes, when ``capacity`` is
        not below the capacity or is below the members held. The step is captured again."""
        if capacity >= len(self.slots) or capacity < len(self) or capacity < 1:
            return False
        keep = [i for i, slot in enumerate(self.slots) if slot is not None]
        live = {slot.optimizer.kind for slot in self.slots if slot is not None}
        gone = set(self.kinds) - live
        old_rows, old_host, old_slots = self.rows, self.host, self.slots
        template = {k: v[0] for k, v in old_rows.items() if k != "active"
                    and not (k[:2] in ("o.", "h.") and k.split(".")[1] in gone)}
        self._allocate(template, {k: v for k, v in old_host.items() if k != "active"}, capacity)
        index = torch.as_tensor(keep, dtype=torch.int64, device=self.device)
        with torch.no_grad():
            for k in self.rows:
                self.rows[k][:len(keep)] = old_rows[k].detach()[index]
        for k, array in old_host.items():
            self.host[k][:len(keep)] = array[keep]
        for new, old in enumerate(keep):
            self.slots[new] = old_slots[old]
        self.runner.reset()
        return True

    def _static_buffers(self, capacity: int) -> None:
        # Per step, row 0: each slot's position in its epoch order; row 1: its rows this step.
        self._steps = torch.zeros((2, capacity), dtype=torch.int64, device=self.device)

    def _releaf(self) -> None:
        for name in self.param_names:
            key = "p." + name
            self.rows[key] = self.rows[key].detach().requires_grad_(True)

    def _member_rows(self, member: Member, model: nn.Module, optimizer: OptimizerConfig,
                     batch_size: int) -> tuple[dict[str, torch.Tensor], dict[str, np.ndarray]]:
        state = model.state_dict()
        device, dtype = self.device, self.dtype
        params = {n: state[n].detach().clone() for n in self.param_names}
        kind = optimizer.kind
        ckpt = _checked_checkpoint(member, kind, self.param_names)
        opt_state = init_state(optimizer, params) if ckpt is None else ckpt["optimizer"]["state"]
        rows = {"p." + n: v for n, v in params.items()}
        rows.update({"b." + n: state[n].detach().clone() for n in self.buffer_names})
        rows.update({f"o.{kind}.{k}": v.to(device=device, dtype=params[k.split("/", 1)[1]].dtype)
                     for k, v in opt_state.items()})
        rows.update({(f"h.{k}" if k in _SCHEDULE_ROWS else f"h.{kind}.{k}"): v[0]
                     for k, v in hparam_rows([optimizer], dtype, device).items()})
        rows["kind"] = torch.tensor(KINDS.index(kind), dtype=torch.int64, device=device)
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
        """New epoch orders of the members whose epoch ended: drawn on the host, staged in
        pinned memory on CUDA and written with one non-blocking copy."""
        n = self.data.n
        starting = np.flatnonzero((self.host["pos"] >= n) & self.host["active"])
        if not len(starting):
            return
        orders = torch.stack([torch.randperm(n, generator=torch.Generator().manual_seed(
            epoch_seed(int(self.host["seed"][i]), int(self.host["epoch"][i]) + 1)))
            for i in starting])
        index = torch.as_tensor(starting.astype(np.int64))
        with torch.no_grad():
            index_d, orders_d = self._to_device(index), self._to_device(orders)
            self.rows["order"].index_copy_(0, index_d, orders_d)
            self.rows["loss_sum"].index_fill_(0, index_d, 0)
        self.host["pos"][starting] = 0
        self.host["loss_count"][starting] = 0

    def _to_device(self, host: torch.Tensor) -> torch.Tensor:
        """``host`` on the stack's device: on CUDA through pinned memory, non-blocking (the
        pinned block is not reused before its copy ran: torch's host allocator records it)."""
        if not self._pinned:
            return host.to(self.device)
        return host.pin_memory().to(self.device, non_blocking=True)

    def train_iteration(self) -> list[int]:
        """One optimizer step for every member; returns the slots whose epoch just ended."""
        self._start_epochs()
        n, active = self.data.n, self.host["active"]
        counts_h = np.where(active, np.minimum(self.host["batch"], n - self.host["pos"]), 0)
        width = int(self.host["batch"][active].max())
        if self.runner.enabled:             # captures per bucket, not per mix of batch sizes
            width = bucket_width(width)
        padded = bool(np.any(counts_h[active] < width))
        steps = torch.as_tensor(np.stack([self.host["pos"], counts_h]).astype(np.int64))
        with torch.no_grad():
            self._steps.copy_(steps.pin_memory() if self._pinned else steps,
                              non_blocking=self._pinned)
        kinds = tuple(sorted({s.optimizer.kind for s in self.slots if s is not None}))
        self.runner((width, padded, self._mask_layers(), kinds, self._features))
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
        """The static step: gather, forward, backward, optimizer; device tensors only, none
        read back. ``key``: (padded width, any padding, dropout layers with masks, optimizer
        kinds of the members, optimizer features)."""
        width, padded, layers, kinds, features = cast(tuple, key)
        rows, n = self.rows, self.data.n
        pos, counts = self._steps[0], self._steps[1]
        span = self._arange[:width] if width <= n else torch.arange(width, device=self.device)
        idx = rows["order"].gather(1, (pos[:, None] + span[None]).clamp(max=n - 1))
        valid_b = span[None] < counts[:, None]
        valid = valid_b.to(self.dtype)
        self._padded = padded
        with autocast(self.options.precision, self.device):
            outputs = self._forward(self.data.x_train[idx], self._dropout_masks(width, layers),
                                    valid)
            per_sample = self.task.loss(outputs.flatten(0, 1),
                                        self.data.y_train[idx].flatten(0, 1))
        per_sample = per_sample.to(self.dtype).view(self.capacity, width)
        member_loss = torch.where(valid_b, per_sample, 0).sum(1) \
            / counts.clamp(min=1).to(self.dtype)
        keep = self._optimize(member_loss, kinds, features)
        with torch.no_grad():
            rows["iter"] += keep.to(torch.int64)
            rows["loss_sum"] += torch.where(keep, member_loss.detach(), 0)

    def _optimize(self, member_loss: torch.Tensor, kinds: tuple[str, ...],
                  features: frozenset[str]) -> torch.Tensor:
        """Backward and the fused update of the active slots, one update per optimizer kind in
        ``kinds`` over the slots of that kind; returns the slots updated (fp16: an
        overflowing member skips its update, parameters and state untouched)."""
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
        shared = {k: v for k, v in self._prefixed("h.").items() if k in _SCHEDULE_ROWS}
        for kind in kinds:
            mine = keep if len(kinds) == 1 else keep & (self.rows["kind"] == KINDS.index(kind))
            fused_step(kind, params, grads, self._prefixed(f"o.{kind}."),
                       dict(shared, **self._prefixed(f"h.{kind}.")), self.rows["iter"],
                       keep=mine, restore=self._scaler is not None, features=features)
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
                              conv=self.options.conv, views=self._views)
            return self.program.run(ctx, x)
        if self.engine == "loop":
            return self._loop_forward(x, masks, valid)
        return self._vmap_forward(x, masks, valid)

    def _loop_forward(self, x: torch.Tensor, masks: dict[int, torch.Tensor],
                      valid: torch.Tensor) -> torch.Tensor:
        """Each slot's model on its own (a model vmap cannot batch), outputs stacked."""
        params, buffers = self._params(), self._buffers()
        outputs = []
        try:
            for i in range(x.shape[0]):
                for j, drop in enumerate(self._dropouts):
                    drop.fused_mask = masks[j][i] if j in masks else None
                for norm in self._norms:
                    norm.row_weight = valid[i]
                outputs.append(functional_call(self.base, ({k: v[i] for k, v in params.items()},
                                                           {k: v[i] for k, v in buffers.items()}),
                                               (x[i],)))
        finally:
            for drop in self._dropouts:
                drop.fused_mask = None
            for norm in self._norms:
                norm.row_weight = None
        return torch.stack(outputs)

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
            if self.engine == "loop":
                return torch.stack([functional_call(
                    self.base, ({n: v[j] for n, v in params.items()},
                                {n: v[j] for n, v in buffers.items()}), (x_val,))
                    for j in range(k)])
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
        kind = self.slots[i].optimizer.kind
        state = {k: cpu(v) for k, v in self._prefixed(f"o.{kind}.").items()}
        return {"format": CHECKPOINT_FORMAT, "epoch": self.epoch(i),
                "iteration": int(self.rows["iter"][i]), "position": 0, "model": model,
                "optimizer": {"kind": kind, "state": state}}


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
