"""What an Optuna or Ray Tune user reaches for (issue 31): callbacks, enqueue, add_trial,
ask/tell."""
from __future__ import annotations

import logging
import threading

import pytest

import hypersack
from hypersack.callbacks import FrozenTrial, resolve_callbacks
from hypersack.core.trial import ResultReported, TrialFinished, TrialRecord, TrialStarted, TrialState
from hypersack.errors import ConfigError
from hypersack.runtime.loop.callbacks import CallbackRunner


class Recorder(hypersack.Callback):
    def __init__(self):
        self.calls: list[tuple] = []
        self.threads: set[str] = set()

    def _add(self, *call):
        self.threads.add(threading.current_thread().name)
        self.calls.append(call)

    def on_trial_start(self, study, trial):
        self._add("start", trial.trial_id)

    def on_trial_result(self, study, trial, result):
        self._add("result", trial.trial_id, result["step"])

    def on_trial_complete(self, study, trial):
        self._add("complete", trial.trial_id, trial.state)

    def on_trial_error(self, study, trial):
        self._add("error", trial.trial_id, trial.error)

    def on_study_end(self, study):
        self._add("end")


def _record(trial_id, state=TrialState.RUNNING, step=None):
    return TrialRecord(trial_id, {"x": 1.0}, 0, state=state, last_step=step,
                       value=None if step is None else 1.0)


# ---- the runner, without a study ----------------------------------------------------------

def test_runner_tells_start_results_and_end_once_in_order_off_the_calling_thread():
    rec = Recorder()
    runner = CallbackRunner([rec], study="S")
    trials = {0: _record(0)}
    runner.listen([TrialStarted(0, "cpu")], trials)
    trials[0].last_step = 1
    runner.listen([ResultReported(0, 1, {"y": 1.0})], trials)
    runner.listen([ResultReported(0, 1, {"y": 1.0})], trials)     # a replay: told once
    trials[0].state = TrialState.PRUNED
    runner.listen([TrialFinished(0)], trials)
    runner.listen([], trials)
    runner.close(trials)
    assert rec.calls == [("start", 0), ("result", 0, 1), ("complete", 0, "pruned"), ("end",)]
    assert rec.threads == {"hypersack-callbacks"}


def test_runner_tells_ends_the_loop_never_saw_at_close_and_skips_stored_ones():
    rec = Recorder()
    runner = CallbackRunner([rec], study="S")
    trials = {0: _record(0, TrialState.COMPLETE, 3), 1: _record(1, TrialState.PENDING)}
    runner.listen([], trials)                       # a resume: trial 0 ended before
    trials[1].state, trials[1].error = TrialState.FAILED, "no device"
    runner.close(trials)
    assert rec.calls == [("error", 1, "no device"), ("end",)]


def test_a_raising_callback_is_logged_once_and_the_others_still_run(caplog):
    seen = []

    def broken(study, trial):
        raise RuntimeError("boom")

    runner = CallbackRunner([broken, lambda study, trial: seen.append(trial.number)], study="S")
    trials = {i: _record(i, TrialState.COMPLETE, 1) for i in range(3)}
    with caplog.at_level(logging.ERROR, logger="hypersack.callbacks"):
        runner.listen([], {})
        runner.listen([TrialFinished(i) for i in range(3)], trials)
        runner.close(trials)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "boom" in caplog.text and errors[0].exc_info
    assert seen == [0, 1, 2]
    assert list(runner.failures.values()) == [3]


def test_a_slow_callback_never_holds_the_loop_and_close_waits_for_it():
    release, seen = threading.Event(), []

    def slow(study, trial):
        release.wait(10)
        seen.append(trial.trial_id)

    runner = CallbackRunner([slow], study="S")
    trials = {i: _record(i, TrialState.COMPLETE, 1) for i in range(3)}
    runner.listen([], {})
    runner.listen([TrialFinished(i) for i in range(3)], trials)     # returns at once
    assert seen == []
    release.set()
    runner.close(trials)
    assert seen == [0, 1, 2]


def test_callbacks_are_resolved_from_objects_classes_functions_and_references():
    out = resolve_callbacks([Recorder, Recorder(), print, "callbacks_helper:CALLBACK"])
    assert isinstance(out[0], Recorder) and out[2] is print
    with pytest.raises(ConfigError) as err:
        resolve_callbacks([1])
    assert err.value.field == "callbacks[0]"
    with pytest.raises(ConfigError, match="callbacks\\[0\\]"):
        resolve_callbacks(["no_such_module_xyz:cb"])
    with pytest.raises(ConfigError, match="must be a list"):
        hypersack.Study(name="c", space={"x": 1}, objective=("y", "max"), n_trials=1,
                        callbacks=Recorder())


def test_frozen_trial_speaks_optuna():
    trial = FrozenTrial(3, {"x": 1}, "complete", 0.5)
    assert trial.number == 3 and trial.params == {"x": 1} and trial.user_attrs == {}


# ---- callbacks in a running study ---------------------------------------------------------

@pytest.mark.slow
def test_study_callbacks_see_every_trial_and_a_broken_one_does_not_stop_it(tmp_path, caplog):
    rec, ends = Recorder(), []

    def optuna_style(study, trial):
        ends.append((trial.number, trial.state, study.name))

    def broken(study, trial):
        raise ValueError("callback bug")

    study = hypersack.Study(name="cb", space={"x": hypersack.Float(-1.0, 1.0)},
                            objective=("score", "max"), n_trials=4, workers=2,
                            storage=tmp_path / "s.db", callbacks=[rec, optuna_style, broken],
                            enqueue=[{"x": -0.5}, {"x": 0.5}, {"x": 0.25}, {"x": 0.75}])
    with caplog.at_level(logging.ERROR, logger="hypersack.callbacks"):
        study.run("trainables:raises_for_negative", progress=False)
    assert sorted(t for t, *_ in ends) == [0, 1, 2, 3]
    assert dict((t, s) for t, s, _ in ends) == {0: "failed", 1: "complete", 2: "complete",
                                                3: "complete"}
    assert {c[0] for c in rec.calls} == {"start", "result", "complete", "error", "end"}
    assert rec.calls[-1] == ("end",)
    for trial_id in range(4):
        mine = [c[0] for c in rec.calls if len(c) > 1 and c[1] == trial_id]
        assert mine[0] == "start" and mine[-1] in ("complete", "error")
    assert caplog.text.count("ValueError: callback bug") == 1


# ---- enqueue -----------------------------------------------------------------------------

def test_enqueue_is_validated_against_the_space_naming_key_and_value():
    study = hypersack.Study(name="e", space={"x": hypersack.Float(0.0, 1.0), "k": 3},
                            objective=("y", "max"), n_trials=2)
    with pytest.raises(ConfigError) as err:
        study.enqueue({"x": 2.0})
    assert err.value.field == "enqueue[0].x" and err.value.value == 2.0
    with pytest.raises(ConfigError, match="enqueue\\[0\\].z"):
        study.enqueue({"z": 1})
    study.enqueue({"x": 0.25})
    assert study.spec.to_dict()["enqueue"] == [{"x": 0.25}]
    with pytest.raises(ConfigError, match="enqueue\\[1\\].x"):
        hypersack.Study(name="e", space={"x": hypersack.Float(0.0, 1.0)}, objective=("y", "max"),
                        n_trials=2, enqueue=[{"x": 0.5}, {"x": "a"}])


@pytest.mark.parametrize("algorithm", ["random", "grid", "tpe",
                                       {"type": "asha", "min_t": 1, "max_t": 9},
                                       {"type": "bohb", "min_t": 1, "max_t": 9}])
def test_enqueued_configs_come_first_and_partial_ones_are_filled(algorithm):
    from hypersack.core.algorithms import make_algorithm
    from hypersack.core.objective import Objective
    from hypersack.core.space import SearchSpace
    from hypersack.core.warm_start import Enqueued
    space = SearchSpace({"x": hypersack.Float(0.0, 1.0), "n": hypersack.Int(1, 4)})
    inner = make_algorithm(algorithm, space, Objective("y", "max"), 0)
    algo = Enqueued(inner, [{"x": 0.5, "n": 2}, {"x": 0.75}])
    first, second, third = (algo.suggest(i) for i in range(3))
    assert first.config == {"x": 0.5, "n": 2} and first.info["enqueued"]
    assert second.config["x"] == 0.75 and 1 <= second.config["n"] <= 4
    assert "enqueued" not in third.info
    for trial_id in range(3):
        algo.on_result(trial_id, 1, {"y": 0.1 * trial_id})
        algo.on_complete(trial_id, 0.1 * trial_id, "complete")
    state = algo.state_dict()
    again = Enqueued(make_algorithm(algorithm, space, Objective("y", "max"), 0),
                     [{"x": 0.5, "n": 2}, {"x": 0.75}])
    again.load_state_dict(state)
    assert again.taken == 2
    assert again.suggest(3).config == algo.suggest(3).config


def test_an_enqueued_asha_keeps_its_state_in_parts_as_a_store_does():
    from hypersack.core.algorithms import make_algorithm
    from hypersack.core.algorithms.base import StateParts
    from hypersack.core.objective import Objective
    from hypersack.core.space import SearchSpace
    from hypersack.core.warm_start import Enqueued
    space = SearchSpace({"x": hypersack.Float(0.0, 1.0)})

    def build():
        inner = make_algorithm({"type": "asha", "min_t": 1, "max_t": 9}, space,
                               Objective("y", "max"), 0)
        return Enqueued(inner, [{"x": 0.5}, {"x": 0.25}])

    algo, parts, rest = build(), {}, {}
    for trial_id in range(4):
        algo.suggest(trial_id)
        algo.on_result(trial_id, 1, {"y": trial_id / 10})
        delta = algo.state_delta()
        assert delta is not None and isinstance(delta.get("parts"), StateParts)
        parts.update({k: v for k, v in delta["parts"].items() if v is not None})
        rest = {k: v for k, v in delta.items() if k != "parts"}
    again = build()
    again.load_state_dict({**rest, "parts": parts})              # what get_study hands back
    assert again.taken == 2
    assert again.suggest(4).config == algo.suggest(4).config


def test_pinned_configs_are_what_tpe_learns():
    from hypersack.core.algorithms import make_algorithm
    from hypersack.core.objective import Objective
    from hypersack.core.space import SearchSpace
    from hypersack.core.warm_start import Enqueued
    space = SearchSpace({"x": hypersack.Float(0.0, 1.0)})
    algo = Enqueued(make_algorithm("tpe", space, Objective("y", "max"), 0), [{"x": 0.125}])
    algo.suggest(0)
    algo.on_complete(0, 3.0, "complete")
    journal = algo.inner.model.trials()
    assert [e["s"] for e in journal] == ["F", "C"] and journal[1]["p"] == [0.125]


# ---- add_trial, ask and tell --------------------------------------------------------------

def test_add_trial_stores_a_complete_trial_outside_the_budget_and_tpe_learns_it(tmp_path):
    study = hypersack.Study(name="warm", space={"x": hypersack.Float(0.0, 1.0)},
                            objective=("y", "max"), n_trials=1, algorithm="tpe",
                            storage=tmp_path / "s.db")
    added = study.add_trial({"x": 0.5}, [{"y": 0.2}, {"y": 0.4}])
    assert added["trial_id"] == 0 and added["state"] == "complete" and added["value"] == 0.4
    assert study.best_trial()["value"] == 0.4
    assert [r["step"] for r in study.results(0)] == [1, 2]
    with pytest.raises(ConfigError, match="config.x"):
        study.add_trial({"x": 5.0}, 1.0)
    with pytest.raises(ConfigError, match="values"):
        study.add_trial({"x": 0.5}, {"other": 1.0})
    trial = study.ask()                       # the budget (1) does not count the added trial
    assert trial is not None and trial.trial_id == 1
    study.tell(trial, 0.9)
    assert study.ask() is None
    assert study.best_trial()["trial_id"] == 1


def test_ask_and_tell_drive_a_study_and_refuse_a_second_tell(tmp_path):
    study = hypersack.Study(name="at", space={"x": hypersack.Float(-1.0, 1.0)},
                            objective=("y", "min"), n_trials=3, storage=tmp_path / "s.db",
                            enqueue=[{"x": 0.0}])
    values = []
    while (trial := study.ask()) is not None:
        if trial.trial_id == 2:
            study.tell(trial, state="failed")
            continue
        values.append(trial.config["x"])
        study.tell(trial.trial_id, {"y": trial.config["x"] ** 2})
    assert values[0] == 0.0 and len(values) == 2
    status = study.status()
    assert (status["complete"], status["failed"]) == (2, 1)
    assert study.best_trial()["config"] == {"x": 0.0}
    with pytest.raises(ConfigError, match="trial"):
        study.tell(0, 1.0)


# ---- user attributes and shared objects ---------------------------------------------------

def test_attributes_are_validated_naming_the_key(tmp_path):
    from hypersack.runtime.storage.user_attrs import check_attr, read_trial_attrs, write_trial_attr
    with pytest.raises(ConfigError) as err:
        check_attr("when", float("nan"))
    assert err.value.field == "user_attrs.when"
    with pytest.raises(ConfigError, match="user_attrs"):
        check_attr("bad key!", 1)
    with pytest.raises(ConfigError, match="at most"):
        check_attr("big", "x" * 70_000)
    write_trial_attr(tmp_path, "a", {"b": [1, 2]})
    write_trial_attr(tmp_path, "c", "d")
    assert read_trial_attrs(tmp_path) == {"a": {"b": [1, 2]}, "c": "d"}


@pytest.mark.slow
def test_trial_and_study_attributes_reach_the_store_dataframe_and_report(tmp_path):
    pytest.importorskip("pandas")
    seen = {}

    def at_end(study, trial):                # as Optuna's callbacks read trial.user_attrs
        seen[trial.number] = trial.user_attrs

    study = hypersack.Study(name="attrs", space={"x": hypersack.Categorical([1.0, 2.0])},
                            objective=("score", "max"), n_trials=2, workers=1, algorithm="grid",
                            storage=tmp_path / "s.db", shared={"offset": 7}, callbacks=[at_end])
    study.set_attr("owner", "me")                       # before the study is stored
    study.run("ecosystem_trainables:with_attrs", progress=False)
    study.set_attr("phase", 2)                          # after: stored at once
    assert study.user_attrs() == {"owner": "me", "phase": 2}
    assert study.user_attrs(0) == {"layers": [1, 2], "note": "x=1.0", "offset": 7}
    assert seen == {0: study.user_attrs(0), 1: study.user_attrs(1)}
    frame = study.trials_dataframe()
    assert list(frame["user_attrs_note"]) == ["x=1.0", "x=2.0"]
    assert list(frame["user_attrs_offset"]) == [7, 7]          # ctx.shared reached each trial
    html = study.report(tmp_path / "r.html").read_text()
    assert "user_attrs_note" in html


def test_shared_objects_ride_once_with_the_trainable():
    import cloudpickle
    from hypersack.runtime.worker.shared import WithShared, check_shared
    from hypersack.runtime.worker.trainable import TrainableRef

    class Ctx:
        shared = None

    ref = TrainableRef.of(WithShared("ecosystem_trainables:with_attrs", {"big": list(range(10))}))
    train = cloudpickle.loads(ref.payload)
    seen = []
    train.train = lambda config, ctx: seen.append(ctx.shared["big"][-1])
    train({}, Ctx())
    assert seen == [9]
    with pytest.raises(ConfigError, match="shared"):
        check_shared({1: 2})


# ---- best checkpoints ---------------------------------------------------------------------

def test_keep_best_keeps_the_n_best_ended_trials():
    from hypersack.core.keep_best import KeepBest
    from hypersack.core.objective import Objective
    keep = KeepBest(Objective("loss", "min"), 2)
    assert keep.offer(0, 0.5, "complete") == []
    assert keep.offer(1, 0.9, "pruned") == []
    assert keep.offer(2, 0.1, "complete") == [1]          # pushes the worst out
    assert keep.offer(3, 0.7, "complete") == [3]
    assert keep.offer(4, None, "pruned") == [4]
    assert keep.offer(5, 0.0, "failed") == [5]
    assert keep.trials == [2, 0]
    with pytest.raises(ConfigError, match="keep_checkpoints_num"):
        KeepBest(Objective("loss", "min"), 0)
    with pytest.raises(ConfigError, match="keep_checkpoints_num"):
        hypersack.Study(name="k", space={"x": 1}, objective=("y", "max"), n_trials=1,
                        keep_checkpoints_num=-1)


@pytest.mark.slow
def test_only_the_best_checkpoints_are_kept_and_the_best_is_exported(tmp_path, capsys):
    from hypersack._entry import main
    study = hypersack.Study(name="ckpt", space={"x": hypersack.Categorical([1.0, 4.0, 2.0, 3.0]),
                                                "peak": 3},
                            objective=("score", "max"), n_trials=4, workers=2, algorithm="grid",
                            storage=tmp_path / "s.db", keep_checkpoints_num=2)
    study.run("ecosystem_trainables:checkpoints_each_step", progress=False)
    with hypersack.runtime.storage.sqlite.Storage(tmp_path / "s.db", readonly=True) as store:
        row = store.get_study("ckpt")
        kept = {t.config["x"] for t in store.load_trials(row.study_id)
                if any(p.name.startswith("checkpoint-") for p in store.trial_dir(row, t.trial_id).iterdir())}
    assert kept == {4.0, 3.0}
    assert study.best_checkpoint() == {"step": 4, "x": 4.0}   # its last state, past its peak
    assert main(["export-best", "ckpt", "--storage", str(tmp_path / "s.db"),
                 "-o", str(tmp_path / "best")]) == 0
    import json
    info = json.loads((tmp_path / "best" / "best.json").read_text())
    assert info["config"]["x"] == 4.0 and info["checkpoint_step"] == 4
    assert (tmp_path / "best" / info["checkpoint"]).is_file()


# ---- the study file's fields --------------------------------------------------------------

@pytest.mark.parametrize("field, value, named", [
    ("callbacks", 3, "callbacks"), ("callbacks", ["no_colon"], "callbacks[0]"),
    ("enqueue", [{"lr": 5.0}], "enqueue[0].lr"), ("enqueue", [{"width": 1}], "enqueue[0].width"),
    ("enqueue", {"lr": 0.1}, "enqueue"), ("keep_checkpoints_num", 0, "keep_checkpoints_num")])
def test_study_file_fields_are_validated_naming_the_field(field, value, named):
    from hypersack.core.spec import StudySpec
    base = {"name": "s", "objective": {"metric": "loss", "mode": "min"}, "budget": {"trials": 1},
            "space": {"lr": {"type": "float", "low": 0.001, "high": 0.1}}}
    with pytest.raises(ConfigError) as err:
        StudySpec.from_dict({**base, field: value})
    assert err.value.field == named
    spec = StudySpec.from_dict({**base, "callbacks": ["m:cb"], "enqueue": [{"lr": 0.01}],
                                "keep_checkpoints_num": 2})
    assert StudySpec.from_dict(spec.to_dict()) == spec
    assert "callbacks" not in StudySpec.from_dict(base).to_dict()     # old stored specs compare equal


def test_export_best_without_a_checkpoint_is_an_error_naming_the_trial(tmp_path, capsys):
    from hypersack._entry import main
    study = hypersack.Study(name="nock", space={"x": hypersack.Float(0.0, 1.0)},
                            objective=("y", "max"), n_trials=1, storage=tmp_path / "s.db")
    study.add_trial({"x": 0.5}, 1.0)
    assert main(["export-best", "nock", "--storage", str(tmp_path / "s.db"), "-o",
                 str(tmp_path / "out")]) == 2
    assert "trial 0" in capsys.readouterr().err and not (tmp_path / "out").exists()
