"""The job history in a temporary SQLite file (beside a real study store)."""
from __future__ import annotations

import pytest

from hypersack.errors import ConfigError, StorageError
from hypersack.runtime.devices.profiler import Profile
from hypersack.runtime.devices.job_history import ProfileKey, ProfileStore, profile_key, signature
from hypersack.runtime.storage.sqlite import Storage

PROFILE = Profile(time_per_iter_s=0.05, peak_memory_gb=3.0, gpu_util_percent=35.0,
                  data_time_fraction=0.1, iters_measured=10, device_arch="A100")
MODEL_KEYS = ["depth", "width"]


def test_signature_depends_on_model_keys_only():
    a = signature("resnet", {"depth": 18, "width": 64, "lr": 0.1}, MODEL_KEYS)
    b = signature("resnet", {"depth": 18, "width": 64, "lr": 0.001}, ["width", "depth"])
    assert a == b and len(a) == 16
    assert a != signature("resnet", {"depth": 34, "width": 64}, MODEL_KEYS)
    assert a != signature("vit", {"depth": 18, "width": 64}, MODEL_KEYS)
    with pytest.raises(ConfigError, match="The value of profiling.model_keys is 'heads'"):
        signature("vit", {"depth": 1}, ["heads"])


def test_profile_key_reads_the_batch_size():
    key = profile_key("resnet", {"depth": 18, "width": 64, "bs": 256}, MODEL_KEYS, "H100", batch_key="bs")
    assert key.batch_size == 256 and key.arch == "H100"
    assert profile_key("resnet", {"depth": 18, "width": 64}, MODEL_KEYS, "H100").batch_size == 0
    with pytest.raises(ConfigError, match="config.batch_size"):
        profile_key("resnet", {"depth": 18, "width": 64, "batch_size": 1.5}, MODEL_KEYS, "H100")


def test_put_get_and_persistence_across_studies(tmp_path):
    db = tmp_path / "study.db"
    key = ProfileKey("abc", 128, "A100")
    with ProfileStore(db) as store:
        assert store.get(key) is None
        store.put(key, PROFILE)
        assert store.get(key) == PROFILE
        store.put(key, PROFILE)                    # replacing is fine
        assert store.keys() == [key]
    with ProfileStore(db) as later:               # a later study on the same file
        assert later.get(key) == PROFILE
        assert later.get(ProfileKey("abc", 128, "H100")) is None   # other arch: profile again
        assert later.get(ProfileKey("abc", 256, "A100")) is None   # other batch size too


def test_lives_beside_the_study_store(tmp_path):
    db = tmp_path / "study.db"
    with Storage(db) as storage:
        storage.create_study("s", {"x": 1})
        with ProfileStore(db) as store:
            store.put(ProfileKey("abc", 1, "cpu"), PROFILE)
        assert storage.has_study("s")
    with ProfileStore(db) as store:
        assert store.get(ProfileKey("abc", 1, "cpu")) == PROFILE
        mode = store._db.execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_missing_lists_what_to_profile(tmp_path):
    with ProfileStore(tmp_path / "h.db") as store:
        configs = [{"depth": d, "width": 64, "batch_size": b, "lr": lr}
                   for d in (18, 34) for b in (64, 128) for lr in (0.1, 0.01)]
        keys = [profile_key("resnet", c, MODEL_KEYS, "A100") for c in configs]
        assert len(store.missing(keys)) == 4          # lr does not define the model
        store.put(keys[0], PROFILE)
        assert len(store.missing(keys)) == 3 and keys[0] not in store.missing(keys)


def test_demand_for(tmp_path):
    config = {"depth": 18, "width": 64, "batch_size": 128, "lr": 0.1}
    with ProfileStore(tmp_path / "h.db") as store:
        args = dict(trainable="resnet", model_keys=MODEL_KEYS)
        assert store.demand_for(config, "A100", **args) is None
        store.put(profile_key("resnet", config, MODEL_KEYS, "A100"), PROFILE)
        compute, memory, runtime = store.demand_for(config, "A100", **args)
        assert compute == 35.0 and memory == pytest.approx(3.5) and runtime == pytest.approx(0.05)
        _, memory, runtime = store.demand_for(config, "A100", iterations=1000, context_gb=0, **args)
        assert memory == 3.0 and runtime == pytest.approx(50.0)
        cpu_profile = Profile(0.2, 1.0, None, 0.0, 10, "cpu")
        store.put(profile_key("resnet", config, MODEL_KEYS, "cpu"), cpu_profile)
        assert store.demand_for(config, "cpu", **args) == (100.0, 1.0, pytest.approx(0.2))
        idle = Profile(0.2, 1.0, 0.0, 0.0, 10, "L4")
        store.put(profile_key("resnet", config, MODEL_KEYS, "L4"), idle)
        assert store.demand_for(config, "L4", **args)[0] == 1.0   # never a free job


def test_correct_after_oom_raises_the_memory_estimate(tmp_path):
    config = {"depth": 18, "width": 64, "batch_size": 512}
    key = profile_key("resnet", config, MODEL_KEYS, "A100")
    with ProfileStore(tmp_path / "h.db") as store:
        store.put(key, PROFILE)
        assert store.correct_after_oom(key, 40.0) == 40.0
        assert store.get(key).peak_memory_gb == 40.0
        assert store.demand_for(config, "A100", trainable="resnet", model_keys=MODEL_KEYS)[1] == 40.0
        assert store.correct_after_oom(key, 20.0) == 40.0         # never lowered
        store.put(key, PROFILE)                                     # a re-profile keeps the floor
        assert store.get(key).peak_memory_gb == 40.0
        assert store.memory_floor(key) == 40.0
        with pytest.raises(ConfigError, match="device_memory_gb"):
            store.correct_after_oom(key, 0)


def test_oom_before_any_profile_places_the_job_alone(tmp_path):
    config = {"depth": 50, "width": 64, "batch_size": 512}
    key = profile_key("resnet", config, MODEL_KEYS, "H100")
    with ProfileStore(tmp_path / "h.db") as store:
        store.correct_after_oom(key, 80.0)
        assert store.get(key) is None                       # still to be profiled
        assert store.demand_for(config, "H100", trainable="resnet", model_keys=MODEL_KEYS) == (100.0, 80.0, 1.0)


def test_not_a_database(tmp_path):
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StorageError, match="profile history"):
        ProfileStore(path)
