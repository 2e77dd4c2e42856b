"""Functional optimizers and schedules against torch.optim on one member (float64)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from hypersack.errors import ConfigError  # noqa: E402
from hypersack.fusion.optim import (OptimizerConfig, Schedule, fused_step, hparam_rows,  # noqa: E402
                                    init_state, schedule_factor)

STEPS = 12
RTOL, ATOL = 1e-11, 1e-13

CASES = {
    "sgd": OptimizerConfig(kind="sgd", lr=0.1),
    "sgd_wd": OptimizerConfig(kind="sgd", lr=0.05, weight_decay=0.01),
    "sgd_momentum": OptimizerConfig(kind="sgd", lr=0.05, momentum=0.9, dampening=0.1,
                                    weight_decay=1e-3),
    "sgd_nesterov": OptimizerConfig(kind="sgd", lr=0.05, momentum=0.8, nesterov=True),
    "adam": OptimizerConfig(kind="adam", lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.01),
    "adamw": OptimizerConfig(kind="adamw", lr=0.01, weight_decay=0.1),
    "rmsprop": OptimizerConfig(kind="rmsprop", lr=0.01, alpha=0.9, weight_decay=0.01),
    "rmsprop_centered_momentum": OptimizerConfig(kind="rmsprop", lr=0.01, momentum=0.5,
                                                 centered=True),
    "adagrad": OptimizerConfig(kind="adagrad", lr=0.1, lr_decay=0.01, weight_decay=0.01,
                               initial_accumulator_value=0.1),
}


def torch_optimizer(cfg: OptimizerConfig, params):
    h = cfg.hyperparameters()
    if cfg.kind == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, dampening=cfg.dampening,
                               nesterov=cfg.nesterov, weight_decay=cfg.weight_decay)
    if cfg.kind in ("adam", "adamw"):
        cls = torch.optim.Adam if cfg.kind == "adam" else torch.optim.AdamW
        return cls(params, lr=cfg.lr, betas=cfg.betas, eps=h["eps"], weight_decay=cfg.weight_decay)
    if cfg.kind == "rmsprop":
        return torch.optim.RMSprop(params, lr=cfg.lr, alpha=cfg.alpha, eps=h["eps"],
                                   momentum=cfg.momentum, centered=cfg.centered,
                                   weight_decay=cfg.weight_decay)
    return torch.optim.Adagrad(params, lr=cfg.lr, lr_decay=cfg.lr_decay, eps=h["eps"],
                               weight_decay=cfg.weight_decay,
                               initial_accumulator_value=cfg.initial_accumulator_value)


def loss_of(p: torch.Tensor, step: int) -> torch.Tensor:
    """A smooth loss whose gradient changes with the step (sum over members is separable)."""
    return (torch.sin(p * (1 + 0.1 * step)) + 0.5 * p ** 2).sum()


def start_params(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(3, 4, generator=g, dtype=torch.float64),
            "b": torch.randn(3, generator=g, dtype=torch.float64)}


def reference(cfg: OptimizerConfig, seed: int, scheduler=None) -> dict[str, torch.Tensor]:
    params = {k: v.clone().requires_grad_() for k, v in start_params(seed).items()}
    opt = torch_optimizer(cfg, list(params.values()))
    sched = scheduler(opt) if scheduler else None
    for step in range(STEPS):
        opt.zero_grad()
        sum(loss_of(p, step) for p in params.values()).backward()
        opt.step()
        if sched:
            sched.step()
    return {k: v.detach() for k, v in params.items()}


def fused(cfgs: list[OptimizerConfig], seeds: list[int]) -> dict[str, torch.Tensor]:
    members = [start_params(s) for s in seeds]
    params = {k: torch.stack([m[k] for m in members]).requires_grad_() for k in members[0]}
    state = {k: torch.stack([init_state(c, m)[k] for c, m in zip(cfgs, members)])
             for k in init_state(cfgs[0], members[0])}
    h = hparam_rows(cfgs, torch.float64, "cpu")
    t = torch.zeros(len(cfgs), dtype=torch.int64)
    for step in range(STEPS):
        for p in params.values():
            p.grad = None
        sum(loss_of(p, step) for p in params.values()).backward()
        fused_step(cfgs[0].kind, params, {k: p.grad for k, p in params.items()}, state, h, t)
        t += 1
    return {k: v.detach() for k, v in params.items()}


def other_member(cfg: OptimizerConfig) -> OptimizerConfig:
    """A second member of the same kind with different hyperparameters."""
    return OptimizerConfig(kind=cfg.kind, lr=cfg.lr * 3, weight_decay=0.02, momentum=0.5,
                           betas=(0.5, 0.9), eps=1e-4, alpha=0.7, lr_decay=0.1)


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_member_matches_torch_optim(case):
    cfg = CASES[case]
    other = other_member(cfg)
    got = fused([other, cfg, other], seeds=[5, 1, 6])
    want, want_other = reference(cfg, 1), reference(other, 6)
    for k in want:
        torch.testing.assert_close(got[k][1], want[k], rtol=RTOL, atol=ATOL)
        torch.testing.assert_close(got[k][2], want_other[k], rtol=RTOL, atol=ATOL)


SCHEDULES = {
    "warmup": (Schedule(kind="constant", warmup_steps=5, warmup_start=0.2),
               lambda o: torch.optim.lr_scheduler.LinearLR(o, start_factor=0.2, total_iters=5)),
    "step": (Schedule(kind="step", step_size=3, gamma=0.5),
             lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5)),
    # torch's cosine rises again after T_max; ours stays at min_factor: compare up to T_max.
    "cosine": (Schedule(kind="cosine", total_steps=STEPS, min_factor=0.1),
               lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=STEPS, eta_min=0.01)),
    "warmup_step": (Schedule(kind="step", step_size=4, gamma=0.3, warmup_steps=3,
                             warmup_start=0.5),
                    lambda o: torch.optim.lr_scheduler.ChainedScheduler([
                        torch.optim.lr_scheduler.LinearLR(o, start_factor=0.5, total_iters=3),
                        torch.optim.lr_scheduler.StepLR(o, step_size=4, gamma=0.3)])),
}


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_schedule_factor_matches_torch_scheduler(name):
    schedule, make = SCHEDULES[name]
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    sched = make(opt)
    h = hparam_rows([OptimizerConfig(kind="sgd", lr=0.1, schedule=schedule)], torch.float64, "cpu")
    for t in range(STEPS):
        want = opt.param_groups[0]["lr"]
        got = 0.1 * schedule_factor(h, torch.tensor([t])).item()
        assert got == pytest.approx(want, rel=1e-9, abs=1e-15), t
        opt.step()
        sched.step()


@pytest.mark.parametrize("name", ["cosine", "warmup_step"])
def test_scheduled_adam_member_matches_torch(name):
    schedule, make = SCHEDULES[name]
    cfg = OptimizerConfig(kind="adam", lr=0.1, schedule=schedule)
    plain = OptimizerConfig(kind="adam", lr=0.05)
    got = fused([plain, cfg], seeds=[0, 3])
    want = reference(cfg, 3, scheduler=make)
    for k in want:
        torch.testing.assert_close(got[k][1], want[k], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("kwargs, field", [
    ({"kind": "lbfgs"}, "optimizer.kind"),
    ({"lr": 0}, "optimizer.lr"),
    ({"momentum": 1.0}, "optimizer.momentum"),
    ({"kind": "sgd", "nesterov": True}, "optimizer.nesterov"),
    ({"betas": (0.9, 1.0)}, "optimizer.betas"),
    ({"weight_decay": -1}, "optimizer.weight_decay"),
])
def test_invalid_optimizer_config_names_field(kwargs, field):
    with pytest.raises(ConfigError) as info:
        OptimizerConfig(**kwargs)
    assert info.value.field == field


def test_invalid_schedule_names_field():
    with pytest.raises(ConfigError, match="schedule.kind"):
        Schedule(kind="linear")
    with pytest.raises(ConfigError, match="schedule.step_size"):
        Schedule(kind="step", step_size=0)
    with pytest.raises(ConfigError, match="optimizer.kind"):
        hparam_rows([OptimizerConfig(kind="sgd"), OptimizerConfig(kind="adam")],
                    torch.float64, "cpu")


@pytest.mark.parametrize("name", sorted(CASES))
def test_keep_mask_skips_rows_bit_for_bit_and_updates_the_rest(name):
    cfg = CASES[name]
    params = {k: torch.stack([v, v + 1]) for k, v in start_params(3).items()}
    state = {k: torch.stack([v, v]) for k, v in init_state(cfg, start_params(3)).items()}
    h, t = hparam_rows([cfg, cfg], torch.float64, "cpu"), torch.tensor([4, 4])
    grads = {k: torch.full_like(v, float("nan")) for k, v in params.items()}
    for k in grads:
        grads[k][1] = 0.3                      # row 0: a free slot (or an fp16 overflow)
    before = {k: v.clone() for k, v in {**params, **state}.items()}
    fused_step(cfg.kind, params, grads, state, h, t, keep=torch.tensor([False, True]))
    for k, v in {**params, **state}.items():
        assert torch.equal(v[0], before[k][0]), k
    assert all(not torch.equal(params[k][1], before[k][1]) for k in params)


class _OpCounter(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the aten ops dispatched inside it."""

    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def _ops_for(cfg: OptimizerConfig, n: int, keep: bool) -> int:
    members = [start_params(s) for s in range(n)]
    params = {k: torch.stack([m[k] for m in members]) for k in members[0]}
    state = {k: torch.stack([init_state(cfg, m)[k] for m in members])
             for k in init_state(cfg, members[0])}
    grads = {k: torch.ones_like(v) for k, v in params.items()}
    h, t = hparam_rows([cfg] * n, torch.float64, "cpu"), torch.zeros(n, dtype=torch.int64)
    mask = torch.arange(n) % 2 == 0 if keep else None
    with _OpCounter() as counter:
        fused_step(cfg.kind, params, grads, state, h, t, keep=mask)
    return counter.ops


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("keep", [False, True])
def test_the_step_has_no_python_loop_over_members(name, keep):
    """The same number of kernels for 2 members as for 32 (with and without a slot mask): the
    step loops over parameters, never over members."""
    cfg = CASES[name]
    assert _ops_for(cfg, 2, keep) == _ops_for(cfg, 32, keep)
