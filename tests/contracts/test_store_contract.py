"""The Store contract the loop writes to (``runtime.loop.store.Store``), run against every store.

Every test runs on each store of ``STORES`` (SQLite ``runtime.storage.sqlite.Storage``, memory
``runtime.storage.memory.MemoryStore``), as Optuna's storage suite runs on every backend. Where two stores
legitimately differ, the subject says so by a capability and the test is skipped with the
reason (never silently): the memory store is never resumed (nothing outlives the process), so
it never calls a state function; it holds one study and cannot fail to write. Reading back is
each store's own: the subjects below are the only code that knows how. Each test was seen to
fail on at least one deliberately broken store (a mutant of either store).
"""
from __future__ import annotations

import dataclasses
import decimal
import inspect
import math
import time

import pytest

from hypersack.core.algorithms.base import StateParts
from hypersack.core.stays import Stay, StayOutcome
from hypersack.core.trial import StopReason, TrialRecord, TrialState
from hypersack.errors import HyperSackError, StorageError
from hypersack.runtime.storage.sqlite import Storage
from hypersack.runtime.loop.store import LAUNCH_FIELDS, BackgroundWalCheckpoints, Store
from hypersack.runtime.storage.memory import MemoryStore


class _Sqlite:
    """The embedded store; read back through its own queries."""
    name = "sqlite"
    resumable = True                # a new driver reads back what the last one wrote
    calls_state_callable = True     # the state is made when the batch is written
    studies = True                  # one file holds many studies
    may_fail = True                 # a write can be refused (read-only file, full disk)
    background_wal_checkpoints = True

    def __init__(self, path):
        self.path = path
        self.store = Storage(path, durability="process")    # no fsync per commit: fast tests
        self.study = self.store.create_study("s", {})

    def other_study(self, name):
        return self.store.create_study(name, {}).study_id

    def trials(self, study_id=None):
        sid = self.study.study_id if study_id is None else study_id
        return {t.trial_id: t for t in self.store.load_trials(sid)}

    def results(self, study_id=None):
        sid = self.study.study_id if study_id is None else study_id
        return [(r["trial_id"], r["step"], {k: v for k, v in r.items() if k not in ("trial_id", "step")})
                for r in self.store.load_results(sid)]

    def status(self, name="s"):
        return self.store.get_study(name).status

    def state(self, name="s"):
        return self.store.get_study(name).controller_state

    def reopen(self):
        self.store.close()
        self.store = Storage(self.path, durability="process")

    def close(self):
        self.store.close()


class _Memory:
    """The simulator's store: plain dicts."""
    name = "memory"
    resumable = False
    calls_state_callable = False
    studies = False
    may_fail = False
    background_wal_checkpoints = False

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
        return self.store.load_state()

    def close(self):
        pass


STORES = {"sqlite": _Sqlite, "memory": _Memory}


@pytest.fixture(params=sorted(STORES))
def subject(request, tmp_path):
    made = STORES[request.param](tmp_path / "s.db")
    yield made
    made.close()


def _needs(subject, capability: str, why: str) -> None:
    if not getattr(subject, capability):
        pytest.skip(f"the {subject.name} store {why}")


def _record(trial_id, state=TrialState.RUNNING, **kw) -> TrialRecord:
    return TrialRecord(trial_id, {"x": trial_id}, seed=trial_id, state=state, **kw)


def _save(subject, trials=(), results=(), state=None, stays=()):
    subject.store.save_batch(subject.study.study_id, list(trials), list(results), state,
                             stays=list(stays))


def _per_trial(results):
    """``{trial_id: [(step, metrics), ...]}`` in the order the store handed them back."""
    out: dict[int, list] = {}
    for trial_id, step, metrics in results:
        out.setdefault(trial_id, []).append((step, metrics))
    return out


def _same(a, b) -> bool:
    """Equal values of equal types; NaN equals NaN."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


# ---- the protocol and its capabilities ----------------------------------------------------

def test_each_store_has_every_method_of_the_protocol_with_its_parameters(subject):
    wanted = [name for name in vars(Store) if not name.startswith("_")]
    assert sorted(wanted) == ["heartbeat", "load_stays", "save_batch", "set_status", "transaction"]
    for name in wanted:
        method = getattr(subject.store, name, None)
        assert callable(method), name
        expected = list(inspect.signature(getattr(Store, name)).parameters)[1:]
        assert list(inspect.signature(method).parameters)[:len(expected)] == expected, name


def test_background_wal_checkpoints_is_a_capability_the_loop_can_ask_for(subject):
    assert isinstance(subject.store, BackgroundWalCheckpoints) is subject.background_wal_checkpoints
    if not subject.background_wal_checkpoints:
        return
    with subject.store.background_wal_checkpoints():
        _save(subject, [_record(0)], [(0, 1, {"v": 1.0})])
    assert subject.results() == [(0, 1, {"v": 1.0})]


# ---- trials -------------------------------------------------------------------------------

def _full_record() -> TrialRecord:
    """A record with every field away from its default (a new field must be added here)."""
    return TrialRecord(
        trial_id=7, config={"lr": 0.01, "layers": [64, 32], "act": "relu", "opt": {"b": [0.9, 0.99]}},
        seed=2**40 + 3, state=TrialState.PAUSED, attempts=3, retries=1, last_step=9,
        metrics={"loss": 0.25, "acc": 0.875}, value=0.25, value_step=6, values=[0.25, 0.875],
        error="boom: it broke",
        traceback="Traceback (most recent call last):\n  ...\nValueError: é\n",
        checkpoint="checkpoint-a3-9.pkl", checkpoint_step=8, device="n0/gpu1",
        info={"bracket": 1, "rung": 2, "pack": "p3", "note": "ü"}, resources=2,
        devices=[("n0", "gpu0"), ("n0", "gpu1")], started_at=1_700_000_000.125,
        finished_at=1_700_000_100.5, stop_reason=StopReason.PAUSED)


def test_the_full_record_sets_every_field_of_a_trial_record():
    record = _full_record()
    for f in dataclasses.fields(TrialRecord):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        assert getattr(record, f.name) != default, f"_full_record leaves {f.name} at its default"
    assert set(LAUNCH_FIELDS) <= {f.name for f in dataclasses.fields(TrialRecord)}


def test_every_stored_field_of_a_trial_round_trips(subject):
    record = _full_record()
    _save(subject, [record])
    back = subject.trials()[7]
    for f in dataclasses.fields(TrialRecord):
        if f.name not in LAUNCH_FIELDS:
            assert _same(getattr(back, f.name), getattr(record, f.name)), f.name
    assert type(back.state) is TrialState and type(back.seed) is int


def test_a_trial_at_its_defaults_round_trips(subject):
    record = TrialRecord(0, {}, seed=0)
    _save(subject, [record])
    back = subject.trials()[0]
    for f in dataclasses.fields(TrialRecord):
        if f.name not in LAUNCH_FIELDS:
            assert getattr(back, f.name) == getattr(record, f.name), f.name


@pytest.mark.parametrize("state", list(TrialState))
def test_every_trial_state_round_trips(subject, state):
    _save(subject, [_record(0, state)])
    assert subject.trials()[0].state is state


def test_a_trial_saved_again_replaces_its_earlier_snapshot(subject):
    path = [TrialState.PENDING, TrialState.RUNNING, TrialState.PAUSED, TrialState.PENDING,
            TrialState.RUNNING, TrialState.COMPLETE]
    for step, state in enumerate(path):
        _save(subject, [_record(0, state, attempts=step, last_step=step or None)])
        trials = subject.trials()
        assert list(trials) == [0]
        assert (trials[0].state, trials[0].attempts) == (state, step)


def test_a_field_cleared_in_a_later_snapshot_is_cleared_in_the_store(subject):
    _save(subject, [_record(0, TrialState.FAILED, error="oom", checkpoint="c.pkl", checkpoint_step=3,
                            info={"rung": 1}, metrics={"v": 1.0}, value=1.0, resources=4)])
    _save(subject, [_record(0, TrialState.PENDING)])
    back = subject.trials()[0]
    assert (back.error, back.checkpoint, back.checkpoint_step, back.value) == (None, None, None, None)
    assert (back.info, back.metrics, back.resources) == ({}, {}, 1)


def test_a_batch_is_a_snapshot_later_changes_to_a_record_are_not_kept(subject):
    record = _record(0, info={"rung": 0})
    _save(subject, [record])
    record.state = TrialState.FAILED                 # the controller mutates it afterwards
    record.info.update(rung=1, pack="p")             # ... its info in place, too
    record.info["end_game"] = True
    record.metrics = {"v": 2.0}
    back = subject.trials()[0]
    assert back.state is TrialState.RUNNING and back.info == {"rung": 0} and back.metrics == {}


def test_every_objective_value_of_a_multi_objective_trial_round_trips_as_a_snapshot(subject):
    multi = _record(0, TrialState.COMPLETE, value=0.5, values=[0.5, 12.0, -3.25])
    single = _record(1, TrialState.COMPLETE, value=1.0)
    _save(subject, [multi, single])
    multi.values.append(9.0)                         # changed in place after the batch
    back = subject.trials()
    assert back[0].values == [0.5, 12.0, -3.25] and type(back[0].values) is list
    assert back[1].values is None and back[1].value == 1.0


def test_only_the_trials_in_a_batch_change(subject):
    _save(subject, [_record(0), _record(1)])
    _save(subject, [_record(1, TrialState.COMPLETE)])
    trials = subject.trials()
    assert (trials[0].state, trials[1].state) == (TrialState.RUNNING, TrialState.COMPLETE)


def test_a_batch_takes_any_iterables(subject):
    subject.store.save_batch(subject.study.study_id, (_record(i) for i in range(3)),
                             iter([(0, 1, {"v": 0.5})]), stays=iter([Stay(0, 1, "n", "g", 1.0)]))
    assert sorted(subject.trials()) == [0, 1, 2]
    assert subject.results() == [(0, 1, {"v": 0.5})]
    assert subject.store.load_stays(subject.study.study_id) == [Stay(0, 1, "n", "g", 1.0)]


def test_an_empty_batch_changes_nothing(subject):
    _save(subject, [_record(0)], [(0, 1, {"v": 0.5})], {"elapsed_s": 1.0})
    _save(subject)
    assert list(subject.trials()) == [0] and subject.results() == [(0, 1, {"v": 0.5})]
    assert subject.state() == {"elapsed_s": 1.0}


def test_a_few_thousand_trials_are_kept_and_fast(subject):
    n = 3000
    began = time.perf_counter()
    with subject.store.transaction():
        for start in range(0, n, 100):
            ids = range(start, start + 100)
            _save(subject, [_record(i) for i in ids], [(i, 1, {"v": i / n}) for i in ids],
                  {"elapsed_s": float(start)}, [Stay(i, 1, "n0", f"gpu{i % 8}", float(i)) for i in ids])
    for start in range(0, n, 500):                   # each finishes in a batch of its own kind
        ids = range(start, start + 500)
        _save(subject, [_record(i, TrialState.COMPLETE, value=i / n) for i in ids],
              [(i, 2, {"v": i / n}) for i in ids])
    assert time.perf_counter() - began < 10.0
    trials = subject.trials()
    assert len(trials) == n and all(t.state is TrialState.COMPLETE for t in trials.values())
    per_trial = _per_trial(subject.results())
    assert len(per_trial) == n and all([s for s, _ in v] == [1, 2] for v in per_trial.values())
    assert len(subject.store.load_stays(subject.study.study_id)) == n


# ---- results ------------------------------------------------------------------------------

METRIC_VALUES = [0, -3, 2**53 + 1, -(2**62), 1.5, -0.0, 5e-324, 1e308, 0.1 + 0.2,
                 float("nan"), float("inf"), float("-inf"), True, False, None, "diverged", ""]


@pytest.mark.parametrize("value", METRIC_VALUES, ids=repr)
def test_every_metric_value_the_loop_hands_over_round_trips(subject, value):
    """Numbers (NaN and infinities included: the controller fails the trial on them, after its
    result is accepted), and what else a trainable may report (a bool, None, a string)."""
    _save(subject, [_record(0)], [(0, 1, {"m": value, "v": 1.0})])
    [(trial_id, step, metrics)] = subject.results()
    assert (trial_id, step, list(metrics)) == (0, 1, ["m", "v"])
    assert _same(metrics["m"], value), metrics


@pytest.mark.parametrize("value", [decimal.Decimal("0.1"), complex(1, 2), object()], ids=type)
def test_a_metric_value_that_is_no_json_value_is_kept_as_its_text_not_an_error(subject, value):
    """A trainable may report any picklable value (a numpy array: ``.item()`` fails); the
    controller fails the trial on it, but its result is stored, so the store must not raise."""
    _save(subject, [_record(0)], [(0, 1, {"m": value, "v": 1.0})])
    [(_, _, metrics)] = subject.results()
    assert str(metrics["m"]) == str(value) and metrics["v"] == 1.0


def test_many_metrics_in_one_result_keep_their_names_and_order(subject):
    names = [f"m{i}" for i in range(300)] + ["val/loss", "a.b", 'q"uote', "back\\slash", "ü-精度", " "]
    metrics = {name: i / 7 for i, name in enumerate(names)}
    _save(subject, [_record(0)], [(0, 1, metrics)])
    [(_, _, back)] = subject.results()
    assert back == metrics and list(back) == names


def test_many_steps_of_a_trial_come_back_in_step_order(subject):
    for first in range(1, 2001, 250):
        _save(subject, [_record(0, last_step=first + 249)],
              [(0, s, {"v": 1 / s}) for s in range(first, first + 250)])
    assert [(s, m["v"]) for _, s, m in subject.results()] == [(s, 1 / s) for s in range(1, 2001)]


def test_results_of_trials_reported_interleaved_come_back_per_trial_in_step_order(subject):
    batches = [[(1, 1, {"v": 0.1}), (0, 1, {"v": 0.2})],
               [(2, 5, {"v": 0.3}), (0, 2, {"v": 0.4}), (1, 2, {"v": 0.5})],
               [(0, 3, {"v": 0.6}), (2, 6, {"v": 0.7})]]
    for batch in batches:
        _save(subject, [], batch)
    assert _per_trial(subject.results()) == {
        0: [(1, {"v": 0.2}), (2, {"v": 0.4}), (3, {"v": 0.6})],
        1: [(1, {"v": 0.1}), (2, {"v": 0.5})], 2: [(5, {"v": 0.3}), (6, {"v": 0.7})]}


# ---- the controller state -----------------------------------------------------------------

def test_a_state_given_as_a_dict_round_trips(subject):
    state = {"elapsed_s": 12.5, "algorithm": {"rng": [1, 2, 3], "created": 4, "name": "asha",
                                              "model": None, "ok": True, "nested": {"a": {"b": [1.5]}}},
             "time_sharing": {"bindings": {"3": ["n0", "gpu1"]}}}
    _save(subject, [_record(0)], [], state)
    assert subject.state() == state


def test_the_latest_state_replaces_the_earlier_one_and_none_keeps_it(subject):
    _save(subject, [], [], {"elapsed_s": 1.0, "algorithm": {"a": 1}})
    _save(subject, [], [], {"elapsed_s": 2.0})
    _save(subject, [_record(0)], [(0, 1, {"v": 1.0})], None)
    assert subject.state() == {"elapsed_s": 2.0}


def test_a_state_given_as_a_function_is_stored(subject):
    _save(subject, [_record(0)], [], lambda: {"elapsed_s": 3.0, "algorithm": {"n": 1}})
    assert subject.state() == {"elapsed_s": 3.0, "algorithm": {"n": 1}}


def test_a_state_function_is_called_once_with_its_batch(subject):
    _needs(subject, "calls_state_callable", "never calls a state function (never resumed)")
    calls = []

    def state():
        calls.append(1)
        return {"elapsed_s": float(len(calls))}
    _save(subject, [_record(0)], [], state)
    assert calls == [1]
    _save(subject, [_record(1)], [])
    assert subject.state() == {"elapsed_s": 1.0} and calls == [1]


def test_a_state_function_that_raises_writes_nothing_of_its_batch(subject):
    _needs(subject, "calls_state_callable", "never calls a state function (never resumed)")
    _save(subject, [_record(0)], [(0, 1, {"v": 1.0})], {"elapsed_s": 1.0})

    def broken():
        raise KeyError("the algorithm's state")
    with pytest.raises(KeyError):
        _save(subject, [_record(0, TrialState.COMPLETE), _record(1)], [(0, 2, {"v": 2.0})], broken)
    assert list(subject.trials()) == [0] and subject.trials()[0].state is TrialState.RUNNING
    assert subject.results() == [(0, 1, {"v": 1.0})] and subject.state() == {"elapsed_s": 1.0}


def _delta(parts, **head):
    return {"elapsed_s": 1.0, "algorithm": {"rng": [1], **head, "parts": StateParts(parts)}}


def test_state_parts_are_kept_by_key_and_all_handed_back(subject):
    _save(subject, [], [], _delta({"t0": [0, "running", []], "t1": [0, "running", []]}, created=2))
    _save(subject, [], [], _delta({"t1": [1, "paused", [0.5]], "t2": [0, "running", []]}, created=3))
    _save(subject, [], [], {"elapsed_s": 2.0, "algorithm": {"rng": [2], "created": 3,
                                                             "parts": StateParts()}})
    assert subject.state() == {"elapsed_s": 2.0, "algorithm": {
        "rng": [2], "created": 3,
        "parts": {"t0": [0, "running", []], "t1": [1, "paused", [0.5]], "t2": [0, "running", []]}}}
    assert type(subject.state()["algorithm"]["parts"]) is dict


def test_a_part_given_as_none_is_removed(subject):
    _save(subject, [], [], _delta({"t0": [1], "t1": [2]}))
    _save(subject, [], [], _delta({"t0": None, "t9": None}))
    assert subject.state()["algorithm"]["parts"] == {"t1": [2]}


def test_a_state_kept_in_parts_hands_back_parts_even_when_none_are_left(subject):
    """A head without ``"parts"`` reads as a whole ``state_dict()`` (ASHA's ``load_state_dict``
    then looks for ``"trials"``): an empty set of parts is still handed back."""
    _save(subject, [], [], _delta({}))
    assert subject.state()["algorithm"] == {"rng": [1], "parts": {}}
    _save(subject, [], [], _delta({"t0": [1]}))
    _save(subject, [], [], _delta({"t0": None}))
    assert subject.state()["algorithm"] == {"rng": [1], "parts": {}}


def test_a_whole_state_replaces_the_stored_parts(subject):
    """A state whose algorithm is not in parts is the whole state: parts stored before are
    stale and are not handed back with it."""
    _save(subject, [], [], _delta({"t0": [1]}))
    whole = {"elapsed_s": 5.0, "algorithm": {"rng": [3], "trials": {"0": [1, "done"]}}}
    _save(subject, [], [], whole)
    assert subject.state() == whole
    _save(subject, [], [], _delta({"t5": [5]}))
    assert subject.state()["algorithm"]["parts"] == {"t5": [5]}


def test_a_whole_state_after_a_rolled_back_one_still_replaces_the_parts(subject):
    _save(subject, [], [], _delta({"t0": [1]}))
    with pytest.raises(RuntimeError):
        with subject.store.transaction():
            _save(subject, [], [], {"elapsed_s": 2.0, "algorithm": {"rng": [2]}})
            raise RuntimeError
    assert subject.state()["algorithm"]["parts"] == {"t0": [1]}
    _save(subject, [], [], {"elapsed_s": 3.0, "algorithm": {"rng": [3]}})
    assert subject.state() == {"elapsed_s": 3.0, "algorithm": {"rng": [3]}}


def test_state_parts_given_by_a_function_are_kept_by_key(subject):
    _needs(subject, "calls_state_callable", "never calls a state function (never resumed)")
    _save(subject, [], [], lambda: _delta({"t0": [0], "t1": [1]}))
    _save(subject, [], [], lambda: _delta({"t1": None, "t2": [2]}))
    assert subject.state()["algorithm"]["parts"] == {"t0": [0], "t2": [2]}


# ---- transactions -------------------------------------------------------------------------

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


def test_a_failed_transaction_rolls_back_stays_status_and_state_parts(subject):
    sid = subject.study.study_id
    opened = Stay(0, 1, "n0", "gpu0", 10.0)
    _save(subject, [_record(0)], [], _delta({"t0": [0], "t1": [1]}), [opened])
    subject.store.set_status(sid, "running")
    with pytest.raises(RuntimeError):
        with subject.store.transaction():
            _save(subject, [_record(0, TrialState.PENDING), _record(1)], [(0, 1, {"v": 1.0})],
                  _delta({"t0": None, "t1": [9], "t2": [2]}, created=5),
                  [Stay(0, 1, "n0", "gpu0", 10.0, end=11.0, outcome=StayOutcome.PREEMPTED),
                   Stay(1, 1, "n0", "gpu1", 11.0)])
            subject.store.set_status(sid, "interrupted")
            subject.store.heartbeat(sid)
            raise RuntimeError("the turn failed before its commit")
    assert subject.store.load_stays(sid) == [opened]
    assert subject.status() == "running"
    assert subject.state() == {"elapsed_s": 1.0, "algorithm": {"rng": [1], "parts": {"t0": [0], "t1": [1]}}}
    assert list(subject.trials()) == [0] and subject.results() == []


def test_a_failed_transaction_leaves_the_store_usable(subject):
    with pytest.raises(ValueError):
        with subject.store.transaction():
            _save(subject, [_record(0)], [(0, 1, {"v": 1.0})])
            raise ValueError
    _save(subject, [_record(1)], [(1, 1, {"v": 2.0})])
    with subject.store.transaction():
        pass
    assert list(subject.trials()) == [1] and subject.results() == [(1, 1, {"v": 2.0})]


def test_an_inner_block_joins_the_outer_one_its_caught_exception_undoes_nothing(subject):
    """Nested blocks are one transaction (no savepoints): an exception caught inside the outer
    block does not undo the inner block's writes; the outer block's end keeps them."""
    with subject.store.transaction():
        _save(subject, [_record(0)])
        with pytest.raises(RuntimeError):
            with subject.store.transaction():
                _save(subject, [_record(1)], [(1, 1, {"v": 1.0})])
                raise RuntimeError
        _save(subject, [_record(2)])
    assert sorted(subject.trials()) == [0, 1, 2] and subject.results() == [(1, 1, {"v": 1.0})]


def test_writes_inside_a_block_are_seen_inside_it(subject):
    with subject.store.transaction():
        _save(subject, [_record(0)], [], {"elapsed_s": 1.0}, [Stay(0, 1, "n", "g", 1.0)])
        assert list(subject.trials()) == [0] and subject.state() == {"elapsed_s": 1.0}
        assert len(subject.store.load_stays(subject.study.study_id)) == 1


def test_a_transaction_rolls_back_to_the_state_before_it_not_to_none(subject):
    _save(subject, [], [], {"elapsed_s": 1.0})
    with pytest.raises(RuntimeError):
        with subject.store.transaction():
            _save(subject, [], [], {"elapsed_s": 2.0})
            _save(subject, [], [], {"elapsed_s": 3.0})
            raise RuntimeError
    assert subject.state() == {"elapsed_s": 1.0}


def test_a_store_that_cannot_write_raises_storage_error_and_writes_nothing(subject, tmp_path):
    _needs(subject, "may_fail", "cannot fail to write")
    _save(subject, [_record(0)], [(0, 1, {"v": 1.0})], {"elapsed_s": 1.0})
    reader = Storage(subject.path, readonly=True)
    try:
        with pytest.raises(StorageError) as caught:
            reader.save_batch(subject.study.study_id, [_record(1)], [(1, 1, {"v": 2.0})],
                              {"elapsed_s": 2.0}, stays=[Stay(1, 1, "n", "g", 1.0)])
        assert isinstance(caught.value, HyperSackError) and "read-only" in str(caught.value)
    finally:
        reader.close()
    assert list(subject.trials()) == [0] and subject.results() == [(0, 1, {"v": 1.0})]
    assert subject.state() == {"elapsed_s": 1.0} and subject.store.load_stays(1) == []


# ---- stays --------------------------------------------------------------------------------

def test_stays_are_kept_with_their_batch_and_a_closed_stay_replaces_the_open_one(subject):
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


@pytest.mark.parametrize("outcome", list(StayOutcome))
def test_every_field_of_a_closed_stay_round_trips(subject, outcome):
    stay = Stay(4, 2, "node-ü", "gpu7", 1_700_000_000.25, 37.5, pack="p-1", rank=3,
                end=1_700_000_010.75, outcome=outcome)
    _save(subject, [_record(4)], [], None, [stay])
    [back] = subject.store.load_stays(subject.study.study_id)
    assert back == stay and back.outcome is outcome


@pytest.mark.parametrize("pack", [None, 0, 12, "bracket-2/pack-0"], ids=repr)
def test_a_stays_pack_round_trips(subject, pack):
    stay = Stay(0, 1, "n0", "gpu0", 1.0, pack=pack)
    _save(subject, [], [], None, [stay])
    assert subject.store.load_stays(subject.study.study_id) == [stay]


def test_stays_come_back_by_trial_attempt_and_rank_whatever_order_they_were_saved(subject):
    stays = [Stay(t, a, "n0", f"gpu{r}", float(t * 10 + a), rank=r)
             for t in (2, 0, 1) for a in (2, 1) for r in (1, 0)]
    for stay in stays:
        _save(subject, [], [], None, [stay])
    back = subject.store.load_stays(subject.study.study_id)
    assert back == sorted(stays, key=lambda s: (s.trial_id, s.attempt, s.rank))


def test_each_attempt_and_device_is_a_stay_of_its_own(subject):
    first = Stay(0, 1, "n0", "gpu0", 1.0, end=2.0, outcome=StayOutcome.FAILED)
    again = Stay(0, 2, "n0", "gpu0", 3.0)
    elsewhere = Stay(0, 2, "n1", "gpu0", 3.0, rank=1)
    _save(subject, [], [], None, [first])
    _save(subject, [], [], None, [again, elsewhere])
    assert subject.store.load_stays(subject.study.study_id) == [first, again, elsewhere]


def test_a_stay_saved_again_replaces_the_one_with_its_key(subject):
    _save(subject, [], [], None, [Stay(0, 1, "n0", "gpu0", 1.0, 100.0)])
    _save(subject, [], [], None, [Stay(0, 1, "n0", "gpu0", 1.5, 25.0, pack=2, end=3.0,
                                       outcome=StayOutcome.FINISHED)])
    assert subject.store.load_stays(subject.study.study_id) == [
        Stay(0, 1, "n0", "gpu0", 1.5, 25.0, pack=2, end=3.0, outcome=StayOutcome.FINISHED)]


def test_no_stays_at_first(subject):
    assert subject.store.load_stays(subject.study.study_id) == []


# ---- status and heartbeat -----------------------------------------------------------------

@pytest.mark.parametrize("status", ["running", "complete", "interrupted"])
def test_every_status_round_trips_and_the_latest_wins(subject, status):
    subject.store.set_status(subject.study.study_id, "running")
    subject.store.set_status(subject.study.study_id, status)
    assert subject.status() == status


def test_status_and_heartbeat(subject):
    subject.store.heartbeat(subject.study.study_id)   # no lease held: nothing to renew
    subject.store.set_status(subject.study.study_id, "interrupted")
    assert subject.status() == "interrupted"


def test_a_heartbeat_without_a_lease_writes_nothing_and_raises_nothing(subject):
    _save(subject, [_record(0)], [(0, 1, {"v": 1.0})], {"elapsed_s": 1.0})
    for _ in range(3):
        subject.store.heartbeat(subject.study.study_id)
    with subject.store.transaction():
        subject.store.heartbeat(subject.study.study_id)
    assert list(subject.trials()) == [0] and subject.results() == [(0, 1, {"v": 1.0})]
    assert subject.state() == {"elapsed_s": 1.0}


# ---- resuming ------------------------------------------------------------------------------

def test_everything_a_batch_wrote_is_read_back_by_the_next_driver(subject):
    _needs(subject, "resumable", "is never resumed (nothing of a simulation outlives it)")
    record = _full_record()
    stays = [Stay(7, 3, "n0", "gpu0", 1.0, end=2.0, outcome=StayOutcome.PAUSED),
             Stay(7, 4, "n0", "gpu1", 3.0, 50.0, pack="p", rank=0)]
    with subject.store.transaction():
        _save(subject, [record], [(7, 9, {"loss": 0.25, "n": float("nan")})],
              _delta({"t7": [1, "paused", [0.5]], "t8": [0, "running", []]}, created=9), stays)
        _save(subject, [], [], lambda: _delta({"t8": None}, created=9))
    subject.store.set_status(subject.study.study_id, "interrupted")
    subject.reopen()
    back = subject.trials()[7]
    assert all(_same(getattr(back, f.name), getattr(record, f.name))
               for f in dataclasses.fields(TrialRecord) if f.name not in LAUNCH_FIELDS)
    [(trial_id, step, metrics)] = subject.results()
    assert (trial_id, step) == (7, 9)
    assert metrics["loss"] == 0.25 and math.isnan(metrics["n"])
    assert subject.state() == {"elapsed_s": 1.0, "algorithm": {
        "rng": [1], "created": 9, "parts": {"t7": [1, "paused", [0.5]]}}}
    assert subject.store.load_stays(subject.study.study_id) == stays
    assert subject.status() == "interrupted"


# ---- several studies in one store ---------------------------------------------------------

def test_studies_in_one_store_never_see_each_others_data(subject):
    _needs(subject, "studies", "holds the one study of a simulation")
    store, a = subject.store, subject.study.study_id
    b = subject.other_study("t")
    store.save_batch(a, [_record(0), _record(1)], [(0, 1, {"v": 0.1})], _delta({"t0": [0]}),
                     stays=[Stay(0, 1, "n0", "gpu0", 1.0)])
    store.save_batch(b, [_record(0, TrialState.COMPLETE)], [(0, 1, {"v": 9.0})],
                     {"elapsed_s": 9.0, "algorithm": {"rng": [9], "parts": StateParts({"t5": [5]})}},
                     stays=[Stay(0, 1, "n0", "gpu0", 2.0, end=3.0, outcome=StayOutcome.FINISHED)])
    store.set_status(b, "complete")
    store.save_batch(a, [], [], _delta({"t5": None}))
    assert sorted(subject.trials(a)) == [0, 1] and subject.trials(a)[0].state is TrialState.RUNNING
    assert list(subject.trials(b)) == [0] and subject.trials(b)[0].state is TrialState.COMPLETE
    assert subject.results(a) == [(0, 1, {"v": 0.1})] and subject.results(b) == [(0, 1, {"v": 9.0})]
    assert store.load_stays(a) == [Stay(0, 1, "n0", "gpu0", 1.0)]
    assert [s.outcome for s in store.load_stays(b)] == [StayOutcome.FINISHED]
    assert subject.state("s")["algorithm"]["parts"] == {"t0": [0]}
    assert subject.state("t") == {"elapsed_s": 9.0, "algorithm": {"rng": [9], "parts": {"t5": [5]}}}
    assert (subject.status("s"), subject.status("t")) == ("running", "complete")


def test_a_rolled_back_transaction_of_one_study_leaves_the_other_as_it_was(subject):
    _needs(subject, "studies", "holds the one study of a simulation")
    store, a = subject.store, subject.study.study_id
    b = subject.other_study("t")
    store.save_batch(b, [_record(0)], [(0, 1, {"v": 1.0})])
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.save_batch(a, [_record(5)], [])
            store.save_batch(b, [_record(0, TrialState.FAILED)], [(0, 2, {"v": 2.0})])
            raise RuntimeError
    assert subject.trials(a) == {} and subject.trials(b)[0].state is TrialState.RUNNING
    assert subject.results(b) == [(0, 1, {"v": 1.0})]


# ---- SQLite's read side of the same data ---------------------------------------------------

@pytest.mark.parametrize("metric", ["v", "val/loss", "a.b", 'q"uote', "back\\slash", "new\nline",
                                    "ü-精度"])
def test_sqlite_reads_one_metric_of_every_result_whatever_its_name_or_value(tmp_path, metric):
    """``load_metric`` (the report's query) gives what ``load_results`` gives, for any metric
    name and for non-finite values (SQLite's JSON functions reject NaN and Infinity)."""
    with Storage(tmp_path / "s.db", durability="process") as store:
        sid = store.create_study("s", {}).study_id
        want = []
        for trial_id, values in enumerate([[0.5, 2, None], [float("inf"), float("-inf"), float("nan")]]):
            store.save_batch(sid, [_record(trial_id)], [(trial_id, step, {metric: v, "other": 1.0})
                                                        for step, v in enumerate(values, 1)])
            store.save_batch(sid, [], [(9, trial_id, {"other": 2.0})])
            want += [(trial_id, step, v) for step, v in enumerate(values, 1)]
            got = [(t, s, v) for t, s, _, v in store.load_metric(sid, metric)]
            full = want + [(9, t, None) for t in range(trial_id + 1)]
            assert len(got) == len(full)
            for (t, s, v), (wt, ws, wv) in zip(got, full):
                assert (t, s) == (wt, ws) and _same(v, wv), (t, s, v, wv)
        assert store.load_metric(sid, metric, since=time.time() + 60) == []
