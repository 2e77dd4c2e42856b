"""One stack per pack: members of several optimizer kinds together, and compaction to the live
members preserving each one exactly (parameters, optimizer state, and the training after)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from fusion_helpers import TinyTask, alone, assert_same_state, run_members  # noqa: E402

from hypersack.fusion.runner import Pack  # noqa: E402
from hypersack.fusion.stack import StackOptions  # noqa: E402
from hypersack.fusion.task import Member  # noqa: E402

TASK = TinyTask()
KINDS = {"adam": {"optimizer": "adam", "lr": 0.01},
         "sgd": {"optimizer": "sgd", "lr": 0.05, "momentum": 0.9, "nesterov": True},
         "rmsprop": {"optimizer": "rmsprop", "lr": 0.005, "momentum": 0.5, "centered": True},
         "adagrad": {"optimizer": "adagrad", "lr": 0.05, "weight_decay": 1e-3}}


def members(epochs=(1, 3, 2, 3, 1, 2)):
    kinds = list(KINDS)
    return [Member(i, {**KINDS[kinds[i % 4]], "batch_size": 5 + i % 3, "dropout": 0.2,
                       "epochs": e}, seed=40 + i) for i, e in enumerate(epochs)]


def test_members_of_every_kind_in_one_stack_each_equal_their_alone_run():
    ms = members((1, 2, 1, 2, 1))        # 4 seats; after the first epochs 2 of 4 are left
    packed, stats = run_members(TASK, ms, max_members=4)
    assert stats.peak_members == 4 and stats.compactions >= 1
    for m in ms:
        assert_same_state(packed.checkpoints[m.trial_id], alone(TASK, m).checkpoints[m.trial_id])


def _state(stack, slot):
    state = stack.member_state(slot)
    return {"model": state["model"], "optimizer": state["optimizer"], "epoch": state["epoch"],
            "iteration": state["iteration"]}


def test_compaction_moves_each_live_member_exactly_and_training_goes_on_identically():
    def pack():
        p = Pack(TASK, "cpu", torch.float64, StackOptions(capacity=8))
        for m in members((3,) * 6):
            p.load(m)
        for _ in range(3):
            p.stack.train_iteration()
        p.free([0, 2, 3, 5])            # 2 of 8 left: trial 1 (sgd) and trial 4 (adam)
        return p

    kept, compacted = pack(), pack()
    before = {s.member.trial_id: _state(compacted.stack, i)
              for i, s in enumerate(compacted.stack.slots) if s is not None}
    assert compacted.compact() and compacted.stack.capacity == 2 and compacted.compactions == 1
    assert not compacted.compact()                       # 2 of 2: nothing more to do
    after = {s.member.trial_id: _state(compacted.stack, i)
             for i, s in enumerate(compacted.stack.slots)}
    assert after.keys() == before.keys() == {1, 4}
    assert compacted.stack.kinds == ["adam", "sgd"]       # rmsprop's and adagrad's rows went
    for trial in before:                                  # bit for bit, not just close
        for part in ("model",):
            for name, value in before[trial][part].items():
                assert torch.equal(after[trial][part][name], value), name
        assert before[trial]["optimizer"]["kind"] == after[trial]["optimizer"]["kind"]
        for name, value in before[trial]["optimizer"]["state"].items():
            assert torch.equal(after[trial]["optimizer"]["state"][name], value), name
    for _ in range(4):
        kept.stack.train_iteration()                      # 8 slots, 6 of them free
        compacted.stack.train_iteration()
    for old, new in ((1, 0), (4, 1)):
        assert_same_state(compacted.stack.member_state(new), kept.stack.member_state(old),
                          rtol=1e-12, atol=1e-14)


def test_a_new_kind_joins_the_stack_and_a_slot_reused_by_another_kind_starts_clean():
    p = Pack(TASK, "cpu", torch.float64, StackOptions(capacity=2))
    adam, sgd = members((2, 2))[:2]
    p.load(adam)
    p.stack.train_iteration()
    assert p.stack.kinds == ["adam"]
    p.free([0])
    assert p.load(sgd) == 0 and p.stack.kinds == ["adam", "sgd"]
    # slot 0 now holds sgd: adam's state rows of that slot are back to a fresh member's
    assert all(float(v[0].abs().sum()) == 0 for k, v in p.stack.rows.items()
               if k.startswith("o.adam."))
    while True:
        ended = p.stack.train_iteration()
        if ended and p.stack.epoch(0) == 2:
            break
    assert_same_state(p.stack.member_state(0), alone(TASK, sgd).checkpoints[sgd.trial_id])


def test_an_asha_like_pack_computes_few_empty_slots():
    """32 members in 8 seats, most leave after 1 epoch: compaction keeps slot-steps close to
    member-steps (without it: 8 slots at every step)."""
    ms = [Member(i, {**KINDS["adam"], "batch_size": 8, "epochs": 3 if i % 4 == 0 else 1},
                 seed=i) for i in range(12)]
    _, stats = run_members(TASK, ms, max_members=8)
    assert stats.compactions >= 1
    assert stats.slot_steps_per_member_step <= 1.5
    assert stats.slot_steps < 8 * stats.iterations
