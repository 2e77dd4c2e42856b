"""Trainables used by the integration tests, importable by worker processes."""
from __future__ import annotations

import os
import signal
import time


def quick(config, ctx):
    """Five reports of score = x * step."""
    for step in range(1, 6):
        ctx.report(step, score=config["x"] * step)


def checkpointing(config, ctx):
    """``steps`` steps of ``sleep`` seconds, a checkpoint before each report; records every start."""
    state = ctx.restore() or {"step": 0, "starts": []}
    state["starts"].append(state["step"])
    for step in range(state["step"] + 1, config.get("steps", 6) + 1):
        time.sleep(config.get("sleep", 0.0))
        state["step"] = step
        ctx.checkpoint(state)
        ctx.report(step, score=config["x"] * step, starts=len(state["starts"]))


def dies_once(config, ctx):
    """Kills its own worker with SIGKILL at step 3 of the first attempt, after checkpointing."""
    state = ctx.restore() or {"step": 0}
    for step in range(state["step"] + 1, 6):
        state["step"] = step
        ctx.checkpoint(state)
        ctx.report(step, score=float(step), resumed_from=float(ctx.attempt))
        if step == 3 and ctx.attempt == 1:
            os.kill(os.getpid(), signal.SIGKILL)


def always_dies(config, ctx):
    ctx.report(1, score=1.0)
    os.kill(os.getpid(), signal.SIGKILL)


def raises_for_negative(config, ctx):
    ctx.report(1, score=config["x"])
    if config["x"] < 0:
        raise ValueError(f"negative x: {config['x']}")
    ctx.report(2, score=config["x"] * 2)


def nan_metric(config, ctx):
    ctx.report(1, score=1.0)
    ctx.report(2, score=float("nan"))
    ctx.report(3, score=1.0)


def wrong_metric(config, ctx):
    ctx.report(1, loss=0.5)


def returns_value(config, ctx):
    return config["x"] * 10


def chatty(config, ctx):
    print(f"hello from trial {ctx.trial_id}")
    os.write(2, b"raw stderr line\n")
    ctx.report(1, score=1.0)


def sleeps(config, ctx):
    ctx.report(1, score=1.0)
    time.sleep(config.get("sleep", 30))
    ctx.report(2, score=2.0)


def ignores_stop(config, ctx):
    """Reports forever unless stopped: a stop must end it at its next report."""
    step = 0
    while True:
        step += 1
        ctx.report(step, score=float(step))
        time.sleep(0.01)


def calls_exit(config, ctx):
    ctx.report(1, score=1.0)
    raise SystemExit(3)


def segfaults_once(config, ctx):
    """A real segmentation fault in the first attempt, after a checkpoint at step 2."""
    state = ctx.restore() or {"step": 0}
    for step in range(state["step"] + 1, 5):
        state["step"] = step
        ctx.checkpoint(state)
        ctx.report(step, score=float(step))
        if step == 2 and ctx.attempt == 1:
            import ctypes
            ctypes.string_at(0)


def checks_durability(config, ctx):
    """After each report that waits (one with a checkpoint) returns, looks in the study's SQLite
    file for that very result and every one before it, posted ones included (steps 4 and 5
    carry no checkpoint: below the decision point they do not wait; step 6 waits for them)."""
    db, trial = config["db"], ctx.trial_id
    for step in range(1, 4):
        ctx.report(step, checkpoint={"step": step}, score=float(step),
                   durable_before=float(all(_stored(db, trial, s) for s in range(step))))
    ctx.report(4, score=4.0, durable_before=1.0)
    ctx.report(5, score=5.0, durable_before=1.0)
    ctx.report(6, checkpoint={"step": 6}, score=6.0,       # waits for 4, 5 and itself
               durable_before=float(all(_stored(db, trial, s) for s in range(4))))
    ctx.report(7, score=7.0, durable_before=float(all(_stored(db, trial, s) for s in range(7))))


def _stored(db: str, trial_id: int, step: int) -> bool:
    import sqlite3
    if step == 0:
        return True
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT COUNT(*) FROM results WHERE trial_id = ? AND step = ?",
                           (trial_id, step)).fetchone()[0] == 1
    finally:
        con.close()


def decaying(config, ctx):
    """loss = l0 * exp(-step / tau) * (1 + seeded noise), ``steps`` steps of ``sleep`` seconds; a
    checkpoint with every report (the step and the noise generator's state). Each report also
    says from which step this attempt started (``start``)."""
    import math

    import numpy as np
    state = ctx.restore() or {"step": 0,
                              "rng": np.random.default_rng(ctx.seed).bit_generator.state}
    start = state["step"]
    rng = np.random.default_rng()
    rng.bit_generator.state = state["rng"]
    for step in range(start + 1, config.get("steps", 30) + 1):
        time.sleep(config.get("sleep", 0.02))
        loss = config.get("l0", 5.0) * math.exp(-step / config["tau"]) * (1.0 + 0.01 * rng.normal())
        state = {"step": step, "rng": rng.bit_generator.state}
        ctx.report(step, checkpoint=state, loss=loss, start=start)


def sums_over_ranks(config, ctx):
    """``steps`` steps; each all-reduces a 1 per rank (gloo), so ``summed`` = the ranks that met."""
    state = ctx.restore() or {"step": 0}
    for step in range(state["step"] + 1, config.get("steps", 2) + 1):
        summed = 1
        if ctx.world.size > 1:
            import torch
            import torch.distributed as dist
            ones = torch.ones(1)
            dist.all_reduce(ones)
            summed = int(ones.item())
        state["step"] = step
        ctx.checkpoint(state)
        ctx.report(step, score=float(step), world=ctx.world.size, summed=summed)


def gated(config, ctx):
    """``checkpointing`` for trials below ``free``; a later trial, past step ``hold``, waits until
    the file ``gate`` exists or the study asks it to stop (so a test's signal lands while the
    study still has work, whatever the load)."""
    state = ctx.restore() or {"step": 0, "starts": []}
    state["starts"].append(state["step"])
    for step in range(state["step"] + 1, config["steps"] + 1):
        while (ctx.trial_id >= config["free"] and step > config["hold"]
               and not os.path.exists(config["gate"]) and not ctx.should_stop()):
            time.sleep(0.02)
        state["step"] = step
        ctx.checkpoint(state)
        ctx.report(step, score=config["x"] * step, starts=len(state["starts"]))


def two_objectives(config, ctx):
    """Three reports of loss (min) and latency_ms (min), a trade-off in ``x``; ``drop`` leaves
    latency_ms out of the report at that step (1: the first, 3: the last)."""
    x, y = config["x"], config.get("y", 0.0)
    for step in range(1, 4):
        metrics = {"loss": (x - 0.2) ** 2 + y + 1.0 / step, "latency_ms": 10.0 * (1.0 - x) + y}
        if config.get("drop") == step:
            del metrics["latency_ms"]
        ctx.report(step, **metrics)
