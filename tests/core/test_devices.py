"""An executor's own device questions (core.devices): warm workers, a device for an unplaced launch."""
from hypersack.core.devices import first_free_device, warm_workers


def test_warm_workers_follow_the_oversubscription_ratio():
    assert [warm_workers(r) for r in (0.5, 1, 1.01, 2.5, 3)] == [1, 1, 2, 3, 3]


def test_an_unplaced_trial_takes_the_first_idle_device():
    assert first_free_device(["cpu0", "cpu1", "cpu2"], {"cpu0"}) == "cpu1"
    assert first_free_device(["cpu0"], ["cpu0"]) is None
