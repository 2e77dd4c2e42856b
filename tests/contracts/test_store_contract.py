"""The Store contract the loop writes to, run against every store (SQLite, memory)."""
from __future__ import annotations

import pytest

from hypersack.core.trial import TrialRecord, TrialState
from hypersack.runtime.storage import Storage
from hypersack.runtime.store import Store
from hypersack.sim.store import MemoryStore


class _Sqlite:
    def __init__(self, path):
        self.store = Storage(path)
        self.study = self.store.create_study("s", {})

    def trials(self):
        return {t.trial_id: t for t in self.store.load_trials(self.study.study_id)}

    def results(self):
        return [(r["trial_id"], r["step"], {k: v for k, v in r.items() if k not in ("trial_id", "step")})
                for r in self.store.load_results(self.study.study_id)]

    def status(self):
        return self.store.get_study("s").status

    def state(self):
        return self.store.get_study("s").controller_state


class _Memory:
    def __init__(self, path):
        self.store = MemoryStore(keep_results=True)
        self.study = type("Row", (), {"study_id": 1})()

    def trials(self):
        return dict(self.store.trials)

    def results(self):
        return list(self.store.results)

    def status(self):
        return self.store.status.get(1)

    def state(self):
        state = self.store.controller_state
        return state() if callable(state) else state


@pytest.fixture(params=["sqlite", "memory"])
def subject(request, tmp_path):
    made = {"sqlite": _Sqlite, "memory": _Memory}[request.param](tmp_path / "s.db")
    yield made
    if request.param == "sqlite":
        made.store.close()


def _record(trial_id, state=TrialState.RUNNING, **kw) -> TrialRecord:
    return TrialRecord(trial_id, {"x": trial_id}, seed=trial_id, state=state, **kw)


def test_a_batch_keeps_trials_results_and_the_controller_state(subject):
    store: Store = subject.store
    sid = subject.study.study_id
    store.save_batch(sid, [_record(0), _record(1)], [(0, 1, {"v": 0.5})], {"elapsed_s": 1.0})
    record = _record(0, TrialState.COMPLETE, value=0.7, checkpoint="checkpoint-a1-2.pkl",
                     checkpoint_step=2)
    store.save_batch(sid, [record], [(0, 2, {"v": 0.7})], lambda: {"elapsed_s": 2.0})
    trials = subject.trials()
    assert trials[0].state is TrialState.COMPLETE and trials[0].value == 0.7
    assert (trials[0].checkpoint, trials[0].checkpoint_step) == ("checkpoint-a1-2.pkl", 2)
    assert trials[1].state is TrialState.RUNNING
    assert subject.results() == [(0, 1, {"v": 0.5}), (0, 2, {"v": 0.7})]
    assert subject.state() == {"elapsed_s": 2.0}


def test_a_batch_is_a_snapshot_later_changes_to_a_record_are_not_kept(subject):
    record = _record(0)
    subject.store.save_batch(subject.study.study_id, [record], [])
    record.state = TrialState.FAILED                 # the controller mutates it afterwards
    assert subject.trials()[0].state is TrialState.RUNNING


def test_status_and_heartbeat(subject):
    subject.store.heartbeat(subject.study.study_id)   # no lease held: nothing to renew
    subject.store.set_status(subject.study.study_id, "interrupted")
    assert subject.status() == "interrupted"


def test_batches_in_a_transaction_are_kept_together_or_not_at_all(subject):
    store: Store = subject.store
    sid = subject.study.study_id
    store.save_batch(sid, [_record(0)], [(0, 1, {"v": 0.5})], {"elapsed_s": 1.0})
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.save_batch(sid, [_record(0, TrialState.COMPLETE), _record(1)],
                             [(0, 2, {"v": 0.7})], {"elapsed_s": 2.0})
            with store.transaction():
                store.save_batch(sid, [_record(2)], [(2, 1, {"v": 0.1})])
            raise RuntimeError("the turn failed before its commit")
    assert sorted(subject.trials()) == [0] and subject.trials()[0].state is TrialState.RUNNING
    assert subject.results() == [(0, 1, {"v": 0.5})]
    assert subject.state() == {"elapsed_s": 1.0}
    with store.transaction():
        store.save_batch(sid, [_record(1)], [(1, 1, {"v": 0.2})], {"elapsed_s": 3.0})
        store.save_batch(sid, [_record(2)], [])
    assert sorted(subject.trials()) == [0, 1, 2]
    assert subject.results() == [(0, 1, {"v": 0.5}), (1, 1, {"v": 0.2})]
    assert subject.state() == {"elapsed_s": 3.0}


def test_stays_are_kept_with_their_batch_and_a_closed_stay_replaces_the_open_one(subject):
    from hypersack.core.stays import Stay, StayOutcome
    sid = subject.study.study_id
    opened = [Stay(0, 1, "n0", "gpu0", 10.0, 50.0, pack=3, rank=0),
              Stay(0, 1, "n0", "gpu1", 10.0, 50.0, pack=3, rank=1)]
    subject.store.save_batch(sid, [_record(0)], [], stays=opened)
    assert subject.store.load_stays(sid) == opened
    closed = [Stay(0, 1, "n0", "gpu0", 10.0, 50.0, pack=3, rank=0, end=12.5,
                   outcome=StayOutcome.PREEMPTED)]
    subject.store.save_batch(sid, [_record(0, TrialState.PENDING)], [], stays=closed)
    stays = subject.store.load_stays(sid)
    assert stays == [closed[0], opened[1]]
    assert stays[0].outcome is StayOutcome.PREEMPTED and stays[1].end is None
