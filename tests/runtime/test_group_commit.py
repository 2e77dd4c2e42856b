"""Group commit: one transaction per loop turn (reports gathered in a bounded window while
enough trials may still report, ``core.group_commit``), the store's durability levels, and the
job history's writes joining the turn's commit."""
from __future__ import annotations

import pytest

from hypersack.core.algorithms import make_algorithm
from hypersack.core.controller import Budget, Controller
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace
from hypersack.core.trial import Launch, ResultReported, TrialFinished, TrialRecord, TrialStarted
from hypersack.errors import ConfigError
from hypersack.runtime.loop.run import run_loop
from hypersack.runtime.devices.profiler import Profile
from hypersack.runtime.devices.job_history import ProfileKey, ProfileStore
from hypersack.runtime.storage.sqlite import Storage

from controller_helpers import on_slots, slots


def _record(trial_id: int) -> TrialRecord:
    return TrialRecord(trial_id, {"x": trial_id}, seed=trial_id)


def _profile() -> Profile:
    return Profile(time_per_iter_s=0.5, peak_memory_gb=1.0, gpu_util_percent=40.0,
                   data_time_fraction=0.1, iters_measured=3, device_arch="cpu")


# ---- the store -------------------------------------------------------------------------------

def test_batches_inside_one_transaction_make_one_commit(tmp_path):
    with Storage(tmp_path / "s.db") as store:
        sid = store.create_study("s", {}).study_id
        before = store.commits
        with store.transaction():
            store.save_batch(sid, [_record(0)], [(0, 1, {"v": 1.0})])
            store.save_batch(sid, [_record(1)], [(1, 1, {"v": 2.0})], {"elapsed_s": 1.0})
        assert store.commits == before + 1
        store.save_batch(sid, [_record(2)], [])
        assert store.commits == before + 2
        assert [t.trial_id for t in store.load_trials(sid)] == [0, 1, 2]
        assert len(store.load_results(sid)) == 2


def test_an_error_inside_the_transaction_writes_nothing_of_it(tmp_path):
    with Storage(tmp_path / "s.db") as store:
        sid = store.create_study("s", {}).study_id
        with pytest.raises(RuntimeError):
            with store.transaction():
                store.save_batch(sid, [_record(0)], [(0, 1, {"v": 1.0})])
                with store.transaction():            # nested: joins the outer one
                    store.save_batch(sid, [_record(1)], [])
                raise RuntimeError("boom")
        assert store.load_trials(sid) == [] and store.load_results(sid) == []
        store.save_batch(sid, [_record(3)], [])       # the store is usable afterwards
        assert [t.trial_id for t in store.load_trials(sid)] == [3]


@pytest.mark.parametrize("durability, level", [("power", 2), ("process", 1)])
def test_durability_sets_the_synchronous_level_of_a_wal_store(tmp_path, durability, level):
    with Storage(tmp_path / "s.db", durability=durability) as store:
        assert store.connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store.connection.execute("PRAGMA synchronous").fetchone()[0] == level
        store.set_durability("power")
        assert store.connection.execute("PRAGMA synchronous").fetchone()[0] == 2


@pytest.mark.parametrize("bad", ["fast", "", None, 1, "POWER"])
def test_a_bad_durability_names_the_field_and_value(tmp_path, bad):
    with pytest.raises(ConfigError) as err:
        Storage(tmp_path / "s.db", durability=bad)
    assert err.value.field == "durability" and err.value.value == bad
    assert not (tmp_path / "s.db").exists()


def test_the_study_api_and_yaml_take_durability(tmp_path):
    import hypersack
    from hypersack.config import load_study_file
    study = hypersack.Study(space={"x": 1.0}, objective=("loss", "min"), n_trials=1,
                            durability="process", storage=tmp_path / "s.db")
    assert study.spec.durability == "process" and study.spec.to_dict()["durability"] == "process"
    assert hypersack.Study(space={"x": 1.0}, objective=("loss", "min"), n_trials=1).spec.durability == "power"
    with pytest.raises(ConfigError, match="durability.*'fsync'"):
        hypersack.Study(space={"x": 1.0}, objective=("loss", "min"), n_trials=1, durability="fsync")
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nspace: {x: 1.0}\nobjective: {metric: loss, mode: min}\n"
                    "budget: {trials: 1}\ndurability: sometimes\n")
    with pytest.raises(ConfigError) as err:
        load_study_file(path)
    assert err.value.field == "durability" and err.value.value == "sometimes"
    assert err.value.location == f"{path}:5"


def test_a_profile_written_in_the_transaction_commits_or_rolls_back_with_it(tmp_path):
    key = ProfileKey("sig", 32, "cpu")
    with Storage(tmp_path / "s.db") as store:
        sid = store.create_study("s", {}).study_id
        history = ProfileStore(store)
        with pytest.raises(RuntimeError):
            with store.transaction():
                history.put(key, _profile())
                assert history.get(key) is not None        # seen inside, before the commit
                raise RuntimeError("boom")
        assert history.get(key) is None
        before = store.commits
        with store.transaction():
            history.put(key, _profile())
            store.save_batch(sid, [_record(0)], [(0, 1, {"v": 1.0})])
        assert store.commits == before + 1
        history.close()                                     # the store's connection stays open
        assert ProfileStore(tmp_path / "s.db").get(key) is not None
        assert store.load_results(sid)


# ---- the loop: one commit per turn, with a gather window --------------------------------------

class _Trickle:
    """Three trials; each poll hands out at most one event (the trials start, then report step 1
    one after the other, then finish). At each ack, records whether every report handed out so
    far is already stored (read back from the file by a second connection)."""

    def __init__(self, path):
        self.path = path
        self.launched: list[int] = []
        self.queue: list = []
        self.polls = 0
        self.reported: list[int] = []
        self.finished: set[int] = set()
        self.durable_at_ack: list[bool] = []

    def start(self): pass
    def inventory(self): return slots(3)
    def shutdown(self, kill=False): pass

    def submit(self, command):
        if isinstance(command, Launch):
            self.launched.append(command.trial_id)
            self.queue.append(TrialStarted(command.trial_id, "cpu"))

    def poll(self, timeout):
        self.polls += 1
        if self.queue:
            return [self.queue.pop(0)]
        for trial in self.launched:
            if trial not in self.reported:
                self.reported.append(trial)
                return [ResultReported(trial, 1, {"loss": 0.1 * trial})]
        return []

    def acknowledge(self, trial_ids, free_below):
        with Storage(self.path, readonly=True) as reader:
            stored = {r["trial_id"] for r in reader.load_results(1)}
        self.durable_at_ack.append(set(self.reported) <= stored)
        for trial in self.reported:
            if trial not in self.finished:
                self.finished.add(trial)
                self.queue.append(TrialFinished(trial))


def _loop(tmp_path, window, siblings=None):
    space = SearchSpace({"x": {"type": "float", "low": 0.0, "high": 1.0}})
    objective = Objective("loss", "min")
    controller = Controller(make_algorithm({"type": "random"}, space, objective, 0),
                                     objective, Budget(trials=3), options=on_slots(3))
    path = tmp_path / f"w{window}-{siblings}.db"
    store = Storage(path)
    row = store.create_study("s", {})
    executor = _Trickle(path)
    saved: list[int] = []
    original = store.save_batch

    def save_batch(study_id, trials, results, state=None, **kwargs):
        results = list(results)
        saved.append(len(results))
        original(study_id, trials, results, state, **kwargs)
    store.save_batch = save_batch       # type: ignore[method-assign]
    run_loop(controller, executor, store, row, group_window_s=window,
             **({} if siblings is None else {"group_siblings": siblings}))
    stored = len(store.load_results(row.study_id))
    store.close()
    return saved, stored, executor


def test_reports_arriving_within_the_window_share_one_transaction(tmp_path):
    # siblings 1: the turn waits while any running trial may still report
    saved, stored, executor = _loop(tmp_path, window=30.0, siblings=1)
    assert stored == 3
    assert max(saved) == 3              # the three reports, gathered from three polls, one batch


def test_the_turn_stops_waiting_once_fewer_than_siblings_trials_may_still_report(tmp_path):
    # 3 trials, siblings 2: after two reports only one trial may still report: commit at once
    saved, stored, _ = _loop(tmp_path, window=30.0, siblings=2)
    assert stored == 3
    assert [n for n in saved if n] == [2, 1]     # results per commit


def test_with_the_default_siblings_three_trials_never_wait(tmp_path):
    # GROUP_SIBLINGS (5) > 3 running trials: each poll is its own turn, as without a window
    saved, stored, _ = _loop(tmp_path, window=30.0)
    assert stored == 3 and max(saved) == 1


def test_without_a_window_each_poll_is_its_own_turn(tmp_path):
    saved, stored, _ = _loop(tmp_path, window=0.0)
    assert stored == 3 and max(saved) == 1


@pytest.mark.parametrize("window, siblings", [(0.0, None), (30.0, 1), (30.0, 2), (30.0, None)])
def test_acks_go_out_only_after_the_turns_commit(tmp_path, window, siblings):
    _, _, executor = _loop(tmp_path, window=window, siblings=siblings)
    assert executor.durable_at_ack and all(executor.durable_at_ack)


# ---- WAL checkpoints beside the loop, not inside its commits -----------------------------------

@pytest.mark.parametrize("durability", ["power", "process"])
def test_inside_background_wal_checkpoints_no_commit_checkpoints_and_a_thread_does(tmp_path, durability,
                                                                              monkeypatch):
    import time
    from hypersack.runtime.storage import wal as storage_module   # where the checkpointer reads them
    monkeypatch.setattr(storage_module, "CHECKPOINT_PAGES", 10)     # 20 commits cross it
    monkeypatch.setattr(storage_module, "CHECKPOINT_EVERY_S", 0.0)
    with Storage(tmp_path / "s.db", durability=durability) as store:
        sid = store.create_study("s", {}).study_id
        db = store.connection
        assert db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000
        with store.background_wal_checkpoints():
            assert db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
            for i in range(20):
                with store.transaction():
                    store.save_batch(sid, [_record(i)], [(i, 1, {"v": float(i)})])
            deadline = time.monotonic() + 30
            while store.wal_checkpoint_count == 0:
                assert time.monotonic() < deadline
                time.sleep(0.01)
        assert db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000
        assert store.wal_checkpoint_count == 0
        assert len(store.load_results(sid)) == 20
    with Storage(tmp_path / "s.db", readonly=True) as reader:
        assert len(reader.load_results(sid)) == 20


def test_the_loop_runs_inside_background_wal_checkpoints(tmp_path):
    seen: list[int] = []
    space = SearchSpace({"x": {"type": "float", "low": 0.0, "high": 1.0}})
    objective = Objective("loss", "min")
    controller = Controller(make_algorithm({"type": "random"}, space, objective, 0),
                                     objective, Budget(trials=3), options=on_slots(3))
    path = tmp_path / "l.db"
    store = Storage(path)
    row = store.create_study("s", {})
    executor = _Trickle(path)
    original = executor.acknowledge

    def acknowledge(trial_ids, free_below):
        seen.append(store.connection.execute("PRAGMA wal_autocheckpoint").fetchone()[0])
        original(trial_ids, free_below)
    executor.acknowledge = acknowledge
    run_loop(controller, executor, store, row, group_window_s=0.0)
    assert seen and set(seen) == {0}
    assert store.connection.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000
    store.close()


def test_a_bad_group_rule_is_refused_before_any_worker_starts(tmp_path):
    started: list[bool] = []

    class _Executor:
        def start(self): started.append(True)

    with pytest.raises(ConfigError) as err:
        run_loop(None, _Executor(), None, None, group_window_s=0.002,   # type: ignore[arg-type]
                 group_siblings=0)
    assert err.value.field == "group_siblings" and not started


# ---- which events settle a trial for the turn ---------------------------------------------------

class _Script:
    """Hands out one scripted batch of events per poll; records the timeouts it was given."""

    def __init__(self, batches):
        self.batches = list(batches)
        self.timeouts: list[float] = []

    def poll(self, timeout):
        self.timeouts.append(timeout)
        return self.batches.pop(0) if self.batches else []


class _Running:
    def __init__(self, n): self.n = n
    def running(self): return self.n


def _gathered(first, batches, running, siblings):
    from hypersack.core.group_commit import GroupCommit
    from hypersack.runtime.loop.run import _gather
    script = _Script(batches)
    events = _gather(script, list(first), _Running(running), GroupCommit(30.0, siblings))
    return events, script


def test_a_trial_that_ended_in_the_turn_cannot_report_in_it():
    from hypersack.core.trial import FailureCause, TrialFailed
    # 4 running, siblings 2: a finish, a failure and a report settle 3 trials: 1 may still report
    events, script = _gathered([TrialFinished(0)], [[TrialFailed(1, "x", cause=FailureCause.ERROR)],
                                                    [ResultReported(2, 1, {"loss": 0.1})],
                                                    [ResultReported(3, 1, {"loss": 0.1})]],
                               running=4, siblings=2)
    assert [type(e).__name__ for e in events] == ["TrialFinished", "TrialFailed", "ResultReported"]
    assert len(script.timeouts) == 2 and all(0 < t <= 30.0 for t in script.timeouts)


def test_a_started_or_profiled_trial_may_still_report_and_a_trial_counts_once():
    from hypersack.core.trial import TrialProfiled
    # 3 running, siblings 2: trial 0 starts (not settled), reports, is profiled (settled once)
    events, _ = _gathered([TrialStarted(0, "cpu")], [[ResultReported(0, 1, {"loss": 0.1})],
                                                      [TrialProfiled(0, {}), TrialFinished(0)],
                                                      [ResultReported(1, 1, {"loss": 0.1})],
                                                      [ResultReported(2, 1, {"loss": 0.1})]],
                          running=3, siblings=2)
    assert [getattr(e, "trial_id") for e in events] == [0, 0, 0, 0, 1]


@pytest.mark.parametrize("durability", ["power", "process"])
def test_background_wal_checkpoints_let_the_wal_restart_instead_of_growing(tmp_path, monkeypatch,
                                                                       durability):
    """Every commit starts a checkpoint (the WAL holds at least one page) and the next
    transaction waits for it: the WAL is copied whole and restarts, so 300 commits of a 2 KB
    row each leave a WAL of a few pages (without the wait, commits land during each
    checkpoint, it never copies the whole WAL, and the WAL grows by every commit: over 1 MB
    here)."""
    import os
    from hypersack.runtime.storage import wal as storage_module   # where the checkpointer reads them
    monkeypatch.setattr(storage_module, "CHECKPOINT_PAGES", 1)
    monkeypatch.setattr(storage_module, "PROCESS_HOLD_PAGES", 1)
    monkeypatch.setattr(storage_module, "CHECKPOINT_EVERY_S", 0.0)
    with Storage(tmp_path / "s.db", durability=durability) as store:
        sid = store.create_study("s", {}).study_id
        with store.background_wal_checkpoints():
            for i in range(300):
                with store.transaction():
                    store.save_batch(sid, [], [(0, i, {"pad": "x" * 2000})])
            assert store.wal_checkpoint_count >= 250
            wal = os.path.getsize(str(tmp_path / "s.db") + "-wal")
        assert wal < 200_000, wal
        assert len(store.load_results(sid)) == 300


class _FakeFrames:
    """A WAL frame count the test sets (``storage._WalFrames``'s interface)."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __call__(self) -> int:
        return self.count

    def close(self) -> None:
        pass


def _probe_checkpointer(on_checkpoint, **options):
    """A ``_WalCheckpointer`` whose thread calls ``on_checkpoint()`` for each checkpoint it starts
    (instead of running one), then reports itself idle."""
    from hypersack.runtime.storage.sqlite import _WalCheckpointer

    class _Probe(_WalCheckpointer):
        def _run(self):
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stopping.is_set():
                    return
                on_checkpoint()
                self._idle.set()

    return _Probe(None, "NORMAL", **options)  # type: ignore[arg-type]


def test_without_the_wal_size_a_checkpoint_starts_at_most_once_per_interval_and_the_next_transaction_waits():
    import threading
    from hypersack.runtime.storage.sqlite import CHECKPOINT_EVERY_S
    now = [100.0]
    ran: list[bool] = []
    release = threading.Event()

    def checkpoint():               # one "checkpoint" per wake-up, held by release
        release.wait(30)
        ran.append(True)

    probe = _probe_checkpointer(checkpoint, clock=lambda: now[0])
    try:
        probe.poke()                            # due: starts one
        probe.poke()                            # one is running: no second
        now[0] += CHECKPOINT_EVERY_S / 2
        waiter = threading.Thread(target=probe.wait_idle)
        waiter.start()
        waiter.join(0.05)
        assert waiter.is_alive()                # the next transaction waits for it
        release.set()
        waiter.join(30)
        assert not waiter.is_alive() and ran == [True]
        probe.poke()                            # within the interval: none
        now[0] += CHECKPOINT_EVERY_S
        probe.poke()                            # due again
        probe.wait_idle()
        assert ran == [True, True]
    finally:
        release.set()
        probe.stop()


def _restarting_checkpoint(frames):
    """A checkpoint that records the WAL's frame count when it starts, then restarts the WAL."""
    started: list[int] = []

    def checkpoint():
        started.append(frames.count)
        frames.count = 0                        # the WAL restarts
    return started, checkpoint


def test_a_checkpoint_starts_once_the_wal_holds_checkpoint_pages_frames_at_most_once_per_interval():
    from hypersack.runtime.storage.sqlite import CHECKPOINT_EVERY_S, CHECKPOINT_PAGES
    frames = _FakeFrames(CHECKPOINT_PAGES - 1)
    started, checkpoint = _restarting_checkpoint(frames)
    now = [50.0]

    probe = _probe_checkpointer(checkpoint, clock=lambda: now[0], frames=frames)
    try:
        probe.poke()
        probe.wait_idle()
        assert started == []                    # one frame short: not yet
        frames.count = CHECKPOINT_PAGES
        probe.poke()
        probe.wait_idle()
        assert started == [CHECKPOINT_PAGES]
        probe.poke()                            # the same instant: the WAL is small again
        probe.wait_idle()
        assert started == [CHECKPOINT_PAGES]
        frames.count = CHECKPOINT_PAGES            # full again (a reader kept it from restarting)
        now[0] += CHECKPOINT_EVERY_S / 2
        probe.poke()                            # not within the interval
        probe.wait_idle()
        assert started == [CHECKPOINT_PAGES]
        now[0] += CHECKPOINT_EVERY_S
        probe.poke()
        probe.wait_idle()
        assert started == [CHECKPOINT_PAGES, CHECKPOINT_PAGES]
    finally:
        probe.stop()


def test_the_wal_frame_count_is_read_from_the_wal_index_through_sqlites_own_descriptor(tmp_path):
    import os
    from hypersack.runtime.storage.sqlite import _WalFrames
    with Storage(tmp_path / "s.db") as store:
        sid = store.create_study("s", {}).study_id
        store.connection.execute("PRAGMA wal_autocheckpoint=0")
        shm = os.stat(f"{store.path}-shm")
        opened = set(os.listdir("/dev/fd"))
        frames = _WalFrames.find(store.path)
        assert frames is not None
        fd = frames._fd
        assert set(os.listdir("/dev/fd")) == opened          # it opened no descriptor
        before = frames()
        store.save_batch(sid, [], [(0, 1, {"pad": "x" * 9000})])
        after = frames()
        assert before is not None and after is not None and after >= before + 3
        assert store.connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1] == after
        frames.close()
        assert frames() is None
        st = os.fstat(fd)                                   # SQLite's descriptor: still open
        assert (st.st_dev, st.st_ino) == (shm.st_dev, shm.st_ino)
    assert _WalFrames.find(tmp_path / "missing.db") is None


def test_a_checkpoint_below_hold_above_runs_beside_the_writer_and_one_above_holds_it():
    import threading
    from hypersack.runtime.storage.sqlite import CHECKPOINT_PAGES
    frames = _FakeFrames(CHECKPOINT_PAGES)
    now = [10.0]
    release = threading.Event()
    probe = _probe_checkpointer(lambda: release.wait(30), clock=lambda: now[0], frames=frames,
                                hold_above=2 * CHECKPOINT_PAGES)
    try:
        probe.poke()                            # due, below hold_above: runs beside the writer
        waiter = threading.Thread(target=probe.wait_idle)
        waiter.start()
        waiter.join(30)
        assert not waiter.is_alive()            # the writer did not wait, the checkpoint runs on
        release.set()
        probe._idle.wait(30)
        release.clear()
        frames.count = 2 * CHECKPOINT_PAGES        # the WAL grew beside it
        now[0] += 1.0
        probe.poke()
        held = threading.Thread(target=probe.wait_idle)
        held.start()
        held.join(0.05)
        assert held.is_alive()                  # this one holds the writer until it is done
        release.set()
        held.join(30)
        assert not held.is_alive()
    finally:
        release.set()
        probe.stop()


def test_the_wal_size_is_read_less_often_far_from_checkpoint_pages_and_the_checkpoint_starts_on_time():
    from hypersack.runtime.storage.sqlite import CHECKPOINT_PAGES

    class Counted(_FakeFrames):
        reads = 0

        def __call__(self) -> int:
            self.reads += 1
            return self.count

    frames = Counted(0)
    started, checkpoint = _restarting_checkpoint(frames)
    now = [10.0]

    probe = _probe_checkpointer(checkpoint, clock=lambda: now[0], frames=frames)
    try:
        commits = 0
        while not started:
            frames.count += 6                   # each commit adds 6 frames
            commits += 1
            probe.poke()
            probe.wait_idle()
        assert CHECKPOINT_PAGES <= started[0] <= CHECKPOINT_PAGES + 6   # at most one commit late
        assert frames.reads < commits / 4       # most commits read nothing
        reads, frames.reads = frames.reads, 0
        now[0] += 1.0                           # after the interval, the same pace: again
        for _ in range(commits):
            frames.count += 6
            probe.poke()
            probe.wait_idle()
        assert len(started) == 2 and CHECKPOINT_PAGES <= started[1] <= CHECKPOINT_PAGES + 6
        assert frames.reads <= reads + 1
    finally:
        probe.stop()
