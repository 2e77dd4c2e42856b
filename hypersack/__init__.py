"""HyperSack: hyperparameter optimization that packs many deep-learning trials onto each GPU.

The public names are loaded on first use (PEP 562), so ``import hypersack`` stays light and
the command line can take Ctrl-C from its first instant.

Glossary (one word, one meaning, in the code, the docs and the messages):

- *study*: one HPO run: a search space, an objective, an algorithm and its trials, kept in a
  store (SQLite by default). A *driver* is the process that runs a study's loop.
- *trial*: one configuration trained by the user's *trainable* ``train(config, ctx)``; an
  *attempt* is one launch of it (a retry, a promotion or a preemption starts a new attempt).
- *objective*: the metric a study optimises and its mode (min or max); a *multi-objective*
  study has several, and its best trials are its *Pareto front*: the complete trials no other
  complete trial beats in every objective (``core.pareto``).
- *step*: the integer a trial reports at (an epoch, an iteration); a *result* is the metrics
  reported at one step.
- *checkpoint*: a trial's saved state, stored with a result. SQLite's own WAL checkpoint is
  always called the *WAL checkpoint*.
- *device*: a (node, GPU) pair a trial runs on; without GPUs, a share of a node's CPU cores
  (a *CPU slot*). The torch device string (``"cuda:0"``) is ``ctx.device``; a device's display
  label (``n0/gpu0``) is only shown, never parsed.
- *placement*: which device each trial runs on (the multiple-knapsack of the HyperSack paper);
  a *policy* (``wfd``, ``fill``, ...) computes it. *Oversubscription* is how many trials' worth of
  compute a GPU is given; a trial's *share* is the percent of a device's compute it gets.
- *pack*: a fused process training several *members* (same-architecture trials) as one model,
  each in a *slot* of the pack. (The placement policies are never called "packers" in the API.)
  A member's *seat* is its place in the pack as the controller assigns it (``Launch.seat``,
  ``core.packs``); the pack process loads it into a free slot.
- *group*: an algorithm's set of similar configs (a bracket, a rung cohort) that may share a pack.
- *profiler*: the HyperSack paper's Sampler, which measures a trial's GPU use over a few
  iterations; an Optuna *sampler* proposes configs. The *job history* keeps the profiles.
- *stay*: one period a trial spent on a device, from its launch to the moment it left.
- *executor*: the transport that runs launches (local processes, Ray, the simulator); a
  *worker* is a process that runs trials for it.
- *callback*: user code the driver tells about trials as they start, report and end
  (``hypersack.callbacks``); a *user attribute* is a JSON value set on a trial or a study
  (``ctx.set_attr``); *shared objects* (``Study(shared=...)``, ``ctx.shared``) are the user's
  large objects sent once to each worker, unrelated to a trial's *share* or to time-sharing.
- *enqueued config*: a config the user asks to run before the algorithm's own (``enqueue``).
"""
from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "Study": "hypersack.study",
    "SearchSpace": "hypersack.core.space", "Float": "hypersack.core.space",
    "Int": "hypersack.core.space", "Categorical": "hypersack.core.space",
    "Constant": "hypersack.core.space",
    "Objective": "hypersack.core.objective",
    "Algorithm": "hypersack.core.algorithms", "Decision": "hypersack.core.algorithms",
    "Suggestion": "hypersack.core.algorithms", "register_algorithm": "hypersack.core.algorithms",
    "allow_checkpoint_types": "hypersack.runtime.worker.checkpoints",
    "HyperSackError": "hypersack.errors", "ConfigError": "hypersack.errors",
    "SpaceError": "hypersack.errors", "StorageError": "hypersack.errors",
    "StudyNotFoundError": "hypersack.errors", "StudyBusyError": "hypersack.errors",
    "CheckpointError": "hypersack.errors", "TrainableError": "hypersack.errors",
    "MissingDependencyError": "hypersack.errors", "TrialStopped": "hypersack.errors",
    "ReportError": "hypersack.errors",
    "Callback": "hypersack.callbacks", "FrozenTrial": "hypersack.callbacks",
}

__all__ = sorted(_EXPORTS)


_SUBMODULES = {"errors", "placement", "algorithms", "study", "config", "validation", "core",
               "runtime", "fusion", "sim", "workloads", "cli"}


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:                 # ``hypersack.errors.X`` works without an import
        return importlib.import_module(f"hypersack.{name}")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'hypersack' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
