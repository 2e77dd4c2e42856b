"""What the real-cluster Ray tests share: the cluster's shape and settings (one cluster for the
whole test session: the ``ray_cluster`` fixture in conftest.py), and a trainable that holds at a
gate the test opens (``ray_helpers:held_at_a_gate``), so a study waits for an event, never for
a guessed number of seconds."""
from __future__ import annotations

import os
import time

# Two raylets of one CPU and no GPU: each node is one trial slot, so a trial grown to two
# workers spans both nodes, and the contract's two devices are on two nodes.
NODES, CPUS, GPUS = 2, 1, 0

# A node that crashed (its raylet killed: no goodbye) is declared dead after three failed
# health checks 0.3 s apart, about 1 s: a check of a killed raylet fails at once (connection
# refused). Ray's defaults: a check every 3 s, dead after 5 failures, about 15 s. A live raylet
# answers in milliseconds, and a check of a stalled one fails only after its 5 s timeout, so
# only a raylet stalled for about 15 s in a row would be misjudged, whatever the period.
SYSTEM_CONFIG = {"health_check_initial_delay_ms": 1000, "health_check_period_ms": 300,
                 "health_check_timeout_ms": 5000, "health_check_failure_threshold": 3}

# Ray test files: they run in one xdist worker (see conftest.py), so one cluster serves them.
RAY_CLUSTER_FILES = ("tests/runtime/test_ray_executor.py", "tests/runtime/test_ray_gpu_node.py",
                     "tests/contracts/test_executor_contract.py")


def held_at_a_gate(config, ctx):
    """``steps`` steps, a checkpoint before each report; a step past ``hold`` waits until the
    file ``gate`` exists. Records every start (``starts``: the step it started after)."""
    state = ctx.restore() or {"step": 0, "starts": []}
    state["starts"].append(state["step"])
    for step in range(state["step"] + 1, config["steps"] + 1):
        while step > config["hold"] and not os.path.exists(config["gate"]):
            time.sleep(0.05)
        state["step"] = step
        ctx.checkpoint(state)
        ctx.report(step, score=config["x"] * step, starts=len(state["starts"]))


def reports_its_device(config, ctx):
    """``steps`` steps; each report says where the trial ran: ``cuda`` (1 when ``ctx.device``
    is a CUDA device) and ``visible`` (the GPU index in CUDA_VISIBLE_DEVICES, -1 for none)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    for step in range(1, config.get("steps", 1) + 1):
        ctx.report(step, score=config["x"], cuda=int(ctx.device.startswith("cuda")),
                   visible=int(visible) if visible.isdigit() else -1)
