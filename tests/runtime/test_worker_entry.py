"""Workers start as their own program: a driver script without a __main__ guard works."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from multiprocessing.connection import wait
from pathlib import Path

from hypersack import Float, Study
from hypersack.runtime.worker.entry import WorkerProcess

REPO = Path(__file__).resolve().parents[2]

UNGUARDED = textwrap.dedent('''
    import json
    import hypersack
    from helper_next_to_script import offset      # a module beside the script (sys.path[0])

    class Curve:                                   # a class defined in __main__, used by workers
        def __init__(self, peak):
            self.peak = peak

        def value(self, x):
            return -(x - self.peak) ** 2 + offset()

    CURVE = Curve(0.3)
    print("DRIVER-BODY-RAN", flush=True)           # printed once: workers never run this script

    def train(config, ctx):
        for step in range(1, 3):
            ctx.report(step, score=CURVE.value(config["x"]))

    study = hypersack.Study(name="mine", space={"x": hypersack.Float(0.0, 1.0)},
                            objective=("score", "max"), n_trials=4, workers=2, seed=1)
    study.run(train, progress=False)
    print("BEST " + json.dumps(study.best_trial()), flush=True)
''')


def _run_script(folder: Path, body: str) -> subprocess.CompletedProcess:
    (folder / "helper_next_to_script.py").write_text("def offset():\n    return 10.0\n")
    (folder / "driver.py").write_text(body)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "driver.py"], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=120)


def test_a_script_without_main_guard_completes_its_study(tmp_path):
    done = _run_script(tmp_path, UNGUARDED)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("DRIVER-BODY-RAN") == 1
    best = json.loads(done.stdout.split("BEST ", 1)[1])
    assert best["trial_id"] in range(4)
    x = best["config"]["x"]
    assert best["value"] == -(x - 0.3) ** 2 + 10.0     # the class and the helper ran in a worker


def test_worker_process_reports_its_end_through_sentinel_and_exitcode():
    worker = WorkerProcess({"HYPERSACK_TEST_VAR": "1"})
    assert worker.is_alive() and worker.exitcode is None
    worker.kill()
    assert wait([worker.sentinel], timeout=30) == [worker.sentinel]
    worker.join(5)
    assert not worker.is_alive() and worker.exitcode == -9


def test_workers_import_from_the_driver_sys_path(tmp_path, monkeypatch):
    """A module only the driver's sys.path finds (not PYTHONPATH, not the cwd) imports in workers."""
    modules = tmp_path / "elsewhere"
    modules.mkdir()
    (modules / "probe_mod.py").write_text(
        "def train(config, ctx):\n    ctx.report(1, score=config['x'] + 100)\n")
    monkeypatch.syspath_prepend(str(modules))
    monkeypatch.chdir(tmp_path)
    study = Study(name="probe", space={"x": Float(0.0, 1.0)}, objective=("score", "max"),
                  n_trials=2, workers=1, storage=tmp_path / "h.db")
    study.run("probe_mod:train", progress=False)
    assert study.best_trial()["value"] >= 100


def test_worker_process_exits_cleanly_on_shutdown():
    worker = WorkerProcess({})
    try:
        worker.conn.send(("shutdown",))
        worker.join(30)
        assert worker.exitcode == 0
    finally:
        worker.kill()
        worker.conn.close()


def test_join_with_a_limit_returns_with_a_live_worker_still_running():
    worker = WorkerProcess({})
    try:
        worker.join(0.05)
        assert worker.is_alive() and worker.exitcode is None
        worker.kill()
        worker.join(30)          # the sentinel fires: the exit code is read
        assert worker.exitcode == -9
    finally:
        worker.kill()
        worker.conn.close()
