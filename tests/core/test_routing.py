"""Routing inside a node: pack choice, warm workers, a free device."""
from hypersack.core.routing import PackSeats, choose_pack, first_free_device, group_key, warm_workers


def test_a_trial_joins_the_first_pack_on_its_device_with_its_key_and_a_seat():
    packs = [PackSeats(1, "gpu0", "a", members=2, cap=2),          # full
             PackSeats(2, "gpu1", "a", members=0, cap=4),          # wrong device
             PackSeats(3, "gpu0", "b", members=0, cap=4),          # wrong key
             PackSeats(4, "gpu0", "a", members=1, cap=4, failed=True),
             PackSeats(5, "gpu0", "a", members=3, cap=4),
             PackSeats(6, "gpu0", "a", members=0, cap=4)]
    assert choose_pack(packs, "a", ["gpu0"]) == 5
    assert choose_pack(packs, "a", ["gpu1", "gpu0"]) == 2
    assert choose_pack(packs, "c", ["gpu0"]) is None
    assert choose_pack(packs[:1], "a", ["gpu0"]) is None


def test_an_algorithms_pack_group_keeps_its_trials_apart():
    assert group_key("k", None) == "k"
    assert group_key("k", 3) != group_key("k", 4) != "k"


def test_warm_workers_follow_the_oversubscription_ratio():
    assert [warm_workers(r) for r in (0.5, 1, 1.01, 2.5, 3)] == [1, 1, 2, 3, 3]


def test_an_unplaced_trial_takes_the_first_idle_device():
    assert first_free_device(["cpu0", "cpu1", "cpu2"], {"cpu0"}) == "cpu1"
    assert first_free_device(["cpu0"], ["cpu0"]) is None
