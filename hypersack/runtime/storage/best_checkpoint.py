"""The best trial's checkpoint: kept (``keep_checkpoints_num``: :class:`CheckpointKeeper`),
read (``Study.best_checkpoint``) and exported (``hypersack export-best STUDY -o DIR``).

The best trial is ``best_trial()``'s (each trial's last reported value, over every trial that
did not fail); its checkpoint is the one of its last durable report with a checkpoint, so a
trial that was pruned or paused after its best report keeps that state. A trial that
checkpoints at every report has its state at the step of its value.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from hypersack.core.keep_best import KeepBest
from hypersack.core.trial import TrialRecord
from hypersack.errors import CheckpointError
from hypersack.runtime.storage import queries
from hypersack.runtime.worker import checkpoints

__all__ = ["CheckpointKeeper", "best_checkpoint", "export_best"]


class CheckpointKeeper:
    """A loop listener: deletes the checkpoint files of ended trials outside the ``keep``
    best (``core.keep_best``); trials that saved no checkpoint take no place among them. On a
    resume, the stored ended trials are offered first."""

    def __init__(self, keep: KeepBest, trial_dir: Callable[[int], Path]):
        self.keep, self.trial_dir = keep, trial_dir
        self._offered: set[int] = set()
        self._primed = False

    def listen(self, events: Sequence[Any], trials: Mapping[int, TrialRecord]) -> None:
        if not self._primed:
            self._primed = True
            self.close(trials)
            return
        for event in events:
            record = trials.get(getattr(event, "trial_id", None))  # type: ignore[arg-type]
            if record is not None:
                self._offer(record)

    def close(self, trials: Mapping[int, TrialRecord]) -> None:
        """Offer every ended trial not offered yet (those the loop ended without an event)."""
        for trial_id in sorted(trials):
            self._offer(trials[trial_id])

    def _offer(self, record: TrialRecord) -> None:
        if not record.state.finished or record.trial_id in self._offered:
            return
        self._offered.add(record.trial_id)
        if record.checkpoint is None:
            return                     # nothing to keep (a trial added from elsewhere...)
        for trial_id in self.keep.offer(record.trial_id, record.value, record.state.value):
            checkpoints.remove_other_checkpoints(Path(self.trial_dir(trial_id)), [])


def _best_with_checkpoint(store: Any, name: str) -> tuple[dict[str, Any], TrialRecord, Path]:
    """The best trial (``queries.best_trial``), its record and its folder; CheckpointError
    when the study has no result or the best trial saved no checkpoint."""
    best = queries.best_trial(store, name)
    if best is None:
        raise CheckpointError(f"Study {name!r} has no result yet, so no best checkpoint")
    row = store.get_study(name)
    record = next(t for t in store.load_trials(row.study_id) if t.trial_id == best["trial_id"])
    if record.checkpoint is None:
        raise CheckpointError(f"The best trial of {name!r} (trial {record.trial_id}) saved no "
                              "checkpoint: report with ctx.report(step, checkpoint=state, ...)")
    return best, record, store.trial_dir(row, record.trial_id)


def best_checkpoint(store: Any, name: str, unsafe: bool = False) -> tuple[dict[str, Any], Any]:
    """``(best, state)``: the best trial (as ``best_trial()``, with ``checkpoint_step``) and its
    checkpoint's state, read as restores read it (safe loading unless ``unsafe``)."""
    best, record, folder = _best_with_checkpoint(store, name)
    state = checkpoints.read_checkpoint(folder, record.checkpoint, unsafe=unsafe)
    return {**best, "checkpoint_step": record.checkpoint_step}, state


def export_best(store: Any, name: str, out_dir: str | Path) -> Path:
    """Copy the best trial's checkpoint file into ``out_dir`` (created) beside ``best.json``
    (the trial, its config, value, step and the file's name); returns the copy's path. Nothing
    is unpickled: the file is copied as it is. A checkpoint that wraps a framework's own file
    (the Lightning integration's ``{"lightning_checkpoint": bytes}``) is also written out as
    that file, ``best.ckpt`` (``LightningModule.load_from_checkpoint`` reads it), named in
    ``best.json`` as ``framework_checkpoint``; its path is returned then. From a store the
    quick check finds intact (``StorageCorruptError`` otherwise)."""
    store.verify_integrity(f"export the best checkpoint of study {name!r}")
    best, record, folder = _best_with_checkpoint(store, name)
    name_ = record.checkpoint or ""
    if os.sep in name_ or name_.startswith(".") or not name_.startswith(checkpoints._PREFIX):
        raise CheckpointError(f"the stored checkpoint name {name_!r} is not a checkpoint file name")
    source = folder / name_
    if source.is_symlink():
        raise CheckpointError(f"the checkpoint {str(source)!r} is a symbolic link; not followed")
    if not source.is_file():
        raise CheckpointError(f"the checkpoint {str(source)!r} named by the study store is missing")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    target = out / name_
    shutil.copyfile(source, target)
    info = {**best, "checkpoint_step": record.checkpoint_step, "checkpoint": name_, "study": name}
    wrapped = _framework_file(folder, name_)
    if wrapped is not None:
        suffix, data = wrapped
        target = out / f"best{suffix}"
        target.write_bytes(data)
        info["framework_checkpoint"] = target.name
    (out / "best.json").write_text(json.dumps(info, indent=2) + "\n")
    return target


def _framework_file(folder: Path, name: str) -> tuple[str, bytes] | None:
    """The framework file a checkpoint wraps (``checkpoints.framework_file``), read safely;
    None for any other checkpoint, or one that safe loading cannot read (it is copied only)."""
    if not name.endswith(".pt"):
        return None
    try:
        return checkpoints.framework_file(checkpoints.read_checkpoint(folder, name))
    except (CheckpointError, OSError):
        return None
