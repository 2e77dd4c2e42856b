"""One exception tree for everything HyperSack raises on purpose.

Every message names the offending field and its value, so a user can fix the input without
reading our code: ``The value of space.lr.low is 0.1, but must be <= high (0.01)``.
"""
from __future__ import annotations

from typing import Any


class HyperSackError(Exception):
    """Base class of every error HyperSack raises deliberately."""


class ConfigError(HyperSackError, ValueError):
    """Invalid user input: a study spec, a search space, an algorithm argument.

    ``field`` is a dotted path into the input (``space.lr.low``); ``location`` is where the
    input came from (``study.yaml:12``) when known.
    """

    def __init__(self, field: str, value: Any, problem: str, location: str | None = None):
        self.field = field
        self.value = value
        self.problem = problem
        self.location = location
        where = f"{location}: " if location else ""
        super().__init__(f"{where}The value of {field} is {_short_repr(value)}, but {problem}")


def _short_repr(value: Any, limit: int = 200) -> str:
    """``repr(value)``, cut to ``limit`` characters; never raises (an int of more digits than
    Python prints, a recursive or huge structure)."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):
        bits = value.bit_length() if isinstance(value, int) else None
        return f"<int of {bits} bits>" if bits else f"<{type(value).__name__}>"
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


class SpaceError(ConfigError):
    """A search-space domain that cannot be sampled as declared."""


class PlacementError(HyperSackError):
    """A placement breaks the GAP constraints (Eq. 1-4) or names devices the cluster lacks."""


class StorageError(HyperSackError):
    """The study store cannot do what was asked (missing study, name clash, bad file)."""


class StudyNotFoundError(StorageError, KeyError):
    """No study of that name in that store (``hypersack status NAME``, ``Study.load``)."""

    def __init__(self, name: str, path: str):
        self.name = name
        super().__init__(f"No study named {name!r} in {path}")

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]


class MissingDependencyError(HyperSackError, ImportError):
    """An optional extra is needed for the feature that was asked for."""

    def __init__(self, feature: str, package: str, extra: str):
        super().__init__(
            f"{feature} needs the package {package!r}: pip install 'hypersack[{extra}]'"
        )


class TrainableError(HyperSackError):
    """The trainable reference cannot be resolved or shipped to a worker."""


class ReportError(ConfigError):
    """A trainable's ``ctx.report`` got a step or a metric the study cannot store; the trial
    fails with this message (the metric's name, its type and its value)."""


class TrialStopped(BaseException):
    """Raised inside a trainable by ``ctx.report`` once the study has asked the trial to stop.

    A ``BaseException`` so that a trainable's ``except Exception`` does not swallow it.
    The worker treats it as a clean stop, not a failure.
    """


class CheckpointError(HyperSackError):
    """A checkpoint cannot be written or read as the checkpoint contract requires."""


class UnsafePathError(HyperSackError):
    """A run folder or file is a symbolic link, belongs to another user, or is no regular file
    (a FIFO, a device) or no folder where one should be."""

    def __init__(self, path: Any, problem: str):
        self.path = str(path)
        super().__init__(f"{self.path!r} {problem}")


class StudyExistsError(StorageError):
    """A study of that name is stored already; the message names every way on."""

    def __init__(self, name: str, path: str, file: str = "FILE"):
        self.name, self.path = name, path
        super().__init__(
            f"A study named {name!r} already exists in {path}. Continue it: 'hypersack resume "
            f"{name}', 'hypersack run {file} --resume', or Study.run(if_exists='resume') "
            f"(load_if_exists=True); start it over: 'hypersack run {file} --replace' or "
            "Study.run(if_exists='replace'); or give the study another name")


class TrialsFailingError(HyperSackError):
    """Trials failed the same way ``max_failures`` times in a row, so the study stopped
    (resumable once the cause is fixed)."""


class StudyBusyError(StorageError):
    """Another live driver holds the study (its lease names host, pid and last heartbeat)."""


class LeaseLostError(StorageError):
    """This driver no longer holds its study's lease (another driver took it over)."""


class StorageFullError(StorageError):
    """The disk under the study store is full; nothing stored was lost."""


class StorageCorruptError(StorageError):
    """The study store's file is damaged or is not a HyperSack store."""


class ClusterError(HyperSackError):
    """The cluster an executor was pointed at cannot run the study (unreachable, a node that
    cannot serve it); raised before any trial starts."""


class NoTrialCompletedWarning(RuntimeWarning):
    """A study ended with no complete trial (every trial failed, most often)."""
