"""The study's decision maker: which trials to launch, what each event means, when the study ends.

Pure: no I/O, no clock. It is built with what it places trials on (``ControllerOptions``:
inventory, placement, demand, packs, time-sharing). Each turn the loop calls ``turn(events,
now)`` (``now``: seconds, any monotonic origin) and carries out the returned ``Turn``: it stores
its changes, results and stays durably, then sends its commands, acknowledges the turn's
reports with its ``free_below`` and sends its launches. ``handle``, ``tick`` and ``launches``
are the turn's parts (tests drive them one by one); ``add_external``, ``ask`` and ``tell``
serve ask/tell sessions outside the loop.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from hypersack.core.algorithms.base import NO_DECISION, Algorithm, Decision
from hypersack.core.allocator import Allocator, default_demand
from hypersack.core.failures import DEFAULT_MAX_FAILURES, FailureStreak
from hypersack.core.objective import Objective, Value
from hypersack.core.packs import PackBook, PackPolicy, Seat
from hypersack.core.shared_devices import SharedDevices
from hypersack.core.timeouts import NOT_RESPONDING, Silence, silence, timed_out
from hypersack.core.timesharing import TimeSharing
from hypersack.core.stays import BEGAN, Stay, StayBook, StayOutcome
from hypersack.core.trial import (Cancel, Command, DeviceAdded, DeviceLost, Event, FailureCause,
                                  InterruptRequested, Launch, PackCapped, Preempt, ResultReported, Stop, StopReason,
                                  TrialFailed, TrialFinished, TrialHeartbeat, TrialRecord,
                                  TrialStarted, TrialState)
from hypersack.errors import ConfigError
from hypersack.validation import check_integer, check_positive

__all__ = ["Budget", "Controller", "ControllerOptions", "Turn", "best_record"]

_INTERRUPTED = StopReason.INTERRUPTED
_TIME_BUDGET = StopReason.TIME_BUDGET
_PRUNED = StopReason.PRUNED
_PAUSED = StopReason.PAUSED
_RESIZE = StopReason.RESIZE
_STOPS = {Decision.STOP: _PRUNED, Decision.PAUSE: _PAUSED, Decision.GROW: _RESIZE}
_CONTINUE = Decision.CONTINUE
_PREEMPTED = StopReason.PREEMPTED
_END_GAME = "end_game"      # info key of a trial resumed by the end-game (stored with the trial)


@dataclass(frozen=True)
class Budget:
    """``trials``: most trials ever created; ``time_s``: wall seconds of running, summed over resumes.

    At least one must be set. When time runs out no trial starts, and running trials are asked to
    stop at their next report; they end COMPLETE with their last reported value.
    """
    trials: int | None = None
    time_s: float | None = None

    def __post_init__(self) -> None:
        if self.trials is None and self.time_s is None:
            raise ConfigError("budget", {}, "must set trials, time_s, or both")
        t, s = self.trials, self.time_s
        if t is not None:
            check_integer("budget.trials", t, low=1)
        if s is not None:
            check_positive("budget.time_s", s, hint="(seconds)")


def trial_seed(study_seed: int, trial_id: int) -> int:
    """A per-trial seed that depends only on the study seed and the trial id."""
    return (study_seed * 1_000_003 + trial_id * 7_919 + 17) % (2**31 - 1)


@dataclass(frozen=True)
class ControllerOptions:
    """What a controller places trials on, given once at construction (``runtime.loop.assemble``
    builds it): ``inventory`` (a ``hypersack.placement.Cluster``; None: no trial can be launched,
    as in ask/tell sessions) placed with ``placement`` (a policy name or its mapping) and
    ``demand(record) -> Job`` (None: ``allocator.default_demand``); ``packs`` (a
    ``core.packs.PackPolicy``: trials that fuse are seated in packs, named in each Launch; None:
    every trial runs alone); ``time_sharing`` (a ``TimeSharing``, a policy name or its mapping;
    None: devices are not time-shared; needs an inventory)."""
    inventory: Any = None
    placement: str | Mapping[str, Any] = "wfd"
    demand: Callable[[TrialRecord], Any] | None = None
    packs: PackPolicy | None = None
    time_sharing: Any = None


@dataclass(frozen=True)
class Turn:
    """What one ``Controller.turn`` decided, for the loop to carry out in this order: store
    ``changes``, ``results`` and ``stays`` in one durable write, acknowledge the turn's reports
    (each trial's next decision point in ``free_below``: its reports below it need not wait for
    an ack; a trial it leaves out: 0), send ``commands``, then ``launches``. ``done``: the study
    ended with this turn (not interrupted: its PAUSED trials were pruned, in ``changes``)."""
    commands: tuple[Command, ...] = ()
    launches: tuple[Launch, ...] = ()
    changes: tuple[TrialRecord, ...] = ()
    results: tuple[tuple[int, int, dict[str, Any]], ...] = ()
    stays: tuple[Stay, ...] = ()
    free_below: Mapping[int, int] = field(default_factory=dict)
    done: bool = False


class Controller:
    def __init__(self, algorithm: Algorithm, objective: Objective, budget: Budget, *,
                 seed: int = 0, max_retries: int = 2, now: float = 0.0,
                 trial_timeout_s: float | None = None,
                 heartbeat_timeout_s: float | None = None,
                 max_failures: int | None = DEFAULT_MAX_FAILURES,
                 options: ControllerOptions = ControllerOptions()):
        check_integer("max_retries", max_retries, low=0)
        self.algorithm = algorithm
        self.objective = objective
        self.budget = budget
        self.seed = seed
        self.max_retries = max_retries
        self.trial_timeout_s = trial_timeout_s
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self._heard: dict[int, float] = {}     # running trial -> its last heartbeat (this attempt)
        self._silenced: set[int] = set()       # running trials whose worker was killed (silent)
        self.options = options
        self.trials: dict[int, TrialRecord] = {}
        self._queue: deque[int] = deque()      # PENDING trials waiting for a slot, in launch order
        self._changed: set[int] = set()
        self._elapsed_before = 0.0             # running time of earlier sessions (resume)
        self._session_start = now
        self._interrupted = False
        self._time_up = False
        self._suggest_idle = False             # the last suggest() had nothing to propose
        self.allocator: Allocator | None = (
            None if options.inventory is None else
            Allocator(options.inventory, options.placement, options.demand or default_demand))
        self._device_lost: set[int] = set()    # trials whose device vanished (no retry charged)
        self._running_ids: set[int] = set()
        self._results: list[tuple[int, int, dict[str, Any]]] = []   # accepted, not yet stored
        self.halt_reason: str | None = None    # why the study stopped itself (e.g. disk full)
        self.shared: SharedDevices | None = self._time_sharing(options.time_sharing)
        self.stays = StayBook()                # each trial's time on each device (reports)
        self._failures = FailureStreak(max_failures)   # same-kind failures in a row
        self.failure_stop: str | None = None   # why failing trials stopped the study, or None
        self._external = 0                     # trials run elsewhere (add_external): no budget
        self.packs: PackBook | None = PackBook(options.packs) if options.packs is not None else None
        self._reported: set[int] = set()       # members that reported this turn (ack pending)
        # whether ``tick`` can decide anything: a trial or heartbeat timeout, a time budget or
        # time-sharing (else a turn skips it)
        self._multi = objective.is_multi        # a frozen objective: asked once
        self._timed = (trial_timeout_s is not None or heartbeat_timeout_s is not None
                       or budget.time_s is not None or self.shared is not None)

    def _time_sharing(self, options: Any) -> SharedDevices | None:
        """Time-sharing of the inventory's devices (``core.timesharing``), or None."""
        parsed = TimeSharing.parse(options)
        if parsed is None:
            return None
        return SharedDevices(parsed, self._placer(), self.objective)

    # ---- restore (resume) ------------------------------------------------------------------

    def restore(self, trials: Iterable[TrialRecord], algorithm_state: Mapping[str, Any] | None,
                elapsed_s: float = 0.0, time_sharing: Mapping[str, Any] | None = None) -> None:
        """Take the stored trials back (before the first turn). Unfinished ones are queued to
        restart from their checkpoint; ``time_sharing`` (bindings, priorities) is time-sharing's
        stored state, taken when the options time-share (else ignored)."""
        if algorithm_state:
            self.algorithm.load_state_dict(algorithm_state)
        self._elapsed_before = elapsed_s
        for record in sorted(trials, key=lambda r: r.trial_id):
            self.trials[record.trial_id] = record
            self._external += bool(record.info.get("external"))
            if not record.state.finished and record.state is not TrialState.PAUSED:
                record.state = TrialState.PENDING
                record.stop_reason = None
                self._queue.append(record.trial_id)
                self._changed.add(record.trial_id)
        shared = self.shared
        if shared is not None:
            if time_sharing:
                shared.share.load_state_dict(time_sharing)
            for trial_id in self._queue:       # every unfinished trial waits
                shared.left(self.trials[trial_id])
            self._changed.update(shared.take_touched())

    # ---- the turn --------------------------------------------------------------------------

    def turn(self, events: Sequence[Event], now: float) -> Turn:
        """Every decision of one turn of the loop, at ``now``: ``events`` in the order the
        executor gave them (an ``InterruptRequested`` among them is taken after the time-driven
        decisions, whatever its place), the time-driven decisions (``tick``), then the launches
        that fit. Returns what to store, acknowledge and send (:class:`Turn`); once the study
        is done and not interrupted, its PAUSED trials are pruned (``finalize``) in this turn."""
        commands: list[Command] = []
        interrupt = False
        reported: set[int] = set()
        handle, on_report, on_trial = self.handle, self._on_report, self._on_trial_event
        for event in events:
            if type(event) is ResultReported:        # most events: no isinstance chain
                reported.add(event.trial_id)
                commands += on_report(event, now)
                continue
            if type(event) is TrialStarted or type(event) is TrialFinished:
                commands += on_trial(event, now)
                continue
            if isinstance(event, InterruptRequested):
                interrupt = True
                continue
            if isinstance(event, ResultReported):
                reported.add(event.trial_id)
            commands += handle(event, now)
        if self._timed:
            commands += self.tick(now)
        if interrupt:
            commands += self.interrupt()
        launches = self.launches(now)
        done = self.done(now)
        if done:
            self.finalize(now)
        free_below = self.free_below
        return Turn(tuple(commands), tuple(launches), tuple(self.take_changes()),
                    tuple(self.take_results()), tuple(self.take_stays()),
                    {t: free_below(t) for t in sorted(reported)}, done)

    def free_below(self, trial_id: int) -> int:
        """The step below which ``trial_id``'s reports need not wait for an ack (pipelining):
        ``next_decision_step``, but 0 (every report waits) for a member of a pack."""
        if self.packs is not None and trial_id in self.packs.of:
            return 0
        return self.next_decision_step(trial_id)

    # ---- launching -------------------------------------------------------------------------

    def elapsed(self, now: float) -> float:
        return self._elapsed_before + max(0.0, now - self._session_start)

    def launches(self, now: float = 0.0) -> list[Launch]:
        """Trials to start now: queued ones first (resumed, promoted, retried), then new ones.

        The placement policy of the inventory (``ControllerOptions``, required) decides what fits;
        each Launch names its devices.
        """
        book = self.packs
        if book is None:
            return self._launches(now)
        self._free_stopped_seats(book)
        out = self._launches(now)
        book.end_turn()                # executors end emptied packs at their next poll
        return out

    def _free_stopped_seats(self, book: PackBook) -> None:
        """A member asked to stop (not preempted) with the ack of the report it made this turn
        leaves its pack at that report: its seat takes this turn's launches."""
        for trial_id in sorted(self._reported):
            record = self.trials[trial_id]
            if record.state is not TrialState.RUNNING or (
                    record.stop_reason is not None and record.stop_reason != _PREEMPTED):
                book.leave(trial_id)
        self._reported.clear()

    def _launches(self, now: float) -> list[Launch]:
        if self._interrupted or self._out_of_time(now):
            return []
        self._take_promotions(now)
        out = self._launch_any(now)
        if not out and self._take_end_game(now):
            out = self._launch_any(now)
        return out

    def _launch_any(self, now: float) -> list[Launch]:
        if self.shared is not None:
            return self._launch_shared(self.shared, now)
        return self._launch_placed(now)

    def _placer(self) -> Allocator:
        """The allocator; every launch is placed, so launching with a controller built without
        an inventory is a caller's bug."""
        if self.allocator is None:
            raise RuntimeError("the controller has no inventory (ControllerOptions.inventory)")
        return self.allocator

    def _launch_placed(self, now: float) -> list[Launch]:
        allocator = self._placer()
        out: list[Launch] = []
        if self._queue:
            queued = [self.trials[t] for t in self._queue]
            placed = allocator.place(queued)
            if placed:
                out = [self._launch(r, now, placed[r.trial_id]) for r in queued
                       if r.trial_id in placed]
                self._queue = deque(t for t in self._queue if t not in placed)
        # Room is asked only of a study that may create (a "no" of _create's own check ends
        # the loop as before, without a placement run); a "yes" places the new trial itself
        # (Allocator.has_room_for): one placement run per new trial.
        while not self._queue and self._may_create(now) and self._room_for_new(allocator):
            record = self._create(now)
            if record is None:
                break
            spot = allocator.place([record])
            if not spot:
                self._queue.append(record.trial_id)
                break
            out.append(self._launch(record, now, spot[record.trial_id]))
        if not out and not self.running():
            self._fail_unplaceable(now)
        return out

    def _launch_shared(self, shared: SharedDevices, now: float) -> list[Launch]:
        """Time-sharing: bind pending and new trials to devices (the global level), then start
        on each device the best bound trials that fit (the node level)."""
        running = [self.trials[t] for t in self._running_ids]
        pending = [self.trials[t] for t in self._queue]
        for record in pending:
            if shared.share.device_of(record.trial_id) is None:
                shared.bind(record, running, pending)
        while (all(shared.share.device_of(t) is not None for t in self._queue)
               and shared.has_room(self._latest(), running, pending)):
            created = self._create(now)
            if created is None:
                break
            self._queue.append(created.trial_id)
            pending.append(created)
            if shared.bind(created, running, pending) is None:
                break
        out = []
        for record, key in shared.starts(pending, running):
            self._queue.remove(record.trial_id)
            self._placer().occupy(record, [key])
            out.append(self._launch(record, now, (key,)))
            shared.started(record, now)
        self._changed.update(shared.take_touched())
        return out

    def _latest(self) -> TrialRecord | None:
        """The latest trial (a real record: a new trial is judged like it), or None."""
        return self.trials[len(self.trials) - 1] if self.trials else None

    def _room_for_new(self, allocator: Allocator) -> bool:
        """Whether a new trial would fit now: asked before one is created, so trials are not
        made long before a device can take them. It is judged like the latest trial, on the
        devices the algorithm gives a new one (yes when there is no trial yet)."""
        if not self.trials:
            return True
        next_id = len(self.trials)
        resources = self._clamp_resources(self.algorithm.resources(next_id))
        return allocator.has_room_for(self.trials[next_id - 1], resources)

    def _fail_unplaceable(self, now: float) -> None:
        """With every device idle, a queued trial that still does not fit never will: fail it."""
        for trial_id in list(self._queue):
            record = self.trials[trial_id]
            why = self._placer().unplaceable(record)
            if why is not None:
                self._queue.remove(trial_id)
                self._finish(record, TrialState.FAILED, now, error=f"no device can run this trial: {why}")

    def _take_promotions(self, now: float) -> None:
        """Queue every PAUSED trial the algorithm promotes now."""
        if self._out_of_time(now):
            return
        seen: set[int] = set()
        while (trial_id := self.algorithm.promote()) is not None and trial_id not in seen:
            seen.add(trial_id)      # an algorithm naming the same trial again is not a new promotion
            self._resume_paused(trial_id)

    def _resume_paused(self, trial_id: int) -> None:
        record = self.trials.get(trial_id)
        if record is not None and record.state is TrialState.RUNNING and record.stop_reason == _PAUSED:
            record.stop_reason = _RESIZE     # promoted before its pause landed: relaunch at once
            return
        if record is None or record.state is not TrialState.PAUSED:
            return       # a promotion of a trial that is not paused: nothing to resume
        record.state = TrialState.PENDING
        record.resources = self._clamp_resources(self.algorithm.resources(trial_id))
        record.info.update(self.algorithm.trial_info(trial_id))   # its next pack: its demand
        self._queue.append(trial_id)
        self._changed.add(trial_id)

    def _create(self, now: float) -> TrialRecord | None:
        """A new trial from the algorithm (or a promotion it returns), or None."""
        while self._may_create(now):
            trial_id = len(self.trials)
            suggestion = self.algorithm.suggest(trial_id)
            self._suggest_idle = suggestion is None
            if suggestion is None:
                return None
            if suggestion.resume is not None:
                self._resume_paused(suggestion.resume)
                if self._queue:
                    return None    # the promoted trial launches first
                continue
            record = TrialRecord(trial_id, dict(suggestion.config), trial_seed(self.seed, trial_id),
                                 info=dict(suggestion.info))
            record.resources = self._clamp_resources(self.algorithm.resources(trial_id))
            self.trials[trial_id] = record
            self._changed.add(trial_id)
            return record
        return None

    def _clamp_resources(self, wanted: int) -> int:
        allocator = self.allocator if self.allocator is not None else self._placer()
        return min(max(1, int(wanted)), max(1, allocator.device_count()))

    def _may_create(self, now: float) -> bool:
        if self.budget.trials is not None and len(self.trials) - self._external >= self.budget.trials:
            return False
        return not self._out_of_time(now) and not self.algorithm.exhausted

    def _out_of_time(self, now: float) -> bool:
        return self.budget.time_s is not None and self.elapsed(now) >= self.budget.time_s

    def _launch(self, record: TrialRecord, now: float,
                devices: tuple[tuple[str, str], ...]) -> Launch:
        record.state = TrialState.RUNNING
        self._running_ids.add(record.trial_id)
        self._heard.pop(record.trial_id, None)     # silence counts from this attempt's first beat
        record.attempts += 1
        record.started_at = now
        record.error = record.traceback = None
        record.devices = [(str(node), str(gpu)) for node, gpu in devices]
        record.info.update(self.algorithm.trial_info(record.trial_id))
        self._changed.add(record.trial_id)
        share = self._share(record)
        seat = self._seat(record)
        # A fused member's stay names its pack (the report draws a pack as one stay) and its
        # record keeps where it sat; a plain trial's, the algorithm's pack hint (or None).
        if seat is not None:
            record.info["fused"] = {"pack": seat.pack, "seat": seat.seat}
        else:
            record.info.pop("fused", None)
        self.stays.open(record.trial_id, record.attempts, record.devices, now, share,
                        seat.pack if seat else record.info.get("pack"), record.device)
        return Launch(record.trial_id, dict(record.config), record.seed, record.attempts,
                      record.checkpoint, tuple(devices), share,
                      seat.pack if seat else None, seat.seat if seat else None,
                      self.free_below(record.trial_id))

    def _seat(self, record: TrialRecord) -> Seat | None:
        """The pack and seat of a trial that fuses, on its first device (None: it runs alone)."""
        book = self.packs
        if (book is None or not record.devices
                or not book.fuses(record.config, record.info.get("pack_size"))):
            return None
        device = record.devices[0]
        neighbours = [self.trials[t].config for t in sorted(self._running_ids)
                      if t != record.trial_id and device in self.trials[t].devices]
        return book.join(record.trial_id, record.config, record.info.get("pack"), device,
                         neighbours)

    def _share(self, record: TrialRecord) -> float | None:
        """Percent of each device's compute this trial was given (None: a whole device)."""
        allocator = self._placer()
        if allocator.policy == "exclusive":
            return None
        compute = float(allocator.demand(record).compute)
        return min(100.0, compute) if compute < 100.0 else None

    # ---- events ----------------------------------------------------------------------------

    def handle(self, event: Event, now: float) -> list[Command]:
        """One event's decisions (``turn`` takes a turn's events through here)."""
        if isinstance(event, ResultReported):         # most events: straight to their branch
            return self._on_report(event, now)
        if isinstance(event, (TrialStarted, TrialFinished)):
            return self._on_trial_event(event, now)
        if isinstance(event, InterruptRequested):
            return self.interrupt()
        if isinstance(event, (DeviceAdded, DeviceLost)):
            self._on_device(event)
            return []
        if isinstance(event, PackCapped):
            if self.packs is not None:
                self.packs.capped(event.pack_id, event.cap)
            return []
        if self.packs is not None and isinstance(event, TrialFailed):
            self.packs.leave(event.trial_id)     # its seat is free, whatever the trial became
        record = self.trials.get(event.trial_id)
        if record is None or record.state is not TrialState.RUNNING:
            return []          # late news of a trial already decided (e.g. failed on NaN)
        if isinstance(event, TrialHeartbeat):
            self._heard_from(record, now)
            return []
        self._changed.add(record.trial_id)
        if isinstance(event, TrialFailed):
            return self._on_failed(record, event, now) + self._stop_if_failing()
        return self._stop_if_failing()

    def _on_trial_event(self, event: TrialStarted | TrialFinished, now: float) -> list[Command]:
        """``handle`` of a TrialStarted or a TrialFinished."""
        if self.packs is not None and isinstance(event, TrialFinished):
            self.packs.leave(event.trial_id)     # its seat is free, whatever the trial became
        record = self.trials.get(event.trial_id)
        if record is None or record.state is not TrialState.RUNNING:
            return []          # late news of a trial already decided (e.g. failed on NaN)
        self._changed.add(record.trial_id)
        if isinstance(event, TrialStarted):
            self._on_started(record, event, now)
        else:
            self._on_finished(record, now)
        return self._stop_if_failing()

    def _on_started(self, record: TrialRecord, event: TrialStarted, now: float) -> None:
        record.device = event.device
        self.stays.place(record.trial_id, event.device)
        # when the worker began it: before, the launch was the worker's start-up
        record.info.setdefault(BEGAN, {}).setdefault(str(record.attempts), now)

    def _on_report(self, event: ResultReported, now: float) -> list[Command]:
        """``handle`` of a report (of a trial still running; else nothing)."""
        record = self.trials.get(event.trial_id)
        if record is None or record.state is not TrialState.RUNNING:
            return []
        self._changed.add(record.trial_id)
        if self.packs is not None:
            self._reported.add(record.trial_id)
        out = self._on_result(record, event, now)
        if self.failure_stop is None:          # ``_stop_if_failing``, inline: the usual case
            return out
        return out + self._stop_if_failing()

    def _stop_if_failing(self) -> list[Command]:
        """Once ``max_failures`` trials in a row failed the same way (``core.failures``), stop
        the study as Ctrl-C does (``failure_stop`` says why; unfinished trials stay resumable)."""
        if self.failure_stop is None or self._interrupted:
            return []
        return self.interrupt()

    def _on_result(self, record: TrialRecord, event: ResultReported, now: float) -> list[Command]:
        """Accept a step's result (to be stored with the trial's change, in one transaction),
        and its checkpoint as the trial's. A step at or before the last stored one is a replay
        (recomputed after a restart from an older checkpoint): acknowledged, not stored again."""
        if record.last_step is not None and event.step <= record.last_step:
            return [Stop(record.trial_id, record.stop_reason)] if record.stop_reason else []
        metrics = dict(event.metrics)      # the stored result's and the record's (never changed)
        self._results.append((record.trial_id, event.step, metrics))
        if event.checkpoint is not None:
            record.checkpoint, record.checkpoint_step = event.checkpoint, event.step
        bad = _first_bad_metric(event.metrics)
        if bad is not None:
            name, value = bad
            self._finish(record, TrialState.FAILED, now, error=(
                f"metric {name!r} is {value!r} at step {event.step}"))
            return [Stop(record.trial_id, StopReason.FAILED)]
        missing = self._missing_objective(record, event) if record.last_step is None else None
        if missing is not None:
            self._finish(record, TrialState.FAILED, now, error=missing)
            return [Stop(record.trial_id, StopReason.FAILED)]
        record.last_step = event.step
        record.metrics = metrics
        objective = self.objective
        if objective.metric in metrics:
            record.value = float(metrics[objective.metric])
            record.value_step = event.step
        if self._multi:
            self._keep_values(record, event.metrics)
        if self.shared is not None:
            self.shared.observe(record, event.metrics)
        if record.stop_reason is not None and record.stop_reason != _PREEMPTED:
            # Asked already; ask again: a worker relaunched after a crash never got the request.
            return [Stop(record.trial_id, record.stop_reason)]
        if record.info.get(_END_GAME):
            return []        # finishing in the end-game: the algorithm has nothing left to decide
        decision = self.algorithm.on_result(record.trial_id, event.step, event.metrics)
        # (an Enum member hashes in Python: the usual answer is told apart by identity)
        reason = None if decision is _CONTINUE else _STOPS.get(decision)
        if reason is None:
            # A preempted trial is still suspended; an algorithm's decision above overrides it.
            return [Preempt(record.trial_id)] if record.stop_reason == _PREEMPTED else []
        record.stop_reason = reason
        return [Stop(record.trial_id, reason)]

    def _missing_objective(self, record: TrialRecord, event: ResultReported) -> str | None:
        """The error of a trial whose first report lacks an objective metric (a typo fails at
        step 1, not after training to the end), or None."""
        if record.last_step is not None:
            return None
        missing = self.objective.missing(event.metrics)
        if not missing:
            return None
        metric = missing[0]
        reported = ", ".join(repr(m) for m in sorted(event.metrics)) or "nothing"
        return (f"the objective metric {metric!r} is missing from the trial's first report "
                f"(step {event.step} reported {reported}); report it from the first step on, "
                f"e.g. ctx.report(step, {metric}=...)")

    def _keep_values(self, record: TrialRecord, metrics: Mapping[str, Any]) -> None:
        """A multi-objective study keeps every objective's value of a report that holds them all."""
        values = self.objective.values_of(metrics) if self.objective.is_multi else None
        if values is not None:
            record.values = list(values)

    def _told(self, record: TrialRecord) -> Value | None:
        """What the algorithm is told a trial reached, by the algorithm's objective: every
        objective's value (a tuple) for a multi-objective one; else the one value of its metric
        (the study's value, or the objective it ranks by: ``rank_by``); None when missing."""
        ranks = getattr(self.algorithm, "objective", self.objective)
        if ranks.is_multi:
            return None if record.values is None else tuple(record.values)
        if ranks.metric == self.objective.metric:
            return record.value
        if record.values is None or ranks.metric not in self.objective.metrics:
            return None
        return record.values[self.objective.metrics.index(ranks.metric)]

    def _unfinished_objectives(self, record: TrialRecord) -> str | None:
        """The error of a multi-objective trial whose last report lacks an objective metric:
        every objective must be in its final result (values of one step, never mixed)."""
        missing = self.objective.missing(record.metrics) if self.objective.is_multi else []
        if not missing:
            return None
        return (f"the objective metric {missing[0]!r} is missing from the trial's last report "
                f"(step {record.last_step} reported {sorted(record.metrics) or 'nothing'}); a "
                f"multi-objective trial must report every objective ({', '.join(self.objective.metrics)}) "
                "in its final result")

    def _on_device(self, event: DeviceAdded | DeviceLost) -> None:
        if isinstance(event, DeviceAdded):
            self._placer().add_device(event.node_id, event.gpu, event.node_cpus)
            if self.shared is not None:
                self.shared.add_device(event.node_id, str(event.gpu.id))
        else:
            self._device_lost.update(self._placer().lose_device(event.node_id, event.gpu_id))
            if self.shared is not None:
                self.shared.remove_device(event.node_id, event.gpu_id)

    def _on_finished(self, record: TrialRecord, now: float) -> None:
        self.stays.close(record.trial_id, now, _finished_outcome(record))
        self._release(record)
        if record.stop_reason == _INTERRUPTED:
            record.state, record.stop_reason = TrialState.PENDING, None
            self._queue.appendleft(record.trial_id)
            return
        if record.stop_reason == _PREEMPTED:
            # Time-sharing suspended it: it waits, bound to its device; no retry is charged.
            record.state, record.stop_reason = TrialState.PENDING, None
            self._queue.append(record.trial_id)
            return
        if record.stop_reason == _PAUSED:
            record.state, record.stop_reason = TrialState.PAUSED, None
            self._failures.ended(record.trial_id, None, failed=False)
            if self.shared is not None:
                self.shared.forget(record)
            return
        if record.stop_reason == _RESIZE:
            record.state, record.stop_reason = TrialState.PENDING, None
            record.resources = self._clamp_resources(self.algorithm.resources(record.trial_id))
            self._queue.appendleft(record.trial_id)
            return
        if record.value is None:
            self._finish(record, TrialState.FAILED, now, error=(
                f"metric {self.objective.metric!r} was never reported "
                f"(reported: {sorted(record.metrics) or 'nothing'})"), released=True)
            return
        unfinished = self._unfinished_objectives(record)
        if unfinished is not None:
            self._finish(record, TrialState.FAILED, now, error=unfinished, released=True)
            return
        state = TrialState.PRUNED if record.stop_reason == _PRUNED else TrialState.COMPLETE
        self._finish(record, state, now, released=True)

    def _on_failed(self, record: TrialRecord, event: TrialFailed, now: float) -> list[Command]:
        """Decide what a failure means, from its cause (the executor reports facts only)."""
        self.stays.close(record.trial_id, now, self._failed_outcome(record, event))
        self._release(record)
        cause = event.cause
        if cause is FailureCause.DISK_FULL:
            # Not the trial's fault: it waits for a resume; the study stops (nothing stored is lost).
            self._requeue(record, event.reason)
            return self.halt(f"the disk is full (trial {record.trial_id}: {event.reason})")
        lost = cause is FailureCause.DEVICE_LOST or record.trial_id in self._device_lost
        if record.stop_reason == _INTERRUPTED or lost:
            # Interrupted, or its device vanished: not the trial's fault, no retry is charged.
            self._device_lost.discard(record.trial_id)
            self._requeue(record, event.reason)
            return []
        retryable = cause in (FailureCause.WORKER_DIED, FailureCause.OOM)
        if retryable and record.stop_reason == _TIME_BUDGET and record.value is not None:
            self._finish(record, TrialState.COMPLETE, now, released=True)   # it was ending anyway
            return []
        if retryable and record.retries < self.max_retries:
            record.retries += 1
            self._requeue(record, event.reason)
            return []
        reason = event.reason
        if retryable:
            reason += f" (gave up after {record.retries} retries)"
        self._finish(record, TrialState.FAILED, now, error=reason, traceback=event.traceback,
                     released=True)
        return []

    def _failed_outcome(self, record: TrialRecord, event: TrialFailed) -> StayOutcome:
        """Why a trial whose worker ended badly left its device (the stay's outcome)."""
        if event.cause is FailureCause.DEVICE_LOST or record.trial_id in self._device_lost:
            return StayOutcome.LOST
        if event.cause is FailureCause.DISK_FULL or record.stop_reason == _INTERRUPTED:
            return StayOutcome.INTERRUPTED
        if record.stop_reason == _TIME_BUDGET and record.value is not None \
                and event.cause in (FailureCause.WORKER_DIED, FailureCause.OOM):
            return StayOutcome.FINISHED
        return StayOutcome.FAILED

    def _requeue(self, record: TrialRecord, reason: str) -> None:
        record.state, record.stop_reason, record.error = TrialState.PENDING, None, reason
        self._queue.appendleft(record.trial_id)

    def _release(self, record: TrialRecord) -> None:
        self._running_ids.discard(record.trial_id)
        self._heard.pop(record.trial_id, None)
        self._silenced.discard(record.trial_id)
        record.info.pop(NOT_RESPONDING, None)
        self._placer().release(record.trial_id)
        record.devices = []
        if self.shared is not None:
            self.shared.left(record)

    def _finish(self, record: TrialRecord, state: TrialState, now: float | None, *,
                error: str | None = None, traceback: str | None = None,
                released: bool = False) -> None:
        """End ``record`` in ``state``; ``released``: its stays were closed and its devices
        released already (``_on_finished``, ``_on_failed``; time-sharing's own bookkeeping is
        told again, as it always was)."""
        if not released:
            if now is not None:
                self.stays.close(record.trial_id, now, _STATE_OUTCOME[state])
            self._release(record)
        elif self.shared is not None:
            self._release(record)
        record.state = state
        record.finished_at = now
        record.stop_reason = None
        record.error, record.traceback = error, traceback
        self._changed.add(record.trial_id)
        if self.shared is not None:
            self.shared.forget(record)
        value = self._told(record) if state is not TrialState.FAILED else None
        self.algorithm.on_complete(record.trial_id, value, state.value)
        failed = state is TrialState.FAILED
        if self._failures.ended(record.trial_id, error, failed) and self.failure_stop is None:
            self.failure_stop = self._failures.message(error)

    # ---- trials run outside the loop (Study.add_trial, Study.ask / tell) ------------------

    def add_external(self, config: Mapping[str, Any], results: list[tuple[int, dict[str, Any]]],
                     now: float) -> TrialRecord:
        """A trial run elsewhere: COMPLETE with ``results`` (``(step, metrics)``, steps
        increasing, the objective in the last), stored like any trial's, not counted in the
        trial budget; the algorithm ``observe``s it. The caller validates config and results."""
        record = self._new_record(config, {"external": True}, now)
        self._external += 1
        for step, metrics in results:
            self._results.append((record.trial_id, step, dict(metrics)))
        record.last_step, record.metrics = results[-1][0], dict(results[-1][1])
        record.value = float(results[-1][1][self.objective.metric])
        record.value_step = results[-1][0]
        self._keep_values(record, results[-1][1])
        record.state, record.finished_at = TrialState.COMPLETE, now
        told = self._told(record)      # never None: the caller checked the last result
        if told is not None:
            self.algorithm.observe(record.trial_id, record.config, told)
        return record

    def ask(self, now: float) -> TrialRecord | None:
        """A new trial, RUNNING on no device, for a caller that trains it (``tell`` ends it);
        None when the budget is spent or the algorithm has nothing to propose."""
        if not self._may_create(now):
            return None
        suggestion = self.algorithm.suggest(len(self.trials))
        if suggestion is None:
            return None
        if suggestion.resume is not None:
            raise ConfigError("algorithm", self.algorithm.__class__.__name__, "pauses and resumes "
                              "trials, which ask/tell cannot do: use Study.run, or an algorithm "
                              "that does not pause (random, grid, tpe, optuna, asha with mode: stop)")
        record = self._new_record(suggestion.config, dict(suggestion.info), now)
        record.state, record.attempts = TrialState.RUNNING, 1
        return record

    def tell(self, trial_id: int, metrics: Mapping[str, Any] | None, step: int | None,
             now: float) -> TrialRecord:
        """End an asked trial: COMPLETE with ``metrics`` at ``step`` (the objective among them),
        FAILED without (None). ConfigError when the trial is unknown or already ended."""
        record = self.trials.get(trial_id)
        if record is None or record.state.finished or record.attempts == 0:
            raise ConfigError("trial", trial_id, "must be a trial from ask() that was not told yet")
        self._changed.add(trial_id)
        record.finished_at = now
        if metrics is None:
            record.state, record.error = TrialState.FAILED, "told failed"
            self.algorithm.on_complete(trial_id, None, TrialState.FAILED.value)
            return record
        step = (record.last_step or 0) + 1 if step is None else step
        self._results.append((trial_id, step, dict(metrics)))
        record.last_step, record.metrics = step, dict(metrics)
        record.value = float(metrics[self.objective.metric])
        record.value_step = step
        self._keep_values(record, metrics)
        self.algorithm.on_result(trial_id, step, metrics)
        record.state = TrialState.COMPLETE
        self.algorithm.on_complete(trial_id, self._told(record), record.state.value)
        return record

    def _new_record(self, config: Mapping[str, Any], info: dict[str, Any], now: float) -> TrialRecord:
        trial_id = len(self.trials)
        record = TrialRecord(trial_id, dict(config), trial_seed(self.seed, trial_id), info=info)
        record.started_at = now
        self.trials[trial_id] = record
        self._changed.add(trial_id)
        return record

    # ---- study-wide ------------------------------------------------------------------------

    def tick(self, now: float) -> list[Command]:
        """Time-driven decisions: trials past ``trial_timeout_s`` (since their launch) fail and
        are cancelled; trials silent past ``heartbeat_timeout_s`` are killed (then retried as
        a dead worker's); once the time budget is spent, every running trial is asked to stop."""
        commands = self._time_out(now) + self._silent(now) + self._preempt(now)
        if self._time_up or not self._out_of_time(now):
            return commands
        self._time_up = True
        return commands + self._stop_running(_TIME_BUDGET)

    def _preempt(self, now: float) -> list[Command]:
        """Time-sharing: running trials whose quantum ended and that a waiting trial outranks
        are asked to suspend after their current step (``Preempt``)."""
        if self.shared is None or self._interrupted or self._time_up:
            return []
        out: list[Command] = []
        for trial_id in self.shared.preemptions(self.trials, self._running_ids, now):
            self.trials[trial_id].stop_reason = _PREEMPTED
            out.append(Preempt(trial_id))
        self._changed.update(self.shared.take_touched())
        return out

    def _time_out(self, now: float) -> list[Command]:
        limit = self.trial_timeout_s
        if limit is None:
            return []
        out: list[Command] = []
        for trial_id in sorted(self._running_ids):
            record = self.trials[trial_id]
            if timed_out(record.started_at, now, limit):
                reason = f"timed out after {limit:g} s (executor.trial_timeout_s)"
                self._finish(record, TrialState.FAILED, now, error=reason)
                out.append(Cancel(trial_id, reason))
        return out

    def _heard_from(self, record: TrialRecord, now: float) -> None:
        """A heartbeat of a running trial: its silence counts from now (and it responds again)."""
        self._heard[record.trial_id] = now
        if record.info.pop(NOT_RESPONDING, None) is not None:
            self._changed.add(record.trial_id)

    def _silent(self, now: float) -> list[Command]:
        """Running trials by their last heartbeat (``core.timeouts.silence``): NOT_RESPONDING
        ones are marked (``info["not_responding"]``: seconds of silence when first seen), GONE
        ones have their worker killed: the executor reports WORKER_DIED, retried as usual."""
        limit = self.heartbeat_timeout_s
        if limit is None or not self._heard:
            return []
        out: list[Command] = []
        for trial_id, heard_at in sorted(self._heard.items()):
            judged = silence(heard_at, now, limit)
            if judged is Silence.HEARD or trial_id in self._silenced:
                continue
            record = self.trials[trial_id]
            if NOT_RESPONDING not in record.info:
                record.info[NOT_RESPONDING] = round(now - heard_at, 1)
                self._changed.add(trial_id)
            if judged is Silence.GONE:
                self._silenced.add(trial_id)
                out.append(Cancel(trial_id, (
                    f"not responding: no heartbeat from its worker for {now - heard_at:.0f} s "
                    f"(executor.heartbeat_timeout_s = {limit:g}); its worker was killed"),
                    cause=FailureCause.WORKER_DIED))
        return out

    def interrupt(self) -> list[Command]:
        """Ctrl-C: launch nothing more; running trials stop at their next report and stay resumable."""
        if self._interrupted:
            return []
        self._interrupted = True
        return self._stop_running(_INTERRUPTED)

    def halt(self, reason: str) -> list[Command]:
        """Stop the study as an interrupt does, because of ``reason`` (kept in ``halt_reason``)."""
        self.halt_reason = self.halt_reason or reason
        return self.interrupt()

    @property
    def interrupted(self) -> bool:
        return self._interrupted

    def _stop_running(self, reason: StopReason) -> list[Command]:
        out: list[Command] = []
        for record in self.trials.values():
            if record.state is TrialState.RUNNING and record.stop_reason in (None, _TIME_BUDGET,
                                                                            _PREEMPTED):
                record.stop_reason = reason
                out.append(Stop(record.trial_id, reason))
        return out

    def running(self) -> int:
        return len(self._running_ids)

    def done(self, now: float) -> bool:
        """No trial running and none will be launched (budget spent, algorithm exhausted or idle)."""
        if self.running():
            return False
        if self._interrupted:
            return True
        if self._queue:
            return self._out_of_time(now)     # they wait for a resume with more time
        # With nothing running, an algorithm that just suggested nothing never will: done,
        # unless the end-game has paused trials to finish.
        if self._may_create(now) and not self._suggest_idle:
            return False
        return self._out_of_time(now) or not self._end_game_picks()

    # ---- the end-game -----------------------------------------------------------------------
    #
    # Successive halving promises that each bracket ends with its best configs trained to the
    # end (SHA/Hyperband: the last rung holds >= 1 config; ASHA: the top of the highest rung is
    # the answer). A trial budget can cut a bracket short: its first rung never fills (SHA,
    # Hyperband, BOHB wait for configs that are never created), or floor(n / rf) rounds to 0
    # (ASHA), and every trial stays PAUSED. The rule: once nothing runs, nothing is queued and no
    # trial will be created, for each group (the algorithm's ``info["bracket"]``, else the whole
    # study) with PAUSED trials and no COMPLETE one, the controller resumes the group's most
    # advanced paused trial (highest last step; then best last value; then lowest id) and lets it
    # train to its end without asking the algorithm again. It repeats for a group whose end-game
    # trial failed. Time budget permitting: a study out of time, or interrupted, has no end-game.

    def _take_end_game(self, now: float) -> bool:
        """Queue the end-game trials (see above); True when any was queued."""
        if self._interrupted or self._out_of_time(now) or self.running() or self._queue:
            return False
        if self._may_create(now) and not self._suggest_idle:
            return False
        picks = self._end_game_picks()
        for record in picks:
            record.info[_END_GAME] = True
            record.state = TrialState.PENDING
            record.resources = self._clamp_resources(self.algorithm.resources(record.trial_id))
            self._queue.append(record.trial_id)
            self._changed.add(record.trial_id)
        return bool(picks)

    def _end_game_picks(self) -> list[TrialRecord]:
        """Per group with paused trials and none complete: its most advanced paused trial."""
        paused: dict[Any, list[TrialRecord]] = {}
        complete: set[Any] = set()
        for r in self.trials.values():
            group = r.info.get("bracket")
            if r.state is TrialState.COMPLETE:
                complete.add(group)
            elif r.state is TrialState.PAUSED:
                paused.setdefault(group, []).append(r)
        sign = self.objective.sign()
        return [max(records, key=lambda r: (r.last_step or 0,
                                            -math.inf if r.value is None else sign * r.value,
                                            -r.trial_id))
                for group, records in sorted(paused.items(), key=lambda kv: str(kv[0]))
                if group not in complete]

    def finalize(self, now: float) -> None:
        """The study ended (not interrupted): PAUSED trials that were never promoted (nor finished
        by the end-game) end PRUNED, with their last reported value."""
        if self._interrupted:
            return
        for record in self.trials.values():
            if record.state is TrialState.PAUSED:
                self._finish(record, TrialState.PRUNED, now)

    def take_results(self) -> list[tuple[int, int, dict[str, Any]]]:
        """Results ``(trial_id, step, metrics)`` accepted since the last call, to be stored in
        the same transaction as ``take_changes()`` (their trials' checkpoints ride with them)."""
        results, self._results = self._results, []
        return results

    def take_stays(self) -> list[Stay]:
        """Stays opened or closed since the last call, to be stored in the same transaction as
        ``take_changes()`` (each opens or closes with a change of its trial)."""
        return self.stays.take()

    def take_changes(self) -> list[TrialRecord]:
        """Trials changed since the last call, for the loop to persist."""
        if not self._changed:
            return []
        trials = self.trials
        changed = [trials[t] for t in sorted(self._changed)]
        self._changed.clear()
        return changed

    def next_decision_step(self, trial_id: int) -> int:
        """The first step at which a report of ``trial_id`` may be answered with a stop: the
        algorithm's next decision point (``Algorithm.next_decision_step``); 0 (every step) for a
        trial that is not running or was asked to stop; ``NO_DECISION`` in the end-game. A
        report below it stops the trial only if its metrics are not finite (the trial then
        fails, one report later for a worker that went on)."""
        record = self.trials.get(trial_id)
        if record is None or record.state is not TrialState.RUNNING or record.stop_reason is not None:
            return 0
        if record.info.get(_END_GAME):
            return NO_DECISION
        return self.algorithm.next_decision_step(trial_id)

    def best(self) -> TrialRecord | None:
        """The trial with the best objective value, as Ray Tune reports it: each trial's last
        reported value (at ``last_step``), over every trial that is not FAILED: complete, paused
        and pruned ones (a trial stopped early counts with the value it reached), and running or
        pending ones with a report (so the best so far never jumps back when a paused trial is
        resumed). Ties: the lower trial id."""
        return best_record(self.trials.values(), self.objective)

    def best_complete(self) -> TrialRecord | None:
        """The COMPLETE trial with the best objective value (ties: the lower trial id)."""
        return best_record(self.trials.values(), self.objective, complete=True)

    def state_dict(self, now: float, full: bool = False) -> dict[str, Any]:
        """The state to store with a commit: the algorithm's, the time spent, time sharing's.
        An algorithm that keeps its state in parts (``Algorithm.state_delta``) gives only the
        parts changed since the previous call, which a store keeps by key (``Store``): call
        this once per commit. ``full``: the algorithm's whole ``state_dict()`` instead (hands
        nothing over)."""
        algorithm = None if full else self.algorithm.state_delta()
        if algorithm is None:
            algorithm = self.algorithm.state_dict()
        state = {"algorithm": algorithm, "elapsed_s": self.elapsed(now)}
        if self.shared is not None:
            state["time_sharing"] = self.shared.state_dict()
        return state




def best_record(records: Iterable[TrialRecord], objective: Objective, *,
                complete: bool = False) -> TrialRecord | None:
    """The best of ``records`` (in trial id order) by :meth:`Controller.best`'s rule, or with
    ``complete`` the best COMPLETE one (a trial trained to its end: in multi-fidelity studies
    the best by the first rule is often one pruned after a few steps); shared with the read side
    of stored studies."""
    best: TrialRecord | None = None
    for r in records:
        if r.value is not None and r.state is not TrialState.FAILED \
                and (not complete or r.state is TrialState.COMPLETE):
            if best is None or best.value is None or objective.better(r.value, best.value):
                best = r
    return best


_STATE_OUTCOME = {TrialState.COMPLETE: StayOutcome.FINISHED, TrialState.PRUNED: StayOutcome.PRUNED,
                  TrialState.FAILED: StayOutcome.FAILED}
_STOP_OUTCOME = {_INTERRUPTED: StayOutcome.INTERRUPTED, _PAUSED: StayOutcome.PAUSED,
                 _RESIZE: StayOutcome.RESIZED, StopReason.PREEMPTED: StayOutcome.PREEMPTED,
                 _PRUNED: StayOutcome.PRUNED}


def _finished_outcome(record: TrialRecord) -> StayOutcome:
    """Why a trial whose trainable returned left its device (mirrors ``_on_finished``)."""
    outcome = _STOP_OUTCOME.get(record.stop_reason) if record.stop_reason else None
    if outcome is not None:
        return outcome
    return StayOutcome.FAILED if record.value is None else StayOutcome.FINISHED


def _first_bad_metric(metrics: Mapping[str, Any]) -> tuple[str, Any] | None:
    for name, value in metrics.items():
        if type(value) is float and value - value == 0.0:     # a finite float: the usual
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return name, value
    return None
