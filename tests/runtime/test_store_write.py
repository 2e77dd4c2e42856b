"""The turn's durable write (``Storage.save_batch``): what it stores, byte for byte, and how."""
from __future__ import annotations

import dataclasses
import json
import random

import numpy as np
import pytest

from hypersack.core.algorithms.base import StateSnapshot
from hypersack.core.algorithms.random_search import RandomSearch
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace
from hypersack.core.stays import Stay, StayOutcome
from hypersack.core.trial import TrialRecord, TrialState
from hypersack.runtime.storage import sqlite as sqlite_store
from hypersack.runtime.storage.sqlite import Storage
from hypersack.runtime.storage.user_attrs import FILE


def full(trial_id: int) -> TrialRecord:
    return TrialRecord(trial_id, {"x": 0.25}, seed=9, state=TrialState.FAILED, attempts=3,
                       retries=2, last_step=7, metrics={"score": 1.5}, value=1.5, values=[1.5, 2.0],
                       error="boom", traceback="Traceback...", checkpoint="/c.pt",
                       checkpoint_step=6, device="cpu/1", info={"rung": 2}, resources=2,
                       started_at=1.0, finished_at=2.0)


def bare(trial_id: int) -> TrialRecord:
    return TrialRecord(trial_id, {"x": 0.5}, seed=1, state=TrialState.RUNNING)


def rowids(store: Storage, table: str) -> list[int]:
    return [r[0] for r in store.connection.execute(f"SELECT rowid FROM {table} ORDER BY rowid")]


def test_a_trial_written_again_is_replaced_whole_in_place(store_path):
    with Storage(store_path) as s:
        sid = s.create_study("a", {}).study_id
        s.save_batch(sid, [bare(0), bare(1)], [])
        before = rowids(s, "trials")
        s.save_batch(sid, [full(0)], [])             # every field set ...
        assert s.load_trials(sid) == [full(0), bare(1)]
        s.save_batch(sid, [bare(0)], [])             # ... and every field back to its default
        assert s.load_trials(sid) == [bare(0), bare(1)]
        assert rowids(s, "trials") == before         # updated where it is, not moved to the end


@pytest.mark.parametrize("layout", ["new", "rowid"])
def test_a_stay_closed_replaces_the_open_one_in_place(store_path, layout):
    """In a store of before the WITHOUT ROWID stays (``rowid``) too: updated where it is."""
    if layout == "rowid":
        _rowid_store(store_path)
    with Storage(store_path) as s:
        sid = s.create_study("a", {}).study_id
        opened = [Stay(0, 1, "n", "gpu0", 1.0, pack=[0, 1]), Stay(1, 1, "n", "gpu1", 1.0)]
        s.save_batch(sid, [bare(0), bare(1)], [], stays=opened)
        before = rowids(s, "stays") if layout == "rowid" else None
        closed = Stay(0, 1, "n", "gpu0", 2.0, share=50.0, pack=None, rank=1, end=3.0,
                      outcome=StayOutcome.PRUNED)
        s.save_batch(sid, [bare(0)], [], stays=[closed])
        assert s.load_stays(sid) == [closed, opened[1]]
        if layout == "rowid":
            assert rowids(s, "stays") == before


# ---- the tables' layout: WITHOUT ROWID stays and state parts in new stores (issue 41) ----------

def _rowid_store(path) -> None:
    """A store made by the schema of before (every table a rowid table), with nothing in it."""
    import sqlite3
    with sqlite3.connect(path) as db:
        db.executescript(sqlite_store._SCHEMA.replace(" WITHOUT ROWID", ""))
        db.execute("INSERT INTO meta VALUES ('schema_version', '5')")


def _layouts(s: Storage) -> dict[str, bool]:
    """Table -> whether it is a WITHOUT ROWID table."""
    return {name: "WITHOUT ROWID" in sql.upper() for name, sql in s.connection.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND sql IS NOT NULL")}


def test_a_new_store_keeps_stays_and_state_parts_without_rowids(store_path):
    with Storage(store_path) as s:
        layout = _layouts(s)
    assert layout["stays"] and layout["state_parts"]
    assert not layout["trials"] and not layout["results"] and not layout["studies"]


def _write_a_study(s: Storage) -> tuple:
    """A study's batches of every kind, a resume's reads, the stays closed by a resume, a part
    deleted; what a reader and a resume load of it."""
    from hypersack.core.algorithms.base import StateParts
    sid = s.create_study("a", {"x": 1}).study_id
    parts = StateParts({f"t{i}": [i, "running", [0.5 * i]] for i in range(12)})
    s.save_batch(sid, [bare(0), full(1)], [(1, 1, {"score": 1.5})],
                 {"algorithm": {"parts": parts, "n": 1}, "elapsed_s": 1.0},
                 stays=[Stay(0, 1, "n", "gpu0", 1.0, pack=[0]), Stay(1, 1, "n", "gpu1", 1.0)])
    s.save_batch(sid, [], [], {"algorithm": {"parts": StateParts({"t3": None, "t10": [9]}),
                                             "n": 2}, "elapsed_s": 2.0},
                 stays=[Stay(0, 1, "n", "gpu0", 1.0, end=2.0, outcome=StayOutcome.FINISHED)])
    closed = s.end_open_stays(sid)
    stays = s.load_stays(sid)
    assert all(x.end is not None and x.end >= x.start for x in stays)
    stays = [dataclasses.replace(x, end=-1.0) if x.outcome == StayOutcome.INTERRUPTED else x
             for x in stays]                     # ended when this store's study was written
    loaded = (s.get_study("a").controller_state, stays, s.load_trials(sid),
              s.load_results(sid), closed)
    s.delete_study("a")
    left = [s.connection.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
            for t in ("stays", "state_parts", "trials", "results")]
    return loaded, left


def test_a_store_of_rowid_tables_keeps_them_and_stores_and_loads_the_same(tmp_path):
    """A store made before (rowid stays and state parts) is not rebuilt when opened for
    writing, and what is written to it reads back as from a new store, row for row."""
    old = tmp_path / "old.db"
    _rowid_store(old)
    with Storage(old) as s:
        assert not any(_layouts(s).values())             # nothing rebuilt
        from_old = _write_a_study(s)
    with Storage(tmp_path / "new.db") as s:
        from_new = _write_a_study(s)
    assert from_old == from_new
    (state, stays, _, _, closed), left = from_new
    assert sorted(state["algorithm"]["parts"]) == sorted(
        [f"t{i}" for i in range(12) if i != 3])
    assert state["algorithm"]["parts"]["t10"] == [9] and closed == 1 and left == [0, 0, 0, 0]
    assert stays[1].outcome == StayOutcome.INTERRUPTED


def test_an_older_store_gains_the_new_tables_without_rowids(tmp_path):
    """A schema-3 store (no state parts) gets its ``state_parts`` table in the new layout and
    keeps its rowid ``stays``."""
    import sqlite3
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.executescript(sqlite_store._SCHEMA.replace(" WITHOUT ROWID", "").split(
            "CREATE TABLE IF NOT EXISTS state_parts")[0])
    with Storage(path) as s:
        layout = _layouts(s)
        assert layout["state_parts"] and not layout["stays"]
        assert _write_a_study(s)[1] == [0, 0, 0, 0]


def test_metrics_are_stored_as_the_text_of_json_dumps(store_path):
    metrics = [{"score": -0.0, "big": 1e300, "tiny": 5e-324, "n": 3, "flag": True},
               {"score": float("nan"), "inf": float("-inf"), "\u00e9": 0.1},
               {"score": 0.5, "odd": ValueError("x\u00e9"), "set": {2}}]
    with Storage(store_path) as s:
        sid = s.create_study("a", {}).study_id
        s.save_batch(sid, [bare(0)], [(0, step, m) for step, m in enumerate(metrics)])
        stored = [r[0] for r in s.connection.execute(
            "SELECT metrics FROM results ORDER BY step")]
        assert stored == [json.dumps(m, default=str) for m in metrics]
        last = TrialRecord(0, {"x": 0.5}, seed=1, last_step=1, metrics=metrics[1])
        s.save_batch(sid, [last], [(0, 1, metrics[1])])
        (text,) = s.connection.execute("SELECT metrics FROM trials").fetchone()
        assert text == json.dumps(metrics[1])


def _stored_state(s: Storage) -> str:
    return s.connection.execute("SELECT controller_state FROM studies").fetchone()[0]


def test_a_state_snapshot_is_encoded_once_and_stored_as_json_dumps_would(store_path, monkeypatch):
    encoded: list = []
    real = sqlite_store._json
    monkeypatch.setattr(sqlite_store, "_json", lambda v: (encoded.append(v), real(v))[1])
    one = StateSnapshot(rng={"state": 2**100, "inc": 3}, n=1.0)
    with Storage(store_path) as s:
        sid = s.create_study("a", {}).study_id
        for elapsed in (1.0, 2.5, -0.0):
            state = {"algorithm": one, "elapsed_s": elapsed, "time_sharing": {"a": [1]}}
            s.save_batch(sid, [bare(0)], [], state)
            assert _stored_state(s) == json.dumps(state)
        assert sum(v is one for v in encoded) == 1          # its text, once
        other = StateSnapshot(rng={"state": 2**100, "inc": 3}, n=1)   # equal, but other text
        s.save_batch(sid, [bare(0)], [], {"algorithm": other})
        assert _stored_state(s) == json.dumps({"algorithm": other}) == '{"algorithm": ' \
            '{"rng": {"state": 1267650600228229401496703205376, "inc": 3}, "n": 1}}'
        plain = {"elapsed_s": 1.0, "algorithm": {"next": 3}}
        s.save_batch(sid, [bare(0)], [], plain)
        assert _stored_state(s) == json.dumps(plain)
        assert s.get_study("a").controller_state == plain


def test_random_search_resumes_exactly_from_its_stored_snapshot(store_path):
    space = SearchSpace.from_dict({"x": {"type": "float", "low": 0.0, "high": 1.0}})
    objective = Objective("score", "max")
    algorithm = RandomSearch(space, objective, seed=3)
    with Storage(store_path) as s:
        sid = s.create_study("a", {}).study_id
        for trial_id in range(3):
            algorithm.suggest(trial_id)
            s.save_batch(sid, [bare(trial_id)], [], {"algorithm": algorithm.state_dict()})
        resumed = RandomSearch(space, objective, seed=3)
        resumed.load_state_dict(s.get_study("a").controller_state["algorithm"])
    assert [resumed.suggest(t).config for t in range(3, 6)] == \
        [algorithm.suggest(t).config for t in range(3, 6)]


def test_a_trials_file_path_is_its_folder_and_name(store_path):
    with Storage(store_path) as s:
        study = s.create_study("a", {})
        for trial_id in (0, 7, 123456):
            assert s.trial_file(study, trial_id, FILE) == str(s.trial_dir(study, trial_id) / FILE)


def test_random_search_hands_out_one_snapshot_until_it_draws():
    algorithm = RandomSearch(None, Objective("score", "max"), seed=1)   # type: ignore[arg-type]
    first = algorithm.state_dict()
    assert isinstance(first, StateSnapshot) and algorithm.state_dict() is first
    assert first == {"rng": np.random.default_rng(1).bit_generator.state}
    algorithm._rng.random()                       # a draw (suggest, or a subclass's own)
    second = algorithm.state_dict()
    assert second is not first and second != first
    assert first == {"rng": np.random.default_rng(1).bit_generator.state}   # never changed


def _mutated(rng: random.Random, r: TrialRecord, step: int) -> TrialRecord:
    """``r`` with some of its fields changed, as a running trial's record changes turn by turn
    (and now and then more: a checkpoint, an error, a new device, a state)."""
    changes: dict = {"last_step": step, "metrics": {"score": rng.random()}, "value": rng.random()}
    pool = {"state": rng.choice([TrialState.RUNNING, TrialState.PENDING, TrialState.PAUSED]),
            "attempts": rng.randint(1, 3), "retries": rng.randint(0, 2),
            "values": rng.choice([None, [0.5, 1.0]]), "error": rng.choice([None, "boom"]),
            "traceback": rng.choice([None, "tb"]), "checkpoint": rng.choice([None, f"c{step}"]),
            "checkpoint_step": rng.choice([None, step]), "device": rng.choice([None, "cpu/0"]),
            "info": rng.choice([{}, {"rung": step}]), "resources": rng.choice([1, 2]),
            "started_at": rng.choice([None, 1.0, 1]), "finished_at": rng.choice([None, 2.5]),
            "config": rng.choice([{"x": 0.5}, {"x": 0.25}]), "seed": rng.choice([1, 2])}
    for name in rng.sample(sorted(pool), rng.randint(0, 3)):
        changes[name] = pool[name]
    return dataclasses.replace(r, **changes)


def test_trials_written_turn_after_turn_read_back_as_last_written(store_path):
    rng = random.Random(4)
    with Storage(store_path) as s:
        sid = s.create_study("a", {}).study_id
        records = {t: bare(t) for t in range(5)}
        s.save_batch(sid, list(records.values()), [])
        for step in range(300):
            changed = rng.sample(sorted(records), rng.randint(1, 3))
            for t in changed:
                records[t] = _mutated(rng, records[t], step)
            s.save_batch(sid, [records[t] for t in changed], [])
            assert s.load_trials(sid) == [records[t] for t in sorted(records)]


def test_before_sqlite_3_24_rows_are_replaced_whole(monkeypatch):
    monkeypatch.setattr(sqlite_store.sqlite3, "sqlite_version_info", (3, 23, 1))
    assert sqlite_store._upsert("stays", ("trial_id", "end"), ("study_id", "trial_id")) == \
        "INSERT OR REPLACE INTO stays (study_id, trial_id, end) VALUES (?, ?, ?)"


# ---- a trial's info text is reused while its content is the same (issue 41) -------------------

def _stored_info(s: Storage) -> str:
    return s.connection.execute("SELECT info FROM trials").fetchone()[0]


def test_an_info_changed_in_place_is_stored_as_json_dumps_would(store_path):
    """Each change the text shows is written, however small: a nested dict changed in place,
    an int become an equal float or bool, -0.0 for 0.0, the same keys in another order."""
    t = TrialRecord(0, {"x": 0.5}, seed=1, info={"rung": 0, "began_at": {"1": 1.5}})
    changes = [lambda i: None,
               lambda i: i["began_at"].__setitem__("2", 2.25),      # nested, in place
               lambda i: i.__setitem__("rung", 1),
               lambda i: i.__setitem__("rung", 1.0),                # equal, other text
               lambda i: i.__setitem__("rung", True),
               lambda i: i.__setitem__("rung", 0.0),
               lambda i: i.__setitem__("rung", -0.0),
               lambda i: i.__setitem__("nan", float("nan")),
               lambda i: i.__setitem__("rung", i.pop("rung")),      # the same items, reordered
               lambda i: i.__setitem__("odd", "\u00e9\n"),
               lambda i: i.clear()]
    with Storage(store_path) as s:
        sid = s.create_study("a", {}).study_id
        for change in changes:
            change(t.info)
            s.save_batch(sid, [t], [])
            assert _stored_info(s) == (json.dumps(t.info) if t.info else "{}")
        t.info = {"rung": 2}
        t.resources, t.value, t.value_step, t.last_step = 2, 1.0, 1, 3    # keys the store adds
        s.save_batch(sid, [t], [])
        assert _stored_info(s) == json.dumps({"rung": 2, "_resources": 2, "_value_step": 1})
        assert s.load_trials(sid) == [t]


def test_an_unchanged_info_is_not_encoded_again(store_path, monkeypatch):
    encoded: list = []
    real = sqlite_store._json
    monkeypatch.setattr(sqlite_store, "_json", lambda v: (encoded.append(v), real(v))[1])
    t = TrialRecord(0, {"x": 0.5}, seed=1, info={"rung": 0, "began_at": {"1": 1.5}})
    with Storage(store_path) as s:
        sid = s.create_study("a", {}).study_id
        for step in range(1, 6):                     # reports: the info is the same
            t.last_step, t.metrics = step, {"score": step}
            s.save_batch(sid, [t], [(0, step, t.metrics)])
        assert sum(v is t.info for v in encoded) == 1
        t.info["began_at"]["2"] = 2.5
        s.save_batch(sid, [t], [])
        assert sum(v is t.info for v in encoded) == 2
        assert _stored_info(s) == json.dumps(t.info)


def test_an_info_that_is_not_json_fails_the_batch_as_before(store_path):
    with Storage(store_path) as s:
        sid = s.create_study("a", {}).study_id
        for bad in ({"f": lambda: 1}, {"s": {1, 2}}):        # no pickle; a pickle, no JSON
            with pytest.raises(TypeError, match="not JSON serializable"):
                s.save_batch(sid, [TrialRecord(0, {"x": 0.5}, seed=1, info=bad)], [])
        assert s.load_trials(sid) == []
