"""Layers that keep fused members isolated: per-member dropout streams and masked BatchNorm.

``prepare_module`` swaps, in a freshly built model, every ``nn.Dropout`` for ``MemberDropout``
and every ``nn.BatchNorm{1,2,3}d`` for ``MaskedBatchNorm``. Parameter and buffer names are
unchanged, so a member's ``state_dict`` loads into the original architecture and back.

Dropout. ``vmap(randomness="different")`` draws one random tensor for the whole stack, so a
member's masks would depend on its slot and on N. Instead, each member's masks come from a
counter-based generator: ``uniform(key, iteration, layer, element)`` is a fixed hash of the
member's key (derived from its trial seed), its own optimizer-step count, the layer's index and
the element's position inside that member's batch. The mask of member i is thus the same whether
it trains alone or beside 63 others, on CPU or CUDA, before or after a checkpoint (no generator
state to save), and all members' masks are drawn in one vectorised pass. ``MemberDropout`` only
multiplies by the mask it is handed (keep / (1 - p)); with no mask it is the identity, which is
exactly dropout with p = 0, and the eval-mode behaviour.

BatchNorm. Under vmap, running statistics are stacked buffers (one row per member) and are
updated in place through the batched view, which torch.func allows when the buffer is itself
batched (a regular buffer updated with a batched value is what it forbids). Batch statistics
are computed explicitly over the member's valid rows only (``row_weight`` 1 for real samples,
0 for padding), so padding to a larger pack batch never changes a member's normalisation.
Semantics follow ``nn.BatchNorm``: biased variance to normalise, unbiased variance into the
running estimate, ``momentum=None`` for a cumulative average.
"""
from __future__ import annotations

import copy
from collections import OrderedDict
from typing import cast

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from hypersack.errors import ConfigError
from hypersack.fusion.graphs import capturing, keep_alive

__all__ = ["MemberDropout", "MaskedBatchNorm", "prepare_module", "member_key", "uniform_stream",
           "dropout_layers", "batchnorm_layers", "dropout_feature_shapes"]

_M32 = 0xFFFFFFFF
_GOLDEN = 0x6A09E667  # < 2**31, odd: element counters spread over 32 bits
_UNSUPPORTED_RANDOM = (nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout,
                       nn.FeatureAlphaDropout)


# ---- counter-based per-member random numbers ---------------------------------------------------

# Multipliers below 2**31: a 32-bit value times one stays below 2**63, so int64 never overflows.
_C1, _C2 = 0x21F0AAAD, 0x735A2D97


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """``(x * c) mod 2**32`` for int64 ``x`` in [0, 2**32) and ``c`` < 2**31."""
    return (x * c) & _M32


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer finaliser (hash-prospector's 16/15/15 xorshift-multiply) on int64
    tensors holding 32-bit values."""
    x = x ^ (x >> 16)
    x = _mul32(x, _C1)
    x ^= x >> 15
    x = _mul32(x, _C2)
    x ^= x >> 15
    return x


def member_key(seed: int) -> int:
    """The 32-bit key of a member's dropout stream, derived from its trial seed."""
    state = np.random.SeedSequence([int(seed) & 0xFFFF_FFFF_FFFF_FFFF, 0xD12]).generate_state(1)
    return int(state[0])


def _mix32_int(x: int) -> int:
    """``_mix32`` on one Python int."""
    x &= _M32
    x ^= x >> 16
    x = (x * _C1) & _M32
    x ^= x >> 15
    x = (x * _C2) & _M32
    return x ^ (x >> 15)


_OFFSETS: OrderedDict[tuple[int, torch.device], torch.Tensor] = OrderedDict()
_MAX_OFFSETS = 32


def _element_offsets(count: int, device: torch.device) -> torch.Tensor:
    """``(arange(count) * golden) mod 2**32``: the per-element counter offsets, cached (the
    ``_MAX_OFFSETS`` most recent). A captured CUDA graph reads them by address, so each one
    used in a capture is also held by that graph (``graphs.keep_alive``): one evicted here
    stays alive, never reused, as long as a graph may read it. One made during a capture is
    not cached (``graphs.capturing``): only the graph holds it."""
    key = (count, device)
    offsets = _OFFSETS.get(key)
    if offsets is None:
        offsets = _mul32(torch.arange(count, device=device, dtype=torch.int64), _GOLDEN)
        if not capturing():
            _OFFSETS[key] = offsets
        while len(_OFFSETS) > _MAX_OFFSETS:
            _OFFSETS.popitem(last=False)
    else:
        _OFFSETS.move_to_end(key)
    return keep_alive(offsets)


def uniform_stream(keys: torch.Tensor, iterations: torch.Tensor, layer: int,
                   shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Uniform numbers in [0, 1) of shape ``[N, *shape]``: row i depends only on
    ``(keys[i], iterations[i], layer)`` and the element's position in ``shape`` (24-bit grid).

    The element's position is its flat index in ``shape``, so a member's rows < b are the same
    whatever the padded batch width is.
    """
    n = keys.shape[0]
    stream = _mix32(keys ^ _mix32(iterations & _M32))
    stream = _mix32(stream ^ _mix32_int(layer + 1))
    count = int(np.prod(shape)) if shape else 1
    h = stream[:, None] + _element_offsets(count, keys.device)[None, :]
    h &= _M32
    h = _mix32(h)
    h >>= 8
    return (h.to(dtype) * (1.0 / (1 << 24))).view(n, *shape)


# ---- layers ------------------------------------------------------------------------------------

class MemberDropout(nn.Dropout):
    """Dropout whose mask (already scaled by 1 / (1 - p)) is set by the fused stack.

    ``fused_mask`` is None outside a training step, or when every member has p = 0.
    """

    fused_mask: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.fused_mask is None:
            return x
        return x * self.fused_mask


class MaskedBatchNorm(nn.modules.batchnorm._BatchNorm):
    """BatchNorm over the channel dimension 1 whose batch statistics skip padded rows.

    ``row_weight`` (shape [B], 1.0 real / 0.0 padding) is set by the fused stack for a training
    step; None means every row is real.
    """

    row_weight: torch.Tensor | None = None

    def _check_input_dim(self, x: torch.Tensor) -> None:
        if x.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {x.dim()}D input)")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(x)
        use_batch = self.training or not self.track_running_stats
        if not use_batch:
            return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                                False, 0.0, self.eps)
        shape = (1, -1) + (1,) * (x.dim() - 2)
        dims = [0] + list(range(2, x.dim()))
        w = self.row_weight if self.row_weight is not None else x.new_ones(x.shape[0])
        w = w.to(x.dtype).view((-1,) + (1,) * (x.dim() - 1))
        count = (w.sum() * (x[0, 0].numel())).clamp(min=1)   # an empty (free) slot: no NaN
        mean = (x * w).sum(dims) / count
        centred = x - mean.view(shape)
        var = (centred * centred * w).sum(dims) / count
        if self.training and self.track_running_stats:
            self._update_running(mean, var, count)
        out = centred * torch.rsqrt(var.view(shape) + self.eps)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        return out

    @torch.no_grad()
    def _update_running(self, mean: torch.Tensor, var: torch.Tensor, count: torch.Tensor) -> None:
        tracked = cast(torch.Tensor, self.num_batches_tracked)   # set: track_running_stats
        tracked.add_(1)
        factor: torch.Tensor | float
        if self.momentum is None:
            factor = 1.0 / tracked.to(mean.dtype)
        else:
            factor = self.momentum
        unbiased = var * count / (count - 1).clamp(min=1)
        cast(torch.Tensor, self.running_mean).mul_(1 - factor).add_(factor * mean.detach())
        cast(torch.Tensor, self.running_var).mul_(1 - factor).add_(factor * unbiased.detach())


def _masked_batchnorm(old: nn.modules.batchnorm._BatchNorm) -> MaskedBatchNorm:
    new = MaskedBatchNorm(old.num_features, eps=old.eps, momentum=old.momentum, affine=old.affine,
                          track_running_stats=old.track_running_stats,
                          device=_device_of(old), dtype=_dtype_of(old))
    new.load_state_dict(old.state_dict())
    new.train(old.training)
    return new


def _device_of(module: nn.Module) -> torch.device | None:
    tensor = next(iter(module.state_dict().values()), None)
    return tensor.device if tensor is not None else None


def _dtype_of(module: nn.Module) -> torch.dtype | None:
    for tensor in module.state_dict().values():
        if tensor.is_floating_point():
            return tensor.dtype
    return None


def prepare_module(module: nn.Module) -> nn.Module:
    """A copy of ``module`` with dropout and BatchNorm replaced by their fusable versions.

    Raises ConfigError for random layers whose per-member reproduction is not implemented
    (channel dropout, alpha dropout). Functional ``F.dropout`` calls inside ``forward`` cannot be
    seen here: they would draw from the global stream and break the isolation guarantee.
    """
    module = copy.deepcopy(module)
    for name, child in list(module.named_modules()):
        if isinstance(child, _UNSUPPORTED_RANDOM):
            raise ConfigError(f"model.{name}", type(child).__name__,
                              "is a random layer that fused training cannot isolate per member")
    _replace(module)
    return module


def _replace(module: nn.Module) -> None:
    for name, child in module.named_children():
        if type(child) is nn.Dropout:
            new = MemberDropout(child.p)
            new.train(child.training)
            setattr(module, name, new)
        elif isinstance(child, nn.modules.batchnorm._BatchNorm) \
                and not isinstance(child, (MaskedBatchNorm, nn.SyncBatchNorm)):
            setattr(module, name, _masked_batchnorm(child))
        else:
            _replace(child)


def dropout_layers(module: nn.Module) -> list[tuple[str, MemberDropout]]:
    """The member-dropout layers in ``named_modules`` order: layer i uses stream index i."""
    return [(n, m) for n, m in module.named_modules() if isinstance(m, MemberDropout)]


def batchnorm_layers(module: nn.Module) -> list[tuple[str, MaskedBatchNorm]]:
    return [(n, m) for n, m in module.named_modules() if isinstance(m, MaskedBatchNorm)]


def dropout_feature_shapes(module: nn.Module,
                           sample: torch.Tensor) -> list[tuple[int, ...] | None]:
    """Per-sample input shape of each dropout layer, found by one forward on the meta device.

    ``sample`` is one input row without the batch dimension; a layer the forward never calls
    gets None. Static shapes are a condition of fusion, so the shapes hold for every step.
    A model without dropout layers is not run; one whose forward cannot run on the meta device
    (it makes a tensor on a fixed device, e.g. a mask) is probed once on ``sample``'s device.
    """
    if not dropout_layers(module):
        return []
    try:
        return _probe_dropout_shapes(module, sample, "meta")
    except (RuntimeError, NotImplementedError, TypeError):
        return _probe_dropout_shapes(module, sample, sample.device)


def _probe_dropout_shapes(module: nn.Module, sample: torch.Tensor,
                          device: torch.device | str) -> list[tuple[int, ...] | None]:
    probe = copy.deepcopy(module).to(device).eval()
    shapes: dict[str, tuple[int, ...]] = {}
    hooks = [layer.register_forward_pre_hook(
        lambda _m, args, name=name: shapes.__setitem__(name, tuple(args[0].shape[1:])))
        for name, layer in dropout_layers(probe)]
    try:
        with torch.no_grad():
            probe(sample.to(device).unsqueeze(0))
    finally:
        for hook in hooks:
            hook.remove()
    return [shapes.get(name) for name, _ in dropout_layers(probe)]
