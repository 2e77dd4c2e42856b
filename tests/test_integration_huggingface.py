"""hypersack.integrations.huggingface (issue 31): a transformers Trainer inside real trials on
local workers: reports per epoch, stops when the study pauses a trial, resumes from its
checkpoint; run_hf_search runs a study from a Trainer factory."""
from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from hypersack.errors import ConfigError, MissingDependencyError, TrialStopped

pytest.importorskip("transformers", reason="transformers is not installed (pip install 'hypersack[huggingface]')")
pytest.importorskip("accelerate", reason="accelerate is not installed (pip install 'hypersack[huggingface]')")


def _fits(tmp_path: Path, trial_id: int) -> list[dict]:
    folder, = tmp_path.glob(f"hypersack-runs/*/trial-{trial_id:05d}")
    return [json.loads((folder / f"fit-{n}.json").read_text())
            for n in range(1, len(list(folder.glob("fit-*.json"))) + 1)]


@pytest.mark.slow
def test_run_hf_search_pauses_stops_the_trainer_and_resumes_from_the_checkpoint(tmp_path):
    """SHA with 2 trials, rungs at epochs 1 and 2 (4 optimizer steps an epoch): both pause at
    epoch 1 (training stops there), the better resumes from its checkpoint for epoch 2."""
    import hypersack
    from hf_trainables import make_trainer
    from hypersack.integrations.huggingface import run_hf_search
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study = run_hf_search(make_trainer, {"lr": hypersack.Categorical([0.05, 0.001]), "epochs": 2},
                              n_trials=2, name="hf", workers=1, storage=tmp_path / "s.db",
                              algorithm={"type": "sha", "n": 2, "min_t": 1, "max_t": 2,
                                         "reduction_factor": 2}, progress=False)
    steps = {t: [r["step"] for r in study.results(t)] for t in (0, 1)}
    assert steps == {0: [1, 2], 1: [1]}
    first, second = study.results(0)
    assert second["eval_loss"] < first["eval_loss"] and second["epoch"] == 2.0
    paused, resumed = _fits(tmp_path, 0)
    assert paused["end"] == 4 and _fits(tmp_path, 1)[0]["end"] == 4     # stopped after epoch 1
    assert resumed["start"] == [4, paused["after"]["1"]]    # from the step and weights it saved
    assert resumed["end"] == 8
    assert study.best_trial()["trial_id"] == 0
    assert not list(tmp_path.glob("hypersack-runs/*/trial-*/hf/checkpoint-*"))   # moved into ctx


class _Ctx:
    def __init__(self, trial_dir, stop_at=None):
        self.trial_dir, self.world, self.stop_at, self.reports = trial_dir, SimpleNamespace(rank=0), stop_at, []

    def report(self, step, checkpoint=None, **metrics):
        self.reports.append((step, checkpoint, metrics))
        if self.stop_at is not None and len(self.reports) >= self.stop_at:
            raise TrialStopped()

    def should_stop(self):
        return False


def _control():
    return SimpleNamespace(should_save=False, should_training_stop=False)


def test_evaluations_report_outside_training_not_and_a_stop_ends_training(tmp_path):
    from hypersack.integrations.huggingface import HyperSackCallback
    ctx = _Ctx(tmp_path, stop_at=2)
    callback = HyperSackCallback(ctx, checkpoint_every=0)
    state, control = SimpleNamespace(epoch=1.0, global_step=4), _control()
    callback.on_evaluate(None, state, control, metrics={"eval_loss": 0.5})     # not training
    callback.on_train_begin(None, state, control)
    callback.on_evaluate(None, state, control, metrics={"eval_loss": 0.5, "note": "x"})
    assert not control.should_training_stop and not control.should_save
    callback.on_evaluate(None, SimpleNamespace(epoch=2.0, global_step=8), control,
                         metrics={"eval_loss": 0.25})
    assert control.should_training_stop and callback.stopped
    assert ctx.reports == [(1, None, {"eval_loss": 0.5}), (2, None, {"eval_loss": 0.25})]


def test_a_checkpointed_evaluation_asks_a_save_and_reports_the_saved_folder(tmp_path):
    from hypersack.integrations.huggingface import HyperSackCallback, unpack_folder
    ctx = _Ctx(tmp_path)
    callback = HyperSackCallback(ctx, step="global_step", checkpoint_every=2)
    args = SimpleNamespace(output_dir=str(tmp_path / "out"), load_best_model_at_end=False)
    callback.on_train_begin(args, None, _control())
    for step in (4, 8):
        control, state = _control(), SimpleNamespace(epoch=step / 4, global_step=step)
        callback.on_evaluate(args, state, control, metrics={"eval_loss": 1 / step})
        assert control.should_save == (step == 8)
    saved = tmp_path / "out" / "checkpoint-8"
    (saved / "sub").mkdir(parents=True)
    (saved / "model.bin").write_bytes(b"w")
    (saved / "sub" / "state.json").write_text("{}")
    callback.on_save(args, SimpleNamespace(global_step=8), _control())
    assert [(s, m) for s, _, m in ctx.reports] == [(4, {"eval_loss": 0.25}), (8, {"eval_loss": 0.125})]
    files = ctx.reports[1][1]["hf_checkpoint"]
    assert files == {"model.bin": b"w", "sub/state.json": b"{}"} and not saved.exists()
    back = unpack_folder(files, tmp_path / "back")
    assert (back / "sub" / "state.json").read_text() == "{}"
    with pytest.raises(ConfigError, match="outside"):
        unpack_folder({"../evil": b""}, tmp_path / "back")


def test_a_missing_monitor_a_repeated_epoch_and_bad_options_are_errors_naming_them(tmp_path):
    from hypersack.integrations.huggingface import HFTrainable, HyperSackCallback
    callback = HyperSackCallback(_Ctx(tmp_path), monitor="eval_acc", checkpoint_every=0)
    callback.on_train_begin(None, None, _control())
    with pytest.raises(ConfigError, match=r"monitor.*eval_acc.*\(eval_loss\)"):
        callback.on_evaluate(None, SimpleNamespace(epoch=1.0), _control(), metrics={"eval_loss": 1.0})
    callback = HyperSackCallback(_Ctx(tmp_path), checkpoint_every=0)
    callback.on_train_begin(None, None, _control())
    callback.on_evaluate(None, SimpleNamespace(epoch=0.5), _control(), metrics={"eval_loss": 1.0})
    with pytest.raises(ConfigError, match="global_step"):
        callback.on_evaluate(None, SimpleNamespace(epoch=1.0), _control(), metrics={"eval_loss": 1.0})
    with pytest.raises(ConfigError, match="step"):
        HFTrainable(lambda config: None, step="batch")
    with pytest.raises(ConfigError, match="trainer_factory"):
        HFTrainable("not callable")


def test_a_missing_transformers_names_the_extra(monkeypatch):
    import importlib
    monkeypatch.setitem(sys.modules, "transformers", None)                  # import fails
    monkeypatch.delitem(sys.modules, "hypersack.integrations.huggingface", raising=False)
    with pytest.raises(MissingDependencyError, match=r"hypersack\[huggingface\]"):
        importlib.import_module("hypersack.integrations.huggingface")
