"""Live progress of a study: a rich display on a terminal, one line per finished trial elsewhere."""
from __future__ import annotations

import sys
import time
from typing import Callable, Protocol

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from hypersack.core.controller import Controller
from hypersack.core.trial import TrialRecord, TrialState

__all__ = ["Progress", "NullProgress", "LineProgress", "LiveProgress", "make_progress"]


class Progress(Protocol):
    def update(self, controller: Controller, now: float) -> None: ...
    def close(self) -> None: ...


class NullProgress:
    def update(self, controller: Controller, now: float) -> None:
        pass

    def close(self) -> None:
        pass


def summary(name: str, controller: Controller) -> str:
    counts = {s: 0 for s in TrialState}
    for r in controller.trials.values():
        counts[r.state] += 1
    best = controller.best()
    metric = controller.objective.metric
    best_text = f"best {metric} {best.value:.4g} (trial {best.trial_id})" if best else "no result yet"
    done = counts[TrialState.COMPLETE] + counts[TrialState.PRUNED]
    paused = f"{counts[TrialState.PAUSED]} paused, " if counts[TrialState.PAUSED] else ""
    return (f"{name}: {done} done, {counts[TrialState.RUNNING]} running, {paused}"
            f"{counts[TrialState.PENDING]} pending, {counts[TrialState.FAILED]} failed; {best_text}")


class LineProgress:
    """Prints one line when a trial finishes: for logs and pipes."""

    def __init__(self, name: str, stream=None):
        self._name = name
        self._stream = stream or sys.stdout
        self._reported: set[int] = set()

    def update(self, controller: Controller, now: float) -> None:
        fresh = [r for r in controller.trials.values()
                 if r.state.finished and r.trial_id not in self._reported]
        for r in fresh:
            self._reported.add(r.trial_id)
            print(_trial_line(r, controller.objective.metric), file=self._stream)
        if fresh:
            print("  " + summary(self._name, controller), file=self._stream, flush=True)

    def close(self) -> None:
        pass


def _trial_line(r: TrialRecord, metric: str) -> str:
    if r.state is TrialState.FAILED:
        return f"trial {r.trial_id} failed: {r.error}"
    return f"trial {r.trial_id} {r.state.value}: {metric}={r.value:.4g} config={r.config}"


class LiveProgress:
    """A rich live view: study counts, best so far, one progress bar per running trial."""

    def __init__(self, name: str, steps_for: Callable[[dict], int | None], console: Console | None = None,
                 refresh_s: float = 0.25):
        self._name = name
        self._steps_for = steps_for
        self._live = Live(console=console or Console(), auto_refresh=False, transient=False)
        self._live.start()
        self._refresh_s = refresh_s
        self._last = 0.0
        self._controller: Controller | None = None

    def update(self, controller: Controller, now: float) -> None:
        self._controller = controller
        wall = time.monotonic()
        if wall - self._last < self._refresh_s:
            return
        self._last = wall
        self._live.update(self._render(controller), refresh=True)

    def _render(self, controller: Controller) -> Group:
        table = Table(box=None, show_header=True, header_style="bold")
        for column in ("trial", "device", "progress", "step", controller.objective.metric):
            table.add_column(column)
        for r in controller.trials.values():
            if r.state is not TrialState.RUNNING:
                continue
            total = self._steps_for(r.config)
            step = r.last_step or 0
            bar = ProgressBar(total=total, completed=min(step, total or step), width=30) if total \
                else Text("...")
            value = "-" if r.value is None else f"{r.value:.4g}"
            table.add_row(str(r.trial_id), r.device or "-", bar, str(r.last_step or "-"), value)
        return Group(Text(summary(self._name, controller), style="bold"), table)

    def close(self) -> None:
        if self._controller is not None:
            self._live.update(self._render(self._controller), refresh=True)
        self._live.stop()


def make_progress(name: str, steps_for: Callable[[dict], int | None], mode: str | bool | None) -> Progress:
    """``mode``: True/"live" for the rich view, "lines" for plain lines, False/None-on-no-tty for quiet."""
    if mode is False or mode == "none":
        return NullProgress()
    if mode == "lines":
        return LineProgress(name)
    if mode is True or mode == "live" or (mode is None and sys.stdout.isatty()):
        return LiveProgress(name, steps_for)
    return LineProgress(name)
