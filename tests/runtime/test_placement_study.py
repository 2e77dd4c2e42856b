"""Studies on the local executor with placement: co-location, data-parallel growth, job history."""
from __future__ import annotations

import importlib.util

import pytest

import hypersack
from hypersack.core.algorithms import Algorithm, Decision, Suggestion
from hypersack.runtime.devices.slots import default_slots
from hypersack.runtime.devices.job_history import ProfileStore

SPACE = {"x": {"type": "float", "low": 0.0, "high": 1.0}, "sleep": 0.4, "steps": 2}


def _overlap(status) -> int:
    """Most trials whose [started_at, finished_at] intervals overlap at one instant."""
    spans = [(t["started_at"], t["finished_at"]) for t in status["trials"]]
    points = sorted([(s, 1) for s, _ in spans] + [(f, -1) for _, f in spans])
    best = now = 0
    for _, delta in points:
        now += delta
        best = max(best, now)
    return best


@pytest.mark.parametrize("placement, ratio, expected", [("exclusive", 2.0, 2), ("wfd", 2.0, 4)])
def test_wfd_with_oversubscription_runs_more_trials_at_once_than_exclusive(
        store_path, placement, ratio, expected):
    study = hypersack.Study(name=f"p-{placement}", space=SPACE, objective=("score", "max"),
                            n_trials=4, storage=store_path, placement=placement,
                            oversubscription=ratio, max_steps="steps")
    study.run("trainables:checkpointing", progress=False, slots=default_slots(2, gpus=[]))
    status = study.status()
    assert status["complete"] == 4
    assert _overlap(status) == expected


def test_profiles_are_kept_in_the_job_history_and_reused_by_a_later_study(store_path):
    space = dict(SPACE, width={"type": "categorical", "choices": [8, 16]}, batch_size=32)
    for name in ("first", "second"):
        study = hypersack.Study(name=name, space=space, objective=("score", "max"), n_trials=2,
                                storage=store_path, max_steps=4,
                                workers=2)
        study.run("trainables:checkpointing", progress=False)
    with ProfileStore(store_path) as store:
        keys = store.keys()
    assert keys and all(k.arch == "cpu" and k.batch_size == 32 for k in keys)
    assert len({k.signature for k in keys}) <= 2         # one per width, shared by both studies
    with ProfileStore(store_path) as store:
        profile = store.get(keys[0])
    assert profile.iters_measured >= 1 and profile.time_per_iter_s > 0


class GrowThenStop(Algorithm):
    """Trial 0 grows from one to two data-parallel workers after epoch 1 and is pruned at epoch
    3 of 4; only then is trial 1 proposed (one epoch, batch 32), on the workers it freed."""

    GROWN = {"lr": 0.01, "batch_size": 64, "hidden": 32, "epochs": 4}
    NEXT = {"lr": 0.01, "batch_size": 32, "hidden": 16, "epochs": 1}

    def __init__(self, space, objective):
        super().__init__(space, objective)
        self.made, self.grown, self.pruned = 0, False, False

    @property
    def exhausted(self):
        return self.made >= 2

    def suggest(self, trial_id):
        if trial_id == 1 and not self.pruned:
            return None                                   # ask again once trial 0 is pruned
        self.made += 1
        return Suggestion(dict(self.GROWN if trial_id == 0 else self.NEXT))

    def on_result(self, trial_id, step, metrics):
        if trial_id == 0 and step == 1:
            self.grown = True
            return Decision.GROW
        if trial_id == 0 and step == 3:
            self.pruned = True
            return Decision.STOP
        return Decision.CONTINUE

    def resources(self, trial_id):
        return 2 if trial_id == 0 and self.grown else 1


@pytest.fixture(scope="module")
def digits_study(tmp_path_factory):
    """One digits study on two CPU devices, shared by the tests below (see GrowThenStop)."""
    for module in ("torch", "sklearn"):          # found, not imported: only the workers need them
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed")
    store_path = tmp_path_factory.mktemp("grow") / "study.db"
    space = hypersack.SearchSpace({"lr": 0.01})
    objective = hypersack.Objective.parse(("accuracy", "max"))
    study = hypersack.Study(name="grow", space=space, objective=objective, n_trials=2,
                            storage=store_path, algorithm=GrowThenStop(space, objective),
                            trial_timeout_s=120)
    study.run("digits_mlp", progress=False, slots=default_slots(2, gpus=[]))
    return store_path, study


@pytest.mark.slow
def test_a_trial_grown_from_one_to_two_data_parallel_workers_continues_its_curve(digits_study):
    _, study = digits_study
    results = study.results(0)
    assert [r["step"] for r in results] == [1, 2, 3]
    assert [r["workers"] for r in results] == [1, 2, 2]
    # ceil(1437 / 64) = 23 steps per epoch alone, ceil(1437 / 128) = 12 with two workers.
    assert [r["steps"] for r in results] == [23, 35, 47]
    assert results[1]["train_loss"] < results[0]["train_loss"]    # no reset after the resize
    assert results[2]["accuracy"] > 0.85


@pytest.mark.slow
def test_a_data_parallel_trial_stopped_mid_run_frees_its_workers_for_the_next_trial(digits_study):
    _, study = digits_study
    trials = study.status()["trials"]
    # a resize relaunches without a failure: a resume, not a second attempt
    assert [(t["state"], t["attempts"], t["resumes"]) for t in trials] == [("pruned", 1, 1),
                                                                          ("complete", 1, 0)]
    assert trials[1]["started_at"] >= trials[0]["finished_at"]
    assert [r["workers"] for r in study.results(1)] == [1]


@pytest.mark.slow
def test_the_digits_trainable_is_profiled_per_batch_within_its_first_epoch(digits_study):
    store_path, _ = digits_study
    with ProfileStore(store_path) as store:
        keys = store.keys()
        profiles = {key.batch_size: store.get(key) for key in keys}
    assert sorted(profiles) == [32, 64] and {key.arch for key in keys} == {"cpu"}
    profile = profiles[32]                 # trial 1: a single epoch of 45 batches
    assert profile.iters_measured == 10    # batches, not epochs: one epoch sufficed
    assert 0 < profile.time_per_iter_s < 1.0 and profile.peak_memory_gb > 0
