"""Live progress of a study: a rich display on a terminal, plain lines elsewhere (logs, pipes).

Both say the same things: trials finished out of the budget ("5 of 32 finished"), running ones
(and how many are still starting: a fresh worker process starting Python and importing the
trainable, torch included, takes seconds to tens of seconds before the first report), paused,
pending and failed ones, the best result so far (trial and step), where the algorithm stands
(``Algorithm.progress_note``: Hyperband's iteration and bracket), elapsed time and an ETA.

ETA (``eta_s``): with a trial budget, elapsed x (1 - f) / f where f is the fraction done: each
finished trial counts 1, a running or paused one its last step over its planned steps (when
``max_steps`` is known); with a time budget, at most the time left. None until something is
done. A rough guide (early-stopping algorithms finish later trials faster), never a promise.
"""
from __future__ import annotations

import sys
import time
from typing import Any, Callable, Mapping, Protocol

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from hypersack.core.controller import Controller
from hypersack.core.timeouts import NOT_RESPONDING
from hypersack.core.trial import TrialRecord, TrialState

__all__ = ["Progress", "NullProgress", "LineProgress", "LiveProgress", "make_progress", "summary",
           "eta_s", "shared_view"]

StepsFor = Callable[[dict], "int | None"]
HEARTBEAT_S = 30.0      # lines mode: a summary at least this often while trials run


class Progress(Protocol):
    def update(self, controller: Controller, now: float) -> None: ...
    def close(self) -> None: ...


class NullProgress:
    def update(self, controller: Controller, now: float) -> None:
        pass

    def close(self) -> None:
        pass


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def eta_s(controller: Controller, now: float, steps_for: StepsFor = lambda config: None) -> float | None:
    """Seconds left, estimated (see the module docstring), or None when unknown."""
    elapsed = controller.elapsed(now)
    budget = controller.budget
    left_by_time = None if budget.time_s is None else max(0.0, budget.time_s - elapsed)
    left_by_trials = None
    if budget.trials is not None:
        done = sum(_fraction_done(r, steps_for) for r in controller.trials.values()
                   if not r.info.get("external"))       # added trials are not in the budget
        fraction = min(1.0, done / budget.trials)
        if fraction > 0:
            left_by_trials = elapsed * (1 - fraction) / fraction
    known = [t for t in (left_by_time, left_by_trials) if t is not None]
    return min(known) if known else None


def _fraction_done(r: TrialRecord, steps_for: StepsFor) -> float:
    if r.state.finished:
        return 1.0
    total = steps_for(r.config)
    if not total or r.last_step is None:
        return 0.0
    return min(1.0, r.last_step / total)


def shared_view(state: str, shared: dict | None) -> tuple[str, str]:
    """A time-shared trial's (state, priority) for display: a running or pending trial shows
    "running" or "waiting" (bound to its device, its turn to come), its priority is its latest
    convergence (Hermes' C; slaq's normalised drop), "new" before its first quantum; ``shared``
    is the trial's ``info["time_sharing"]`` (None: not time-shared, shown as it is)."""
    if not shared or state not in ("running", "pending"):
        return state, "-"
    priority = shared.get("priority")
    return str(shared.get("state", state)), "new" if priority is None else f"{priority:.3g}"


def not_responding(state: str, info: Mapping[str, Any]) -> str | None:
    """"not responding" and for how long, for a running trial whose worker went silent (the
    controller's mark, ``core.timeouts.NOT_RESPONDING``); None otherwise."""
    silent = info.get(NOT_RESPONDING)
    if state != "running" or silent is None:
        return None
    return f"not responding (no heartbeat for {silent:g} s)"


def starting(r: TrialRecord) -> str | None:
    """What a running trial without a report is waiting for, or None once it has reported."""
    if r.state is not TrialState.RUNNING or r.last_step is not None:
        return None
    return "starting worker" if r.device is None else "importing, first step"


def summary(name: str, controller: Controller, now: float | None = None,
            steps_for: StepsFor = lambda config: None) -> str:
    """One line: counts against the budget, the best so far, elapsed time and ETA."""
    counts = {s: 0 for s in TrialState}
    starting_now, any_report = 0, False
    for r in controller.trials.values():
        if r.info.get("external"):     # Study.add_trial: not in the budget
            continue
        counts[r.state] += 1
        starting_now += starting(r) is not None
        any_report = any_report or r.last_step is not None
    finished = counts[TrialState.COMPLETE] + counts[TrialState.PRUNED] + counts[TrialState.FAILED]
    total = controller.budget.trials
    text = f"{name}: {finished} of {total} finished" if total else f"{name}: {finished} finished"
    text += f", {counts[TrialState.RUNNING]} running"
    if starting_now:
        text += (f" ({starting_now} before their first report)" if any_report else
                 f" ({starting_now} starting: worker start-up and imports)")
    waiting = sum(1 for r in controller.trials.values() if r.state is TrialState.PENDING
                  and (r.info.get("time_sharing") or {}).get("state") == "waiting")
    for state in (TrialState.PAUSED, TrialState.PENDING, TrialState.FAILED):
        if counts[state]:
            text += f", {counts[state]} {state.value}"
            if state is TrialState.PENDING and waiting:
                text += f" ({waiting} waiting for their turn on a device)"
    text += _best_text(controller)
    note = getattr(controller.algorithm, "progress_note", lambda: None)()
    if note:
        text += f"; {note}"
    if now is not None:
        text += f"; elapsed {_duration(controller.elapsed(now))}"
        eta = eta_s(controller, now, steps_for)
        if eta is not None and not controller.done(now):
            text += f", ETA ~{_duration(eta)}"
    if stopping(controller):
        text += f"; {STOPPING}"
    return text


#: What the first Ctrl-C does, said at once (the second kills the trials).
STOPPING = "stopping at the next report; Ctrl-C again to kill"


def stopping(controller: Controller) -> bool:
    """Whether the study is stopping because of Ctrl-C (not a halt of its own)."""
    return controller.interrupted and controller.halt_reason is None \
        and controller.failure_stop is None


def _best_text(controller: Controller) -> str:
    """The best so far, and the best complete trial when the best was stopped early."""
    best = controller.best()
    metric = controller.objective.metric
    if best is None:
        return "; no result yet"
    text = f"; best {metric} {best.value:.4g} (trial {best.trial_id}, step {best.step_of_value}"
    if best.state is TrialState.COMPLETE:
        return text + ")"
    text += f", {best.state.value})"
    full = controller.best_complete()
    if full is not None:
        text += f", best complete {full.value:.4g} (trial {full.trial_id})"
    return text


#: The study's automatic choices so far, one line each ("oversubscription auto: H100: r = 2.5,
#: ..."), read by the progress views at each update; the machine's ``decisions``.
Decisions = Callable[[], list[str]]


def _no_decisions() -> list[str]:
    return []


class LineProgress:
    """Plain lines for logs and pipes: one per trial that finishes, pauses or is pruned, one per
    automatic choice of the study the first time it is made or changes (``decisions``), a
    summary after them, and a summary at least every ``heartbeat_s`` while trials run."""

    def __init__(self, name: str, stream=None, steps_for: StepsFor = lambda config: None,
                 heartbeat_s: float = HEARTBEAT_S, clock: Callable[[], float] = time.monotonic,
                 decisions: Decisions = _no_decisions):
        self._decisions = decisions
        self._told: set[str] = set()
        self._name = name
        self._stream = stream or sys.stdout
        self._steps_for = steps_for
        self._heartbeat_s = heartbeat_s
        self._clock = clock
        self._said: dict[int, tuple] = {}       # trial -> (state, last step) last printed
        self._last_line = -float("inf")
        self._started = False
        self._told_stop = False
        self._last: tuple[Controller, float] | None = None

    def update(self, controller: Controller, now: float) -> None:
        self._last = (controller, now)
        lines = []
        for r in controller.trials.values():
            silent = not_responding(r.state.value, r.info)
            if silent is not None and self._said.get(r.trial_id) != (r.state, silent):
                self._said[r.trial_id] = (r.state, silent)
                lines.append(f"trial {r.trial_id} {silent}: its worker is killed and the trial "
                             "retried once executor.heartbeat_timeout_s has passed")
            if not (r.state.finished or r.state is TrialState.PAUSED):
                continue
            key = (r.state, r.last_step)
            if self._said.get(r.trial_id) != key:
                self._said[r.trial_id] = key
                lines.append(_trial_line(r, controller.objective.metric))
        for decision in self._decisions():
            if decision not in self._told:
                self._told.add(decision)
                lines.append(decision)
        if stopping(controller) and not self._told_stop:
            self._told_stop = True
            lines.append(STOPPING)
        wall = self._clock()
        running = any(r.state is TrialState.RUNNING for r in controller.trials.values())
        if not self._started and running:
            self._started = True
            lines.append("starting workers: each imports the trainable (and torch, if it uses "
                         "it) before its first report")
        if lines or (running and wall - self._last_line >= self._heartbeat_s):
            self._last_line = wall
            for line in lines:
                print(line, file=self._stream)
            print("  " + summary(self._name, controller, now, self._steps_for), file=self._stream,
                  flush=True)

    def close(self) -> None:
        """Print what the study's end changed (paused trials never promoted end pruned)."""
        if self._last is not None:
            self.update(*self._last)


def _trial_line(r: TrialRecord, metric: str) -> str:
    if r.state is TrialState.FAILED:
        return f"trial {r.trial_id} failed: {r.error}"
    value = "-" if r.value is None else f"{r.value:.4g}"
    return f"trial {r.trial_id} {r.state.value} at step {r.last_step}: {metric}={value} config={r.config}"


class LiveProgress:
    """A rich live view: study counts, best so far, the study's automatic choices
    (``decisions``), one progress bar per running trial."""

    def __init__(self, name: str, steps_for: StepsFor, console: Console | None = None,
                 refresh_s: float = 0.25, decisions: Decisions = _no_decisions):
        self._decisions = decisions
        self._name = name
        self._steps_for = steps_for
        self._live = Live(console=console or Console(), auto_refresh=False, transient=False)
        self._live.start()
        self._refresh_s = refresh_s
        self._last = 0.0
        self._controller: Controller | None = None
        self._now: float | None = None

    def update(self, controller: Controller, now: float) -> None:
        self._controller, self._now = controller, now
        wall = time.monotonic()
        if wall - self._last < self._refresh_s and not stopping(controller):
            return
        self._last = wall
        self._live.update(self._render(controller, now), refresh=True)

    def _render(self, controller: Controller, now: float | None) -> Group:
        table = Table(box=None, show_header=True, header_style="bold")
        shared = controller.shared is not None
        columns = ("trial", "device", "progress", "step", controller.objective.metric)
        for column in columns + (("state", "priority") if shared else ()):
            table.add_column(column)
        for r in controller.trials.values():
            view = r.info.get("time_sharing") if shared else None
            if r.state is not TrialState.RUNNING and not (view and r.state is TrialState.PENDING):
                continue
            total = self._steps_for(r.config)
            step = r.last_step or 0
            silent = not_responding(r.state.value, r.info)
            waiting = starting(r)
            bar = Text(silent, style="bold red") if silent else Text(waiting, style="dim") if waiting else (
                ProgressBar(total=total, completed=min(step, total or step), width=30) if total
                else Text("..."))
            value = "-" if r.value is None else f"{r.value:.4g}"
            step_text = "-" if r.last_step is None else str(r.last_step)
            if total and r.last_step is not None:
                step_text += f"/{total}"
            row = [str(r.trial_id), r.device or "-", bar, step_text, value]
            if shared:
                row += list(shared_view(r.state.value, view))
                if r.state is TrialState.PENDING:
                    row[1] = (view or {}).get("device") or "-"
            table.add_row(*row)
        line = Text(summary(self._name, controller, now, self._steps_for), style="bold")
        chosen = [Text(d, style="dim") for d in self._decisions()]
        return Group(line, *chosen, table) if table.row_count else Group(line, *chosen)

    def close(self) -> None:
        if self._controller is not None:
            self._live.update(self._render(self._controller, self._now), refresh=True)
        self._live.stop()
        if not self._live.console.is_terminal:
            self._live.console.line()     # rich ends a non-terminal live view without a newline


def make_progress(name: str, steps_for: StepsFor, mode: str | bool | None,
                  decisions: Decisions = _no_decisions) -> Progress:
    """``mode``: True/"live" for the rich view, "lines" for plain lines, False/"none" for quiet;
    None: live on a terminal, lines otherwise. ``decisions``: the study's automatic choices."""
    if mode is False or mode == "none":
        return NullProgress()
    if mode == "lines":
        return LineProgress(name, steps_for=steps_for, decisions=decisions)
    if mode is True or mode == "live" or (mode is None and sys.stdout.isatty()):
        return LiveProgress(name, steps_for, decisions=decisions)
    return LineProgress(name, steps_for=steps_for, decisions=decisions)
