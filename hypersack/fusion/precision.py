"""Precision of a fused pack: fp32 (exact mode), bf16 or fp16 autocast over fp32 master weights.

``precision="fp32"`` (the default) runs in the pack's dtype and is the mode of the exactness
guarantee. ``"bf16"`` / ``"fp16"`` run the forward (and the loss) under ``torch.autocast``;
parameters, gradients and optimizer state stay in the pack's dtype (fp32 master weights).
fp16 adds a per-member dynamic loss scale (``LossScale``): each member's loss is multiplied by
its own scale, its gradients divided by it, and a member whose gradients overflowed skips the
update (parameters and state untouched) and halves its scale; after ``growth_interval`` clean
steps its scale doubles, like ``torch.amp.GradScaler`` but per member and without a host sync.
Convolutional packs at reduced precision use channels_last activations.

``PlainPrecision`` is the same for one model trained alone (the built-in workloads' plain trials,
``hypersack.workloads``): the same autocast, the same ``LossScale`` (with one member), the same
channels_last rule, so a plain trial and a pack of the study compare at one precision.
"""
from __future__ import annotations

import contextlib
from typing import Iterator, Mapping

import torch

from hypersack.core.packs import PRECISIONS
from hypersack.errors import ConfigError

__all__ = ["PRECISIONS", "check_precision", "autocast", "LossScale", "PlainPrecision"]

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def check_precision(precision: str, field: str = "precision") -> str:
    """``precision`` when it is one of ``PRECISIONS``, else ConfigError naming ``field``."""
    if precision not in PRECISIONS:
        raise ConfigError(field, precision, f"must be one of {list(PRECISIONS)}")
    return precision


@contextlib.contextmanager
def autocast(precision: str, device: torch.device) -> Iterator[None]:
    """``torch.autocast`` for bf16 / fp16 on ``device``; nothing for fp32."""
    if precision == "fp32":
        yield
        return
    # No weight-cast cache: the step may be recorded in a CUDA graph, where a cache kept
    # across steps would replay stale casts.
    with torch.autocast(device_type=device.type, dtype=_DTYPES[precision], cache_enabled=False):
        yield


class LossScale:
    """Per-member dynamic loss scaling over rows ``scale`` (float) and ``growth`` (int64)."""

    init_scale, growth_interval = 2.0 ** 16, 2000

    def rows(self, device: torch.device) -> dict[str, torch.Tensor]:
        """One member's fresh rows."""
        return {"scale": torch.tensor(self.init_scale, dtype=torch.float32, device=device),
                "growth": torch.zeros((), dtype=torch.int64, device=device)}

    @staticmethod
    def scale(loss: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return loss * scale.to(loss.dtype)

    @staticmethod
    def unscale(grads: Mapping[str, torch.Tensor],
                scale: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Gradients divided by each member's scale, and ``finite`` bool [N]."""
        finite = torch.ones_like(scale, dtype=torch.bool)
        out = {}
        for name, g in grads.items():
            inv = (1.0 / scale).to(g.dtype).view((-1,) + (1,) * (g.dim() - 1))
            out[name] = g * inv
            finite &= torch.isfinite(g).flatten(1).all(1)
        return out, finite

    def update(self, scale: torch.Tensor, growth: torch.Tensor, finite: torch.Tensor,
               active: torch.Tensor) -> None:
        """Halve the scale of members that overflowed, double it after a clean streak."""
        with torch.no_grad():
            grown = growth + 1
            double = grown >= self.growth_interval
            new_scale = torch.where(finite, torch.where(double, scale * 2, scale), scale * 0.5)
            new_growth = torch.where(finite & ~double, grown, torch.zeros_like(growth))
            scale.copy_(torch.where(active, new_scale, scale))
            growth.copy_(torch.where(active, new_growth, growth))


class PlainPrecision:
    """One model's training step at ``precision`` (fp32: exactly ``loss.backward();
    optimizer.step()``).

    Use: ``model = amp.prepare(model)``; per step ``with amp.autocast(): loss = f(model(amp.inputs(x)))``
    then ``amp.step(loss, model, optimizer)`` (which runs the backward). Parameters and optimizer
    state stay in the model's dtype (fp32 master weights); bf16 / fp16 run the forward and loss under
    autocast, conv models in channels_last. fp16 scales the loss by ``LossScale``'s one-member rule:
    a step whose gradients overflow is skipped (parameters and optimizer state untouched) and halves
    the scale. ``state_dict`` / ``load_state_dict`` carry the scale across a checkpoint."""

    def __init__(self, precision: str, device: torch.device | str):
        self.precision = check_precision(precision)
        self.device = torch.device(device)
        self._scaler = LossScale() if precision == "fp16" else None
        self._rows = self._scaler.rows(self.device) if self._scaler is not None else {}
        self.channels_last = False

    def prepare(self, model: torch.nn.Module) -> torch.nn.Module:
        """``model``, in channels_last when it convolves in 2-D and the precision is reduced."""
        if self.precision != "fp32" and any(isinstance(m, torch.nn.Conv2d)
                                            for m in model.modules()):
            self.channels_last = True
            model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        return model

    def inputs(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` in the layout of the model (channels_last images for a prepared conv model)."""
        if self.channels_last and x.dim() == 4:
            return x.contiguous(memory_format=torch.channels_last)
        return x

    def autocast(self) -> contextlib.AbstractContextManager[None]:
        """The forward's (and the loss's) autocast region; nothing in fp32."""
        return autocast(self.precision, self.device)

    def step(self, loss: torch.Tensor, model: torch.nn.Module,
             optimizer: torch.optim.Optimizer) -> bool:
        """Backward of ``loss`` and the optimizer step; False when fp16 skipped it (overflow)."""
        if self._scaler is None:
            loss.backward()
            optimizer.step()
            return True
        scale, growth = self._rows["scale"].view(1), self._rows["growth"].view(1)
        self._scaler.scale(loss.float(), scale[0]).backward()
        named = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
        grads, finite = self._scaler.unscale({n: g.unsqueeze(0) for n, g in named.items()},
                                             scale)
        with torch.no_grad():
            for name, g in named.items():
                g.copy_(grads[name][0])
        self._scaler.update(scale, growth, finite, torch.ones_like(finite))
        if not bool(finite.item()):
            return False
        optimizer.step()
        return True

    def state_dict(self) -> dict[str, float]:
        """The fp16 loss scale and its clean-step count (empty for fp32 and bf16)."""
        return {k: float(v.item()) for k, v in self._rows.items()}

    def load_state_dict(self, state: Mapping[str, float]) -> None:
        for key, value in state.items():
            if key in self._rows:
                self._rows[key].fill_(value)
