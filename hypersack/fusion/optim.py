"""Functional optimizers over stacked parameters, with per-member hyperparameters and schedules.

Every parameter is a tensor ``[N, ...]`` (row i belongs to member i); every hyperparameter is a
tensor ``[N]`` broadcast as ``[N, 1, ...]``. One call updates all N members and all parameters
with a handful of multi-tensor ops (``torch._foreach_*`` over the list of stacked parameters,
as ``torch.optim``'s ``foreach`` path: Adam is 8 of them, plus about 30 small ops on ``[N]``
rows), whatever the number of parameters. The update rules are those of ``torch.optim``
(single-tensor path, ``maximize=False``, ``amsgrad=False``, no ``differentiable``), operation for
operation, so that a member follows the same trajectory as ``torch.optim`` on one model, to
rounding:

- ``sgd``: weight decay, momentum (first step ``buf = grad``), dampening, Nesterov.
- ``adam`` / ``adamw``: betas, eps, L2 (adam) or decoupled (adamw) weight decay.
- ``rmsprop``: alpha, eps, momentum, centered, weight decay.
- ``adagrad``: lr_decay, eps, initial_accumulator_value, weight decay.

The fused CUDA kernels (``torch._fused_adam_`` / ``_fused_adamw_`` / ``_fused_sgd_``) take one
learning rate (a float or a one-element tensor) and float betas, eps, weight decay and momentum
per call, so per-member hyperparameters would need one call per member: the foreach ops are
used on every device.

One stack holds one optimizer *kind*; members may differ in every hyperparameter of that kind.
Members with different kinds go in separate stacks of the same pack (``hypersack.fusion.runner``
keeps one stack per kind and shares the data between them).

Schedules (``Schedule``) are closed forms of the member's optimizer-step count t (updates done
before this one): ``lr_t = lr * warmup(t) * main(t)`` with ``warmup`` as ``LinearLR(start_factor,
end_factor=1, total_iters=warmup_steps)`` and ``main`` one of constant, ``StepLR(step_size,
gamma)`` or ``CosineAnnealingLR(T_max=total_steps, eta_min=min_factor * lr)`` (which, unlike
torch's, stays at ``eta_min`` after ``total_steps`` instead of rising again).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

import torch

from hypersack.errors import ConfigError
from hypersack.validation import check_integer, check_number, check_positive

__all__ = ["KINDS", "SCHEDULES", "Schedule", "OptimizerConfig", "state_names", "init_state",
           "hparam_rows", "schedule_factor", "fused_step", "FEATURES", "rule_features"]

KINDS = ("sgd", "adam", "adamw", "rmsprop", "adagrad")
SCHEDULES = ("constant", "step", "cosine")

_HPARAMS = {
    "sgd": ("lr", "weight_decay", "momentum", "dampening", "nesterov"),
    "adam": ("lr", "weight_decay", "beta1", "beta2", "eps"),
    "adamw": ("lr", "weight_decay", "beta1", "beta2", "eps"),
    "rmsprop": ("lr", "weight_decay", "alpha", "eps", "momentum", "centered"),
    "adagrad": ("lr", "weight_decay", "lr_decay", "eps"),
}
_STATE = {
    "sgd": ("momentum_buffer",),
    "adam": ("exp_avg", "exp_avg_sq"),
    "adamw": ("exp_avg", "exp_avg_sq"),
    "rmsprop": ("square_avg", "momentum_buffer", "grad_avg"),
    "adagrad": ("sum",),
}
_SCHEDULE_FIELDS = ("schedule_code", "warmup_steps", "warmup_start", "step_size", "gamma",
                    "total_steps", "min_factor")


@dataclass(frozen=True)
class Schedule:
    """A learning-rate schedule in optimizer steps (one step = one minibatch update).

    ``kind``: "constant", "step" (x ``gamma`` every ``step_size`` steps) or "cosine" (from 1 down
    to ``min_factor`` over ``total_steps``, then flat). ``warmup_steps`` (>= 0): linear ramp of
    the factor from ``warmup_start`` (in (0, 1]) to 1, multiplied with the main schedule.
    """
    kind: str = "constant"
    warmup_steps: int = 0
    warmup_start: float = 1.0 / 3.0
    step_size: int = 1
    gamma: float = 0.1
    total_steps: int = 1
    min_factor: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in SCHEDULES:
            raise ConfigError("schedule.kind", self.kind, f"must be one of {list(SCHEDULES)}")
        for name in ("warmup_steps", "step_size", "total_steps"):
            value = getattr(self, name)
            low = 0 if name == "warmup_steps" else 1
            check_integer(f"schedule.{name}", value, low=low)
        check_number("schedule.warmup_start", self.warmup_start, low=0.0, high=1.0, low_open=True)
        check_positive("schedule.gamma", self.gamma)
        check_number("schedule.min_factor", self.min_factor, low=0.0, high=1.0)

    def values(self) -> dict[str, float]:
        return {"schedule_code": float(SCHEDULES.index(self.kind)),
                "warmup_steps": float(self.warmup_steps), "warmup_start": self.warmup_start,
                "step_size": float(self.step_size), "gamma": self.gamma,
                "total_steps": float(self.total_steps), "min_factor": self.min_factor}


@dataclass(frozen=True)
class OptimizerConfig:
    """One member's optimizer: its kind, hyperparameters and schedule (validated here).

    ``eps`` None takes torch's default for the kind (1e-8; adagrad 1e-10).
    """
    kind: str = "adam"
    lr: float = 1e-3
    weight_decay: float = 0.0
    momentum: float = 0.0
    dampening: float = 0.0
    nesterov: bool = False
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float | None = None
    alpha: float = 0.99
    centered: bool = False
    lr_decay: float = 0.0
    initial_accumulator_value: float = 0.0
    schedule: Schedule = field(default_factory=Schedule)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError("optimizer.kind", self.kind, f"must be one of {list(KINDS)}")
        check_positive("optimizer.lr", self.lr)
        check_number("optimizer.weight_decay", self.weight_decay, low=0.0)
        check_number("optimizer.momentum", self.momentum, low=0.0, high=1.0, high_open=True)
        check_number("optimizer.dampening", self.dampening, low=0.0, high=1.0)
        if self.nesterov and (self.momentum <= 0 or self.dampening != 0):
            raise ConfigError("optimizer.nesterov", self.nesterov,
                              "needs momentum > 0 and dampening == 0")
        if not isinstance(self.betas, (tuple, list)) or len(self.betas) != 2:
            raise ConfigError("optimizer.betas", self.betas, "must be a pair of numbers in [0, 1)")
        for beta in self.betas:
            check_number("optimizer.betas", beta, low=0.0, high=1.0, high_open=True)
        if self.eps is not None:
            check_number("optimizer.eps", self.eps, low=0.0)
        check_number("optimizer.alpha", self.alpha, low=0.0, high=1.0)
        check_number("optimizer.lr_decay", self.lr_decay, low=0.0)
        check_number("optimizer.initial_accumulator_value", self.initial_accumulator_value, low=0.0)
        if not isinstance(self.schedule, Schedule):
            raise ConfigError("optimizer.schedule", self.schedule, "must be a Schedule")

    def hyperparameters(self) -> dict[str, float]:
        """The per-member numbers of this kind's update rule (booleans as 0.0 / 1.0)."""
        eps = self.eps if self.eps is not None else (1e-10 if self.kind == "adagrad" else 1e-8)
        every = {"lr": self.lr, "weight_decay": self.weight_decay, "momentum": self.momentum,
                 "dampening": self.dampening, "nesterov": float(self.nesterov),
                 "beta1": self.betas[0], "beta2": self.betas[1], "eps": eps, "alpha": self.alpha,
                 "centered": float(self.centered), "lr_decay": self.lr_decay}
        return {name: float(every[name]) for name in _HPARAMS[self.kind]}


# ---- state and rows ----------------------------------------------------------------------------

def state_names(kind: str, param_names: Sequence[str]) -> list[str]:
    """Keys of the optimizer state of one member: ``"<state>/<param name>"``."""
    return [f"{s}/{p}" for s in _STATE[kind] for p in param_names]


def init_state(config: OptimizerConfig, params: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Fresh optimizer state of one member (tensors shaped like its parameters)."""
    state = {}
    for s in _STATE[config.kind]:
        fill = config.initial_accumulator_value if s == "sum" else 0.0
        for name, p in params.items():
            state[f"{s}/{name}"] = torch.full_like(p, fill)
    return state


def hparam_rows(configs: Sequence[OptimizerConfig], dtype: torch.dtype,
                device: torch.device | str) -> dict[str, torch.Tensor]:
    """Hyperparameters and schedule parameters of N members of one kind, each a tensor [N]."""
    kinds = {c.kind for c in configs}
    if len(kinds) != 1:
        raise ConfigError("optimizer.kind", sorted(kinds), "must be one kind per stack")
    rows = [dict(c.hyperparameters(), **c.schedule.values()) for c in configs]
    return {k: torch.tensor([r[k] for r in rows], dtype=dtype, device=device) for k in rows[0]}


def schedule_factor(h: Mapping[str, torch.Tensor], t: torch.Tensor) -> torch.Tensor:
    """The learning-rate factor [N] at optimizer-step counts ``t`` [N] (see ``Schedule``)."""
    t = t.to(h["gamma"].dtype)
    warm_steps = h["warmup_steps"]
    ramp = h["warmup_start"] + (1 - h["warmup_start"]) * torch.minimum(t, warm_steps) \
        / warm_steps.clamp(min=1)
    warm = torch.where(warm_steps > 0, ramp, torch.ones_like(t))
    stepped = h["gamma"] ** torch.floor(t / h["step_size"])
    progress = torch.minimum(t, h["total_steps"]) / h["total_steps"]
    cosine = h["min_factor"] + (1 - h["min_factor"]) * (1 + torch.cos(math.pi * progress)) / 2
    code = h["schedule_code"]
    main = torch.where(code == 1, stepped, torch.where(code == 2, cosine, torch.ones_like(t)))
    return warm * main


# ---- the update rules --------------------------------------------------------------------------

#: Optional parts of the update rules (``rule_features``).
FEATURES = frozenset({"schedule", "weight_decay", "momentum", "plain", "nesterov", "centered"})


def rule_features(configs: Iterable[OptimizerConfig]) -> frozenset[str]:
    """The optional parts of the update rules that at least one of ``configs`` uses.

    "schedule": a non-constant schedule or a warmup; "weight_decay": > 0; "momentum": > 0
    (sgd, rmsprop); "plain": momentum 0 (sgd, rmsprop); "nesterov"; "centered" (rmsprop).
    ``fused_step(features=...)`` leaves out the multi-tensor ops of the parts no member uses;
    results are the same, since the ops left out would multiply by 0 or 1 for every member.
    """
    uses: set[str] = set()
    for c in configs:
        if c.schedule.kind != "constant" or c.schedule.warmup_steps > 0:
            uses.add("schedule")
        if c.weight_decay > 0:
            uses.add("weight_decay")
        if c.kind in ("sgd", "rmsprop"):
            uses.add("momentum" if c.momentum > 0 else "plain")
        if c.nesterov:
            uses.add("nesterov")
        if c.centered:
            uses.add("centered")
    return frozenset(uses)


_TensorList = list[torch.Tensor] | tuple[torch.Tensor, ...]


class _Lists:
    """The step's tensors as parallel lists (one entry per parameter): ``p``, ``g`` and the
    optimizer state ``s[name]``; ``scalars`` shapes per-member numbers [N] for the foreach ops."""

    def __init__(self, p: list[torch.Tensor], g: _TensorList,
                 s: dict[str, list[torch.Tensor]]):
        self.p, self.g, self.s = p, g, s

    def scalars(self, *values: torch.Tensor) -> list[list[torch.Tensor]]:
        """Each ``[N]`` value as a list of ``[N, 1, ...]`` views, one per parameter (entry i
        broadcasts against ``p[i]``): one stack, then one view and one unbind per rank."""
        table = torch.stack(values)
        by_rank: dict[int, Sequence[torch.Tensor]] = {}
        for x in self.p:
            if x.dim() not in by_rank:
                by_rank[x.dim()] = table.view((len(values), -1) + (1,) * (x.dim() - 1)).unbind(0)
        return [[by_rank[x.dim()][j] for x in self.p] for j in range(len(values))]


@torch.no_grad()
def fused_step(kind: str, params: Mapping[str, torch.Tensor], grads: Mapping[str, torch.Tensor],
               state: Mapping[str, torch.Tensor], h: Mapping[str, torch.Tensor],
               t: torch.Tensor, keep: torch.Tensor | None = None,
               restore: bool = True, features: frozenset[str] | None = None) -> None:
    """Update ``params`` and ``state`` in place for all N members.

    ``h``: hyperparameter rows [N] (``hparam_rows``); ``t``: int64 [N], updates each member has
    done before this one (drives the schedule and bias corrections). A missing gradient (a
    parameter that took no part in the loss) counts as zero; torch.optim would skip such a
    parameter instead, which differs only under weight decay or momentum.

    The update is a handful of multi-tensor ops (``torch._foreach_*``, as ``torch.optim``'s
    ``foreach`` path) over the list of stacked parameters, each per-member number a ``[N, 1,
    ...]`` view; the number of ops depends on the kind and ``features``, never on N or on the
    parameters' count. The arithmetic is torch.optim's single-tensor path, operation for
    operation, so a member follows torch.optim on one model to rounding.

    ``keep``: bool [N] or None (all). Rows where it is False get learning rate 0 and weight 0
    on every running average, so their parameters and optimizer state stay bit for bit when
    their gradients are finite. ``restore``: their gradients may not be finite (members whose
    fp16 gradients overflowed): they are zeroed first (one ``where`` per parameter). Without
    it (free slots, whose loss weight 0 gives zero gradients) they are used as they are.
    ``features``: ``rule_features`` of the members (None: every part, always exact).
    Shapes never change and nothing is skipped in Python: no loop over members.
    """
    names = list(params)
    lists = _Lists([params[n] for n in names],
                   [_grad(grads.get(n), params[n]) for n in names],
                   {s: [state[f"{s}/{n}"] for n in names] for s in _STATE[kind]})
    if not names:
        return
    uses = FEATURES if features is None else features
    lr = h["lr"] * schedule_factor(h, t) if "schedule" in uses else h["lr"]
    k = None if keep is None else keep.to(lr.dtype)
    if k is not None:
        lr = lr * k
        if restore and keep is not None:
            lists.g = _zero_rows(lists.g, keep)
    _RULES[kind](lists, h, lr, k, t, uses)


def _grad(g: torch.Tensor | None, p: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(p) if g is None else g


def _zero_rows(grads: _TensorList, keep: torch.Tensor) -> list[torch.Tensor]:
    views: dict[int, torch.Tensor] = {}
    out = []
    for g in grads:
        if g.dim() not in views:
            views[g.dim()] = keep.view((-1,) + (1,) * (g.dim() - 1))
        out.append(torch.where(views[g.dim()], g, 0))
    return out


def _masked(value: torch.Tensor, k: torch.Tensor | None, held: float) -> torch.Tensor:
    """``value`` where ``k`` is 1, ``held`` where it is 0 (exactly: k is 0.0 or 1.0)."""
    if k is None:
        return value
    return value * k + held * (1 - k)


def _sgd(x: _Lists, h: Mapping[str, torch.Tensor], lr: torch.Tensor, k: torch.Tensor | None,
         t: torch.Tensor, uses: frozenset[str]) -> None:
    fe = torch
    g: _TensorList = x.g
    if "weight_decay" in uses:
        (wd,) = x.scalars(h["weight_decay"])
        g = fe._foreach_addcmul(g, x.p, wd)                     # g + wd p
    if "momentum" not in uses:
        (neg_lr,) = x.scalars(-lr)
        fe._foreach_addcmul_(x.p, g, neg_lr)
        return
    mom, first = h["momentum"], t == 0
    keep_buf = _masked(torch.where(first, 0.0, mom), k, 1.0)    # first step: buf = g
    # momentum 0: the buffer stays 0, as where no member has momentum (it is left out)
    take = _masked(torch.where(first, 1.0, 1 - h["dampening"]) * (mom > 0), k, 0.0)
    mixed = "plain" in uses or "nesterov" in uses
    if mixed:
        nesterov, plain = h["nesterov"] > 0, mom == 0
        g_coef = (nesterov | plain).to(lr.dtype)
        buf_coef = torch.where(nesterov, mom, (~plain).to(lr.dtype))
        a, c, neg_lr, gc, bc = x.scalars(keep_buf, take, -lr, g_coef, buf_coef)
    else:
        a, c, neg_lr = x.scalars(keep_buf, take, -lr)
    buf = x.s["momentum_buffer"]
    fe._foreach_mul_(buf, a)
    fe._foreach_addcmul_(buf, g, c)                             # mom buf + (1 - dampening) g
    update: _TensorList = buf
    if mixed:
        update = fe._foreach_mul(g, gc)                         # nesterov: g + mom buf,
        fe._foreach_addcmul_(update, buf, bc)                   # plain: g, else: buf
    fe._foreach_addcmul_(x.p, update, neg_lr)


def _adam(x: _Lists, h: Mapping[str, torch.Tensor], lr: torch.Tensor, k: torch.Tensor | None,
          t: torch.Tensor, uses: frozenset[str], decoupled: bool = False) -> None:
    fe = torch
    step = (t + 1).to(lr.dtype)
    beta1, beta2 = h["beta1"], h["beta2"]
    neg_step_size = lr / (beta1 ** step - 1)                    # -lr / (1 - beta1^t)
    bias2_sqrt = (1 - beta2 ** step).sqrt()
    w1, w2 = _masked(1 - beta1, k, 0.0), _masked(1 - beta2, k, 0.0)
    b2 = _masked(beta2, k, 1.0)
    decay = "weight_decay" in uses
    extra = [1 - lr * h["weight_decay"] if decoupled else h["weight_decay"]] if decay else []
    w1_, w2_, b2_, eps, bias2, nss, *wd = x.scalars(w1, w2, b2, h["eps"], bias2_sqrt,
                                                     neg_step_size, *extra)
    g: _TensorList = x.g
    if decay and decoupled:
        fe._foreach_mul_(x.p, wd[0])                            # p (1 - lr wd)
    elif decay:
        g = fe._foreach_addcmul(g, x.p, wd[0])                  # g + wd p
    m, v = x.s["exp_avg"], x.s["exp_avg_sq"]
    fe._foreach_lerp_(m, g, w1_)
    fe._foreach_mul_(v, b2_)
    fe._foreach_addcmul_(v, fe._foreach_mul(g, w2_), g)         # v beta2 + (1 - beta2) g g
    denom = fe._foreach_sqrt(v)                                 # the one new tensor list
    fe._foreach_div_(denom, bias2)
    fe._foreach_add_(denom, eps)                                # sqrt(v) / bc2 + eps
    fe._foreach_div_(denom, nss)                                # / -step size (lr 0: inf)
    fe._foreach_addcdiv_(x.p, m, denom)                         # p - step size m / denom


def _adamw(x: _Lists, h: Mapping[str, torch.Tensor], lr: torch.Tensor, k: torch.Tensor | None,
           t: torch.Tensor, uses: frozenset[str]) -> None:
    _adam(x, h, lr, k, t, uses, decoupled=True)


def _rmsprop(x: _Lists, h: Mapping[str, torch.Tensor], lr: torch.Tensor,
             k: torch.Tensor | None, t: torch.Tensor, uses: frozenset[str]) -> None:
    fe = torch
    alpha, mom = h["alpha"], h["momentum"]
    momentum, mixed = "momentum" in uses, "plain" in uses and "momentum" in uses
    values = [_masked(alpha, k, 1.0), _masked(1 - alpha, k, 0.0), h["eps"], -lr]
    if "weight_decay" in uses:
        values.append(h["weight_decay"])
    if "centered" in uses:
        values += [(1 - alpha) * h["centered"] * (1.0 if k is None else k), -h["centered"]]
    if momentum:      # momentum 0: the buffer stays 0, as where no member has momentum
        values += [_masked(mom, k, 1.0), (mom > 0).to(lr.dtype) * (1.0 if k is None else k)]
    if mixed:
        values += [(mom == 0).to(lr.dtype), (mom > 0).to(lr.dtype)]
    a, w, eps, neg_lr, *rest = x.scalars(*values)
    g: _TensorList = x.g
    if "weight_decay" in uses:
        g = fe._foreach_addcmul(g, x.p, rest.pop(0))            # g + wd p
    sq = x.s["square_avg"]
    fe._foreach_mul_(sq, a)
    fe._foreach_addcmul_(sq, fe._foreach_mul(g, w), g)          # alpha sq + (1 - alpha) g g
    if "centered" in uses:
        gavg = x.s["grad_avg"]
        fe._foreach_lerp_(gavg, g, rest.pop(0))                 # centred members only
        avg = fe._foreach_addcmul(sq, gavg, fe._foreach_mul(gavg, rest.pop(0)))
        fe._foreach_sqrt_(avg)                                  # sqrt(sq - gavg^2), centred
    else:
        avg = fe._foreach_sqrt(sq)
    fe._foreach_add_(avg, eps)
    update: _TensorList = fe._foreach_div(g, avg)
    if momentum:
        buf, mom_, keep_ = x.s["momentum_buffer"], rest.pop(0), rest.pop(0)
        fe._foreach_mul_(buf, mom_)
        fe._foreach_addcmul_(buf, update, keep_)                # mom buf + g / avg
        if mixed:
            fe._foreach_mul_(update, rest.pop(0))               # momentum 0: g / avg
            fe._foreach_addcmul_(update, buf, rest.pop(0))      # else: buf
        else:
            update = buf
    fe._foreach_addcmul_(x.p, update, neg_lr)


def _adagrad(x: _Lists, h: Mapping[str, torch.Tensor], lr: torch.Tensor,
             k: torch.Tensor | None, t: torch.Tensor, uses: frozenset[str]) -> None:
    fe = torch
    neg_clr = -lr / (1 + t.to(lr.dtype) * h["lr_decay"])
    values = [h["eps"], neg_clr] + ([h["weight_decay"]] if "weight_decay" in uses else []) \
        + ([k] if k is not None else [])
    eps, nclr, *rest = x.scalars(*values)
    g: _TensorList = x.g
    if "weight_decay" in uses:
        g = fe._foreach_addcmul(g, x.p, rest.pop(0))            # g + wd p
    gk = g if k is None else fe._foreach_mul(g, rest.pop(0))
    total = x.s["sum"]
    fe._foreach_addcmul_(total, g, gk)                          # sum + g g
    std = fe._foreach_sqrt(total)
    fe._foreach_add_(std, eps)
    fe._foreach_addcmul_(x.p, fe._foreach_div(g, std), nclr)


_Rule = Callable[[_Lists, Mapping[str, torch.Tensor], torch.Tensor, "torch.Tensor | None",
                  torch.Tensor, frozenset[str]], None]
_RULES: dict[str, _Rule] = {"sgd": _sgd, "adam": _adam, "adamw": _adamw, "rmsprop": _rmsprop,
                            "adagrad": _adagrad}
