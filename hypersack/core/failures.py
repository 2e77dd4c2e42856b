"""When failing trials should stop the study: ``max_failures`` consecutive failures of one kind.

A bad run (a metric-name typo, a trainable that raises on its first line) fails every trial the
same way; going on only burns the budget. ``FailureStreak`` counts trials that end FAILED in a
row with the same *kind* (the first line of the error, numbers and addresses blanked: ``ValueError:
step 3`` and ``ValueError: step 12`` are one kind); a trial that ends in any other way
(complete, pruned, paused) or fails another way starts a new streak. At ``max_failures`` it
trips, and the controller stops the study (Ray Tune's ``fail_fast``, Optuna's ``catch``).

Failures that depend on the config rather than on the code do not count: a metric that is NaN or
infinite, a trial out of time, out of memory, or that no device can hold. Pure: no I/O, no clock.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["FailureStreak", "failure_kind", "DEFAULT_MAX_FAILURES"]

#: Consecutive same-kind failures that stop a study unless the spec says otherwise.
DEFAULT_MAX_FAILURES = 5

_NUMBER = re.compile(r"0x[0-9a-fA-F]+|[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?")
# Errors that a config, not the code, brings about (their kinds never trip the streak).
_CONFIG_DEPENDENT = (re.compile(r"^metric '.*' is .* at step"),
                     re.compile(r"timed out after"),
                     re.compile(r"no device can run this trial"),
                     re.compile(r"out of memory", re.IGNORECASE))


def failure_kind(error: str | None) -> str | None:
    """The kind of a FAILED trial's ``error`` (its first line, numbers blanked as ``#``), or
    None when the failure depends on the trial's config and so says nothing of the others."""
    first = _first_line(error) or "unknown error"
    if any(p.search(first) for p in _CONFIG_DEPENDENT):
        return None
    return _NUMBER.sub("#", first)[:300]


def _first_line(text: str | None) -> str:
    stripped = (text or "").strip()
    return stripped.splitlines()[0] if stripped else ""


@dataclass
class FailureStreak:
    """Trials that ended FAILED in a row with one kind. ``max_failures``: the streak length that
    trips it (>= 1), or None: never."""
    max_failures: int | None = DEFAULT_MAX_FAILURES
    kind: str | None = None
    trials: list[int] = field(default_factory=list)

    def ended(self, trial_id: int, error: str | None, failed: bool) -> bool:
        """Record that ``trial_id`` ended (``failed``, with ``error``, or not); True when the
        streak has just reached ``max_failures``."""
        kind = failure_kind(error) if failed else None
        if kind is None:
            self.kind, self.trials = None, []
            return False
        if kind != self.kind:
            self.kind, self.trials = kind, []
        self.trials.append(trial_id)
        return self.max_failures is not None and len(self.trials) == self.max_failures

    def message(self, example: str | None) -> str:
        """What to tell the user once tripped: how many trials, which, and the error of one."""
        ids = ", ".join(str(t) for t in self.trials)
        first = _first_line(example) or "?"
        return (f"{len(self.trials)} trials in a row failed the same way (trials {ids}): "
                f"{first}")
