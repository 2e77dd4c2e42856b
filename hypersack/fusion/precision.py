"""Precision of a fused pack: fp32 (exact mode), bf16 or fp16 autocast over fp32 master weights.

``precision="fp32"`` (the default) runs in the pack's dtype and is the mode of the exactness
guarantee. ``"bf16"`` / ``"fp16"`` run the forward (and the loss) under ``torch.autocast``;
parameters, gradients and optimizer state stay in the pack's dtype (fp32 master weights).
fp16 adds a per-member dynamic loss scale (``LossScale``): each member's loss is multiplied by
its own scale, its gradients divided by it, and a member whose gradients overflowed skips the
update (parameters and state untouched) and halves its scale; after ``growth_interval`` clean
steps its scale doubles, like ``torch.amp.GradScaler`` but per member and without a host sync.
Convolutional packs at reduced precision use channels_last activations.
"""
from __future__ import annotations

import contextlib
from typing import Iterator, Mapping

import torch

from hypersack.core.packs import PRECISIONS
from hypersack.errors import ConfigError

__all__ = ["PRECISIONS", "check_precision", "autocast", "LossScale"]

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ConfigError("pack.precision", precision, f"must be one of {list(PRECISIONS)}")
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
