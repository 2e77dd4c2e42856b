"""hypersack.integrations.lightning (issue 31): a Lightning Trainer inside real trials on local
workers: reports per epoch, stops when the study pauses a trial, resumes from its checkpoint."""
from __future__ import annotations

import sys
import warnings
from types import SimpleNamespace

import pytest

import hypersack
from hypersack.errors import MissingDependencyError, TrialStopped

pytest.importorskip("lightning", reason="lightning is not installed (pip install 'hypersack[lightning]')")


@pytest.mark.slow
def test_a_paused_trial_stops_its_trainer_and_resumes_from_its_checkpoint(tmp_path):
    """SHA with 2 trials, rungs at epochs 1 and 2: both pause at epoch 1 (the Trainer stops
    there), the better resumes from its checkpoint and trains epoch 2."""
    study = hypersack.Study(name="pl", space={"lr": hypersack.Categorical([0.05, 0.001]),
                                              "epochs": 2},
                            objective=("val_loss", "min"), n_trials=2, workers=1,
                            algorithm={"type": "sha", "n": 2, "min_t": 1, "max_t": 2,
                                       "reduction_factor": 2},
                            storage=tmp_path / "s.db")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study.run("lightning_trainables:train", progress=False)
    results = {t: [(r["step"], r) for r in study.results(t)] for t in (0, 1)}
    assert [s for s, _ in results[0]] == [1, 2] and [s for s, _ in results[1]] == [1]
    assert {"val_loss", "train_loss"} <= set(results[0][0][1])
    assert results[0][1][1]["val_loss"] < results[0][0][1]["val_loss"]      # it learned on
    first, resumed = study.user_attrs(0)["fit-1"], study.user_attrs(0)["fit-2"]
    assert first["stopped"] and first["last_epoch"] == 1        # the pause stopped the Trainer
    assert study.user_attrs(1)["fit-1"]["stopped"]
    assert not resumed["stopped"] and resumed["start_epoch"] == 1 and resumed["last_epoch"] == 2
    assert resumed["start_weights"] == first["after"]["1"]      # the weights epoch 1 ended with
    assert study.best_trial()["trial_id"] == 0


class _Ctx:
    """A trial context that records reports and raises TrialStopped from the n-th on."""

    def __init__(self, trial_dir, stop_at=None):
        self.trial_dir, self.world, self.stop_at, self.reports = trial_dir, SimpleNamespace(rank=0), stop_at, []

    def report(self, step, checkpoint=None, **metrics):
        self.reports.append((step, checkpoint is not None, metrics))
        if self.stop_at is not None and len(self.reports) >= self.stop_at:
            raise TrialStopped()

    def should_stop(self):
        return False


def _trainer(epoch, **metrics):
    return SimpleNamespace(sanity_checking=False, current_epoch=epoch, global_step=4 * (epoch + 1),
                           callback_metrics=metrics, should_stop=False)


def test_reports_each_validation_and_a_stop_sets_should_stop(tmp_path):
    import torch
    from hypersack.integrations.lightning import HyperSackCallback
    ctx = _Ctx(tmp_path, stop_at=2)
    callback = HyperSackCallback(ctx, checkpoint_every=0)
    first, second = _trainer(0, val_loss=torch.tensor(0.5)), _trainer(1, val_loss=0.25, acc=1)
    callback.on_validation_end(first, None)
    assert not first.should_stop and not callback.stopped
    callback.on_validation_end(second, None)
    assert second.should_stop and callback.stopped
    assert ctx.reports == [(1, False, {"val_loss": 0.5}), (2, False, {"val_loss": 0.25, "acc": 1.0})]
    callback.on_validation_end(_trainer(2, val_loss=0.1), None)      # after the stop: not sent
    assert len(ctx.reports) == 2


def test_global_steps_and_the_sanity_check(tmp_path):
    from hypersack.integrations.lightning import HyperSackCallback
    ctx = _Ctx(tmp_path)
    callback = HyperSackCallback(ctx, step="global_step", checkpoint_every=0)
    callback.on_validation_end(SimpleNamespace(**{**vars(_trainer(0, val_loss=1.0)),
                                                  "sanity_checking": True}), None)
    callback.on_validation_end(_trainer(0, val_loss=1.0), None)
    assert [r[0] for r in ctx.reports] == [4]


def test_a_missing_monitor_or_a_repeated_epoch_is_an_error_naming_it(tmp_path):
    from hypersack.errors import ConfigError
    from hypersack.integrations.lightning import HyperSackCallback
    callback = HyperSackCallback(_Ctx(tmp_path), monitor="val_acc", checkpoint_every=0)
    with pytest.raises(ConfigError, match=r"monitor.*val_acc.*\(val_loss\)"):
        callback.on_validation_end(_trainer(0, val_loss=1.0), None)
    callback = HyperSackCallback(_Ctx(tmp_path), checkpoint_every=0)
    callback.on_validation_end(_trainer(0, val_loss=1.0), None)
    with pytest.raises(ConfigError, match="global_step"):
        callback.on_validation_end(_trainer(0, val_loss=1.0), None)


def test_bad_options_are_refused_naming_them():
    from hypersack.errors import ConfigError
    from hypersack.integrations.lightning import HyperSackCallback
    with pytest.raises(ConfigError, match="step"):
        HyperSackCallback(object(), step="batch")
    with pytest.raises(ConfigError, match="checkpoint_every"):
        HyperSackCallback(object(), checkpoint_every=-1)


def test_only_scalar_metrics_are_reported():
    import torch
    from hypersack.integrations.lightning import scalar_metrics
    assert scalar_metrics({"a": torch.tensor(0.5), "b": torch.ones(2), "c": 3, "d": True,
                           "e": "x"}) == {"a": 0.5, "c": 3.0}


def test_a_missing_lightning_names_the_extra(monkeypatch):
    import importlib
    for name in ("lightning", "lightning.pytorch", "pytorch_lightning"):
        monkeypatch.setitem(sys.modules, name, None)                  # import fails
    monkeypatch.delitem(sys.modules, "hypersack.integrations.lightning", raising=False)
    with pytest.raises(MissingDependencyError, match=r"hypersack\[lightning\]"):
        importlib.import_module("hypersack.integrations.lightning")


@pytest.mark.slow
def test_export_best_writes_a_ckpt_that_load_from_checkpoint_loads_and_logs_stay_quiet(tmp_path):
    """export-best of a Lightning study: ``best.ckpt`` loads with ``load_from_checkpoint`` with
    the best trial's weights; no trial log repeats "weights_only was not set" (issue 39)."""
    import torch
    from lightning_trainables import Linear
    study = hypersack.Study(name="plx", space={"lr": hypersack.Categorical([0.05, 0.001]),
                                               "epochs": 2},
                            objective=("val_loss", "min"), n_trials=2, workers=1,
                            algorithm="grid", storage=tmp_path / "s.db")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study.run("lightning_trainables:train", progress=False)
    path = study.export_best(tmp_path / "best")
    assert path.name == "best.ckpt"
    model = Linear.load_from_checkpoint(path, lr=0.05)
    best = study.best_trial()
    assert torch.isclose(torch.tensor(sum(float(p.detach().sum()) for p in model.parameters())),
                         torch.tensor(study.user_attrs(best["trial_id"])["fit-1"]["after"]["2"]),
                         atol=1e-5)
    logs = list((tmp_path / "hypersack-runs").rglob("trial.log"))
    assert len(logs) == 2 and not any("weights_only" in log.read_text() for log in logs)
