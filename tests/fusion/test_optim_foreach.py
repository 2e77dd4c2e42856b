"""The multi-tensor optimizer step (issue 38): a handful of ops whatever the parameter count,
parts no member uses left out without changing a bit, masked rows untouched."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from hypersack.fusion.optim import (OptimizerConfig, fused_step, hparam_rows,  # noqa: E402
                                    init_state, rule_features)
from test_optim import _OpCounter  # noqa: E402

MIXES = {
    "sgd": [OptimizerConfig(kind="sgd", lr=0.1),
            OptimizerConfig(kind="sgd", lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01),
            OptimizerConfig(kind="sgd", lr=0.02, momentum=0.8, nesterov=True)],
    "sgd_momentum": [OptimizerConfig(kind="sgd", lr=0.1, momentum=0.9),
                     OptimizerConfig(kind="sgd", lr=0.05, momentum=0.5)],
    "adam": [OptimizerConfig(kind="adam", lr=0.01),
             OptimizerConfig(kind="adam", lr=0.02, betas=(0.8, 0.99), weight_decay=0.1)],
    "adamw": [OptimizerConfig(kind="adamw", lr=0.01, weight_decay=0.1),
              OptimizerConfig(kind="adamw", lr=0.03)],
    "rmsprop": [OptimizerConfig(kind="rmsprop", lr=0.01),
                OptimizerConfig(kind="rmsprop", lr=0.01, momentum=0.5, centered=True),
                OptimizerConfig(kind="rmsprop", lr=0.02, alpha=0.9, weight_decay=0.01)],
    "adagrad": [OptimizerConfig(kind="adagrad", lr=0.1, lr_decay=0.01)],
}


def _setup(cfgs, shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    n = len(cfgs)
    members = [{f"p{i}": torch.randn(s, generator=g, dtype=torch.float64)
                for i, s in enumerate(shapes)} for _ in range(n)]
    params = {k: torch.stack([m[k] for m in members]) for k in members[0]}
    state = {k: torch.stack([init_state(c, m)[k] for c, m in zip(cfgs, members)])
             for k in init_state(cfgs[0], members[0])}
    return params, state, hparam_rows(cfgs, torch.float64, "cpu")


def _train(cfgs, features, keep=None, steps=5):
    params, state, h = _setup(cfgs, [(3, 4), (5,), (2, 3, 2, 2)])
    t = torch.zeros(len(cfgs), dtype=torch.int64)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        grads = {k: torch.randn(v.shape, generator=g, dtype=v.dtype) for k, v in params.items()}
        fused_step(cfgs[0].kind, params, grads, state, h, t, keep=keep, restore=False,
                   features=features)
        t += 1 if keep is None else keep.long()
    return params, state


@pytest.mark.parametrize("name", sorted(MIXES))
def test_leaving_out_unused_parts_changes_no_bit(name):
    cfgs = MIXES[name]
    full = _train(cfgs, None)
    lean = _train(cfgs, rule_features(cfgs))
    for got, want in zip(lean, full):
        for k in want:
            assert torch.equal(got[k], want[k]), k


def test_features_name_what_the_members_use():
    assert rule_features(MIXES["adam"]) == {"weight_decay"}
    assert rule_features(MIXES["sgd"]) == {"weight_decay", "momentum", "plain", "nesterov"}
    assert "plain" not in rule_features(MIXES["sgd_momentum"])
    assert rule_features([OptimizerConfig(kind="rmsprop", centered=True)]) == {"plain", "centered"}


@pytest.mark.parametrize("name", sorted(MIXES))
def test_masked_rows_stay_bit_for_bit_without_restore(name):
    """Finite gradients in masked rows (a free slot): parameters and state untouched, with no
    copy to restore from."""
    cfgs = (MIXES[name] * 4)[:4]
    keep = torch.tensor([True, False, True, False])
    params, state = _train(cfgs, None, keep=keep, steps=1)
    start, start_state, _ = _setup(cfgs, [(3, 4), (5,), (2, 3, 2, 2)])
    for k in params:
        assert torch.equal(params[k][~keep], start[k][~keep]), k
        assert not torch.equal(params[k][keep], start[k][keep]), k
    for k in state:
        assert torch.equal(state[k][~keep], start_state[k][~keep]), k


def _ops(kind, count):
    cfgs = [OptimizerConfig(kind=kind, lr=0.01, weight_decay=0.01)] * 4
    params, state, h = _setup(cfgs, [(3, 4)] * count)
    grads = {k: torch.ones_like(v) for k, v in params.items()}
    with _OpCounter() as counter:
        fused_step(kind, params, grads, state, h, torch.zeros(4, dtype=torch.int64),
                   keep=torch.ones(4, dtype=torch.bool), restore=False,
                   features=rule_features(cfgs))
    return counter.ops


@pytest.mark.parametrize("kind", sorted(MIXES))
def test_the_op_count_does_not_grow_with_the_parameter_count(kind):
    kind = MIXES[kind][0].kind
    assert _ops(kind, 2) == _ops(kind, 40)
