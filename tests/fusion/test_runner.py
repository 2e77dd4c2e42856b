"""run_pack: data coverage with mixed batch sizes, load/free, stop, resume, refused members."""
from __future__ import annotations

import io

import pytest

torch = pytest.importorskip("torch")

from fusion_helpers import (N_TRAIN, ListSource, TinyTask, alone, assert_same_state,  # noqa: E402
                            run_members)

from hypersack.errors import ConfigError  # noqa: E402
from hypersack.fusion.runner import run_pack  # noqa: E402
from hypersack.fusion.stack import FusedStack  # noqa: E402
from hypersack.fusion.task import Member  # noqa: E402

TASK = TinyTask()


def member(i, epochs=2, **config):
    base = {"optimizer": "adam", "lr": 0.01, "batch_size": 8, "dropout": 0.2, "epochs": epochs}
    return Member(trial_id=i, config={**base, **config}, seed=10 + i)


def test_each_member_sees_each_sample_once_per_epoch(monkeypatch):
    """Batch sizes 3, 8 and 16 over 40 samples: every epoch covers every sample exactly once."""
    seen: dict[tuple[int, int], list[int]] = {}
    original = FusedStack._forward

    def spy(self, x, masks, valid):
        ids = self.rows["order"].gather(1, (torch.as_tensor(self.host["pos"])[:, None]
                                            + torch.arange(x.shape[1])[None]).clamp(max=N_TRAIN - 1))
        for row, slot in enumerate(self.slots):
            if slot is None:      # a free slot trains on nothing
                continue
            key = (slot.member.trial_id, int(self.host["epoch"][row]))
            seen.setdefault(key, []).extend(ids[row][valid[row] > 0].tolist())
        return original(self, x, masks, valid)

    monkeypatch.setattr(FusedStack, "_forward", spy)
    members = [member(0, batch_size=3), member(1, batch_size=8), member(2, batch_size=16)]
    run_members(TASK, members, dtype=torch.float32)
    assert sorted(seen) == [(t, e) for t in range(3) for e in range(2)]
    for key, ids in seen.items():
        assert sorted(ids) == list(range(N_TRAIN)), key
    assert seen[(0, 0)] != seen[(0, 1)]  # reshuffled per epoch
    assert seen[(0, 0)] != seen[(1, 0)]  # and per member


def test_load_and_free_runs_more_members_than_slots():
    members = [member(i, epochs=1 + i % 3, batch_size=4 + 3 * i) for i in range(5)]
    source, stats = run_members(TASK, members, max_members=2)
    assert stats.loaded == 5 and stats.freed == 5 and stats.peak_members == 2
    for m in members:
        steps = [s for s, _ in source.reports[m.trial_id]]
        assert steps == list(range(1, m.config["epochs"] + 1))
        assert_same_state(source.checkpoints[m.trial_id], alone(TASK, m).checkpoints[m.trial_id])
    # a slot freed by a finished member is refilled before the pack trains on
    first_finish = source.events.index(("finished", members[0].trial_id))
    assert source.events[first_finish + 1] == ("load", 2)


def test_stop_frees_member_and_loads_next():
    members = [member(0, epochs=3), member(1, epochs=3), member(2, epochs=1)]
    source, stats = run_members(TASK, members, max_members=2, stop_at={0: 1})
    assert [s for s, _ in source.reports[0]] == [1]
    assert ("finished", 0) in source.events and stats.freed == 3
    assert [s for s, _ in source.reports[1]] == [1, 2, 3]
    assert [s for s, _ in source.reports[2]] == [1]


def roundtrip(state):
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


def test_resumed_member_continues_as_if_never_interrupted():
    target = member(0, epochs=3, batch_size=6, dropout=0.3, optimizer="sgd", momentum=0.9)
    uninterrupted = alone(TASK, target)
    # paused after epoch 1 in a pack with two companions...
    first, _ = run_members(TASK, [member(7, epochs=3), target, member(8, batch_size=13)],
                           stop_at={0: 1})
    checkpoint = roundtrip(first.checkpoints[0])
    assert checkpoint["epoch"] == 1
    # ...resumed later beside different members
    resumed = Member(0, target.config, target.seed, checkpoint=checkpoint)
    second, _ = run_members(TASK, [member(9, batch_size=3), resumed])
    assert [s for s, _ in second.reports[0]] == [2, 3]
    assert_same_state(second.checkpoints[0], uninterrupted.checkpoints[0])
    assert second.reports[0][-1][1] == pytest.approx(uninterrupted.reports[0][-1][1], rel=1e-9)


def test_resumed_member_with_nothing_left_finishes_at_once():
    done, _ = run_members(TASK, [member(0, epochs=1)])
    again = Member(0, member(0, epochs=1).config, 10, checkpoint=done.checkpoints[0])
    source, stats = run_members(TASK, [again])
    assert stats.iterations == 0 and source.events[-1] == ("finished", 0)
    assert 0 not in source.reports


def test_unfit_members_are_refused_and_the_pack_goes_on():
    members = [member(0), member(1, hidden=16), member(2, optimizer="lbfgs"),
               Member(3, member(3).config, 13, checkpoint={"not": "ours"}), member(4)]
    source, stats = run_members(TASK, members, max_members=5)
    assert sorted(source.failures) == [1, 2, 3] and stats.failed == 3
    assert all(isinstance(e, ConfigError) for e in source.failures.values())
    assert "architecture" in str(source.failures[1])
    assert "optimizer.kind" in str(source.failures[2])
    assert sorted(source.reports) == [0, 4]


def test_checkpoint_optimizer_kind_must_match():
    done, _ = run_members(TASK, [member(0, epochs=1)])
    wrong = Member(0, {**member(0).config, "optimizer": "sgd"}, 10, checkpoint=done.checkpoints[0])
    source, _ = run_members(TASK, [wrong])
    assert "optimizer" in str(source.failures[0])


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_max_members_is_validated(bad):
    with pytest.raises(ConfigError, match="pack.max_members"):
        run_pack(TASK, ListSource([]), max_members=bad)


def test_empty_source_returns_at_once():
    stats = run_pack(TASK, ListSource([]))
    assert stats.iterations == 0 and stats.loaded == 0


def test_cpu_memory_profile_counts_member_state():
    from hypersack.fusion.memory import measure_member_memory
    small = measure_member_memory(TASK, {"hidden": 4}, dtype=torch.float64)
    large = measure_member_memory(TASK, {"hidden": 64}, dtype=torch.float64)
    assert not small.measured and 0 < small.per_member_bytes < large.per_member_bytes
