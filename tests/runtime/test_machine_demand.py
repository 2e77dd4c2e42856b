"""The job history's demand cache (``runtime.devices.machine``): a trial's Job is built once and rebuilt
only when the history of its own config (model keys and batch size) changes."""
from __future__ import annotations

from hypersack.core.spec import StudySpec
from hypersack.core.trial import TrialFinished, TrialProfiled, TrialRecord
from hypersack.runtime.devices.slots import default_slots
from hypersack.runtime.devices.machine import prepare_machine
from hypersack.runtime.devices.profiler import Profile


def _spec() -> StudySpec:
    return StudySpec.from_dict({"name": "s", "objective": {"metric": "score", "mode": "max"},
                                "space": {"width": {"type": "categorical", "choices": [16, 32]},
                                          "x": {"type": "float", "low": 0.0, "high": 1.0}},
                                "budget": {"trials": 4}})


def _profiled(trial_id: int) -> TrialProfiled:
    profile = Profile(time_per_iter_s=0.5, peak_memory_gb=1.0, gpu_util_percent=40.0,
                      data_time_fraction=0.1, iters_measured=3, device_arch="cpu")
    return TrialProfiled(trial_id, profile.to_dict())


def test_a_profile_rebuilds_the_demand_of_its_own_config_only(tmp_path):
    narrow = [TrialRecord(0, {"width": 16, "x": 0.1}, seed=0), TrialRecord(2, {"width": 16, "x": 0.9}, seed=0)]
    wide = TrialRecord(1, {"width": 32, "x": 0.5}, seed=0)
    with prepare_machine(_spec(), tmp_path / "runs", tmp_path / "s.db", trainable_name="t",
                         slots=default_slots(2, gpus=[])) as machine:
        (observe,) = machine.observers
        before = [machine.demand(r) for r in (*narrow, wide)]
        assert [machine.demand(r) for r in (*narrow, wide)] == before      # built once
        assert all(a is b for a, b in zip([machine.demand(r) for r in (*narrow, wide)], before))
        assert not before[0].per_arch
        observe(_profiled(0))
        after = [machine.demand(r) for r in (*narrow, wide)]
        assert after[0].per_arch and after[1].per_arch                    # width 16: profiled
        assert after[2] is before[2]                                      # width 32: untouched
        observe(TrialFinished(1))                                         # ended: forgotten
        assert machine.demand(wide) is not before[2]
        assert machine.demand(wide) == before[2]



def test_the_demand_of_an_ended_trial_is_given_but_not_kept_as_a_live_trials(tmp_path):
    """An ended trial is asked about as the model of a new trial's room
    (``Allocator.has_room_for``): it gets its config's demand, and is not kept among the live
    trials (whose demands co-location sums) nor its Job cached for it."""
    from hypersack.core.trial import TrialState
    latest = TrialRecord(1, {"width": 32, "x": 0.5}, seed=0)
    with prepare_machine(_spec(), tmp_path / "runs", tmp_path / "s.db", trainable_name="t",
                         slots=default_slots(2, gpus=[])) as machine:
        (observe,) = machine.observers
        placed = machine.demand(latest)
        assert machine.demand(latest) is placed                 # kept while it runs
        observe(TrialFinished(1))
        latest.state = TrialState.COMPLETE
        asked = machine.demand(latest)
        assert asked == placed and machine.demand(latest) is not asked   # given, not kept
        latest.state = TrialState.PENDING                       # resumed: kept again
        again = machine.demand(latest)
        assert again == placed and machine.demand(latest) is again


def test_a_history_key_is_remembered_only_for_values_whose_json_is_theirs():
    """``_fingerprint``: equal fingerprints give equal history keys (1, 1.0 and True, -0.0 and
    0.0 tell apart); containers and other types are keyed afresh."""
    from hypersack.runtime.devices.machine import _fingerprint, _history_key
    values = [1, 1.0, True, 0, 0.0, -0.0, False, None, "1", 2.5, 2.50, float("inf"),
              float("nan"), [1], (1,), {"a": 1}, 10**30]
    names = ["width", "batch_size"]
    for a in values:
        for b in values:
            ca, cb = {"width": a, "batch_size": 64}, {"width": b, "batch_size": 64}
            fa, fb = _fingerprint(ca, names), _fingerprint(cb, names)
            if fa is not None and fa == fb:
                assert _history_key(ca, ["width"]) == _history_key(cb, ["width"]), (a, b)
    assert _fingerprint({"width": 16}, names) == ((int, 16), (type(None), None))  # remembered
    for kept_apart in (-0.0, 0.0, [16], {"a": 1}):
        assert _fingerprint({"width": kept_apart}, names) is None
    assert _fingerprint({"width": 1}, names) != _fingerprint({"width": True}, names)
