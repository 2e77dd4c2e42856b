"""The logging integrations (issue 31): TensorBoard and MLflow callbacks, offline."""
from __future__ import annotations

import struct
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from hypersack.callbacks import FrozenTrial
from hypersack.errors import MissingDependencyError


def _study(tmp_path: Path) -> SimpleNamespace:
    return SimpleNamespace(name="demo", storage_path=tmp_path / "hypersack.db")


def _trial(trial_id: int, state: str = "running", **metrics) -> FrozenTrial:
    return FrozenTrial(trial_id, {"lr": 0.1, "opt": "adam", "sizes": [1, 2]}, state,
                       metrics.get("loss"), 2 if metrics else None, metrics,
                       "boom" if state == "failed" else None)


def _drive(callback, study) -> None:
    """Two trials: one complete after two results, one failed after one."""
    callback.on_trial_start(study, _trial(0))
    callback.on_trial_start(study, _trial(1))
    callback.on_trial_result(study, _trial(0), {"step": 1, "loss": 0.5, "acc": 0.7})
    callback.on_trial_result(study, _trial(1), {"step": 1, "loss": 0.9, "acc": 0.1})
    callback.on_trial_result(study, _trial(0), {"step": 2, "loss": 0.25, "acc": 0.8})
    callback.on_trial_complete(study, _trial(0, "complete", loss=0.25, acc=0.8))
    callback.on_trial_error(study, _trial(1, "failed", loss=0.9, acc=0.1))
    callback.on_study_end(study)


def _events(folder: Path) -> list:
    """Every event in the TFRecord files of ``folder`` (not below it)."""
    from tensorboardX.proto import event_pb2
    out = []
    for path in sorted(folder.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        at = 0
        while at < len(data):
            (length,) = struct.unpack("<Q", data[at:at + 8])
            event = event_pb2.Event()
            event.ParseFromString(data[at + 12:at + 12 + length])
            out.append(event)
            at += 12 + length + 4
    return out


def test_tensorboard_writes_a_run_per_trial_with_metrics_by_step_and_hparams(tmp_path):
    pytest.importorskip("tensorboardX")
    from hypersack.integrations.tensorboard import TensorBoardCallback
    _drive(TensorBoardCallback(max_open=1), _study(tmp_path))
    root = tmp_path / "hypersack-runs" / "tensorboard" / "demo"
    assert sorted(p.name for p in root.iterdir()) == ["trial-00000", "trial-00001"]
    scalars = [(v.tag, e.step, round(v.simple_value, 3)) for e in _events(root / "trial-00000")
               for v in e.summary.value]
    assert ("loss", 1, 0.5) in scalars and ("loss", 2, 0.25) in scalars and ("acc", 2, 0.8) in scalars
    hparams = _events(root / "trial-00000" / "hparams")
    text = b"".join(e.SerializeToString() for e in hparams)
    assert b"lr" in text and b"opt" in text and b"final/loss" in text
    assert _events(root / "trial-00001")      # the failed trial has its run too


def test_mlflow_logs_a_run_per_trial_to_a_local_file_store(tmp_path):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient
    from hypersack.integrations.mlflow import MLflowCallback
    _drive(MLflowCallback(tags={"team": "x"}), _study(tmp_path))
    client = MlflowClient(tracking_uri=(tmp_path / "hypersack-runs" / "mlruns").as_uri())
    experiment = client.get_experiment_by_name("demo")
    runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
    assert sorted(runs) == ["trial-00000", "trial-00001"]
    done, failed = runs["trial-00000"], runs["trial-00001"]
    assert done.data.params == {"lr": "0.1", "opt": "adam", "sizes": "[1, 2]"}
    assert done.data.tags["hypersack.state"] == "complete" and done.data.tags["team"] == "x"
    assert done.info.status == "FINISHED" and failed.info.status == "FAILED"
    history = client.get_metric_history(done.info.run_id, "loss")
    assert [(m.step, m.value) for m in history] == [(1, 0.5), (2, 0.25)]


@pytest.mark.parametrize("module, cls, extra", [("tensorboard", "TensorBoardCallback", "tensorboard"),
                                                ("mlflow", "MLflowCallback", "mlflow")])
def test_a_missing_package_names_the_extra(monkeypatch, module, cls, extra):
    import importlib
    for name in ("tensorboardX", "mlflow", "mlflow.tracking", "mlflow.entities"):
        monkeypatch.setitem(sys.modules, name, None)      # import fails
    callback = getattr(importlib.import_module(f"hypersack.integrations.{module}"), cls)
    with pytest.raises(MissingDependencyError, match=rf"hypersack\[{extra}\]"):
        callback()
