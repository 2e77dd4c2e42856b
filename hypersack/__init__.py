"""HyperSack: hyperparameter optimization that packs many deep-learning trials onto each GPU.

The public names are loaded on first use (PEP 562), so ``import hypersack`` stays light and
the command line can take Ctrl-C from its first instant.
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
    "allow_checkpoint_types": "hypersack.runtime.checkpoints",
    "HyperSackError": "hypersack.errors", "ConfigError": "hypersack.errors",
    "SpaceError": "hypersack.errors", "StorageError": "hypersack.errors",
    "StudyNotFoundError": "hypersack.errors", "StudyBusyError": "hypersack.errors",
    "CheckpointError": "hypersack.errors", "TrainableError": "hypersack.errors",
    "MissingDependencyError": "hypersack.errors", "TrialStopped": "hypersack.errors",
    "ReportError": "hypersack.errors",
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
