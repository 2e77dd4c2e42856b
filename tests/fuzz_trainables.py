"""Trainables that misbehave, for tests/runtime/test_trainable_fuzz.py (``fuzzed``: each trial
does one random thing to its worker and its driver, chosen by its ``case``, a seed) and
tests/runtime/test_bad_reports.py (``sends_raw``). Light imports: workers start fast."""
from __future__ import annotations

import math
import os
import random
import signal
import subprocess
import time
from pathlib import Path


class _BadStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no message for you")


def _array(rng: random.Random, shape, dtype="float64"):
    import numpy as np
    return np.full(shape, rng.random(), dtype=dtype)


def _metric(rng: random.Random):
    """A metric value: mostly numbers, often not. Arrays stand for tensors too: a metric is
    read through ``ndim`` and ``item()`` whatever its type (``validation.check_metric``), and
    importing torch would cost each fuzzed worker ~1.5 s of CPU (real tensors are reported in
    test_bad_reports.py)."""
    import numpy as np
    makers = [
        lambda: rng.random(), lambda: rng.randint(-5, 5), lambda: 10**rng.randint(18, 400),
        lambda: -(10**400), lambda: math.nan, lambda: math.inf, lambda: "0.5", lambda: None,
        lambda: {"nested": [1.0, {"deeper": 2}]}, lambda: [0.5], lambda: (0.5,), lambda: 1j,
        lambda: True, lambda: np.float32(rng.random()), lambda: np.int64(3), lambda: np.bool_(1),
        lambda: _array(rng, (2,)), lambda: _array(rng, ()), lambda: _array(rng, (1,)),
        lambda: _array(rng, (2, 1), "float32"), lambda: _array(rng, (), "float32"), lambda: object(),
        lambda: b"bytes", lambda: Path("/"), lambda: _BadStr(),
    ]
    return rng.choice(makers)()


def _step(rng: random.Random, good: int):
    """Mostly the right step; now and then anything."""
    import numpy as np
    if rng.random() < 0.85:
        return good
    return rng.choice([1.5, -1, 10**30, 2**53 + 1, "1", None, float(good), np.int64(good),
                       math.nan, True, good - 1])


def _spawn(record: Path, rng: random.Random) -> None:
    """Start a `sleep 300` (or a shell that starts one) and write down its pid."""
    if rng.random() < 0.5:
        pid = subprocess.Popen(["sleep", "300"]).pid
    else:
        shell = subprocess.Popen(["sh", "-c", "sleep 300 & echo $!; wait"], stdout=subprocess.PIPE,
                                 text=True)
        pid = int(shell.stdout.readline())       # the grandchild
        _note(record, shell.pid)
    _note(record, pid)


def _note(record: Path, pid: int) -> None:
    with open(record, "a") as f:
        f.write(f"{pid}\n")


def _end(rng: random.Random, record: Path, ctx) -> None:
    """How the trial ends: returns, returns a value, raises, exits, dies."""
    kind = rng.randrange(28)        # 0-9: the odd ends; the rest: a plain return
    if kind == 0:
        raise KeyboardInterrupt
    if kind == 1:
        raise SystemExit(rng.choice([0, 1, "bye"]))
    if kind == 2:
        raise _BadStr()
    if kind == 3:
        raise ValueError("plain failure")
    if kind == 4:
        os._exit(rng.choice([0, 1, 3]))
    if kind == 5:
        os.kill(os.getpid(), rng.choice([signal.SIGTERM, signal.SIGKILL, signal.SIGUSR1]))
        time.sleep(1)
    if kind == 6:
        os.kill(os.getpid(), signal.SIGINT)     # ignored by workers: the trial goes on
        time.sleep(0.01)
    if kind == 7:
        return _metric(rng)                     # reported as the objective
    if kind == 8:
        os.closerange(3, 64)                    # its pipe to the driver among them
        time.sleep(300)
    if kind == 9:
        print("x" * 10_000, flush=True)
    return None


def fuzzed(config, ctx):
    rng = random.Random(config["case"])
    record = Path(config["record"])
    _note(record, os.getpid())                  # the worker: the group to check afterwards
    if rng.random() < 0.25:
        _spawn(record, rng)
    for step in range(1, rng.randint(1, 5)):
        metrics = {"score": rng.random()}
        if rng.random() < 0.2:
            metrics[rng.choice(["score", "other", "", "a.b", "ü"])] = _metric(rng)
        if rng.random() < 0.2:
            ctx.checkpoint({"step": step})
        ctx.report(_step(rng, step), **metrics)
    return _end(rng, record, ctx)


def sends_raw(config, ctx):
    """Bypasses ctx.report: puts what ``config["wire"]`` says on its pipe to the driver, then
    waits for an ack that never comes."""
    import pickle

    import numpy as np
    conn = ctx._channel._pipe.conn
    if config["wire"] == "junk":
        conn.send_bytes(b"not a pickle")
    else:
        conn.send_bytes(pickle.dumps(("report", ctx.trial_id, 1, {"score": np.ones(2)}, None)))
    ctx._channel.flush()
