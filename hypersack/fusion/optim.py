"""Functional optimizers over stacked parameters, with per-member hyperparameters and schedules.

Every parameter is a tensor ``[N, ...]`` (row i belongs to member i); every hyperparameter is a
tensor ``[N]`` broadcast as ``[N, 1, ...]``. One call updates all N members with a handful of
large tensor operations. The update rules are those of ``torch.optim`` (single-tensor path,
``maximize=False``, ``amsgrad=False``, no ``differentiable``) so that a member follows the same
trajectory as ``torch.optim`` on one model, to rounding:

- ``sgd``: weight decay, momentum (first step ``buf = grad``), dampening, Nesterov.
- ``adam`` / ``adamw``: betas, eps, L2 (adam) or decoupled (adamw) weight decay.
- ``rmsprop``: alpha, eps, momentum, centered, weight decay.
- ``adagrad``: lr_decay, eps, initial_accumulator_value, weight decay.

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
from typing import Mapping, Sequence

import torch

from hypersack.errors import ConfigError
from hypersack.validation import check_integer, check_number, check_positive

__all__ = ["KINDS", "SCHEDULES", "Schedule", "OptimizerConfig", "state_names", "init_state",
           "hparam_rows", "schedule_factor", "fused_step"]

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

def _b(v: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``[N]`` -> ``[N, 1, ...]`` broadcastable against ``like``."""
    return v.view((-1,) + (1,) * (like.dim() - 1))


@torch.no_grad()
def fused_step(kind: str, params: Mapping[str, torch.Tensor], grads: Mapping[str, torch.Tensor],
               state: Mapping[str, torch.Tensor], h: Mapping[str, torch.Tensor],
               t: torch.Tensor, keep: torch.Tensor | None = None,
               restore: bool = True) -> None:
    """Update ``params`` and ``state`` in place for all N members.

    ``h``: hyperparameter rows [N] (``hparam_rows``); ``t``: int64 [N], updates each member has
    done before this one (drives the schedule and bias corrections). A missing gradient (a
    parameter that took no part in the loss) counts as zero; torch.optim would skip such a
    parameter instead, which differs only under weight decay or momentum.

    ``keep``: bool [N] or None (all). Rows where it is False get learning rate 0 and a zero
    gradient, so their parameters stay bit for bit (every rule moves a parameter by lr x a
    finite number); with ``restore`` their optimizer state is kept too (``torch.where`` against
    a copy: members whose fp16 gradients overflowed), without it the state of those rows may
    decay (free slots, whose rows the next load overwrites). Shapes never change and nothing is
    skipped in Python: the loop is over parameters, never over members.
    """
    lr = h["lr"] * schedule_factor(h, t)
    if keep is not None:
        lr = lr * keep.to(lr.dtype)
    step = (t + 1).to(lr.dtype)
    rule = _RULES[kind]
    for name, p in params.items():
        g = grads.get(name)
        g = torch.zeros_like(p) if g is None else g
        st = {s: state[f"{s}/{name}"] for s in _STATE[kind]}
        if keep is None:
            rule(p, g, st, h, lr, step, t)
            continue
        g = torch.where(_b(keep, g), g, 0)
        if not restore:
            rule(p, g, st, h, lr, step, t)
            continue
        tensors = [p, *st.values()]
        before = [x.clone() for x in tensors]
        rule(p, g, st, h, lr, step, t)
        for x, old in zip(tensors, before):
            x.copy_(torch.where(_b(keep, x), x, old))


def _sgd(p, g, st, h, lr, step, t) -> None:
    g = g + _b(h["weight_decay"], p) * p
    mom, buf = _b(h["momentum"], p), st["momentum_buffer"]
    first = _b(t == 0, p)
    buf.copy_(torch.where(first, g, mom * buf + (1 - _b(h["dampening"], p)) * g))
    with_momentum = torch.where(_b(h["nesterov"], p) > 0, g + mom * buf, buf)
    update = torch.where(mom != 0, with_momentum, g)
    p.sub_(_b(lr, p) * update)


def _adam(p, g, st, h, lr, step, t, decoupled: bool = False) -> None:
    wd = _b(h["weight_decay"], p)
    if decoupled:
        p.mul_(1 - _b(lr, p) * wd)
    else:
        g = g + wd * p
    beta1, beta2 = _b(h["beta1"], p), _b(h["beta2"], p)
    m, v = st["exp_avg"], st["exp_avg_sq"]
    m.lerp_(g, 1 - beta1)
    v.mul_(beta2).add_((1 - beta2) * g * g)
    step_size = _b(lr / (1 - h["beta1"] ** step), p)
    bias2_sqrt = _b((1 - h["beta2"] ** step).sqrt(), p)
    denom = v.sqrt() / bias2_sqrt + _b(h["eps"], p)
    p.sub_(step_size * m / denom)


def _adamw(p, g, st, h, lr, step, t) -> None:
    _adam(p, g, st, h, lr, step, t, decoupled=True)


def _rmsprop(p, g, st, h, lr, step, t) -> None:
    g = g + _b(h["weight_decay"], p) * p
    alpha = _b(h["alpha"], p)
    sq, gavg, buf = st["square_avg"], st["grad_avg"], st["momentum_buffer"]
    sq.mul_(alpha).add_((1 - alpha) * g * g)
    gavg.lerp_(g, 1 - alpha)
    centred = (sq - gavg * gavg).sqrt()
    avg = torch.where(_b(h["centered"], p) > 0, centred, sq.sqrt()) + _b(h["eps"], p)
    mom = _b(h["momentum"], p)
    buf.mul_(mom).add_(g / avg)
    update = torch.where(mom > 0, buf, g / avg)
    p.sub_(_b(lr, p) * update)


def _adagrad(p, g, st, h, lr, step, t) -> None:
    g = g + _b(h["weight_decay"], p) * p
    clr = _b(lr / (1 + (step - 1) * h["lr_decay"]), p)
    total = st["sum"]
    total.add_(g * g)
    p.sub_(clr * g / (total.sqrt() + _b(h["eps"], p)))


_RULES = {"sgd": _sgd, "adam": _adam, "adamw": _adamw, "rmsprop": _rmsprop, "adagrad": _adagrad}
