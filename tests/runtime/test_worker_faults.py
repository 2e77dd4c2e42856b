"""What a trainable does to its worker stays the trial's: an interrupt it raises is its error,
the processes it starts end with its worker, a full log is a clean failure."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import hypersack

pytestmark = pytest.mark.filterwarnings("ignore:Study .*no trial completed:RuntimeWarning")

REPO = Path(__file__).resolve().parents[2]


def _study(store_path, **kwargs):
    return hypersack.Study(name="w", space={"x": {"type": "float", "low": 0.0, "high": 1.0}},
                           objective=("score", "max"), n_trials=kwargs.pop("n_trials", 1),
                           storage=store_path, workers=1, **kwargs)


def _raises_interrupt(config, ctx):
    ctx.report(1, score=1.0)
    raise KeyboardInterrupt


def _exits(config, ctx):
    ctx.report(1, score=1.0)
    raise SystemExit(3)


def test_an_interrupt_a_trainable_raises_is_its_error_with_its_traceback(store_path, capfd):
    study = _study(store_path, n_trials=2, max_retries=2)
    assert study.run(_raises_interrupt, progress=False).status == "complete"
    trials = study.status()["trials"]
    assert [t["state"] for t in trials] == ["failed", "failed"]
    for t in trials:
        assert t["error"] == "KeyboardInterrupt: " and t["attempts"] == 1    # no retry
        assert "raise KeyboardInterrupt" in t["traceback"]
    assert "Traceback" not in capfd.readouterr().err       # only in the trials' logs


def test_system_exit_is_the_trials_error_too(store_path):
    study = _study(store_path)
    study.run(_exits, progress=False)
    (trial,) = study.status()["trials"]
    assert trial["state"] == "failed" and trial["error"] == "SystemExit: 3"


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie counts as ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def _wait_gone(pids: list[int], timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not all(_gone(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if not _gone(p)]


def _starts_sleeps(config, ctx):
    """Starts two `sleep 300` (one in a grandchild shell), records their pids, then hangs; the
    grid's first trial (``warm``) only reports, so the worker is up before the timed one."""
    if config["warm"]:
        ctx.report(1, score=0.0)
        return
    import subprocess as sp
    first = sp.Popen(["sleep", "300"])
    shell = sp.Popen(["sh", "-c", "sleep 300 & echo $!; wait"], stdout=sp.PIPE, text=True)
    second = int(shell.stdout.readline())
    Path(config["pids"]).write_text(f"{first.pid} {shell.pid} {second}")
    ctx.report(1, score=1.0)
    time.sleep(300)


def _two_trials_on_one_worker(store_path, pids, key, choices, trainable) -> list[dict]:
    """Two grid trials (``key`` in ``choices``, in order) one after the other on one worker,
    each with a 3 s timeout and no retry; their status rows."""
    space = {"pids": str(pids), key: {"type": "categorical", "choices": choices}}
    study = hypersack.Study(name="w", space=space, objective=("score", "max"), algorithm="grid",
                            n_trials=2, storage=store_path, workers=1, trial_timeout_s=3,
                            max_retries=0)
    study.run(trainable, progress=False)
    return study.status()["trials"]


def test_processes_a_trainable_started_end_with_its_timed_out_worker(store_path, tmp_path):
    pids = tmp_path / "pids"
    # The timeout counts from the launch: the timed trial runs second, on the warm worker, so
    # its 3 s never include the worker's start-up (a loaded machine can take longer than that).
    warm, trial = _two_trials_on_one_worker(store_path, pids, "warm", [True, False],
                                            _starts_sleeps)
    assert warm["state"] == "complete"
    assert trial["state"] == "failed" and "time" in trial["error"]
    started = [int(p) for p in pids.read_text().split()]
    assert _wait_gone(started) == []


DRIVER = textwrap.dedent('''
    import sys, time
    from pathlib import Path
    import hypersack

    def train(config, ctx):
        import subprocess as sp
        child = sp.Popen(["sleep", "300"])
        Path(config["pids"]).write_text(str(child.pid))
        ctx.report(1, score=1.0)
        time.sleep(300)

    study = hypersack.Study(name="k", space={"pids": sys.argv[1]}, objective=("score", "max"),
                            n_trials=1, storage=sys.argv[2], workers=1)
    study.run(train, progress=False)
''')


def test_processes_a_trainable_started_end_when_the_driver_is_killed(tmp_path):
    (tmp_path / "driver.py").write_text(DRIVER)
    pids = tmp_path / "pids"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    driver = subprocess.Popen([sys.executable, "driver.py", str(pids), str(tmp_path / "s.db")],
                              cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (pids.exists() and pids.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)
        sleep_pid = int(pids.read_text())
        assert not _gone(sleep_pid)
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    assert _wait_gone([sleep_pid]) == []


FULL_LOG = textwrap.dedent('''
    import os, sys
    from hypersack.runtime.worker import checkpoints, process as worker
    from hypersack.runtime.worker.messages import TrialTask, WorldSpec

    class Pipe:
        sent = []
        def send(self, message):
            self.sent.append(message)

    def fill_up(config, ctx):       # from now on the log is a full disk
        full = os.open("/dev/full", os.O_WRONLY)
        os.dup2(full, 1)
        os.dup2(full, 2)
        print("x" * 100, flush=True)

    if sys.argv[1] == "header":
        checkpoints.open_private = lambda path, append=False: os.open("/dev/full", os.O_WRONLY)
    task = TrialTask(7, {}, 0, 1, "cpu", sys.argv[2], "score", None, WorldSpec(), False, None,
                     False, ("k", None, None))
    pipe = Pipe()
    worker.run_task(pipe, task, {"k": fill_up})
    print("SENT", [(type(m).__name__, getattr(m, "disk_full", None)) for m in pipe.sent])
    print("after the trial", file=sys.stderr)
''')


def test_a_full_trial_log_is_a_clean_disk_full_failure_with_nothing_on_the_terminal(tmp_path):
    (tmp_path / "full.py").write_text(FULL_LOG)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for where in ("header", "trainable"):
        done = subprocess.run([sys.executable, "full.py", where, str(tmp_path / where)],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stderr == "after the trial\n"         # no traceback, no lost log lines
        assert "SENT [('Started', None), ('Failed', True)]" in done.stdout


class _Sent:
    """A pipe that keeps what is sent and acks each report at once."""
    def __init__(self):
        self.sent = []

    def send(self, message):
        self.sent.append(message)

    def recv(self):
        from hypersack.runtime.worker.messages import Ack
        return Ack(self.sent[-1].trial_id, 0, 1)

    def poll(self, timeout=0):
        return False


def _scores(config, ctx):
    ctx.report(1, score=1.0)


def test_a_trial_that_fails_before_loading_its_trainable_leaves_it_to_the_next(tmp_path):
    """The driver sends a trainable once per worker: a first trial that fails on an unsafe
    trial.log (before loading it) must not leave the next trials with "not sent"."""
    from hypersack.runtime.worker import process as worker
    from hypersack.runtime.worker.messages import Done, Failed, TrialTask, WorldSpec
    from hypersack.runtime.worker.trainable import TrainableRef
    ref = TrainableRef.of(_scores)
    unsafe = tmp_path / "t0"
    unsafe.mkdir(mode=0o700)
    (unsafe / "trial.log").symlink_to(tmp_path / "elsewhere.log")
    cache: dict = {}
    outcomes = []
    for trial_id, folder, sent in ((0, unsafe, (ref.key, ref.reference, ref.payload)),
                                   (1, tmp_path / "t1", (ref.key, None, None)),
                                   (2, tmp_path / "t2", (ref.key, None, None))):
        pipe = _Sent()
        task = TrialTask(trial_id, {}, 0, 1, "cpu", str(folder), "score", None, WorldSpec(),
                         False, None, False, sent)
        worker.run_task(pipe, task, cache)
        outcomes.append(pipe.sent[-1])
    assert isinstance(outcomes[0], Failed) and "UnsafePathError" in outcomes[0].reason
    assert [type(m) for m in outcomes[1:]] == [Done, Done]
    assert not (tmp_path / "elsewhere.log").exists()


def _escapes(config, ctx):
    """Starts a `sleep 300` in a session of its own (out of the worker's group), records its
    pid; the grid's second trial does so and then stops itself."""
    import subprocess as sp
    child = sp.Popen(["setsid", "sleep", "300"])
    with open(config["pids"], "a") as f:
        f.write(f"{child.pid}\n")
    ctx.report(1, score=1.0)
    if config["hang"]:
        time.sleep(300)


def test_no_process_a_trainable_started_outlives_its_trial_even_in_a_new_session(store_path, tmp_path):
    """A finished trial's escaped process ends with the trial (the worker stays warm); a
    timed-out trial's ends with its killed worker."""
    pids = tmp_path / "pids"
    done, hung = _two_trials_on_one_worker(store_path, pids, "hang", [False, True], _escapes)
    assert done["state"] == "complete" and hung["state"] == "failed"
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 2 and _wait_gone(started) == []


def _stops_itself_once(config, ctx):
    """The grid's third trial (on a warm worker) stops its own process at once (SIGSTOP: every
    thread, its heartbeat's too) on its first attempt; every other attempt reports and ends."""
    if config["case"] == 2 and ctx.attempt == 1:
        os.kill(os.getpid(), signal.SIGSTOP)
    ctx.report(1, score=1.0)
    ctx.report(2, score=2.0)


def test_a_trial_that_stops_itself_is_shown_not_responding_then_killed_and_retried(store_path, capsys):
    study = hypersack.Study(name="w", space={"case": {"type": "categorical", "choices": [0, 1, 2, 3]}},
                            objective=("score", "max"), algorithm="grid", n_trials=4,
                            storage=store_path, workers=2, heartbeat_timeout_s=3,
                            trial_timeout_s=60)     # a failure here fails, never hangs
    assert study.run(_stops_itself_once, progress="lines").status == "complete"
    trials = study.status()["trials"]
    assert [t["state"] for t in trials] == ["complete"] * 4
    stopped = next(t for t in trials if t["config"]["case"] == 2)
    assert stopped["retries"] == 1 and stopped["attempts"] == 2
    assert stopped["not_responding"] is None                 # cleared once it ended
    out = capsys.readouterr().out
    assert "not responding (no heartbeat for" in out


def _floods_its_log(config, ctx):
    """Writes 3 MB through Python, waits for the cap to be seen, then 3 MB at the C level."""
    Path(config["where"]).write_text(str(ctx.trial_dir))
    for _ in range(30):
        sys.stdout.write("x" * 99_999 + "\n")
    sys.stdout.flush()
    time.sleep(0.5)
    for _ in range(30):
        os.write(1, b"y" * 99_999 + b"\n")
    ctx.report(1, score=1.0)


def test_a_trials_log_is_capped_and_the_cut_marked(store_path, tmp_path):
    space = {"where": str(tmp_path / "where")}
    study = hypersack.Study(name="w", space=space, objective=("score", "max"), n_trials=1,
                            storage=store_path, workers=1, max_log_mb=1)
    study.run(_floods_its_log, progress=False)
    (trial,) = study.status()["trials"]
    assert trial["state"] == "complete"
    log = (Path((tmp_path / "where").read_text()) / "trial.log").read_bytes()
    assert 1_000_000 < len(log) < 1_000_000 + 1_000
    assert log.rstrip().endswith(b"executor.max_log_mb (1 MB) to its log; the rest of its "
                                 b"output is dropped ---")
    assert b"yyyy" not in log
