"""Horizontally fused ops: one table from each ``nn`` layer type to its fused counterpart.

A fused value holds N members' activations in one tensor, in one of two layouts:

- ``NB`` (member-major): ``[N, *member_shape]``; linear layers, embeddings, layer norm and every
  op without a rule below work on it (the last ones through ``torch.vmap`` of that one op).
- ``CF`` (channel-folded, HFTA's layout): ``[B, N * C, *spatial]`` for a member shape
  ``[B, C, *spatial]``; convolutions become one grouped convolution (``groups * N``), BatchNorm
  one normalisation over ``N * C`` channels, pooling and element-wise ops run unchanged.

Conversions happen only where a layer needs the other layout. Every fused op computes, for
member i, what the original layer computes on member i's input with member i's parameters:
members never mix (grouped convolution, batched matmul, per-channel statistics).

``FUSED_MODULES`` is the table (exact types only: a subclass may change ``forward``); a model
with a parametrised layer that is not in it cannot be fused (``Unfusable``).
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from hypersack.core.packs import CONV_FORMS
from hypersack.errors import HyperSackError
from hypersack.fusion.graphs import capturing
from hypersack.fusion.layers import MaskedBatchNorm, MemberDropout

__all__ = ["NB", "CF", "Value", "FuseContext", "Unfusable", "FUSED_MODULES", "ELEMENTWISE",
           "RANDOM_FUNCTIONS", "CONV_FORMS", "to_nb", "to_cf", "member_shape", "call_generic"]

NB, CF = "nb", "cf"
# CONV_FORMS: how a dense fused Conv2d runs, "grouped" (one grouped convolution, ``groups * N``)
# or "bmm" (im2col once, then one batched matrix product over the members: ``fused_conv``).


class Unfusable(HyperSackError):
    """A layer or op the horizontally fused engine cannot run; the pack falls back to vmap."""

    def __init__(self, where: str, what: str):
        self.where, self.what = where, what
        super().__init__(f"{where} ({what}) cannot be fused horizontally")


@dataclass
class Value:
    """A fused (per-member) tensor and its layout; anything else in a graph is shared."""
    t: torch.Tensor
    layout: str


@dataclass
class FuseContext:
    """What fused ops need besides their inputs, for one forward of ``n`` members.

    ``params`` / ``buffers``: stacked ``[n, ...]`` tensors by the member model's names.
    ``masks``: scaled dropout keep-masks ``[n, B, *features]`` by dropout index (absent: p = 0).
    ``row_weight``: ``[n, B]`` 1.0 for real rows, 0.0 for padding; None when no row is padding.
    ``views``: reshaped views of buffers (no autograd), kept by the caller across forwards so
    that a step does not make them again (a view whose base is no longer the buffer is remade).
    ``conv``: the formulation of dense Conv2d layers, one of ``CONV_FORMS``.

    BatchNorm's running statistics and ``num_batches_tracked`` are updated by ``finish()``, after
    the forward, for all layers at once (a few multi-tensor ops instead of a few per layer).
    """
    n: int
    params: dict[str, torch.Tensor]
    buffers: dict[str, torch.Tensor]
    training: bool
    masks: dict[int, torch.Tensor] = field(default_factory=dict)
    row_weight: torch.Tensor | None = None
    dropout_index: dict[str, int] = field(default_factory=dict)
    channels_last: bool = False
    conv: str = "grouped"
    views: dict[tuple[str, tuple[int, ...]], torch.Tensor] = field(default_factory=dict)
    _tracked: list[torch.Tensor] = field(default_factory=list)
    _running: list[tuple] = field(default_factory=list)
    _row_scale: torch.Tensor | None = None
    _rows: torch.Tensor | None = None

    def tensor(self, name: str) -> torch.Tensor | None:
        return self.params.get(name, self.buffers.get(name))

    def buffer_view(self, name: str, shape: tuple[int, ...]) -> torch.Tensor | None:
        """Buffer ``name`` viewed as ``shape`` (cached in ``views``); None if there is none."""
        buffer = self.buffers.get(name)
        if buffer is None:
            return None
        cached = self.views.get((name, shape))
        if cached is None or cached._base is not buffer:
            cached = self.views[(name, shape)] = buffer.view(shape)
        return cached

    def row_scale(self, batch: int) -> torch.Tensor:
        """``[B, n, 1, 1]``: row weight x B / the member's real rows (0 on padding), so that a
        mean over all B rows times it is the mean over the member's own rows."""
        if self._row_scale is None:
            w = self.row_weight
            if w is None:                  # no padding (BatchNorm with momentum None)
                w = torch.ones(self.n, batch, device=self.device, dtype=self.dtype)
            self._rows = w.sum(1)
            self._row_scale = (w * (batch / self._rows.clamp(min=1)[:, None])).t()[:, :, None, None]
        return self._row_scale

    @property
    def device(self) -> torch.device:
        return next(iter(self.params.values())).device

    @property
    def dtype(self) -> torch.dtype:
        return next((p.dtype for p in self.params.values() if p.is_floating_point()),
                    torch.float32)

    def count_batch(self, tracked: torch.Tensor | None) -> None:
        if tracked is not None:
            self._tracked.append(tracked)

    def update_running(self, mean: torch.Tensor | None, var: torch.Tensor | None,
                       batch_mean: torch.Tensor, batch_var: torch.Tensor, spatial: int,
                       momentum: float | None, tracked: torch.Tensor | None) -> None:
        """Queue ``mean/var <- (1 - momentum) mean/var + momentum batch_mean/unbiased batch_var``
        (``[1, n, C, 1]`` views of the running buffers; ``spatial``: positions per row;
        ``momentum`` None: a cumulative average, momentum 1 / ``tracked``, as nn.BatchNorm)."""
        if mean is not None and var is not None:
            self._running.append((mean, var, batch_mean, batch_var, spatial, momentum, tracked))

    def _constant(self, values: list[int], like: torch.Tensor) -> torch.Tensor:
        """``values`` as a tensor on ``like``'s device, made once (kept in ``views``, unless
        made during a capture: ``graphs.capturing``): no copy from the host inside a step
        that a CUDA graph replays."""
        key = ("#constant", tuple(values))
        cached = self.views.get(key)
        if cached is None or cached.dtype != like.dtype or cached.device != like.device:
            cached = torch.tensor(values, dtype=like.dtype, device=like.device)
            if not capturing():
                self.views[key] = cached
        return cached

    @torch.no_grad()
    def finish(self) -> None:
        """Apply the queued BatchNorm updates (``fused_batchnorm``): a few multi-tensor ops."""
        if self._tracked:
            torch._foreach_add_(self._tracked, 1)
            self._tracked = []
        if not self._running:
            return
        assert self._rows is not None    # set by row_scale
        spatial = sorted({r[4] for r in self._running})
        rows = self._rows.to(self._running[0][2].dtype)
        count = rows[None, :] * self._constant(spatial, rows)[:, None]
        unbias = (count / (count - 1).clamp(min=1)).view(len(spatial), 1, -1, 1, 1).unbind(0)
        factor = dict(zip(spatial, unbias))
        for momentum in {r[5] for r in self._running}:
            group = [r for r in self._running if r[5] == momentum]
            unbiased = torch._foreach_mul([r[3] for r in group], [factor[r[4]] for r in group])
            if momentum is None:
                weights = [(1.0 / r[6].to(rows.dtype)).view(1, -1, 1, 1) for r in group]
                torch._foreach_lerp_([r[0] for r in group], [r[2] for r in group], weights)
                torch._foreach_lerp_([r[1] for r in group], unbiased, weights)
                continue
            torch._foreach_lerp_([r[0] for r in group], [r[2] for r in group], momentum)
            torch._foreach_lerp_([r[1] for r in group], unbiased, momentum)
        self._running = []


# ---- layouts -----------------------------------------------------------------------------------

def member_shape(v: Value, n: int) -> torch.Size:
    """The shape one member sees."""
    if v.layout == NB:
        return v.t.shape[1:]
    b, folded, *rest = v.t.shape
    return torch.Size([b, folded // n, *rest])


def to_nb(v: Value, n: int) -> torch.Tensor:
    if v.layout == NB:
        return v.t
    b, folded, *rest = v.t.shape
    return v.t.reshape(b, n, folded // n, *rest).movedim(1, 0)


def to_cf(v: Value, n: int, channels_last: bool = False) -> torch.Tensor:
    """``[B, N * C, *spatial]`` of a value whose member shape has at least 2 dimensions."""
    if v.layout == CF:
        return v.t
    t = v.t
    if t.dim() < 3:
        raise Unfusable("a channel-folded op", f"member input of {t.dim() - 1} dimension(s)")
    out = t.movedim(0, 1).reshape(t.shape[1], -1, *t.shape[3:])
    if channels_last and out.dim() == 4:
        out = out.contiguous(memory_format=torch.channels_last)
    return out


def _stacked(ctx: FuseContext, name: str, attr: str) -> torch.Tensor | None:
    return ctx.tensor(f"{name}.{attr}" if name else attr)


# ---- fused layers ------------------------------------------------------------------------------

def fused_linear(ctx: FuseContext, name: str, m: nn.Module, x: Value) -> Value:
    """``y_i = x_i W_i^T + b_i``: one batched matmul over ``[N, rows, in]``."""
    return Value(fused_linear_raw(to_nb(x, ctx.n), _stacked(ctx, name, "weight"),
                                  _stacked(ctx, name, "bias")), NB)


def fused_conv(ctx: FuseContext, name: str, m: nn.Module, x: Value) -> Value:
    """One grouped convolution over ``N * C`` channels (``groups * N``); with ``ctx.conv``
    "bmm", a dense Conv2d (``groups`` 1, numeric padding) runs as ``conv2d_bmm`` instead."""
    conv = m
    assert isinstance(conv, (nn.Conv1d, nn.Conv2d))
    if conv.padding_mode != "zeros":
        raise Unfusable(f"model.{name}", f"padding_mode={conv.padding_mode!r}")
    w, b = _stacked(ctx, name, "weight"), _stacked(ctx, name, "bias")
    assert w is not None
    if ctx.conv == "bmm" and isinstance(conv, nn.Conv2d) and conv.groups == 1 \
            and not isinstance(conv.padding, str):
        t = to_cf(x, ctx.n)         # NCHW: unfold reads it once whatever the precision
        return Value(conv2d_bmm(t, w, b, conv.stride, conv.padding, conv.dilation), CF)
    t = to_cf(x, ctx.n, ctx.channels_last)
    w = w.reshape(-1, *w.shape[2:])
    bias = None if b is None else b.reshape(-1)
    fn = F.conv1d if isinstance(conv, nn.Conv1d) else F.conv2d
    out = fn(t, w, bias, conv.stride, conv.padding, conv.dilation, conv.groups * ctx.n)
    return Value(out, CF)


def conv2d_bmm(t: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
               stride: tuple[int, ...], padding: tuple[int, ...] | Any,
               dilation: tuple[int, ...]) -> torch.Tensor:
    """N dense 2-d convolutions as one batched GEMM: ``[B, N * C, H, W]`` (channel-folded)
    with stacked ``w`` ``[N, O, C, kh, kw]`` and ``b`` ``[N, O]`` -> ``[B, N * O, Ho, Wo]``.

    im2col (``F.unfold``) of the folded input is, per member, the member's own patch matrix
    ``[C * kh * kw, B * L]`` (a 1x1 convolution with stride 1 and no padding needs none), so
    member i's output is ``W_i @ cols_i``: one ``bmm`` / ``baddbmm`` over the members, which
    a GPU runs as a few large tensor-core GEMMs. The result is a channel-folded view of the
    ``[N, O, B, L]`` product (no copy back); a following 1x1 convolution reads it in place.
    Member i's result is what ``F.conv2d`` gives on its input up to summation order.
    """
    batch, folded, height, width = t.shape
    n, out_ch, channels, kh, kw = w.shape
    kind = t.device.type
    if torch.is_autocast_enabled(kind):     # im2col in the GEMM's type: half the bytes in bf16
        t = t.to(torch.get_autocast_dtype(kind))
    if folded != n * channels:
        raise Unfusable("a fused Conv2d", f"input of {folded} channels for {n} x {channels}")
    stride, padding, dilation = (_pair(v) for v in (stride, padding, dilation))
    ho = (height + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (width + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    if (kh, kw) == (1, 1) and stride == (1, 1) and padding == (0, 0):
        cols = t.reshape(batch, n, channels, height * width)
    else:
        cols = F.unfold(t, (kh, kw), dilation, padding, stride)
        cols = cols.view(batch, n, channels * kh * kw, ho * wo)
    cols = cols.permute(1, 2, 0, 3).reshape(n, channels * kh * kw, batch * ho * wo)
    weight = w.reshape(n, out_ch, channels * kh * kw)
    out = torch.bmm(weight, cols) if b is None else torch.baddbmm(b.unsqueeze(2), weight, cols)
    return out.view(n, out_ch, batch, ho, wo).permute(2, 0, 1, 3, 4).reshape(
        batch, n * out_ch, ho, wo)


def _pair(v: Any) -> tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, int) else (int(v[0]), int(v[1]))


def fused_batchnorm(ctx: FuseContext, name: str, m: nn.Module, x: Value) -> Value:
    """Per-member BatchNorm over ``N * C`` channels; padded rows (``row_weight``) excluded."""
    bn = m
    assert isinstance(bn, MaskedBatchNorm)
    t = to_cf(x, ctx.n, ctx.channels_last)
    channels = t.shape[1]
    flat = (channels,)
    mean = ctx.buffer_view(_attr(name, "running_mean"), flat)
    var = ctx.buffer_view(_attr(name, "running_var"), flat)
    w, b = _stacked(ctx, name, "weight"), _stacked(ctx, name, "bias")
    if not ctx.training and mean is not None and var is not None:
        return Value(F.batch_norm(t, mean, var, _flat(w), _flat(b), False, 0.0, bn.eps), CF)
    tracked = _stacked(ctx, name, "num_batches_tracked")
    if ctx.row_weight is None and bn.momentum is not None:
        ctx.count_batch(tracked)
        return Value(F.batch_norm(t, mean, var, _flat(w), _flat(b), True, bn.momentum,
                                  bn.eps), CF)
    batch, n = t.shape[0], ctx.n
    stats = (1, n, channels // n, 1)
    found: list[tuple[torch.Tensor, torch.Tensor]] = []
    out = _MaskedBatchNorm.apply(t.view(batch, n, channels // n, -1),
                                 None if w is None else w.view(stats),
                                 None if b is None else b.view(stats),
                                 ctx.row_scale(batch), bn.eps, found)
    ctx.count_batch(tracked)
    ctx.update_running(ctx.buffer_view(_attr(name, "running_mean"), stats),
                       ctx.buffer_view(_attr(name, "running_var"), stats), *found[0],
                       out.shape[3], bn.momentum, tracked)
    return Value(out.view(t.shape), CF)


def _attr(name: str, attr: str) -> str:
    return f"{name}.{attr}" if name else attr


def _flat(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.view(-1)


class _MaskedBatchNorm(torch.autograd.Function):
    """BatchNorm of ``x`` ``[B, N, C, L]`` over each member's own rows, forward and backward in
    a few ops each (the composite's autograd takes about three times as many).

    ``weight`` / ``bias``: ``[1, N, C, 1]`` views or None. ``scale`` ``[B, N, 1, 1]``: row weight
    x B / rows (``FuseContext.row_scale``), so a mean over (B, L) times it is the mean over the
    member's real rows. The batch mean and biased variance ``[1, N, C, 1]`` are appended to
    ``stats`` (no gradient). Padded rows of the output are not meaningful; their gradient (zero:
    the loss gives them none) stays zero.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor | None,
                bias: torch.Tensor | None, scale: torch.Tensor, eps: float,
                stats: list) -> torch.Tensor:
        mean = (x * scale).mean((0, 3), keepdim=True)
        centred = x - mean
        var = (centred * centred * scale).mean((0, 3), keepdim=True)
        rstd = (var + eps).rsqrt()
        gain = rstd if weight is None else weight * rstd
        out = centred * gain if bias is None else torch.addcmul(bias, centred, gain)
        ctx.save_for_backward(centred, scale, rstd, gain)
        ctx.affine = (weight is not None, bias is not None)
        ctx.set_materialize_grads(False)
        stats.append((mean, var))
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor | None) -> tuple:
        if grad is None:
            return None, None, None, None, None, None
        centred, scale, rstd, gain = ctx.saved_tensors
        grad_bias = grad.sum((0, 3), keepdim=True)
        grad_weight = (grad * centred).sum((0, 3), keepdim=True) * rstd
        # dx = gain (g - mean_real(g) - y mean_real(g y)), y = centred rstd; 0 on padding
        shift = torch.addcmul(grad_bias, centred, grad_weight * rstd) * scale
        grad_x = torch.sub(grad, shift, alpha=1.0 / (grad.shape[0] * grad.shape[3])) * gain
        weight, bias = ctx.affine
        return (grad_x, grad_weight if weight else None, grad_bias if bias else None,
                None, None, None)


def fused_layernorm(ctx: FuseContext, name: str, m: nn.Module, x: Value) -> Value:
    ln = m
    assert isinstance(ln, nn.LayerNorm)
    t = to_nb(x, ctx.n)
    out = F.layer_norm(t, ln.normalized_shape, None, None, ln.eps)
    w, b = _stacked(ctx, name, "weight"), _stacked(ctx, name, "bias")
    view = (ctx.n,) + (1,) * (t.dim() - 1 - len(ln.normalized_shape)) + tuple(ln.normalized_shape)
    if w is not None:
        out = out * w.view(view)
    if b is not None:
        out = out + b.view(view)
    return Value(out, NB)


def fused_embedding(ctx: FuseContext, name: str, m: nn.Module, x: Value | torch.Tensor) -> Value:
    """Row lookup in each member's own table (member i's ids offset by ``i * vocab``)."""
    emb = m
    assert isinstance(emb, nn.Embedding)
    if emb.padding_idx is not None or emb.max_norm is not None or emb.scale_grad_by_freq \
            or emb.sparse:
        raise Unfusable(f"model.{name}", "Embedding with padding_idx/max_norm/sparse")
    w = _stacked(ctx, name, "weight")
    assert w is not None
    n, vocab = ctx.n, w.shape[1]
    if isinstance(x, Value):
        ids = to_nb(x, n)
        offsets = torch.arange(n, device=ids.device).view((n,) + (1,) * (ids.dim() - 1))
        return Value(F.embedding(ids + offsets * vocab, w.reshape(n * vocab, -1)), NB)
    rows = w.index_select(1, x.reshape(-1))
    return Value(rows.view(n, *x.shape, w.shape[2]), NB)


def fused_attention(ctx: FuseContext, name: str, m: nn.Module, query: Value, key: Value,
                    value: Value, key_padding_mask: Any = None, need_weights: bool = True,
                    attn_mask: Any = None, average_attn_weights: bool = True,
                    is_causal: bool = False) -> tuple[Value, None]:
    """``nn.MultiheadAttention`` as batched projections and one attention over N x B batches.

    Returns ``(output, None)``: the attention weights are not computed (a model that uses
    them fails the pack's probe and trains under vmap)."""
    mha = m
    assert isinstance(mha, nn.MultiheadAttention)
    if (mha.dropout and ctx.training) or not mha._qkv_same_embed_dim or mha.bias_k is not None \
            or mha.add_zero_attn or key_padding_mask is not None \
            or any(isinstance(a, Value) for a in (attn_mask,)) \
            or not all(isinstance(a, Value) for a in (query, key, value)):
        raise Unfusable(f"model.{name}", "MultiheadAttention with dropout, kdim/vdim, bias_k, "
                                         "zero attention or a key padding mask")
    n, heads = ctx.n, mha.num_heads
    w, b = _stacked(ctx, name, "in_proj_weight"), _stacked(ctx, name, "in_proj_bias")
    assert w is not None
    q, k, v = (to_nb(a, n) if mha.batch_first else to_nb(a, n).transpose(1, 2)
               for a in (query, key, value))                                  # [N, B, T, E]
    ws, bs = w.chunk(3, dim=1), (b.chunk(3, dim=1) if b is not None else (None,) * 3)

    def project(x: torch.Tensor, i: int) -> torch.Tensor:
        out = fused_linear_raw(x, ws[i], bs[i])
        return out.flatten(0, 1).unflatten(-1, (heads, -1)).transpose(1, 2)  # [NB, H, T, d]
    if isinstance(attn_mask, torch.Tensor) and attn_mask.dtype == torch.bool:
        attn_mask = ~attn_mask               # nn.MultiheadAttention: True = may not attend
    out = F.scaled_dot_product_attention(project(q, 0), project(k, 1), project(v, 2),
                                         attn_mask=attn_mask,
                                         is_causal=bool(is_causal and attn_mask is None))
    out = out.transpose(1, 2).flatten(2).unflatten(0, (n, -1))               # [N, B, T, E]
    out = fused_linear_raw(out, _stacked(ctx, name, "out_proj.weight"),
                           _stacked(ctx, name, "out_proj.bias"))
    return Value(out if mha.batch_first else out.transpose(1, 2), NB), None


def fused_linear_raw(t: torch.Tensor, w: torch.Tensor | None,
                     b: torch.Tensor | None) -> torch.Tensor:
    """``[N, ..., in] @ W_i^T + b_i`` for stacked ``w`` ``[N, out, in]``."""
    assert w is not None
    flat = t.reshape(t.shape[0], -1, t.shape[-1])
    wt = w.transpose(1, 2)
    out = torch.bmm(flat, wt) if b is None else torch.baddbmm(b.unsqueeze(1), flat, wt)
    return out.view(*t.shape[:-1], w.shape[1])


def fused_dropout(ctx: FuseContext, name: str, m: nn.Module, x: Value) -> Value:
    """Multiply by the member's own mask (``hypersack.fusion.layers``); none: identity."""
    mask = ctx.masks.get(ctx.dropout_index[name]) if ctx.training else None
    if mask is None:
        return x
    if x.layout == CF:
        mask = mask.to(x.t.dtype)
        mask = mask.movedim(0, 1).reshape(x.t.shape)
    return Value(x.t * mask, x.layout)


def channelwise(ctx: FuseContext, name: str, m: nn.Module, x: Value) -> Value:
    """Pooling: each channel on its own, so the channel-folded layout runs as it is."""
    spatial = 1 if "1d" in type(m).__name__ else 2
    if len(member_shape(x, ctx.n)) != spatial + 2:
        raise Unfusable(f"model.{name}", f"{type(m).__name__} on an unbatched input")
    return Value(m(to_cf(x, ctx.n, ctx.channels_last)), CF)


def elementwise_module(ctx: FuseContext, name: str, m: nn.Module, x: Value) -> Value:
    return Value(m(x.t), x.layout)


def generic_module(ctx: FuseContext, name: str, m: nn.Module, x: Value) -> Value:
    """A parameter-free module that reshapes (Flatten, Unflatten): vmapped over members."""
    return call_generic(m, (x,), {}, ctx.n)


_ACTIVATIONS = (nn.ReLU, nn.ReLU6, nn.GELU, nn.SiLU, nn.Sigmoid, nn.Tanh, nn.Hardswish,
                nn.Hardsigmoid, nn.LeakyReLU, nn.ELU, nn.Softplus, nn.Mish, nn.Identity,
                nn.Hardtanh, nn.SELU, nn.CELU, nn.Tanhshrink)
_POOLS = (nn.MaxPool1d, nn.MaxPool2d, nn.AvgPool1d, nn.AvgPool2d, nn.AdaptiveAvgPool1d,
          nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d)

FusedOp = Callable[..., Any]

#: The table: layer type -> fused op. Nothing else with parameters or randomness fuses.
FUSED_MODULES: dict[type, FusedOp] = {
    nn.Linear: fused_linear, nn.Conv1d: fused_conv, nn.Conv2d: fused_conv,
    MaskedBatchNorm: fused_batchnorm, nn.LayerNorm: fused_layernorm,
    nn.MultiheadAttention: fused_attention,
    nn.Embedding: fused_embedding, MemberDropout: fused_dropout,
    nn.Flatten: generic_module, nn.Unflatten: generic_module,
    **{cls: channelwise for cls in _POOLS},
    **{cls: elementwise_module for cls in _ACTIVATIONS},
}

# ---- functions and methods ---------------------------------------------------------------------

#: Element-wise functions (and method names): any layout passes through when the operands agree.
ELEMENTWISE: set[Any] = {
    operator.add, operator.sub, operator.mul, operator.truediv, operator.neg, operator.pow,
    torch.add, torch.sub, torch.mul, torch.div, torch.relu, torch.sigmoid, torch.tanh,
    torch.exp, torch.sqrt, torch.rsqrt, torch.abs, torch.clamp, torch.where,
    F.relu, F.relu6, F.gelu, F.silu, F.hardswish, F.hardsigmoid, F.leaky_relu, F.elu,
    F.softplus, F.mish, F.sigmoid, F.tanh,
    "add", "sub", "mul", "div", "neg", "pow", "relu", "sigmoid", "tanh", "exp", "sqrt",
    "rsqrt", "abs", "clamp", "contiguous",
}
#: Functions that draw random numbers: their per-member streams are not reproducible here.
RANDOM_FUNCTIONS: set[Any] = {F.dropout, F.dropout1d, F.dropout2d, F.dropout3d, F.alpha_dropout,
                              F.feature_alpha_dropout, torch.rand, torch.randn, torch.randint,
                              torch.bernoulli, torch.rand_like, torch.randn_like,
                              torch.multinomial, "bernoulli_", "uniform_", "normal_",
                              "random_", "exponential_"}


def _operands(args: tuple, kwargs: dict) -> list[Any]:
    flat, _ = tree_flatten((args, kwargs))
    return flat


def elementwise(fn: Any, args: tuple, kwargs: dict, n: int) -> Value:
    """``fn`` on the raw tensors when every fused operand has one layout and one rank and
    every shared tensor is a scalar; otherwise the generic (vmapped) call."""
    flat = _operands(args, kwargs)
    values = [a for a in flat if isinstance(a, Value)]
    layouts = {v.layout for v in values}
    ranks = {v.t.dim() for v in values}
    shared_ok = all(a.dim() == 0 for a in flat if isinstance(a, torch.Tensor))
    if len(layouts) == 1 and len(ranks) == 1 and shared_ok:
        raw_args, raw_kwargs = tree_map(lambda a: a.t if isinstance(a, Value) else a,
                                        (args, kwargs))
        call = getattr(raw_args[0], fn) if isinstance(fn, str) else fn
        out = call(*raw_args[1:], **raw_kwargs) if isinstance(fn, str) else call(*raw_args,
                                                                                **raw_kwargs)
        return Value(out, values[0].layout)
    return call_generic(fn, args, kwargs, n)


def reduction(fn: Any, args: tuple, kwargs: dict, n: int) -> Value:
    """mean/sum/amax over spatial dimensions of a channel-folded value stay folded."""
    x = args[0]
    dims = kwargs.get("dim", args[1] if len(args) > 1 else None)
    if isinstance(x, Value) and x.layout == CF and dims is not None and len(args) <= 2:
        rank = x.t.dim()
        dims_t = (dims,) if isinstance(dims, int) else tuple(dims)
        if all((d % rank) >= 2 for d in dims_t):
            rest = {k: v for k, v in kwargs.items() if k != "dim"}
            out = getattr(x.t, fn)(dim=dims_t, **rest) if isinstance(fn, str) else \
                fn(x.t, dim=dims_t, **rest)
            return Value(out, CF)
    return call_generic(fn, args, kwargs, n)


def sdpa(fn: Any, args: tuple, kwargs: dict, n: int) -> Value:
    """scaled_dot_product_attention folds members into its batch dimensions."""
    q, k, v = args[:3]
    mask = kwargs.get("attn_mask", args[3] if len(args) > 3 else None)
    if all(isinstance(a, Value) for a in (q, k, v)) and not isinstance(mask, Value):
        raw = [to_nb(a, n) for a in (q, k, v)]
        return Value(fn(*raw, *args[3:], **kwargs), NB)
    return call_generic(fn, args, kwargs, n)


def call_generic(fn: Any, args: tuple, kwargs: dict, n: int) -> Any:
    """``fn`` vmapped over the members of its fused operands (shared operands broadcast)."""
    flat, spec = tree_flatten((args, kwargs))
    where = [i for i, a in enumerate(flat) if isinstance(a, Value)]
    if not where:
        a, k = tree_unflatten(flat, spec)
        return _apply(fn, a, k)
    tensors = [to_nb(flat[i], n) for i in where]

    def one(*ts: torch.Tensor) -> Any:
        local = list(flat)
        for i, t in zip(where, ts):
            local[i] = t
        a, k = tree_unflatten(local, spec)
        return _apply(fn, a, k)

    out = torch.vmap(one, randomness="error")(*tensors)
    return tree_map(lambda o: Value(o, NB) if isinstance(o, torch.Tensor) else o, out)


def _apply(fn: Any, args: Any, kwargs: Any) -> Any:
    if isinstance(fn, str):
        return getattr(args[0], fn)(*args[1:], **kwargs)
    return fn(*args, **kwargs)


#: Rules for call_function / call_method targets with a layout-aware implementation.
FUNCTION_RULES: dict[Any, Callable[[Any, tuple, dict, int], Any]] = {
    **{fn: elementwise for fn in ELEMENTWISE},
    **{fn: reduction for fn in ("mean", "sum", "amax", torch.mean, torch.sum, torch.amax)},
    F.scaled_dot_product_attention: sdpa,
}
