"""Real studies in worker processes: results, failures, retries, timeouts, logs, budgets."""
from __future__ import annotations

import pytest

import hypersack
from hypersack.errors import (ConfigError, StorageError, StudyExistsError, TrainableError,
                              TrialsFailingError)
from hypersack.runtime.devices.slots import default_slots

SPACE = {"x": {"type": "float", "low": 0.0, "high": 1.0}}


def make_study(store_path, n_trials=4, space=SPACE, **kwargs):
    """A study of ``trainables`` on one worker unless ``workers`` says (each is a process)."""
    kwargs.setdefault("workers", 1)
    return hypersack.Study(name=kwargs.pop("name", "t"), space=space, objective=("score", "max"),
                           n_trials=n_trials, storage=store_path, **kwargs)


def by_id(status):
    return {t["trial_id"]: t for t in status["trials"]}


def test_study_completes_and_stores_every_result(store_path):
    study = make_study(store_path, n_trials=6, workers=2)
    run = study.run("trainables:quick", progress=False)
    assert run.status == "complete"
    status = study.status()
    assert status["complete"] == 6 and status["failed"] == 0 and status["total"] == 6
    results = study.results()
    assert len(results) == 6 * 5
    for t in status["trials"]:
        assert t["value"] == pytest.approx(t["config"]["x"] * 5)
        assert t["last_step"] == 5
    best = study.best_trial()
    assert best["value"] == max(t["value"] for t in status["trials"])
    assert set(best) == {"trial_id", "config", "metric", "value", "step", "state"}
    assert best["step"] == 5 and best["state"] == "complete"


def test_callable_trainable_is_shipped_to_workers(store_path):
    def train(config, ctx):          # a closure: shipped by value with cloudpickle
        ctx.report(1, score=config["x"] + offset)
    offset = 100.0
    study = make_study(store_path, n_trials=2)
    study.run(train, progress=False)
    assert all(t["value"] >= 100.0 for t in study.status()["trials"])


def test_raising_trial_fails_with_traceback_and_study_continues(store_path):
    space = {"x": {"type": "categorical", "choices": [-1.0, 1.0]}}
    study = make_study(store_path, n_trials=6, space=space, algorithm="grid")
    study.run("trainables:raises_for_negative", progress=False)
    trials = by_id(study.status())
    failed = [t for t in trials.values() if t["state"] == "failed"]
    complete = [t for t in trials.values() if t["state"] == "complete"]
    assert len(failed) == 1 and len(complete) == 1      # the grid has two points
    assert "ValueError: negative x: -1.0" in failed[0]["error"]
    assert "Traceback" in failed[0]["traceback"] and "raises_for_negative" in failed[0]["traceback"]


def test_sys_exit_in_a_trainable_fails_only_that_trial(store_path):
    study = make_study(store_path, n_trials=2)
    study.run("trainables:calls_exit", progress=False)
    trials = study.status()["trials"]
    assert [t["state"] for t in trials] == ["failed", "failed"]
    assert all(t["error"] == "SystemExit: 3" and t["attempts"] == 1 for t in trials)


def test_nan_metric_fails_the_trial_with_that_reason(store_path):
    study = make_study(store_path, n_trials=1)
    study.run("trainables:nan_metric", progress=False)
    trial = study.status()["trials"][0]
    assert trial["state"] == "failed"
    assert trial["error"] == "metric 'score' is nan at step 2"
    assert [r["step"] for r in study.results()] == [1, 2]    # step 3 never ran


def test_a_metric_typo_stops_the_study_after_max_failures_trials(store_path):
    study = make_study(store_path, n_trials=40, max_failures=2)
    with pytest.raises(TrialsFailingError) as exc:
        study.run("trainables:wrong_metric", progress=False)
    assert "2 trials in a row failed the same way" in str(exc.value)
    assert "'score' is missing from the trial's first report" in str(exc.value)
    assert "'loss'" in str(exc.value) and "hypersack resume t" in str(exc.value)
    assert "if the objective itself is wrong" in str(exc.value)         # resume keeps it
    assert "hypersack run FILE --replace" in str(exc.value)
    status = study.status()
    assert status["total"] == 2 and status["failed"] == 2 and status["status"] == "interrupted"


def test_returned_number_is_the_final_objective(store_path):
    study = make_study(store_path, n_trials=2)
    study.run("trainables:returns_value", progress=False)
    for t in study.status()["trials"]:
        assert t["state"] == "complete" and t["value"] == pytest.approx(t["config"]["x"] * 10)


def test_killed_worker_is_retried_from_its_checkpoint(store_path):
    study = make_study(store_path, n_trials=1)
    study.run("trainables:dies_once", progress=False)
    trial = study.status()["trials"][0]
    assert trial["state"] == "complete"
    assert trial["attempts"] == 2 and trial["retries"] == 1
    results = {r["step"]: r for r in study.results()}
    assert sorted(results) == [1, 2, 3, 4, 5]
    assert results[3]["resumed_from"] == 1.0       # first attempt got to step 3 ...
    assert results[4]["resumed_from"] == 2.0       # ... and the retry went on from its checkpoint


def test_segfaulting_worker_is_retried_from_its_checkpoint(store_path):
    study = make_study(store_path, n_trials=1)
    study.run("trainables:segfaults_once", progress=False)
    trial = study.status()["trials"][0]
    assert trial["state"] == "complete" and trial["retries"] == 1 and trial["last_step"] == 4
    assert trial["error"] is None


def test_a_report_is_in_the_store_when_it_returns_to_the_trainable(store_path):
    study = make_study(store_path, n_trials=2, space={"db": str(store_path), **SPACE})
    study.run("trainables:checks_durability", progress=False)
    results = study.results()
    assert len(results) == 14
    assert all(r["durable_before"] == 1.0 for r in results), [
        (r["trial_id"], r["step"], r["durable_before"]) for r in results]


def test_worker_that_keeps_dying_fails_after_max_retries(store_path):
    study = make_study(store_path, n_trials=1, max_retries=1)
    study.run("trainables:always_dies", progress=False)
    trial = study.status()["trials"][0]
    assert trial["state"] == "failed" and trial["attempts"] == 2
    assert "worker process died (killed by SIGKILL)" in trial["error"]
    assert "gave up after 1 retries" in trial["error"]


def test_trial_over_its_timeout_is_killed_and_failed(store_path):
    space = {"x": 0.5, "sleep": 30}
    study = make_study(store_path, n_trials=1, space=space, trial_timeout_s=1.0)
    study.run("trainables:sleeps", progress=False)
    trial = study.status()["trials"][0]
    assert trial["state"] == "failed" and "timed out after 1 s" in trial["error"]


def test_trial_output_goes_to_its_log_file(store_path):
    study = make_study(store_path, n_trials=1)
    study.run("trainables:chatty", progress=False)
    (folder,) = (store_path.parent / "hypersack-runs").glob("t-*")     # keyed by the study's uuid
    log = (folder / "trial-00000" / "trial.log").read_text()
    assert "hello from trial 0" in log and "raw stderr line" in log


def test_time_budget_stops_running_trials_at_their_next_report(store_path):
    study = hypersack.Study(name="t", space=SPACE, objective=("score", "max"), time_budget_s=2.5,
                            storage=store_path, workers=2)
    study.run("trainables:ignores_stop", progress=False)
    status = study.status()
    # Load-independent: however slowly workers start, each trial that ran ended COMPLETE with
    # its last report (stored once, gap-free); none is left running, pending or failed. The
    # decision itself (when time is up, stop at the next report) is tested in core.
    assert status["running"] == 0 and status["pending"] == 0 and status["failed"] == 0
    for t in status["trials"]:
        steps = [r["step"] for r in study.results(t["trial_id"])]
        assert t["state"] == "complete" and steps == list(range(1, t["last_step"] + 1))
        assert t["value"] == float(t["last_step"])


def test_grid_study_ends_when_the_grid_is_exhausted(store_path):
    space = {"x": {"type": "float", "low": 0.0, "high": 1.0}}
    study = make_study(store_path, n_trials=100, space=space,
                       algorithm={"type": "grid", "points_per_axis": 3})
    study.run("trainables:quick", progress=False)
    xs = sorted(t["config"]["x"] for t in study.status()["trials"])
    assert xs == [0.0, 0.5, 1.0]


def test_tpe_study_runs(store_path):
    pytest.importorskip("optuna")
    study = make_study(store_path, n_trials=6, algorithm={"type": "tpe", "n_startup_trials": 3})
    study.run("trainables:quick", progress=False)
    assert study.status()["complete"] == 6


def test_existing_study_is_an_error_unless_resumed_or_replaced(store_path):
    make_study(store_path, n_trials=1).run("trainables:quick", progress=False)
    with pytest.raises(StudyExistsError, match="already exists") as exc:
        make_study(store_path, n_trials=1).run("trainables:quick", progress=False)
    for way in ("hypersack resume t", "--resume", "--replace", "if_exists='resume'",
                "if_exists='replace'", "load_if_exists=True"):
        assert way in str(exc.value)
    assert isinstance(exc.value, StorageError)
    make_study(store_path, n_trials=2).run("trainables:quick", load_if_exists=True,
                                           progress=False)
    assert make_study(store_path).status()["total"] == 2       # resumed with more trials
    make_study(store_path, n_trials=2).run("trainables:quick", if_exists="replace", progress=False)
    assert make_study(store_path).status()["total"] == 2


def test_several_studies_share_one_file(store_path):
    make_study(store_path, n_trials=1, name="a").run("trainables:quick", progress=False)
    make_study(store_path, n_trials=2, name="b").run("trainables:quick", progress=False)
    assert make_study(store_path, name="a").status()["total"] == 1
    assert make_study(store_path, name="b").status()["total"] == 2


def test_missing_trainable_is_a_clear_error(store_path):
    with pytest.raises(TrainableError, match="has no trainable"):
        make_study(store_path).run(progress=False)
    with pytest.raises(TrainableError, match="cannot be imported"):
        make_study(store_path).run("no_such_module_xyz:train", progress=False)


def test_default_slots_one_per_core_without_gpus():
    slots = default_slots(gpus=[], cpu_count=4)
    assert [s.device for s in slots] == ["cpu"] * 4
    assert all(s.env["OMP_NUM_THREADS"] == "1" and s.env["CUDA_VISIBLE_DEVICES"] == "" for s in slots)
    gpu_slots = default_slots(gpus=[0, 3], cpu_count=16)
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in gpu_slots] == ["0", "3"]
    assert [s.device for s in gpu_slots] == ["cuda:0", "cuda:0"] and gpu_slots[1].label == "cuda:3"


def test_resume_may_grow_the_budget_but_not_change_the_space(store_path):
    make_study(store_path, n_trials=2).run("trainables:quick", progress=False)
    grown = make_study(store_path, n_trials=4)
    grown.run("trainables:quick", if_exists="resume", progress=False)
    assert grown.status()["complete"] == 4
    assert hypersack.Study.load("t", store_path).spec.budget.trials == 4   # kept for later resumes
    other_space = {"x": {"type": "float", "low": 0.0, "high": 2.0}}
    with pytest.raises(hypersack.ConfigError, match="The value of space is .* differs from the stored"):
        make_study(store_path, space=other_space).run("trainables:quick", if_exists="resume",
                                                      progress=False)


def test_an_unknown_algorithm_is_refused_when_the_study_is_made(store_path):
    with pytest.raises(ConfigError, match="algorithm.type"):
        make_study(store_path, algorithm="nosuch")
    with pytest.raises(ConfigError, match="algorithm.bogus"):
        make_study(store_path, algorithm={"type": "asha", "min_t": 1, "max_t": 9, "bogus": 1})
    assert not store_path.exists()


def test_load_if_exists_cannot_contradict_replace(store_path):
    with pytest.raises(ConfigError, match="load_if_exists"):
        make_study(store_path).run("trainables:quick", if_exists="replace", load_if_exists=True)


def test_a_trainable_with_a_syntax_error_fails_before_anything_is_stored(store_path, tmp_path,
                                                                         monkeypatch):
    (tmp_path / "fp_syntax.py").write_text("def train(config, ctx):\n    return (\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=r"syntax error at .*fp_syntax.py:2"):
        make_study(store_path).run("fp_syntax:train", progress=False)
    assert not store_path.exists()


def test_a_trainable_that_cannot_be_imported_fails_every_trial_with_the_same_error(
        store_path, tmp_path, monkeypatch):
    """Later trials on the same worker were "AssertionError:" (the driver sends the reference
    once per worker); each now names the import error, and the study stops at max_failures."""
    (tmp_path / "fp_badimport.py").write_text("import fp_no_such_package\n"
                                              "def train(config, ctx): pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    study = make_study(store_path, n_trials=10, max_failures=3)
    with pytest.raises(TrialsFailingError, match="3 trials in a row"):
        study.run("fp_badimport:train", progress=False)
    errors = [t["error"] for t in study.status()["trials"]]
    assert len(errors) == 3
    assert all("No module named 'fp_no_such_package'" in e for e in errors), errors


def test_a_space_with_nothing_to_search_runs_one_trial_and_says_so(store_path):
    study = make_study(store_path, n_trials=3, space={"x": 0.5}, algorithm="tpe")
    with pytest.warns(UserWarning, match="nothing to search .* runs one trial"):
        study.run("trainables:quick", progress=False)
    assert study.status()["total"] == 1


INTERRUPTED_SCRIPT = """
import os, signal, hypersack

def stop_after_first(study, trial):        # Ctrl-C as a person would press it, mid-study
    os.kill(os.getpid(), signal.SIGINT)

study = hypersack.Study(name="ctrl_c", space={"x": hypersack.Float(0, 1)}, objective=("score", "max"),
                        n_trials=6, workers=1, storage="s.db", callbacks=[stop_after_first])
study.run("trainables:quick", progress=False)
print("not reached")
"""


def test_ctrl_c_in_python_saves_the_study_prints_how_to_resume_and_raises(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path
    tests = Path(__file__).resolve().parents[1]
    (tmp_path / "script.py").write_text(INTERRUPTED_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests), str(tests.parent)])}
    out = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode in (130, -2), out.stderr          # died of the re-raised KeyboardInterrupt
    assert "not reached" not in out.stdout
    line = "hypersack.Study.load('ctrl_c', storage='s.db').resume(train)"
    assert f"continue it with: {line}" in out.stderr and "KeyboardInterrupt" in out.stderr
    study = hypersack.Study.load("ctrl_c", tmp_path / "s.db")
    assert study.status()["status"] == "interrupted" and study.status()["total"] < 6
