"""A trial's first start, running time over all attempts and waiting time; the best complete
trial beside the best (issue 27: a promoted trial showed 0.0 s, the best was a pruned trial)."""
from __future__ import annotations

import pytest

from hypersack.core.stays import Stay, StayOutcome, trial_times
from hypersack.core.trial import TrialRecord, TrialState
from hypersack.runtime.storage import queries
from hypersack.runtime.storage.sqlite import Storage

T0 = 1_700_000_000.0


def test_times_sum_attempts_and_count_the_gaps_as_waiting():
    stays = [Stay(0, 1, "n0", "g0", T0, end=T0 + 10, outcome=StayOutcome.PAUSED),
             Stay(0, 2, "n0", "g0", T0 + 30, end=T0 + 35, outcome=StayOutcome.FINISHED),
             Stay(0, 2, "n1", "g1", T0 + 30, rank=1, end=T0 + 35,
                  outcome=StayOutcome.FINISHED),                     # a second rank counts once
             Stay(1, 1, "n0", "g1", T0 + 5)]                          # still running
    times = trial_times(stays, {0: T0 + 35, 1: None}, now=T0 + 50)
    assert times[0].first_start == T0
    assert times[0].running_s == pytest.approx(15.0) and times[0].waiting_s == pytest.approx(20.0)
    assert times[1].running_s == pytest.approx(45.0) and times[1].waiting_s == 0.0
    assert 2 not in times


def test_a_workers_start_up_is_its_own_time_not_the_trials_running_time():
    """Attempt 1 began 8 s after its launch (a new worker importing), attempt 2 at once."""
    stays = [Stay(0, 1, "n0", "g0", T0, end=T0 + 10, outcome=StayOutcome.PAUSED),
             Stay(0, 2, "n0", "g0", T0 + 30, end=T0 + 35, outcome=StayOutcome.FINISHED)]
    record = TrialRecord(0, {}, 0, attempts=2, info={"began_at": {"1": T0 + 8, "2": T0 + 30}})
    from hypersack.core.stays import began_times
    assert began_times([record]) == {(0, 1): T0 + 8, (0, 2): T0 + 30}
    times = trial_times(stays, {0: T0 + 35}, now=T0 + 50, began=began_times([record]))
    assert times[0].running_s == pytest.approx(7.0) and times[0].startup_s == pytest.approx(8.0)
    assert times[0].waiting_s == pytest.approx(20.0)


def test_the_controller_notes_when_the_worker_began_each_attempt():
    from hypersack.core.algorithms import make_algorithm
    from hypersack.core.controller import Budget, Controller
    from hypersack.core.objective import Objective
    from hypersack.core.space import SearchSpace
    from hypersack.core.trial import TrialStarted
    from controller_helpers import on_slots
    space, objective = SearchSpace({"x": {"type": "float", "low": 0.0, "high": 1.0}}), Objective("y", "min")
    c = Controller(make_algorithm({"type": "random"}, space, objective, 0), objective,
                   Budget(trials=1), options=on_slots(1))
    (launch,) = c.launches(now=100.0)
    c.handle(TrialStarted(launch.trial_id, "gpu0"), now=108.5)
    assert c.trials[launch.trial_id].info["began_at"] == {"1": 108.5}


def store_with_a_promoted_and_a_pruned_trial(path):
    import hypersack
    spec = hypersack.Study(name="mf", objective=("loss", "min"), n_trials=2, storage=path,
                           space={"x": {"type": "float", "low": 0.0, "high": 1.0}}).spec.to_dict()
    with Storage(path) as store:
        row = store.create_study("mf", spec)
        promoted = TrialRecord(0, {"x": 0.1}, 0, state=TrialState.COMPLETE, attempts=2,
                               last_step=9, metrics={"loss": 0.4}, value=0.4,
                               started_at=T0 + 30, finished_at=T0 + 35)
        pruned = TrialRecord(1, {"x": 0.9}, 1, state=TrialState.PRUNED, attempts=1, last_step=1,
                             metrics={"loss": 0.2}, value=0.2, started_at=T0, finished_at=T0 + 3)
        stays = [Stay(0, 1, "n0", "g0", T0, end=T0 + 10, outcome=StayOutcome.PAUSED),
                 Stay(0, 2, "n0", "g0", T0 + 30, end=T0 + 35, outcome=StayOutcome.FINISHED),
                 Stay(1, 1, "n0", "g1", T0, end=T0 + 3, outcome=StayOutcome.PRUNED)]
        store.save_batch(row.study_id, [promoted, pruned], [], stays=stays)
        store.set_status(row.study_id, "complete")
    return path


@pytest.fixture
def mf_store(tmp_path):
    return store_with_a_promoted_and_a_pruned_trial(tmp_path / "mf.db")


def test_status_gives_each_trials_running_and_waiting_time_and_the_best_complete(mf_store):
    with Storage(mf_store, readonly=True) as store:
        info = queries.status(store, "mf")
    promoted = info["trials"][0]
    assert promoted["first_started_at"] == T0 and promoted["started_at"] == T0 + 30
    assert promoted["running_s"] == pytest.approx(15.0)
    assert promoted["waiting_s"] == pytest.approx(20.0)
    assert info["best"]["trial_id"] == 1 and info["best"]["state"] == "pruned"
    assert info["best_complete"]["trial_id"] == 0 and info["best_complete"]["step"] == 9


def test_the_dataframe_and_the_report_table_show_the_times_over_all_attempts(mf_store):
    import hypersack
    from hypersack.report.data import from_storage, payload
    frame = hypersack.Study.load("mf", mf_store).trials_dataframe()
    row = frame.iloc[0]
    assert row["duration"].total_seconds() == pytest.approx(35.0)      # first start to end
    assert row["running"].total_seconds() == pytest.approx(15.0)
    assert row["waiting"].total_seconds() == pytest.approx(20.0)
    with Storage(mf_store, readonly=True) as store:
        p = payload(from_storage(store, "mf"))
    assert p["table"]["start"][0] == 0.0 and p["table"]["running"][0] == 15.0
    assert p["table"]["waiting"][0] == 20.0
    assert p["summary"]["best"]["trial_id"] == 1
    assert p["summary"]["best_complete"]["trial_id"] == 0


def test_best_complete_trial_in_python_and_on_the_command_line(mf_store, capsys):
    import hypersack
    from hypersack import cli
    study = hypersack.Study.load("mf", mf_store)
    assert study.best_trial()["trial_id"] == 1
    assert study.best_complete_trial()["trial_id"] == 0
    assert cli.main(["best", "mf", "--storage", str(mf_store), "--complete", "--json"]) == 0
    assert '"trial_id": 0' in capsys.readouterr().out
    assert cli.main(["status", "mf", "--storage", str(mf_store)]) == 0
    out = capsys.readouterr().out
    assert "Best trial of 'mf': trial 1 at step 1 (pruned)" in out
    assert "Best complete trial of 'mf': trial 0 at step 9" in out
