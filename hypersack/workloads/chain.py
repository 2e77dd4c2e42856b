"""A synthetic trainable whose every step is a pure function of the step before it.

``synthetic_chain`` (built-in name; ``hypersack.workloads.chain``) reports ``steps`` steps; the state after step s is
``next_state(state after s-1, config, s)`` and its metrics come from that state alone, so a
run's stored values can be checked exactly against ``chain_values`` — the values an
uninterrupted run computes. The fault tests and ``benchmarks/driver/fault_injection.py`` kill drivers
and workers under it and compare. Config: ``lr`` (float > 0), ``steps`` (int, default 10),
``sleep_s`` (seconds of "work" per step, default 0), ``checkpoint_every`` (default 1: a
checkpoint rides with every report; k > 1: every k-th report carries one, so a restart
recomputes the steps after it and reports them again).
"""
from __future__ import annotations

import hashlib
import time
from typing import Any, Mapping

__all__ = ["chain", "chain_values", "next_state"]


def next_state(state: Mapping[str, Any], config: Mapping[str, Any], step: int) -> dict[str, Any]:
    """The state after ``step``, from the state after ``step - 1``."""
    digest = hashlib.sha256(f"{state['x']!r}|{config['lr']!r}|{step}".encode()).digest()
    noise = int.from_bytes(digest[:8], "big") / 2**64
    loss = state["loss"] * (1.0 - min(0.5, float(config["lr"]) / 4)) + 0.01 * noise
    return {"step": step, "x": noise, "loss": loss}


def initial_state(seed: int) -> dict[str, Any]:
    return {"step": 0, "x": float(seed % 1000) / 1000.0, "loss": 1.0}


def chain_values(config: Mapping[str, Any], seed: int) -> list[dict[str, float]]:
    """The metrics an uninterrupted run reports, step 1 first."""
    state, out = initial_state(seed), []
    for step in range(1, int(config.get("steps", 10)) + 1):
        state = next_state(state, config, step)
        out.append({"loss": state["loss"], "x": state["x"]})
    return out


def chain(config: Mapping[str, Any], ctx: Any) -> None:
    steps = int(config.get("steps", 10))
    every = int(config.get("checkpoint_every", 1))
    state = ctx.restore() or initial_state(ctx.seed)
    for step in range(state["step"] + 1, steps + 1):
        time.sleep(float(config.get("sleep_s", 0.0)))
        state = next_state(state, config, step)
        checkpoint = state if step % every == 0 else None
        ctx.report(step, checkpoint=checkpoint, loss=state["loss"], x=state["x"])
