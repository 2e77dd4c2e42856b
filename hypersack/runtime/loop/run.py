"""The study loop: the only while-loop. Events in, decisions from the controller, commands out.

Each turn: poll the executor (with a group window: more events are gathered for up to
``group_window_s`` after the first, while enough running trials may still report,
``core.group_commit``); hand the events and the time to ``controller.turn``, which returns every
decision of the turn (``core.controller.Turn``: commands, launches, changes, results, stays,
each trial's free_below, done); write the changes (trials, accepted results and the checkpoints
that rode with them, the controller's state, and what observers wrote through the store's
connection, e.g. the job history's profiles) in one durable transaction, the store's
``transaction()``: one commit per turn (group commit); only then send commands, acknowledge the
turn's reports (the loop picks them, ``acknowledgements``: the executor only carries the acks)
and send launches.
Ctrl-C (or SIGTERM) once: running trials stop at their next report, stay resumable, and the study
is marked interrupted; twice: workers are killed at once (their trials restart on resume from the
checkpoint of their last durable report).
"""
from __future__ import annotations

import contextlib
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from hypersack.core.algorithms import Algorithm
from hypersack.core.controller import Controller, ControllerOptions, Turn
from hypersack.core.group_commit import GROUP_SIBLINGS, GROUP_WINDOW_S, GroupCommit
from hypersack.core.spec import StudySpec
from hypersack.core.trial import (Event, InterruptRequested, ResultReported, TrialFailed,
                                  TrialFinished, TrialHeartbeat)
from hypersack.errors import StorageError, StorageFullError, TrialsFailingError
from hypersack.runtime.loop.executor import Executor
from hypersack.runtime.loop.heap import LoopHeap
from hypersack.runtime.loop.progress import Progress, NullProgress
from hypersack.runtime.loop.store import BackgroundWalCheckpoints, Store, StudyRef

__all__ = ["Acks", "GROUP_SIBLINGS", "GROUP_WINDOW_S", "StudyRun", "acknowledgements",
           "build_controller", "run_loop"]

POLL_INTERVAL_S = 0.1
HEARTBEAT_S = 5.0       # the driver's lease is renewed at least this often (seconds)
MAX_GROUP = 4096        # most events gathered into one turn
# Events after which a trial cannot report again in the same turn (see core.group_commit).
_SETTLING = (ResultReported, TrialFinished, TrialFailed)


@dataclass
class StudyRun:
    """How a run ended: ``status`` is complete or interrupted; ``signalled``: interrupted by
    Ctrl-C or SIGTERM (not by a halt or a failing-trials stop)."""
    name: str
    status: str
    signalled: bool = False


def build_controller(spec: StudySpec, algorithm: Algorithm, row: Any, storage: Any,
                     now: float, resume: bool,
                     options: ControllerOptions = ControllerOptions()) -> Controller:
    """A controller for ``spec`` (its budget, objective, seed, max_retries, trial timeout and
    max_failures: every path, the simulator's included, builds it here) placing trials as
    ``options`` say (``assemble`` builds them; the default, no inventory, launches nothing: an
    ask/tell session); on resume it takes back the stored trials, algorithm and time-sharing
    state (``row``: a StudyRow, ``storage``: its Storage)."""
    controller = Controller(algorithm, spec.objective, spec.budget, seed=spec.seed,
                            max_retries=spec.executor.max_retries, now=now,
                            trial_timeout_s=spec.executor.trial_timeout_s,
                            heartbeat_timeout_s=spec.executor.heartbeat_timeout_s,
                            max_failures=spec.max_failures, options=options)
    if resume:
        state = row.controller_state or {}
        controller.restore(storage.load_trials(row.study_id), state.get("algorithm"),
                           elapsed_s=float(state.get("elapsed_s", 0.0)),
                           time_sharing=state.get("time_sharing"))
    return controller


class _Interrupts:
    """Counts SIGINT/SIGTERM while installed; restores the previous handlers on exit.

    The first signal only counts (the loop stops trials gracefully); the second raises
    KeyboardInterrupt once (workers are killed); later ones are ignored, so shutdown finishes.
    """

    def __init__(self) -> None:
        self.count = 0
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "_Interrupts":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        self.count += 1
        if self.count == 2:
            raise KeyboardInterrupt

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def run_loop(controller: Controller, executor: Executor, storage: Store, row: StudyRef, *,
             progress: Progress | None = None, clock: Callable[[], float] = time.time,
             observers: Sequence[Callable[[Event], None]] = (),
             group_window_s: float = 0.0, group_siblings: int = GROUP_SIBLINGS,
             on_started: Callable[[], None] | None = None,
             listeners: Sequence[Callable[[list[Event], Any], None]] = ()) -> StudyRun:
    """Run the study to its end. ``observers`` see every event before the controller does
    (profiles into the job history, OOM corrections...); their writes through the store's
    connection join the turn's transaction. ``listeners`` are called after each turn is
    durable with the turn's events and the controller's trials (the study's callbacks, which
    must not block: ``runtime.loop.callbacks``).

    ``group_window_s``: once a poll returned events, the loop keeps polling for up to this many
    seconds (wall clock) for more, while at least ``group_siblings`` running trials may still
    report in this turn (``core.group_commit.GroupCommit``: a trial that reported in it waits
    for its ack before it reports again) and fewer than ``MAX_GROUP`` events are in: they share
    one transaction and one commit, and each report's ack waits at most this much longer. 0
    (the simulator's default): one poll per turn. A bad value raises ConfigError before any
    worker starts.

    While the turns run, no full garbage collection walks the study's objects (``heap.LoopHeap``:
    survivors of the young generations are frozen after each turn that promoted some), and a
    store that offers ``BackgroundWalCheckpoints`` (SQLite) copies its WAL on a thread of its own,
    not inside a turn's commit.

    The study is marked running (and ``on_started`` called: a replaced study is deleted
    there) only once the executor has started: an executor that cannot start (no Ray cluster)
    raises with the stored study as it was.

    Ctrl-C handling covers the whole run, shutdown included: a run interrupted once or twice
    returns status "interrupted". A storage fault (disk full, lease lost, damaged file) kills
    the workers, keeps what is stored, marks the study interrupted where the store still allows
    it and raises the StorageError with the command that resumes the study.
    """
    group = GroupCommit(group_window_s, group_siblings)
    progress = progress or NullProgress()
    failure: StorageError | None = None
    with _Interrupts() as interrupts:
        try:
            executor.start()
            storage.set_status(row.study_id, "running")
            if on_started is not None:
                on_started()
            checkpoints = (storage.background_wal_checkpoints()
                           if isinstance(storage, BackgroundWalCheckpoints) else contextlib.nullcontext())
            with LoopHeap() as heap, checkpoints:
                _turns(controller, executor, storage, row, progress, clock, interrupts, observers,
                       group, heap, listeners)
        except KeyboardInterrupt:
            pass
        except StorageError as exc:
            failure = exc
        finally:
            _shutdown(executor, kill=interrupts.count >= 2 or failure is not None)
            progress.close()
        halted = controller.halt_reason
        status = "interrupted" if (interrupts.count or failure or halted
                                   or controller.interrupted) else "complete"
        _set_status(storage, row, status, quiet=failure is not None)
    if failure is not None:
        raise _with_resume_hint(failure, row.name) from None
    if controller.failure_stop and not halted:
        raise _failing(row.name, controller.failure_stop)
    if halted:
        raise StorageFullError(f"Study {row.name!r} stopped: {halted}. Nothing stored was lost; "
                               f"free some space, then continue with: hypersack resume {row.name}")
    return StudyRun(row.name, status, signalled=interrupts.count > 0)


def _failing(name: str, why: str) -> TrialsFailingError:
    wrong_objective = ""
    if "the objective metric" in why and "is missing from the trial's" in why:
        wrong_objective = (
            "; if the objective itself is wrong (the trainable reports another name), correct "
            "the study's objective and start over: hypersack run FILE --replace (Python: "
            "Study.run(if_exists='replace')), since a resume keeps the stored objective")
    return TrialsFailingError(
        f"Study {name!r} stopped: {why}. Fix the cause (every failure and its traceback: "
        f"hypersack status {name}), then continue with: hypersack resume {name}"
        f"{wrong_objective}; to run on regardless, raise max_failures in the study "
        "(null: never stop)")


def _with_resume_hint(exc: StorageError, name: str) -> StorageError:
    message = f"{exc}; once fixed, continue the study with: hypersack resume {name}"
    try:
        return type(exc)(message)
    except TypeError:              # an error class with its own arguments
        return StorageError(message)


def _shutdown(executor: Executor, kill: bool) -> None:
    try:
        executor.shutdown(kill=kill)
    except KeyboardInterrupt:        # the second Ctrl-C came during a graceful shutdown
        executor.shutdown(kill=True)


def _set_status(storage: Store, row: StudyRef, status: str, quiet: bool) -> None:
    try:
        storage.set_status(row.study_id, status)
    except StorageError:
        if not quiet:
            raise


def _gather(executor: Executor, events: list[Event], controller: Controller,
            group: GroupCommit) -> list[Event]:
    """``events`` and those that arrive while ``group`` says to wait (see ``run_loop``)."""
    start = time.monotonic()
    settled: set[int] = set()
    counted = 0
    while len(events) < MAX_GROUP:
        for event in events[counted:]:
            if isinstance(event, _SETTLING):
                settled.add(event.trial_id)
        counted = len(events)
        left = group.wait_s(controller.running(), len(settled), time.monotonic() - start)
        if left <= 0:
            break
        more = executor.poll(left)
        if not more:
            break
        events += more
    return events


def _turns(controller: Controller, executor: Executor, storage: Store, row: StudyRef,
           progress: Progress, clock: Callable[[], float], interrupts: _Interrupts,
           observers: Sequence[Callable[[Event], None]] = (),
           group: GroupCommit = GroupCommit(0.0), heap: LoopHeap | None = None,
           listeners: Sequence[Callable[[list[Event], Any], None]] = ()) -> None:
    """Turn after turn until the controller says the study is done: poll the executor, one
    ``controller.turn``, its durable write, then acknowledgements, commands and launches."""
    first = True
    last_beat = clock()
    update = None if type(progress) is NullProgress else progress.update
    while True:
        events = [] if first else executor.poll(POLL_INTERVAL_S)
        news = _news(events)
        if news and group.window_s > 0:
            events = _gather(executor, events, controller, group)
        first = False
        with storage.transaction() if news else contextlib.nullcontext():
            now = clock()
            turn = _decide(controller, events, now, observers, interrupts)
            last_beat = _store(controller, storage, row, turn, now, last_beat)
        for listen in listeners:
            listen(events, controller.trials)
        _carry_out(executor, turn, acknowledgements(events, turn) if events else _NO_ACKS)
        if update is not None:
            update(controller, now)
        if heap is not None:
            heap.after_turn()
        if turn.done:
            return


def _news(events: list[Event]) -> bool:
    """Whether ``events`` hold more than heartbeats (which change nothing stored, mostly: a
    turn of heartbeats alone opens no transaction and waits for no group commit)."""
    for event in events:
        if type(event) is not TrialHeartbeat:
            return True
    return False


def _decide(controller: Controller, events: list[Event], now: float,
            observers: Sequence[Callable[[Event], None]], interrupts: _Interrupts) -> Turn:
    """The observers see each event, then the controller decides the turn. A Ctrl-C is handed
    over once (``InterruptRequested``): a signal that lands after this reads the counter
    (during the commit, say) is handed over next turn."""
    if observers:
        for event in events:
            for observe in observers:
                observe(event)
    if interrupts.count and not controller.interrupted:
        return controller.turn(events + [InterruptRequested()], now)
    return controller.turn(events, now)


def _store(controller: Controller, storage: Store, row: StudyRef, turn: Turn, now: float,
           last_beat: float) -> float:
    """The turn's durable write (inside the turn's transaction, if any), or a lease renewal
    when it has nothing to write and the last one is ``HEARTBEAT_S`` old; returns the time of
    the last renewal."""
    if turn.changes or turn.results:
        storage.save_batch(row.study_id, list(turn.changes), list(turn.results),
                           lambda: controller.state_dict(now), stays=list(turn.stays))
        return now
    if now - last_beat >= HEARTBEAT_S:
        storage.heartbeat(row.study_id)
        return now
    return last_beat


@dataclass(frozen=True)
class Acks:
    """What the loop acknowledges after a turn is durable: ``trial_ids``, whose reports of the
    turn are stored (or were replays, answered all the same), each with its ``free_below``."""
    trial_ids: tuple[int, ...]
    free_below: dict[int, int]


def acknowledgements(events: Sequence[Event], turn: Turn) -> Acks:
    """Every trial that reported in ``events`` (the executor holds each such report until it
    is acked), once, in the order of their first report; each trial's ``free_below`` is the
    turn's (0 where the turn gives none: every report of it waits)."""
    given = turn.free_below
    free_below: dict[int, int] = {}
    for event in events:
        if (type(event) is ResultReported or isinstance(event, ResultReported)) \
                and event.trial_id not in free_below:
            free_below[event.trial_id] = given.get(event.trial_id, 0)
    return Acks(tuple(free_below), free_below)


_NO_ACKS = Acks((), {})      # a turn without events acknowledges nothing


def _carry_out(executor: Executor, turn: Turn, acks: Acks) -> None:
    """Once the turn is durable: commands first (a stopped trial's ack then finds its stop),
    the acknowledgements, then the launches."""
    for command in turn.commands:
        executor.submit(command)
    if acks.trial_ids:
        executor.acknowledge(acks.trial_ids, acks.free_below)
    for launch in turn.launches:
        executor.submit(launch)
