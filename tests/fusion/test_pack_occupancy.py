"""Slot occupancy of a pack (PackStats) and the pack process's OOM retry with a halved cap."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from fusion_helpers import TinyTask, run_members  # noqa: E402

from hypersack.fusion.runner import PackStats  # noqa: E402
from hypersack.fusion.stack import FusedStack  # noqa: E402
from hypersack.fusion.task import Member  # noqa: E402
from hypersack.runtime.worker.messages import (Ack, AddMember, Done, EndPack, MemberTask,  # noqa: E402
                                               PackCap, PackSpec, Reported)
from hypersack.runtime.worker.pack import _PackSession  # noqa: E402

TASK = TinyTask()
BASE = {"optimizer": "adam", "lr": 0.01, "batch_size": 8, "dropout": 0.2}   # 5 steps an epoch


def member(i, epochs):
    return Member(trial_id=i, config={**BASE, "epochs": epochs}, seed=10 + i)


def test_mean_occupancy_follows_members_that_come_and_go():
    # 2 slots: 0 (1 epoch) and 1 (3 epochs) for 5 steps, then 2 (1 epoch) takes 0's slot for 5
    # steps, then 1 alone for 5: (10 * 2/2 + 5 * 1/2) / 15.
    _, stats = run_members(TASK, [member(0, 1), member(1, 3), member(2, 1)], max_members=2)
    assert stats.iterations == 15
    assert stats.mean_occupancy == pytest.approx(12.5 / 15)
    assert 0.5 <= stats.time_occupancy <= 1.0 and stats.seconds > 0


def test_time_weighted_occupancy_weights_iterations_by_their_time():
    stats = PackStats()
    assert stats.mean_occupancy == 0.0 and stats.time_occupancy == 0.0
    stats.record(2, 2, 3.0)
    stats.record(1, 2, 1.0)
    assert stats.iterations == 2
    assert stats.mean_occupancy == pytest.approx(0.75)
    assert stats.time_occupancy == pytest.approx((3.0 + 0.5) / 4.0)
    assert "mean 0.750, time-weighted 0.875" in stats.summary()


class AckingPipe:
    """The driver's end: acks every report at once; ``inbox`` is what the driver sends, then
    EndPack once the pack waits with nothing to do."""

    def __init__(self, inbox):
        self.inbox, self.sent = list(inbox), []

    def send(self, message):
        self.sent.append(message)
        if isinstance(message, Reported):
            self.inbox.append(Ack(message.trial_id))

    def poll(self, timeout=0.0):
        return bool(self.inbox)

    def recv(self):
        return self.inbox.pop(0) if self.inbox else EndPack()


def run_session(tmp_path, epochs=(1, 2), max_members=4, optimizers=("adam", "adam")):
    tasks = [AddMember(MemberTask(i, {**BASE, "epochs": e, "optimizer": o}, 10 + i, 1,
                                  str(tmp_path / f"t{i}"), None, None, False))
             for i, (e, o) in enumerate(zip(epochs, optimizers))]
    pipe = AckingPipe(tasks)
    spec = PackSpec(1, ("k", "unused", None), "cpu", max_members, {}, str(tmp_path / "p.log"))
    session = _PackSession(pipe, spec, TASK)
    assert session.run() is None
    return session, pipe.sent


def reports(sent):
    return [(m.trial_id, m.step, m.metrics) for m in sent if isinstance(m, Reported)]


def inject_oom(monkeypatch, at_calls, error=None):
    original, calls = FusedStack._device_step, []

    def step(self, key):
        calls.append(key)
        if len(calls) in at_calls:
            raise error or torch.cuda.OutOfMemoryError("CUDA out of memory (injected)")
        return original(self, key)

    monkeypatch.setattr(FusedStack, "_device_step", step)
    return calls


def test_the_pack_process_records_occupancy_against_its_cap(tmp_path):
    session, sent = run_session(tmp_path)
    # 2 of 4 seats for 5 steps, then 1 of 4 for 5.
    assert session.stats.iterations == 10 and session.stats.freed == 2
    assert session.stats.mean_occupancy == pytest.approx((5 * 0.5 + 5 * 0.25) / 10)
    assert sum(isinstance(m, Done) for m in sent) == 2


@pytest.mark.parametrize("error", [None, RuntimeError("CUDA error: out of memory")])
def test_an_oom_halves_the_cap_reports_it_and_training_goes_on_unchanged(
        tmp_path, monkeypatch, error):
    three = {"epochs": (1, 2, 2), "optimizers": ("adam", "sgd", "adam")}   # 3 of 4: no compaction
    want_reports = reports(run_session(tmp_path / "a", **three)[1])
    calls = inject_oom(monkeypatch, {3}, error)
    seen_capacity = []
    spy = FusedStack._device_step

    def record(self, key):
        seen_capacity.append(self.capacity)
        return spy(self, key)

    monkeypatch.setattr(FusedStack, "_device_step", record)
    session, sent = run_session(tmp_path / "b", **three)
    assert [m for m in sent if isinstance(m, PackCap)] == [PackCap(3)]    # 4 -> 3, 3 held
    assert session.cap == 3 and len(calls) == 11                         # step 3 ran twice
    assert seen_capacity == [4] * 3 + [3] * 8    # the stack shrank to the cap for the retry
    assert reports(sent) == want_reports
    # occupancy is against the cap of its time: 3 of 4, after the OOM 3 of 3, then 2 of 3.
    assert session.stats.mean_occupancy == pytest.approx((2 * 0.75 + 3 * 1 + 5 * 2 / 3) / 10)


def test_an_oom_the_cap_cannot_absorb_fails_the_pack(tmp_path, monkeypatch):
    inject_oom(monkeypatch, {2, 4})     # 4 -> 3 with 3 held, then no smaller cap is possible
    with pytest.raises(torch.cuda.OutOfMemoryError):
        run_session(tmp_path, epochs=(1, 2, 2), optimizers=("adam",) * 3)


def test_an_error_that_is_not_an_oom_is_not_retried(tmp_path, monkeypatch):
    calls = inject_oom(monkeypatch, {2}, ValueError("boom"))
    with pytest.raises(ValueError, match="boom"):
        run_session(tmp_path)
    assert len(calls) == 2


def test_the_pack_log_ends_with_its_stats(tmp_path, capsys):
    import cloudpickle
    from hypersack.runtime.worker.pack import run_pack_task
    tasks = [AddMember(MemberTask(0, {**BASE, "epochs": 1}, 10, 1, str(tmp_path / "t0"),
                                  None, None, False))]
    log = tmp_path / "pack.log"
    spec = PackSpec(1, ("k", "tiny", cloudpickle.dumps(TASK)), "cpu", 2, {}, str(log))
    with capsys.disabled():     # the pack points fds 1 and 2 at its log, as in a worker
        assert run_pack_task(AckingPipe(tasks), spec, {}) is None
    last = log.read_text().strip().splitlines()[-1]
    assert last.startswith("pack stats: 5 iterations") and "slot occupancy mean 0.500" in last


def test_a_shrunk_stack_trains_its_moved_members_as_before():
    from fusion_helpers import assert_same_state
    from hypersack.fusion.runner import Pack
    from hypersack.fusion.stack import StackOptions

    def pack():
        p = Pack(TASK, "cpu", torch.float64, StackOptions(capacity=4, precision="fp32"))
        for i in range(3):
            p.load(member(i, 3))
        p.train_iteration()
        p.free([0])
        return p, p.stack

    (_, kept), (shrunk_pack, shrunk) = pack(), pack()
    assert not shrunk.shrink(1) and not shrunk.shrink(4)    # below the members / not smaller
    assert shrunk.shrink(2) and shrunk.capacity == 2
    assert [s.member.trial_id for s in shrunk.slots] == [1, 2]
    for _ in range(3):
        kept.train_iteration()
        shrunk_pack.train_iteration()
    for old, new in ((1, 0), (2, 1)):
        assert_same_state(shrunk.member_state(new), kept.member_state(old))


def test_members_of_two_optimizer_kinds_share_one_stack_and_it_compacts(tmp_path):
    """2 members (adam, sgd) in a 4-seat pack: one stack, compacted to its 2 members before
    the first step and to 1 once the first leaves: one slot-step per member-step."""
    session, sent = run_session(tmp_path, optimizers=("adam", "sgd"))
    stats = session.stats
    assert session.pack.stack.kinds == ["sgd"]          # adam's rows went with its member
    assert stats.compactions == 2 and stats.member_steps == 15 and stats.slot_steps == 15
    assert stats.slot_steps_per_member_step == 1.0
    assert "slot-steps 15 for member-steps 15 (1.000 per member-step), compactions 2" \
        in stats.summary()
