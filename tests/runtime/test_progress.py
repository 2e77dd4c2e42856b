"""Progress lines: totals against the budget, starting workers, best with its step, elapsed and
ETA; in lines mode pauses and prunes are printed, and a heartbeat while trials run."""
from __future__ import annotations

import io

import pytest

from hypersack.core.algorithms import Algorithm, Decision, Suggestion
from hypersack.core.controller import Budget, Controller
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace
from hypersack.core.trial import ResultReported, TrialFinished, TrialStarted
from hypersack.runtime.loop.progress import LineProgress, eta_s, summary

from controller_helpers import on_slots

SPACE = SearchSpace({"x": [1]})
OBJ = Objective("acc", "max")


class Decides(Algorithm):
    def __init__(self, decisions):
        super().__init__(SPACE, OBJ)
        self.decisions = decisions

    def suggest(self, trial_id):
        return Suggestion({"x": trial_id, "epochs": 4})

    def on_result(self, trial_id, step, metrics):
        return self.decisions.get((trial_id, step), Decision.CONTINUE)


def controller(decisions=None, trials=4, time_s=None):
    """A controller with two devices."""
    return Controller(Decides(decisions or {}), OBJ, Budget(trials, time_s), now=0.0, options=on_slots(2))


def steps(config):
    return config["epochs"]


def test_summary_counts_against_the_budget_and_says_when_workers_start():
    c = controller()
    c.launches(0.0)
    line = summary("s", c, 15.0, steps)
    assert line.startswith("s: 0 of 4 finished, 2 running (2 starting: worker start-up and imports)")
    assert "no result yet" in line and "elapsed 15s" in line and "ETA" not in line
    c.handle(TrialStarted(0, "cpu0"), 16.0)
    c.handle(ResultReported(0, 2, {"acc": 0.5}), 20.0)
    c.handle(ResultReported(0, 4, {"acc": 0.75}), 30.0)
    c.handle(TrialFinished(0), 30.0)
    line = summary("s", c, 90.0, steps)
    assert "1 of 4 finished, 1 running (1 before their first report)" in line
    assert "best acc 0.75 (trial 0, step 4)" in line and "elapsed 1m30s" in line
    assert "ETA ~4m30s" in line                # 1 of 4 done in 90 s: 270 s left


def test_eta_counts_partial_trials_and_is_capped_by_the_time_budget():
    c = controller(trials=2, time_s=100.0)
    c.launches(0.0)
    c.handle(ResultReported(0, 2, {"acc": 0.1}), 10.0)        # half of trial 0: 1/4 of the study
    assert eta_s(c, 10.0, steps) == pytest.approx(30.0)
    assert eta_s(c, 10.0) == pytest.approx(90.0)              # steps unknown: the time left
    assert eta_s(c, 90.0, steps) == pytest.approx(10.0)       # the time budget ends sooner


def test_lines_print_pauses_and_prunes_and_a_heartbeat():
    c = controller({(0, 1): Decision.PAUSE, (1, 1): Decision.STOP}, trials=3)
    wall = [0.0]
    out = io.StringIO()
    progress = LineProgress("s", out, steps_for=steps, heartbeat_s=30.0, clock=lambda: wall[0])
    c.launches(0.0)
    progress.update(c, 0.0)
    assert "starting workers" in out.getvalue() and "0 of 3 finished" in out.getvalue()
    for t in (0, 1):
        c.handle(ResultReported(t, 1, {"acc": 0.2 + t}), 1.0)
        c.handle(TrialFinished(t), 1.0)
    c.launches(1.0)
    wall[0] = 1.0
    progress.update(c, 1.0)
    text = out.getvalue()
    assert "trial 0 paused at step 1: acc=0.2" in text and "trial 1 pruned at step 1: acc=1.2" in text
    before = out.getvalue()
    wall[0] = 20.0
    progress.update(c, 20.0)
    assert out.getvalue() == before                           # nothing new, heartbeat not due
    wall[0] = 31.5
    progress.update(c, 31.5)
    assert out.getvalue().count("\n") == before.count("\n") + 1
    assert "elapsed 32s" in out.getvalue().splitlines()[-1]


def test_lines_close_prints_what_the_end_of_the_study_changed():
    c = controller({(0, 1): Decision.PAUSE}, trials=2)
    out = io.StringIO()
    progress = LineProgress("s", out, steps_for=steps)
    c.launches(0.0)
    c.handle(ResultReported(0, 1, {"acc": 0.5}), 1.0)
    c.handle(TrialFinished(0), 1.0)
    c.handle(ResultReported(1, 4, {"acc": 0.25}), 1.0)
    c.handle(TrialFinished(1), 1.0)
    progress.update(c, 1.0)
    assert "trial 0 paused at step 1" in out.getvalue()
    c.finalize(1.0)                                 # a completed trial: no end-game, 0 is pruned
    progress.close()
    assert "trial 0 pruned at step 1: acc=0.5" in out.getvalue()
    assert out.getvalue().splitlines()[-1].startswith("  s: 2 of 2 finished")


def test_a_best_stopped_early_is_shown_with_the_best_complete_trial():
    c = controller({(1, 1): Decision.STOP}, trials=2)
    c.launches(0.0)
    c.handle(ResultReported(0, 4, {"acc": 0.5}), 1.0)
    c.handle(TrialFinished(0), 1.0)
    c.handle(ResultReported(1, 1, {"acc": 0.9}), 1.0)
    c.handle(TrialFinished(1), 1.0)
    line = summary("s", c, 2.0, steps)
    assert "best acc 0.9 (trial 1, step 1, pruned), best complete 0.5 (trial 0)" in line


def test_the_first_ctrl_c_is_acknowledged_at_once():
    c = controller()
    out = io.StringIO()
    progress = LineProgress("s", out, steps_for=steps, heartbeat_s=30.0, clock=lambda: 0.0)
    c.launches(0.0)
    progress.update(c, 0.0)
    assert "Ctrl-C again" not in out.getvalue()
    c.interrupt()
    progress.update(c, 0.1)
    assert "stopping at the next report; Ctrl-C again to kill" in out.getvalue()
    assert "Ctrl-C again to kill" in summary("s", c, 0.2, steps)


def test_the_studys_automatic_choices_are_shown_once_each_and_again_when_they_change():
    chosen = ["oversubscription auto: H100: no co-location measured yet, the paper's ratio 2.5"]
    out = io.StringIO()
    progress = LineProgress("s", out, steps_for=steps, decisions=lambda: list(chosen))
    c = controller()
    progress.update(c, 0.0)
    progress.update(c, 0.5)
    assert out.getvalue().count("oversubscription auto: H100") == 1
    chosen[0] = "oversubscription auto: H100: r = 3.1 from 4 co-located trials"
    progress.update(c, 1.0)
    assert "r = 3.1 from 4 co-located trials" in out.getvalue()


def test_the_live_view_shows_the_choices_under_its_summary():
    from rich.console import Console
    from hypersack.runtime.loop.progress import LiveProgress
    console = Console(file=io.StringIO(), width=120)
    progress = LiveProgress("s", steps, console=console, refresh_s=0.0,
                            decisions=lambda: ["execution auto: resnet18: co-located (util 40%)"])
    progress.update(controller(), 0.0)
    progress.close()
    assert "execution auto: resnet18: co-located (util 40%)" in console.file.getvalue()


def test_a_machine_explains_what_auto_chose():
    from hypersack.core.execution import ExecutionChoice
    from hypersack.core.oversubscription import RatioChoice
    from hypersack.runtime.devices.machine import Machine
    machine = Machine(slots=[], cluster=None)
    machine.ratios["H100"] = RatioChoice(2.5, "H100: the paper's ratio")
    machine.execution["m"] = ExecutionChoice("exclusive", "m: fills the GPU alone")
    assert machine.decisions() == ["oversubscription auto: H100: the paper's ratio",
                                   "execution auto: m: fills the GPU alone"]
