"""``Controller.turn(events, now)``: one call per turn of the loop returns every decision (the
``Turn``), and the options given at construction (inventory, packs, time-sharing) are the only
way in."""
from __future__ import annotations

import pytest

from hypersack.core.algorithms import Decision
from hypersack.core.controller import Budget, Controller, ControllerOptions, Turn
from hypersack.core.packs import PackBook
from hypersack.core.trial import (InterruptRequested, Launch, ResultReported, Stop, StopReason,
                                  TrialFinished, TrialStarted, TrialState)

from controller_helpers import on_slots
from test_controller import OBJ, Scripted


class Pipelined(Scripted):
    """Scripted, with a decision point at step 3 for every trial."""

    def next_decision_step(self, trial_id):
        return 3


class FusesAll:
    """A pack policy under which every trial fuses, any number per pack."""
    max_members = 4

    def fuses(self, config, pack_size=None):
        return True

    def key(self, config):
        return "k"

    def member_memory(self, config, device):
        return None

    def device_memory(self, device):
        return None


def make(algorithm=None, trials=2, slots=2, time_s=None, **options):
    return Controller(algorithm or Scripted(), OBJ, Budget(trials=trials, time_s=time_s),
                      options=on_slots(slots, **options))


def test_the_first_turn_launches_what_fits_and_stores_the_launched_trials():
    c = make(trials=3, slots=2)
    turn = c.turn([], 0.0)
    assert isinstance(turn, Turn)
    assert [launch.trial_id for launch in turn.launches] == [0, 1]
    assert all(isinstance(launch, Launch) for launch in turn.launches)
    assert [r.trial_id for r in turn.changes] == [0, 1]
    assert turn.commands == () and turn.results == () and turn.free_below == {}
    assert len(turn.stays) == 2 and not turn.done


def test_a_report_is_a_result_to_store_and_the_decision_a_command():
    c = make(Scripted(decisions={(1, 1): Decision.STOP}))
    c.turn([], 0.0)
    turn = c.turn([TrialStarted(0, "cpu0"), ResultReported(0, 1, {"acc": 0.5}, "ck"),
                   ResultReported(1, 1, {"acc": 0.1})], 1.0)
    assert turn.results == ((0, 1, {"acc": 0.5}), (1, 1, {"acc": 0.1}))
    assert turn.commands == (Stop(1, StopReason.PRUNED),)
    assert {r.trial_id for r in turn.changes} == {0, 1}
    assert c.trials[0].checkpoint == "ck"


def test_free_below_is_each_reporting_trials_next_decision_point():
    c = make(Pipelined())
    c.turn([], 0.0)
    turn = c.turn([ResultReported(0, 1, {"acc": 0.5}), TrialStarted(1, "cpu1")], 1.0)
    assert turn.free_below == {0: 3}          # only the trial that reported
    c2 = make(Pipelined(decisions={(0, 1): Decision.STOP}))
    c2.turn([], 0.0)
    assert c2.turn([ResultReported(0, 1, {"acc": 0.5})], 1.0).free_below == {0: 0}  # asked to stop


def test_a_launch_carries_its_trials_next_decision_point():
    """So the first report of an attempt is pipelined like the later ones."""
    first = make(Pipelined()).turn([], 0.0)
    assert [launch.free_below for launch in first.launches] == [3, 3]


def test_a_pack_member_waits_at_every_report():
    c = make(Pipelined(), slots=1, packs=FusesAll())
    first = c.turn([], 0.0)
    assert all(launch.pack == 1 for launch in first.launches)
    assert all(launch.free_below == 0 for launch in first.launches)
    turn = c.turn([ResultReported(0, 1, {"acc": 0.5})], 1.0)
    assert turn.free_below == {0: 0}


def test_an_interrupt_is_taken_after_the_time_driven_decisions():
    c = make(trials=2, slots=2, time_s=10.0)
    c.turn([], 0.0)
    turn = c.turn([InterruptRequested()], 10.0)       # the time budget ran out as well
    assert turn.commands == (Stop(0, StopReason.TIME_BUDGET), Stop(1, StopReason.TIME_BUDGET),
                             Stop(0, StopReason.INTERRUPTED), Stop(1, StopReason.INTERRUPTED))
    assert c.interrupted and turn.launches == ()
    assert c.trials[0].stop_reason is StopReason.INTERRUPTED


def test_the_last_turn_is_done_and_prunes_the_paused_trials():
    c = make(Scripted(limit=1, decisions={(0, 1): Decision.PAUSE}), trials=1, slots=1)
    c.turn([], 0.0)
    c.turn([ResultReported(0, 1, {"acc": 0.5})], 1.0)
    turn = c.turn([TrialFinished(0)], 2.0)
    # the end-game resumes it once: it trains to its end
    assert [launch.trial_id for launch in turn.launches] == [0] and not turn.done
    c.turn([ResultReported(0, 2, {"acc": 0.6})], 3.0)
    last = c.turn([TrialFinished(0)], 4.0)
    assert last.done and c.trials[0].state is TrialState.COMPLETE


def test_an_interrupted_study_is_done_without_pruning_its_paused_trials():
    c = make(Scripted(decisions={(0, 1): Decision.PAUSE}), trials=2, slots=1)
    c.turn([], 0.0)
    c.turn([ResultReported(0, 1, {"acc": 0.5})], 1.0)
    c.turn([InterruptRequested()], 1.5)
    turn = c.turn([TrialFinished(0)], 2.0)
    assert turn.done and c.trials[0].state is TrialState.PAUSED


def _piecewise(c, events, now):
    """The turn as separate calls (what the loop did before ``turn``)."""
    commands = []
    for event in events:
        commands += c.handle(event, now)
    commands += c.tick(now)
    launches = c.launches(now)
    return commands, launches, [r.trial_id for r in c.take_changes()], c.take_results()


def test_a_turn_decides_as_the_separate_calls_do():
    script = [([], 0.0),
              ([TrialStarted(0, "cpu0"), ResultReported(0, 1, {"acc": 0.2}),
                ResultReported(1, 1, {"acc": 0.9})], 1.0),
              ([ResultReported(0, 2, {"acc": 0.3}), TrialFinished(1)], 2.0),
              ([TrialFinished(0)], 3.0)]
    decisions = {(0, 2): Decision.STOP}
    a = make(Scripted(limit=4, decisions=decisions), trials=4)
    b = make(Scripted(limit=4, decisions=decisions), trials=4)
    for events, now in script:
        turn = a.turn(events, now)
        commands, launches, changes, results = _piecewise(b, events, now)
        assert list(turn.commands) == commands and list(turn.launches) == launches
        assert [r.trial_id for r in turn.changes] == changes and list(turn.results) == results


def test_inventory_packs_and_time_sharing_are_given_at_construction():
    assert not any(hasattr(Controller, name)
                   for name in ("set_inventory", "set_packs", "set_time_sharing"))
    c = make(packs=FusesAll(), time_sharing={"policy": "hermes", "quantum_s": 10})
    assert isinstance(c.packs, PackBook) and c.shared is not None
    assert c.allocator is not None and c.allocator.policy == "wfd"
    plain = make()
    assert plain.packs is None and plain.shared is None


def test_a_controller_without_inventory_launches_nothing_and_cannot_time_share():
    bare = Controller(Scripted(), OBJ, Budget(trials=1))
    with pytest.raises(RuntimeError, match="no inventory"):
        bare.turn([], 0.0)
    with pytest.raises(RuntimeError, match="no inventory"):
        Controller(Scripted(), OBJ, Budget(trials=1),
                   options=ControllerOptions(time_sharing={"policy": "hermes"}))


def test_the_last_turn_prunes_a_paused_trial_and_stores_it():
    c = make(Scripted(limit=2, decisions={(0, 1): Decision.PAUSE}), trials=2, slots=1)
    c.turn([], 0.0)
    assert c.turn([ResultReported(0, 1, {"acc": 0.5})], 1.0).commands == (
        Stop(0, StopReason.PAUSED),)
    assert [launch.trial_id for launch in c.turn([TrialFinished(0)], 2.0).launches] == [1]
    c.turn([ResultReported(1, 1, {"acc": 0.7})], 3.0)
    last = c.turn([TrialFinished(1)], 4.0)        # a complete trial: no end-game for 0
    assert last.done and c.trials[0].state is TrialState.PRUNED
    assert {r.trial_id: r.state for r in last.changes} == {0: TrialState.PRUNED,
                                                          1: TrialState.COMPLETE}
