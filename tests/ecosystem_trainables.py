"""Trainables of tests/test_ecosystem.py, importable by worker processes."""
from __future__ import annotations


def with_attrs(config, ctx):
    """Two reports of score = x * step; user attributes; ``ctx.shared`` when the study has it."""
    ctx.set_attr("note", f"x={config['x']}")
    ctx.set_attr("layers", [1, 2])
    for step in (1, 2):
        ctx.report(step, score=config["x"] * step)
    if ctx.shared is not None and "offset" in ctx.shared:
        ctx.set_attr("offset", ctx.shared["offset"])


def checkpoints_each_step(config, ctx):
    """``steps`` reports, each with a checkpoint {step, x}; score = x * step (up to a peak at
    ``peak`` when set, then falling)."""
    state = ctx.restore() or {"step": 0}
    peak = config.get("peak")
    for step in range(state["step"] + 1, config.get("steps", 4) + 1):
        score = config["x"] * (step if peak is None or step <= peak else 2 * peak - step)
        ctx.report(step, checkpoint={"step": step, "x": config["x"]}, score=score)
