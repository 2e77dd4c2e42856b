"""The Profiler runs once per history key where a new profile can teach nothing: a key measured
alone whose demand fills a whole device is not profiled again (no co-location can come of it);
every other trial is, and under ``oversubscription: auto`` every trial is. A key's
demand is built once and renamed for each trial of it."""
from __future__ import annotations

from hypersack.core.spec import StudySpec
from hypersack.core.trial import TrialProfiled, TrialRecord, TrialState
from hypersack.runtime.devices.job_history import ProfileStore, profile_key
from hypersack.runtime.devices.machine import prepare_machine
from hypersack.runtime.devices.profiler import Profile
from hypersack.runtime.devices.slots import default_slots

CONFIG = {"width": 16, "x": 0.5}


def _spec(**extra) -> StudySpec:
    return StudySpec.from_dict({"name": "s", "objective": {"metric": "score", "mode": "max"},
                                "space": {"width": {"type": "categorical", "choices": [16, 32]},
                                          "x": {"type": "float", "low": 0.0, "high": 1.0}},
                                "budget": {"trials": 4}, **extra})


def _profiled(trial_id: int, util: float | None, arch: str = "cpu") -> TrialProfiled:
    profile = Profile(time_per_iter_s=0.1, peak_memory_gb=1.0, gpu_util_percent=util,
                      data_time_fraction=0.0, iters_measured=3, device_arch=arch)
    return TrialProfiled(trial_id, profile.to_dict())


def _running(trial_id: int, device: str = "cpu0", **config) -> TrialRecord:
    return TrialRecord(trial_id, {**CONFIG, **config}, seed=0, state=TrialState.RUNNING,
                       devices=[("local", device)])


def _machine(tmp_path, spec=None, slots=None):
    return prepare_machine(spec or _spec(), tmp_path / "runs", tmp_path / "s.db",
                           trainable_name="t", slots=slots or default_slots(2, gpus=[]))


def test_a_key_profiled_alone_that_fills_its_device_is_not_profiled_again(tmp_path):
    with _machine(tmp_path) as machine:
        (observe,) = machine.observers
        assert machine.profile(CONFIG) is True                  # never profiled
        machine.demand(_running(0))
        observe(_profiled(0, util=None))                        # alone; CPU: 100% of its slot
        assert machine.profile(CONFIG) is False
        assert machine.profile({**CONFIG, "x": 0.9}) is False  # the same model key
        assert machine.profile({**CONFIG, "width": 32}) is True  # another key: profiled
    with ProfileStore(tmp_path / "s.db") as store:           # the history keeps the profile
        assert store.corunners(profile_key("t", CONFIG, ["width"], "cpu")) == 0


def test_a_key_whose_demand_leaves_room_on_its_device_is_profiled_every_time(tmp_path):
    with _machine(tmp_path) as machine:
        (observe,) = machine.observers
        machine.demand(_running(0))
        observe(_profiled(0, util=40.0))                        # another trial could share
        assert machine.profile(CONFIG) is True


def test_a_key_profiled_only_beside_other_trials_is_profiled_again(tmp_path):
    with _machine(tmp_path) as machine:
        (observe,) = machine.observers
        pair = [_running(1), _running(2)]
        for record in pair:
            machine.demand(record)
        observe(_profiled(1, util=None))                        # measured beside trial 2
        assert machine.profile(CONFIG) is True


def test_auto_oversubscription_profiles_every_trial(tmp_path):
    with _machine(tmp_path, _spec(oversubscription="auto"),
                  default_slots(1, gpus=[0])) as machine:
        (observe,) = machine.observers
        machine.demand(_running(0, device="gpu0"))
        observe(_profiled(0, util=100.0, arch="gpu"))
        assert machine.profile(CONFIG) is True


def test_a_keys_demand_is_renamed_per_trial_and_keeps_each_configs_cores(tmp_path):
    with _machine(tmp_path) as machine:
        first, second, wide = _running(0), _running(1), _running(2, cpus=2)
        a, b, c = (machine.demand(r) for r in (first, second, wide))
        assert (a.id, b.id, c.id) == (0, 1, 2)
        assert b.renamed(0) == a
        assert (a.cpus, c.cpus) == (1, 2)                    # the config's cpus: not the template's
