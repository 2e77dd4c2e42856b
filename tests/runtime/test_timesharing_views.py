"""What people see of a time-shared study (each trial's state, running / waiting, and priority in
`hypersack status`, the live progress table and the summary line), and what a resume takes back."""
from __future__ import annotations

import io

from rich.console import Console

from hypersack import cli
from hypersack.core.allocator import Demand
from hypersack.core.controller import ControllerOptions
from hypersack.core.spec import StudySpec
from hypersack.core.trial import TrialFinished
from hypersack.placement import GPU, Cluster, Node
from hypersack.runtime.loop.run import build_controller
from hypersack.runtime.loop.progress import LiveProgress, shared_view, summary
from hypersack.runtime.storage.sqlite import Storage
from timesharing_helpers import Scripted, make, report


def _preempted_study():
    """One device; trial 0 ran a quantum (C = 0.5) and was preempted; trial 1 runs, 2 waits."""
    c = make(n=1, trials=3)
    c.launches(0.0)
    report(c, 0, 1, 5.0, 1.0)
    report(c, 0, 2, 4.0, 2.0)
    c.tick(10.0)
    c.handle(TrialFinished(0), 10.0)
    c.launches(10.0)
    return c


def test_shared_view_states_and_priorities():
    assert shared_view("pending", {"state": "waiting", "priority": None}) == ("waiting", "new")
    assert shared_view("running", {"state": "running", "priority": 0.01234}) == ("running", "0.0123")
    assert shared_view("complete", {"state": "running", "priority": 1.0}) == ("complete", "-")
    assert shared_view("pending", None) == ("pending", "-")


def test_summary_counts_waiting_trials():
    c = _preempted_study()
    assert "2 pending (2 waiting for their turn on a device)" in summary("s", c, 10.0)


def test_live_table_shows_running_and_waiting_trials_with_priorities():
    c = _preempted_study()
    console = Console(file=io.StringIO(), width=140, record=True)
    view = LiveProgress("s", lambda config: 4, console=console)
    view.update(c, 10.0)
    view.close()
    text = console.export_text()
    lines = {line.split()[0]: line.split() for line in text.splitlines() if line.strip()[:1].isdigit()}
    assert lines["0"][-2:] == ["waiting", "0.5"]
    assert lines["1"][-2:] == ["running", "new"]
    assert lines["2"][-2:] == ["waiting", "new"] and "n0/g0" in lines["2"]


def test_status_command_shows_state_and_priority(tmp_path, capsys):
    c = _preempted_study()
    path = tmp_path / "s.db"
    with Storage(path) as store:
        row = store.create_study("s", {"objective": {"metric": "loss", "mode": "min"}})
        store.save_batch(row.study_id, c.take_changes(), c.take_results(), c.state_dict(10.0))
    assert cli.main(["status", "s", "--storage", str(path)]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()[:1].isdigit()}
    head = next(line.split() for line in out.splitlines() if "priority" in line.split())
    col = head.index("priority")          # the table's columns: trial, state, ..., priority
    assert rows["0"][1] == "waiting" and rows["0"][col] == "0.5"
    assert rows["1"][1] == "running" and rows["1"][col] == "new"
    assert rows["2"][1] == "waiting"


def test_a_finished_trial_drops_its_time_sharing_view():
    c = _preempted_study()
    report(c, 1, 1, 1.0, 11.0)
    c.handle(TrialFinished(1), 12.0)
    assert "time_sharing" not in c.trials[1].info


def test_a_resumed_study_takes_its_time_sharing_state_back_from_the_store(tmp_path):
    c = _preempted_study()
    spec = StudySpec.from_dict({"name": "s", "space": {"x": [1]}, "budget": {"trials": 3},
                                "objective": {"metric": "loss", "mode": "min"},
                                "time_sharing": {"policy": "hermes", "quantum_s": 10}})
    with Storage(tmp_path / "s.db") as store:
        row = store.create_study("s", spec.to_dict())
        store.save_batch(row.study_id, c.take_changes(), c.take_results(), c.state_dict(10.0))
        options = ControllerOptions(inventory=Cluster([Node("n0", 8, [GPU("g0", "A100", 16.0)])]),
                                    demand=Demand().job, time_sharing=spec.time_sharing)
        again = build_controller(spec, Scripted(), store.get_study("s"), store, 0.0,
                                 resume=True, options=options)
    assert again.shared.state_dict() == c.shared.state_dict()
    assert again.trials[1].info["time_sharing"]["state"] == "waiting"    # ran when the driver died
    assert [t.trial_id for t in again.launches(0.0)] == [1]   # new trials first, bind order
    assert again.trials[0].info["time_sharing"]["priority"] == 0.5
    assert again.trials[0].info["time_sharing"]["state"] == "waiting"
    assert again.trials[2].info["time_sharing"]["state"] == "waiting"
