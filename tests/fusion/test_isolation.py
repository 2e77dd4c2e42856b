"""The isolation guarantee: a member trained in a pack ends where it ends trained alone."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from fusion_helpers import TinyTask, alone, assert_same_state, run_members  # noqa: E402

from hypersack.fusion.optim import Schedule  # noqa: E402
from hypersack.fusion.task import Member  # noqa: E402

TASK = TinyTask()

OPTIMIZERS = {
    "sgd": {"optimizer": "sgd", "lr": 0.1},
    "sgd_momentum": {"optimizer": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 1e-3},
    "sgd_nesterov": {"optimizer": "sgd", "lr": 0.05, "momentum": 0.8, "nesterov": True},
    "adam": {"optimizer": "adam", "lr": 0.01, "betas": (0.8, 0.99)},
    "adamw": {"optimizer": "adamw", "lr": 0.01, "weight_decay": 0.05},
    "rmsprop": {"optimizer": "rmsprop", "lr": 0.005, "momentum": 0.5, "centered": True},
    "adagrad": {"optimizer": "adagrad", "lr": 0.05, "lr_decay": 0.01},
}


def members_for(base: dict) -> list[Member]:
    """Four members of one optimizer kind differing in every per-member knob."""
    variants = [
        {"batch_size": 8, "dropout": 0.0},
        {"batch_size": 5, "dropout": 0.3, "lr": base["lr"] * 2},
        {"batch_size": 16, "dropout": 0.5, "weight_decay": 0.01,
         "schedule": Schedule(kind="cosine", total_steps=9, warmup_steps=2)},
        {"batch_size": 7, "dropout": 0.1, "schedule": Schedule(kind="step", step_size=4)},
    ]
    return [Member(trial_id=i, config={**base, **v, "epochs": 2}, seed=100 + i)
            for i, v in enumerate(variants)]


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_every_member_equals_its_alone_run(name):
    members = members_for(OPTIMIZERS[name])
    packed, stats = run_members(TASK, members, max_members=4)
    assert stats.peak_members == 4 and stats.failed == 0
    for m in members:
        reference = alone(TASK, m)
        assert_same_state(packed.checkpoints[m.trial_id], reference.checkpoints[m.trial_id])
        got = [step for step, _ in packed.reports[m.trial_id]]
        assert got == [1, 2]
        for (_, a), (_, b) in zip(packed.reports[m.trial_id], reference.reports[m.trial_id]):
            assert a == pytest.approx(b, rel=1e-9)


def test_mixed_optimizer_kinds_share_one_pack():
    members = [Member(i, {**cfg, "batch_size": 4 + i, "dropout": 0.2, "epochs": 2}, seed=i)
               for i, cfg in enumerate(OPTIMIZERS.values())]
    packed, stats = run_members(TASK, members, max_members=len(members))
    assert stats.peak_members == len(members)
    for m in members:
        assert_same_state(packed.checkpoints[m.trial_id], alone(TASK, m).checkpoints[m.trial_id])


def test_slot_order_does_not_matter():
    members = members_for(OPTIMIZERS["adam"])
    forward, _ = run_members(TASK, members)
    backward, _ = run_members(TASK, list(reversed(members)))
    for m in members:
        assert_same_state(forward.checkpoints[m.trial_id], backward.checkpoints[m.trial_id])


def test_dropout_and_batchnorm_take_effect():
    """The guarantee is not vacuous: dropout changes the trajectory, BN stats move."""
    base = {"optimizer": "sgd", "lr": 0.1, "batch_size": 8, "epochs": 1}
    plain, dropped = Member(0, {**base, "dropout": 0.0}, seed=1), \
        Member(1, {**base, "dropout": 0.5}, seed=1)
    source, _ = run_members(TASK, [plain, dropped])
    a, b = source.checkpoints[0]["model"], source.checkpoints[1]["model"]
    assert not torch.allclose(a["0.weight"], b["0.weight"])
    assert a["1.num_batches_tracked"].item() == 5  # 40 samples / 8 per batch
    assert not torch.allclose(a["1.running_mean"], torch.zeros_like(a["1.running_mean"]))


def test_float32_pack_stays_close_to_alone():
    members = members_for(OPTIMIZERS["adam"])[:2]
    packed, _ = run_members(TASK, members, dtype=torch.float32)
    for m in members:
        ref = alone(TASK, m, dtype=torch.float32)
        assert_same_state(packed.checkpoints[m.trial_id], ref.checkpoints[m.trial_id],
                          rtol=1e-4, atol=1e-5)
