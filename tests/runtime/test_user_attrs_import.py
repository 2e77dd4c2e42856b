"""The attribute importer looks at a trial's file once per stop of the trial (the file changes
only while the trial runs): not once per event, and not again at ``close``."""
from __future__ import annotations

from hypersack.core.trial import ResultReported, TrialFinished, TrialRecord, TrialState
from hypersack.runtime.storage.sqlite import Storage
from hypersack.runtime.storage.user_attrs import (FILE, AttrsImporter, load_attrs,
                                                  read_trial_attrs, write_trial_attr)


def test_a_stopped_trials_file_is_imported_once_per_stop(tmp_path):
    with Storage(tmp_path / "s.db") as store:
        row = store.create_study("s", {})
        importer = AttrsImporter(store, row.study_id, lambda t: store.trial_dir(row, t))
        looked: list[int] = []
        real = importer._import
        importer._import = lambda t: (looked.append(t), real(t))   # type: ignore[method-assign]
        folder = store.trial_dir(row, 0)
        folder.mkdir(parents=True)
        write_trial_attr(folder, "arch", "a")
        trial = TrialRecord(0, {}, seed=0, state=TrialState.RUNNING, attempts=1)
        events = [ResultReported(0, 1, {"v": 1.0}), ResultReported(0, 2, {"v": 2.0})]
        importer.listen(events, {0: trial})
        assert looked == []                                   # running: its file may change
        trial.state = TrialState.PAUSED
        importer.listen([*events, TrialFinished(0)], {0: trial})
        importer.listen([ResultReported(0, 3, {"v": 3.0})], {0: trial})
        assert looked == [0] and load_attrs(store, row.study_id) == {0: {"arch": "a"}}
        trial.attempts, trial.state = 2, TrialState.COMPLETE   # resumed, then ended
        write_trial_attr(folder, "arch", "b")
        importer.listen([TrialFinished(0)], {0: trial})
        importer.close({0: trial})
        assert looked == [0, 0] and load_attrs(store, row.study_id) == {0: {"arch": "b"}}


def test_the_file_is_looked_for_at_the_given_path_and_read_from_the_trials_folder(tmp_path):
    with Storage(tmp_path / "s.db") as store:
        row = store.create_study("s", {})
        folders: list[int] = []

        def trial_dir(trial_id: int):
            folders.append(trial_id)
            return store.trial_dir(row, trial_id)

        importer = AttrsImporter(store, row.study_id, trial_dir,
                                 lambda t: store.trial_file(row, t, FILE))
        store.trial_dir(row, 1).mkdir(parents=True)
        write_trial_attr(store.trial_dir(row, 1), "arch", "b")
        trials = {t: TrialRecord(t, {}, seed=0, state=TrialState.COMPLETE, attempts=1)
                  for t in (0, 1)}
        importer.listen([TrialFinished(0), TrialFinished(1)], trials)
        assert folders == [1]                     # no folder built for a trial without a file
        assert load_attrs(store, row.study_id) == {1: {"arch": "b"}}


def _returns_within(call, seconds: float = 10.0):
    """``call()``'s value, from a thread that must end within ``seconds`` (a read that blocks
    on a FIFO would not: the test fails instead of hanging)."""
    import threading
    out: list = []
    thread = threading.Thread(target=lambda: out.append(call()), daemon=True)
    thread.start()
    thread.join(seconds)
    return thread.is_alive(), out


def test_a_fifo_or_link_planted_as_the_attribute_file_is_never_read(tmp_path):
    import os
    folder = tmp_path / "trial"
    folder.mkdir(mode=0o700)
    os.mkfifo(folder / FILE)
    try:
        blocked, out = _returns_within(lambda: read_trial_attrs(folder))
    finally:
        try:        # unblock a reader stuck in open() (the old code)
            os.close(os.open(folder / FILE, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
    assert not blocked and out == [{}]
    os.unlink(folder / FILE)
    outside = tmp_path / "outside.json"
    outside.write_text('{"stolen": 1}')
    (folder / FILE).symlink_to(outside)
    assert read_trial_attrs(folder) == {}


def test_set_attr_never_writes_through_a_planted_link(tmp_path):
    import os
    folder = tmp_path / "trial"
    folder.mkdir(mode=0o700)
    target = tmp_path / "target"
    target.write_text("keep me")
    (folder / f"user_attrs.tmp{os.getpid()}").symlink_to(target)
    (folder / FILE).symlink_to(target)
    write_trial_attr(folder, "arch", "a")
    assert target.read_text() == "keep me"
    assert not (folder / FILE).is_symlink() and read_trial_attrs(folder) == {"arch": "a"}
    assert sorted(p.name for p in folder.iterdir()) == [FILE, f"user_attrs.tmp{os.getpid()}"]
