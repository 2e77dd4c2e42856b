"""Checkpoint files: private, never through a link, never another user's, read safely."""
from __future__ import annotations

import os
import pickle
import stat
from dataclasses import dataclass

import pytest

from hypersack.errors import CheckpointError, UnsafePathError
from hypersack.runtime.worker import checkpoints
from hypersack.runtime.worker.checkpoints import (allow_checkpoint_types, ensure_private_dir, open_private,
                                                  read_checkpoint, remove_other_checkpoints,
                                                  write_checkpoint)

NOBODY = 65534


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned > /tmp/hypersack-pwned",))


@dataclass
class Settings:
    lr: float


def _plant(folder, name, obj):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(pickle.dumps(obj))


def test_a_planted_pickle_runs_no_code_on_a_safe_restore(tmp_path):
    _plant(tmp_path, "checkpoint-a1-1.pkl", Evil())
    with pytest.raises(CheckpointError, match="refusing to load posix.system|refusing to load os.system"):
        read_checkpoint(tmp_path, "checkpoint-a1-1.pkl")
    assert not os.path.exists("/tmp/hypersack-pwned")


def test_plain_data_and_numpy_round_trip_and_allowed_classes_load(tmp_path):
    np = pytest.importorskip("numpy")
    state = {"step": 3, "w": [1.5, 2], "t": (1, "a"), "s": {1, 2}, "arr": np.arange(4.0),
             "f": np.float32(0.5)}
    name = write_checkpoint(tmp_path, state, attempt=1, sequence=1)
    got = read_checkpoint(tmp_path, name)
    assert got["step"] == 3 and got["s"] == {1, 2} and list(got["arr"]) == [0.0, 1.0, 2.0, 3.0]
    other = write_checkpoint(tmp_path, {"settings": Settings(0.1)}, attempt=1, sequence=2)
    with pytest.raises(CheckpointError, match="allow_checkpoint_types"):
        read_checkpoint(tmp_path, other)
    assert read_checkpoint(tmp_path, other, unsafe=True)["settings"] == Settings(0.1)
    allow_checkpoint_types(Settings)
    try:
        assert read_checkpoint(tmp_path, other)["settings"] == Settings(0.1)
    finally:
        checkpoints._ALLOWED.clear()


def test_torch_checkpoints_load_with_weights_only(tmp_path):
    torch = pytest.importorskip("torch")
    np = pytest.importorskip("numpy")
    state = {"w": torch.ones(2), "epoch": 1, "rng": np.arange(3), "lr": np.float64(0.1)}
    name = write_checkpoint(tmp_path, state, attempt=2, sequence=1)
    assert name.endswith(".pt")
    got = read_checkpoint(tmp_path, name)
    assert got["w"].tolist() == [1.0, 1.0] and list(got["rng"]) == [0, 1, 2] and got["lr"] == 0.1
    evil = write_checkpoint(tmp_path, {"x": Evil()}, attempt=2, sequence=2)
    with pytest.raises(CheckpointError, match="safe load refuses"):
        read_checkpoint(tmp_path, evil)


def test_a_stored_name_must_be_a_checkpoint_file_in_the_trial_folder(tmp_path):
    for name in ("../other/checkpoint-a1-1.pkl", "/etc/passwd", ".checkpoint-a1-1.pkl.1.tmp",
                 "trial.log"):
        with pytest.raises(CheckpointError, match="not a checkpoint file name"):
            read_checkpoint(tmp_path, name)
    with pytest.raises(CheckpointError, match="missing"):
        read_checkpoint(tmp_path, "checkpoint-a1-9.pkl")


def test_symlinks_are_never_followed(tmp_path):
    target = tmp_path / "victim"
    target.write_text("keep me")
    trial = ensure_private_dir(tmp_path / "runs" / "study" / "trial-00000", root=tmp_path / "runs")
    (trial / "trial.log").symlink_to(target)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        open_private(trial / "trial.log", append=True)
    (trial / "checkpoint-a1-1.pkl").symlink_to(target)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        read_checkpoint(trial, "checkpoint-a1-1.pkl")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "runs" / "linked").symlink_to(elsewhere)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        ensure_private_dir(tmp_path / "runs" / "linked" / "trial-00000", root=tmp_path / "runs")
    assert target.read_text() == "keep me" and list(elsewhere.iterdir()) == []


def test_a_temp_file_planted_as_a_link_is_replaced_not_followed(tmp_path):
    target = tmp_path / "victim"
    target.write_text("keep me")
    trial = ensure_private_dir(tmp_path / "t")
    (trial / f".checkpoint-a1-1.pkl.{os.getpid()}.tmp").symlink_to(target)
    name = write_checkpoint(trial, {"ok": 1}, attempt=1, sequence=1)
    assert read_checkpoint(trial, name) == {"ok": 1} and target.read_text() == "keep me"


@pytest.mark.skipif(os.geteuid() != 0, reason="making a folder owned by another user needs root")
def test_folders_and_files_of_another_user_are_refused(tmp_path):
    runs = tmp_path / "runs"
    foreign = runs / "study"
    foreign.mkdir(parents=True)
    os.chown(foreign, NOBODY, NOBODY)
    with pytest.raises(UnsafePathError, match="another user"):
        ensure_private_dir(foreign / "trial-00000", root=runs)
    mine = ensure_private_dir(runs / "mine")
    _plant(mine, "checkpoint-a1-1.pkl", {"x": 1})
    os.chown(mine / "checkpoint-a1-1.pkl", NOBODY, NOBODY)
    with pytest.raises(UnsafePathError, match="another user"):
        read_checkpoint(mine, "checkpoint-a1-1.pkl")


def test_new_folders_and_files_are_private_and_stale_checkpoints_are_removed(tmp_path):
    trial = ensure_private_dir(tmp_path / "a" / "b", root=tmp_path / "a")
    assert stat.S_IMODE(os.stat(tmp_path / "a").st_mode) == 0o700
    keep = write_checkpoint(trial, 1, attempt=1, sequence=1)
    drop = write_checkpoint(trial, 2, attempt=1, sequence=2)
    (trial / "trial.log").write_text("log")
    remove_other_checkpoints(trial, [keep, None])
    assert sorted(p.name for p in trial.iterdir()) == [keep, "trial.log"] and drop != keep
    assert stat.S_IMODE(os.stat(trial / keep).st_mode) == 0o600


def test_read_private_reads_only_a_regular_file_of_this_user_and_never_blocks(tmp_path):
    good = tmp_path / "good"
    good.write_bytes(b"data")
    assert checkpoints.read_private(good) == b"data"
    with pytest.raises(UnsafePathError, match="more than the 3"):
        checkpoints.read_private(good, limit=3)
    os.mkfifo(tmp_path / "fifo")               # an open() without O_NONBLOCK would wait forever
    with pytest.raises(UnsafePathError, match="not a regular file"):
        checkpoints.read_private(tmp_path / "fifo")
    (tmp_path / "link").symlink_to(good)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        checkpoints.read_private(tmp_path / "link")
    with pytest.raises(UnsafePathError, match="not a regular file"):
        checkpoints.read_private(tmp_path)
    with pytest.raises(FileNotFoundError):
        checkpoints.read_private(tmp_path / "missing")


def test_a_fifo_planted_as_the_committed_checkpoint_is_refused_not_waited_on(tmp_path):
    import threading
    fifo = tmp_path / "checkpoint-a1-1.pkl"
    os.mkfifo(fifo)
    raised: list = []

    def restore():
        try:
            checkpoints.read_checkpoint(tmp_path, fifo.name)
        except Exception as exc:
            raised.append(exc)
    thread = threading.Thread(target=restore, daemon=True)
    thread.start()
    thread.join(10)
    blocked = thread.is_alive()
    if blocked:          # unblock the reader stuck in open() (the old code), then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert not blocked
    assert isinstance(raised[0], UnsafePathError) and "not a regular file" in str(raised[0])
