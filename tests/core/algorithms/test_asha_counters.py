"""ASHA's O(1) counters (running trials, trials past the last rung) always equal a recount of
its trial table, through pauses, promotions, crashes, kills and restores; ``exhausted`` and the
end game answer as the former O(n) scans did."""
from __future__ import annotations

import pytest

from hypersack.core.algorithms import ASHA, RASDA
from hypersack.core.algorithms.sha import RUNNING
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace

from mf_driver import Driver

OBJ = Objective("loss", "min")
SPACE = SearchSpace({"x": {"type": "float", "low": 0.0, "high": 1.0},
                     "y": {"type": "float", "low": 0.0, "high": 1.0}})


def curve(config, step):
    return (config["x"] - 0.3) ** 2 + (config["y"] - 0.7) ** 2 + 1.0 / step


def _duration(config):
    return 1.0 + 2 * config["y"]


class Checked:
    """Mixin: after every call that changes the trial table, compare the counters with a recount."""

    checks = 0

    def _check(self):
        last = len(self.milestones)
        entries = list(self._trials.values())
        assert self._running == sum(1 for _, status in entries if status == RUNNING)
        assert self._through == sum(1 for rung, _ in entries if rung == last)
        Checked.checks += 1

    def on_result(self, trial_id, step, metrics):
        decision = super().on_result(trial_id, step, metrics)
        self._check()
        return decision

    def on_complete(self, trial_id, value, state):
        super().on_complete(trial_id, value, state)
        self._check()

    def promote(self):
        resumed = super().promote()
        self._check()
        return resumed

    def suggest(self, trial_id):
        suggestion = super().suggest(trial_id)
        self._check()
        return suggestion

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self._check()

    @property
    def exhausted(self):
        answer = super().exhausted
        if self.num_samples is not None and self._created >= self.num_samples:
            running = any(status == RUNNING for _, status in self._trials.values())
            assert answer == (not running and self._promotable() is None)
        return answer


class CheckedASHA(Checked, ASHA):
    pass


class CheckedRASDA(Checked, RASDA):
    pass


@pytest.mark.parametrize("mode", ["pause", "stop"])
@pytest.mark.parametrize("kind", ["asha", "rasda"])
def test_counters_match_a_recount_through_crashes_and_restores(mode, kind):
    def make():
        if kind == "asha":
            return CheckedASHA(SPACE, OBJ, seed=4, min_t=1, max_t=9, reduction_factor=3, mode=mode,
                               num_samples=24)
        return CheckedRASDA(SPACE, OBJ, seed=4, min_t=1, max_t=8, sf=2, rf=2, mode=mode,
                            max_resources=4, num_samples=24)
    before = Checked.checks
    alg = make()
    driver = Driver(alg, curve, max_steps=9, devices=4, duration=_duration, checkpoint_every=2,
                    crash={(0, 2), (3, 3), (5, 1)}, kill_at=40, rebuild=make).run()
    assert driver.trials and Checked.checks - before > 100
    assert driver.best() is not None


def test_end_game_needs_no_running_trial_and_none_past_the_last_rung():
    alg = CheckedASHA(SPACE, OBJ, seed=1, min_t=1, max_t=9, reduction_factor=3, num_samples=3)
    for t in range(3):
        alg.suggest(t)
    for t, loss in ((0, 0.1), (1, 0.2), (2, 0.3)):
        alg.on_result(t, 1, {"loss": loss})           # floor(n/3) of n arrivals: all pause
    assert (alg._running, alg._through) == (0, 0)
    assert alg.promote() == 0 and alg._running == 1   # now the top third of rung 0
    assert alg.promote() is None
    alg.on_result(0, 3, {"loss": 0.05})                # alone at rung 1: paused there
    assert alg._running == 0 and not alg.exhausted
    assert alg.promote() == 0                          # the end game: highest rung's best goes on
    assert (alg._running, alg._through) == (1, 1)      # past the last rung (milestones 1, 3)
    alg.on_result(0, 9, {"loss": 0.01})
    alg.on_complete(0, 0.01, "complete")
    assert (alg._running, alg._through) == (0, 1)
    assert alg.promote() is None and alg.exhausted
