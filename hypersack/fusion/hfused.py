"""The horizontally fused engine: a member's model, traced once, run for N members at once.

``FusedProgram(model)`` traces a prepared member model (``layers.prepare_module``) with
``torch.fx`` and checks every node against ``fused_ops``: each leaf layer must be in
``FUSED_MODULES`` (or be a parameter-free, non-random torch layer), no function may draw random
numbers, and the model takes one input. Anything else raises ``Unfusable`` naming the layer, and
the stack trains with vmap instead (``choose_engine``), so a model that cannot be fused still
trains, with the same results.

``FusedProgram.run(ctx, x)`` interprets the graph on fused values (``fused_ops.Value``): layers
call their fused op, element-wise ops pass through in the layout they find, ``x.shape`` /
``x.size()`` answer the member's shape, and every other op is vmapped over the members on its
own. Input ``x`` and the output are member-major ``[N, B, ...]``.
"""
from __future__ import annotations

import builtins
import copy
import operator
import warnings
from typing import Any, Callable

import torch
from torch import fx, nn

from hypersack.fusion.fused_ops import (CF, FUNCTION_RULES, FUSED_MODULES, NB, RANDOM_FUNCTIONS,
                                        FuseContext, Unfusable, Value, call_generic,
                                        generic_module, member_shape, to_nb)
from hypersack.fusion.layers import dropout_layers

__all__ = ["FusedProgram", "choose_engine", "ENGINES"]

ENGINES = ("auto", "hfused", "vmap")
_RANDOM_MODULES = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout,
                   nn.FeatureAlphaDropout, nn.RReLU)


class _Tracer(fx.Tracer):
    def is_leaf_module(self, m: nn.Module, qualified_name: str) -> bool:
        return type(m) in FUSED_MODULES or super().is_leaf_module(m, qualified_name)


class FusedProgram:
    """One member model as a graph runnable on N members (see the module docstring)."""

    def __init__(self, model: nn.Module):
        try:
            self.graph = _Tracer().trace(model)
        except Exception as exc:   # fx raises many types for untraceable Python
            raise Unfusable("model.forward", f"not traceable by torch.fx: {exc}") from exc
        self.modules = dict(model.named_modules())
        self.dropout_index = {name: i for i, (name, _) in enumerate(dropout_layers(model))}
        self.names = {n for n, _ in model.named_parameters()} | \
            {n for n, _ in model.named_buffers()}
        self.constants: dict[str, Any] = {}
        self.nodes = list(self.graph.nodes)
        self.ops: dict[fx.Node, Callable] = {}
        for node in self.nodes:
            self._check(node, model)

    def _check(self, node: fx.Node, model: nn.Module) -> None:
        target = node.target
        if node.op == "placeholder":
            if node is not self.nodes[0] and not node.args:
                raise Unfusable(f"model.forward({target})", "a second input")
        elif node.op == "call_module":
            assert isinstance(target, str)
            m = self.modules[target]
            op = FUSED_MODULES.get(type(m))
            if op is None:
                has_state = any(True for _ in m.parameters()) or any(True for _ in m.buffers())
                if has_state or isinstance(m, _RANDOM_MODULES):
                    raise Unfusable(f"model.{target}", type(m).__name__)
                op = generic_module
            self.ops[node] = op
        elif node.op in ("call_function", "call_method"):
            if target in RANDOM_FUNCTIONS:
                raise Unfusable(f"model ({node.name})", f"random function {target}")
        elif node.op == "get_attr":
            assert isinstance(target, str)
            if target not in self.names:
                self.constants[target] = _resolve(model, target)

    def run(self, ctx: FuseContext, x: torch.Tensor) -> torch.Tensor:
        """The members' outputs ``[N, ...]`` for inputs ``x`` ``[N, B, ...]`` (BatchNorm's
        running statistics updated at the end: ``FuseContext.finish``)."""
        env: dict[fx.Node, Any] = {}
        for node in self.nodes:
            if node.op == "output":
                out = fx.node.map_arg(node.args[0], lambda a: env[a])
                if not isinstance(out, Value):
                    raise Unfusable("model.forward", "an output that is not one tensor")
                ctx.finish()
                return to_nb(out, ctx.n)
            env[node] = self._eval(node, env, ctx, x)
        raise Unfusable("model.forward", "no output")

    def _eval(self, node: fx.Node, env: dict, ctx: FuseContext, x: torch.Tensor) -> Any:
        if node.op == "placeholder":
            return Value(x, NB) if node is self.nodes[0] else node.args[0]
        if node.op == "get_attr":
            assert isinstance(node.target, str)
            stacked = ctx.tensor(node.target)
            return Value(stacked, NB) if stacked is not None else self.constants[node.target]
        args = fx.node.map_arg(node.args, lambda a: env[a])
        kwargs = fx.node.map_arg(node.kwargs, lambda a: env[a])
        if node.op == "call_module":
            assert isinstance(node.target, str)
            return self.ops[node](ctx, node.target, self.modules[node.target], *args, **kwargs)
        if node.op == "call_method":
            return _method(node.target, args, kwargs, ctx.n)
        return _function(node.target, args, kwargs, ctx.n)


def _resolve(model: nn.Module, target: str) -> Any:
    value: Any = model
    for part in target.split("."):
        value = getattr(value, part)
    return value


def _method(name: Any, args: tuple, kwargs: dict, n: int) -> Any:
    self_ = args[0]
    if not isinstance(self_, Value):
        return getattr(self_, name)(*args[1:], **kwargs)
    if name == "size":
        shape = member_shape(self_, n)
        dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
        return shape if dim is None else shape[dim]
    if name == "dim":
        return len(member_shape(self_, n))
    rule = FUNCTION_RULES.get(name)
    return rule(name, args, kwargs, n) if rule else call_generic(name, args, kwargs, n)


_ATTRIBUTES: dict[str, Callable[[Value, int], Any]] = {
    "shape": lambda v, n: member_shape(v, n), "ndim": lambda v, n: len(member_shape(v, n)),
    "device": lambda v, n: v.t.device, "dtype": lambda v, n: v.t.dtype,
    "is_cuda": lambda v, n: v.t.is_cuda,
}


def _function(fn: Any, args: tuple, kwargs: dict, n: int) -> Any:
    if fn is builtins.getattr and isinstance(args[0], Value):
        attribute = _ATTRIBUTES.get(args[1])
        if attribute is not None:
            return attribute(args[0], n)
        return call_generic(lambda t: getattr(t, args[1]), (args[0],), {}, n)
    if fn is operator.getitem and not isinstance(args[0], Value):
        return args[0][args[1]]
    rule = FUNCTION_RULES.get(fn)
    return rule(fn, args, kwargs, n) if rule else call_generic(fn, args, kwargs, n)


# ---- choosing the engine -----------------------------------------------------------------------

def choose_engine(engine: str, base: nn.Module, sample: torch.Tensor,
                  vmap_forward: Callable[[dict, dict, torch.Tensor], torch.Tensor],
                  rtol: float) -> FusedProgram | None:
    """The fused program for ``base``, or None for vmap (with one warning naming the cause).

    ``engine``: "auto" (fuse if the model fuses and a two-member probe forward on ``sample``
    (``[2, B, ...]``) agrees with ``vmap_forward`` to ``rtol``, or runs where vmap cannot),
    "hfused" (fuse or raise) or "vmap". The probe runs on copies: the stack's state is
    untouched.
    """
    if engine == "vmap":
        return None
    try:
        program = FusedProgram(base)
        _probe(program, base, sample, vmap_forward, rtol)
        return program
    except Exception as exc:
        if engine == "hfused":
            raise
        warnings.warn(f"fused pack runs under vmap: {exc}", RuntimeWarning, stacklevel=3)
        return None


def _probe(program: FusedProgram, base: nn.Module, sample: torch.Tensor,
           vmap_forward: Callable, rtol: float) -> None:
    def stacked(named: Any) -> dict[str, torch.Tensor]:
        out = {}
        for i, (k, v) in enumerate(named):
            v = v.detach()
            # two different members: the second perturbed, so a mix-up of members shows
            other = v + 0.01 * (i + 1) if v.is_floating_point() else v
            out[k] = torch.stack([v, other]).clone()
        return out
    params, buffers = stacked(base.named_parameters()), stacked(base.named_buffers())
    dtype = next((p.dtype for p in params.values() if p.is_floating_point()), torch.float32)
    ctx = FuseContext(n=2, params=params, buffers=copy.deepcopy(buffers), training=True,
                      dropout_index=program.dropout_index,
                      row_weight=torch.ones(sample.shape[:2], dtype=dtype, device=sample.device))
    got = program.run(ctx, sample)
    try:
        want = vmap_forward(params, copy.deepcopy(buffers), sample)
    except Exception:       # a model vmap cannot run: the fused program is all there is
        return
    if got.shape != want.shape or not torch.allclose(got, want, rtol=rtol, atol=rtol):
        raise Unfusable("model", "a probe forward that differs from the vmapped one")


__all__ += ["CF", "NB"]
