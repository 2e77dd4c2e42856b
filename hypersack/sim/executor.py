"""The simulated executor: the Executor protocol over an event heap and a simulated clock.

The study loop, the controller, the algorithms and the placement policies run unchanged against
it. Each Launch becomes a simulated trial on the devices the controller chose; its steps take the
time the performance model (``perf``) says, re-evaluated whenever a neighbour starts or ends; each
step ends with a checkpoint and a report whose metrics come from the learning-curve model.

Contract, mirroring the local executor:

* ``poll`` pops every pending event of the earliest time on the heap (ties broken by insertion
  order), advances the clock to that time and returns them; the timeout is ignored.
* A report waits for ``acknowledge`` before the next step starts (the same turn: no simulated
  time passes), whatever the ack's ``free_below``: every report carries a checkpoint, and the
  local executor's worker waits at those too. A ``Stop`` that arrives while a trial waits
  there ends it at that report's time; one that arrives mid-step ends it at its next report.
* A trial that reports its last step (``steps_for(config)``) ends with ``TrialFinished`` at once.
* ``Preempt`` is a Stop whose trial then holds its devices ``perf.params.suspend_s`` seconds more
  (saving its state) before ``TrialFinished``; its device stay ends with outcome "preempted".
* Scheduled device failures emit ``DeviceLost`` then ``TrialFailed(DEVICE_LOST)`` for each trial
  that held it; a relaunch from a checkpoint resumes after that checkpoint's step and pays
  ``restore_s``. Scheduled additions emit ``DeviceAdded``.
* Fused packs (``perf.fusion`` set, ``sim.packs``): a launch whose ``pack`` is set joins that
  running pack, or starts it on its first placed device, as the controller decided
  (``core.packs.PackBook``, the same decisions as a local study's); its steps take the time the
  fused model says (``perf.FusedModel``).
* With ``trial_timeout_s`` the clock also stops at each trial's timeout deadline
  (``core.timeouts.deadline``): ``poll`` returns no event then, so the loop's ``tick`` lets the
  controller time the trial out on time; what a timeout means is the controller's.
* A launch without devices (no placement) runs where its pack runs (a member of a running
  pack), else on the first idle device (``core.devices.first_free_device``).
* ``log`` lists every event returned, as ``(time, kind, trial_id, detail)``: two runs with the
  same seed and scenario give the same log.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from hypersack.core.devices import first_free_device
from hypersack.core.timeouts import deadline
from hypersack.core.trial import (Cancel, Command, DeviceAdded, DeviceLost, Event, FailureCause,
                                  Launch, PackCapped, Preempt, ResultReported, Stop, TrialFailed,
                                  TrialFinished, TrialStarted)
from hypersack.sim.clock import SimClock, SimulationStalled
from hypersack.sim.curves import Curve, CurveModel
from hypersack.sim.packs import RunningPacks, SimPack
from hypersack.sim.perf import PerfModel
from hypersack.sim.timeline import Interval, Timeline

__all__ = ["SimExecutor", "DeviceChange"]

Key = tuple[str, str]
_NONE: dict = {}          # no packs on any device


@dataclass(frozen=True)
class DeviceChange:
    """A scheduled change of the inventory: at ``at`` seconds, ``gpu`` (a placement GPU) joins
    node ``node`` (created with ``cpus`` cores if new), or, when ``gpu`` is None, GPU ``gpu_id``
    of ``node`` fails."""
    at: float
    node: str
    gpu_id: str | None = None
    gpu: Any = None
    cpus: float = 0.0


@dataclass
class _Device:
    key: Key
    gpu: Any
    runs: list[int] = field(default_factory=list)
    factor: float = 1.0        # f_gpu of the performance model
    alive: bool = True


@dataclass
class _Node:
    id: str
    cpus: float
    devices: list[Key] = field(default_factory=list)
    cpu_demand: float = 0.0
    factor: float = 1.0        # f_cpu
    cpu_units: int = 0         # the cores its runs ask for (one count per device), in _CPU_UNITs
    inexact: int = 0           # runs on it whose cores are no whole number of _CPU_UNITs

    def hold(self, cpus: float, sign: int) -> None:
        """Count (``sign`` 1) or forget (-1) one device's share of a run asking ``cpus``."""
        units = _cpu_units(cpus)
        if units is None:
            self.inexact += sign
        else:
            self.cpu_units += sign * units

    def demand(self, summed: Callable[[], float]) -> float:
        """The cores asked for on this node: its exact count when every run's cores are whole
        numbers of ``_CPU_UNIT`` (such sums are exact in floats, in any order, so this equals
        ``summed()``, the sum in device order), else ``summed()``."""
        return self.cpu_units * _CPU_UNIT if not self.inexact else summed()


_CPU_UNIT = 2.0 ** -20


def _cpu_units(cpus: float) -> int | None:
    """``cpus`` in ``_CPU_UNIT``s when it is a whole number of them below 2**32 cores (sums of
    a few million such stay exact in a float), else None (remembered per value: a study asks
    of few values, at every start and end of a run)."""
    found = _UNITS.get(cpus, _UNKNOWN)
    if found is _UNKNOWN:
        units = cpus / _CPU_UNIT
        found = int(units) if units.is_integer() and abs(cpus) < 2.0 ** 32 else None
        if len(_UNITS) >= 1024:
            _UNITS.clear()
        _UNITS[cpus] = found
    return found  # type: ignore[return-value]


_UNITS: dict[float, int | None] = {}
_UNKNOWN = object()


@dataclass
class _Run:
    trial_id: int
    attempt: int
    config: Mapping[str, Any]
    devices: tuple[Key, ...]
    curve: Curve
    max_steps: int | None
    step: int
    step_work: float
    work_left: float
    utilization: dict[Key, float]
    memory: dict[Key, float]
    cpus: float
    rate: float = 0.0
    updated_at: float = 0.0
    version: int = 0
    waiting_ack: bool = False
    stop_requested: bool = False
    preempted: bool = False
    suspending: bool = False
    intervals: list[Interval] = field(default_factory=list)
    pack: SimPack | None = None


class SimExecutor:
    def __init__(self, cluster: Any, perf: PerfModel, curves: CurveModel, *,
                 steps_for: Callable[[Mapping[str, Any]], int | None],
                 clock: SimClock | None = None, changes: Sequence[DeviceChange] = (),
                 keep_log: bool = True, trial_timeout_s: float | None = None):
        self.clock = clock or SimClock()
        self.perf = perf
        self.curves = curves
        self._steps_for = steps_for
        self.timeline = Timeline()
        self.log: list[tuple[float, str, int | None, Any]] | None = [] if keep_log else None
        self._heap: list[tuple] = []
        self._seq = 0
        self._devices: dict[Key, _Device] = {}
        self._nodes: dict[str, _Node] = {}
        self._runs: dict[int, _Run] = {}
        self._checkpoints: dict[str, int] = {}
        self._warm: set[Key] = set()          # devices that ran a trial (warmup_s paid)
        self._empty_polls = 0
        self._inventory: Any = None
        self.oom_failures = 0
        self._timeout = trial_timeout_s
        fusion = getattr(perf, "fusion", None)
        self.packs: RunningPacks | None = RunningPacks(fusion) if fusion is not None else None
        for node in cluster.nodes:
            self._add_node(str(node.id), node.cpus)
            for gpu in node.gpus:
                self._add_device(str(node.id), gpu)
        for change in changes:
            self._push(change.at, "change", None, change)

    # ---- the Executor protocol -----------------------------------------------------------

    def start(self) -> None:
        return None

    def shutdown(self, kill: bool = False) -> None:
        now = self.clock.now
        for trial_id in list(self._runs):
            self._end_run(trial_id, now, "stopped")

    def gpu(self, key: Key) -> Any:
        """The simulated GPU ``key`` names (a placement GPU), None when it is gone."""
        device = self._devices.get(key)
        return device.gpu if device is not None and device.alive else None

    def inventory(self) -> Any:
        """The live devices as a placement Cluster (no load)."""
        if self._inventory is None:
            from hypersack.placement import Cluster, Node
            nodes = [Node(n.id, n.cpus, tuple(self._devices[k].gpu for k in n.devices
                                               if self._devices[k].alive))
                     for n in self._nodes.values()]
            self._inventory = Cluster(nodes)
        return self._inventory

    def submit(self, command: Command) -> None:
        if isinstance(command, Launch):
            self._launch(command)
        elif isinstance(command, Stop):
            self._stop(command.trial_id, isinstance(command, Preempt))
        elif isinstance(command, Cancel):
            if command.trial_id in self._runs:
                self._end_run(command.trial_id, self.clock.now, "failed")
                self._push(self.clock.now, "event", command.trial_id,
                           TrialFailed(command.trial_id, command.reason,
                                       cause=command.cause))

    def acknowledge(self, trial_ids: Iterable[int], free_below: Mapping[int, int]) -> None:
        """The waiting trials of ``trial_ids`` go on: each starts its next step now (the
        ``Executor`` contract; others keep waiting, a trial that does not wait is ignored).
        ``free_below`` changes nothing here, as in the local executor for these reports: every
        simulated report carries its step's checkpoint, and a report with a checkpoint waits
        for its ack whatever ``free_below`` says (``TrialContext.report`` posts only reports
        without one). The wait costs no simulated time (the loop acks in the turn that read
        the report); it decides that a Stop of that turn ends the trial at this report."""
        now = self.clock.now
        runs = self._runs
        for trial_id in trial_ids:
            run = runs.get(trial_id)
            if run is not None and run.waiting_ack:
                run.waiting_ack = False
                run.work_left, run.updated_at = run.step_work, now
                self._schedule_step(run, now)

    def poll(self, timeout: float = 0.0) -> list[Event]:
        """Every event of the next event time (the clock moves there), after ``PackCapped(id, 0)``
        for each pack that ended (empty at this poll); ``timeout`` is ignored."""
        events: list[Event] = []
        ended: list[Event] = [PackCapped(p, 0) for p in self.packs.end_empty()] if self.packs else []
        woke = False
        heap, runs, clock, pop = self._heap, self._runs, self.clock, heapq.heappop
        while heap and not events and not woke:
            t = heap[0][0]
            while heap and heap[0][0] == t:
                _, _, kind, trial_id, payload = pop(heap)
                if kind == "step":          # the usual entries, as ``_stale`` and ``_fire`` say
                    run = runs.get(trial_id)
                    if run is None or run.version != payload:
                        continue            # a step superseded by a rate change, or of an ended trial
                    clock.advance_to(t)
                    events += self._step_done(run, t)
                    continue
                if kind == "event":
                    clock.advance_to(t)
                    events.append(payload)
                    continue
                if self._stale(kind, trial_id, payload):
                    continue
                clock.advance_to(t)
                woke = woke or kind == "wake"
                events.extend(self._fire(kind, trial_id, payload, t))
        if not events and not woke:
            self._stalled()
        else:
            self._empty_polls = 0
        events = ended + events
        if self.log is not None:
            for e in events:
                self.log.append((self.clock.now, type(e).__name__, getattr(e, "trial_id", None), _detail(e)))
        return events

    # ---- heap ----------------------------------------------------------------------------

    def _push(self, t: float, kind: str, trial_id: int | None, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, kind, trial_id, payload))

    def _fire(self, kind: str, trial_id: int | None, payload: Any, t: float) -> list[Event]:
        if kind == "event":
            return [payload]
        if trial_id is None:                  # an inventory change
            return self._change(payload, t)
        if kind == "step":
            return self._step_done(self._runs[trial_id], t)
        if kind == "wake":
            return []       # a timeout deadline: the loop's tick decides
        if kind == "suspended":
            self._end_run(trial_id, t, "preempted")
            return [TrialFinished(trial_id)]
        return self._change(payload, t)

    def _stale(self, kind: str, trial_id: int | None, payload: Any) -> bool:
        if kind not in ("step", "wake", "suspended") or trial_id is None:
            return False
        run = self._runs.get(trial_id) if trial_id is not None else None
        if kind == "wake":
            return run is None or run.attempt != payload
        return run is None or run.version != payload

    def _stalled(self) -> None:
        self._empty_polls += 1
        if self._empty_polls >= 2 and not self._runs:
            raise SimulationStalled(
                f"at t={self.clock.now:.1f} s nothing runs, nothing is scheduled and the study "
                "launched nothing: its pending trials fit no live device")

    # ---- launching -----------------------------------------------------------------------

    def _launch(self, launch: Launch) -> None:
        now = self.clock.now
        fused = launch.pack is not None
        devices = self._devices_for(launch, fused)
        self._push(now, "event", launch.trial_id, TrialStarted(launch.trial_id, _label(devices)))
        if devices is None:
            self._push(now, "event", launch.trial_id, TrialFailed(
                launch.trial_id, f"device(s) {list(launch.devices)} not available",
                cause=FailureCause.DEVICE_LOST))
            return
        run = self._new_run(launch, devices, now, fused)
        if run.max_steps is not None and run.step >= run.max_steps:
            # Resumed from its last step's checkpoint (e.g. preempted at its last report): a
            # trainable has nothing left to do and returns at once.
            self._push(now, "event", launch.trial_id, TrialFinished(launch.trial_id))
            return
        if self._out_of_memory(run):
            self.oom_failures += 1
            self._push(now, "event", launch.trial_id, TrialFailed(
                launch.trial_id, "CUDA out of memory (simulated: the device's memory is full)",
                cause=FailureCause.OOM))
            return
        if fused:
            self._seat(run, launch)
        self._runs[run.trial_id] = run
        for key in devices:
            self._devices[key].runs.append(run.trial_id)
            self._nodes[key[0]].hold(run.cpus, 1)
            run.intervals.append(Interval(run.trial_id, run.attempt, key[0], key[1], now, None,
                                          run.utilization[key], run.memory[key]))
        self._reprice(devices, now)
        limit = deadline(now, self._timeout)
        if limit is not None:
            self._push(limit, "wake", run.trial_id, run.attempt)

    def _devices_for(self, launch: Launch, fused: bool) -> tuple[Key, ...] | None:
        """The devices a launch runs on: the placed ones (a pack member: the first), else its
        running pack's, else the first idle one; None when one is not alive."""
        if launch.devices:
            keys = tuple((str(n), str(g)) for n, g in launch.devices)
            ok = all(k in self._devices and self._devices[k].alive for k in keys)
            return (keys[:1] if fused else keys) if ok else None
        running = self.packs.pack(launch.pack) if self.packs and launch.pack is not None else None
        if running is not None:
            return (running.device,)
        alive = {f"{k[0]}/{k[1]}": k for k, d in self._devices.items() if d.alive}
        busy = [label for label, k in alive.items() if self._devices[k].runs]
        free = first_free_device(list(alive), busy)
        return (alive[free],) if free is not None else None

    def _seat(self, run: _Run, launch: Launch) -> None:
        """Seat a member where its Launch says (``RunningPacks.join``)."""
        if self.packs is None or launch.pack is None:   # a bug: the controller seats no member then
            raise RuntimeError(f"trial {run.trial_id} has a pack, but the simulation has no fusion plan")
        seat = launch.seat if launch.seat is not None else -1
        run.pack = self.packs.join(run.trial_id, launch.pack, seat, run.devices[0])

    def _new_run(self, launch: Launch, devices: tuple[Key, ...], now: float,
                 fused: bool = False) -> _Run:
        perf, config = self.perf, launch.config
        archs = [self._devices[k].gpu.arch for k in devices]
        profiles = [perf.profile(config, a) for a in archs]
        resumed_step = self._checkpoints.get(launch.checkpoint, 0) if launch.checkpoint else 0
        nodes = 1 if len(devices) == 1 else len({k[0] for k in devices})
        step_work = perf.step_work(config, archs, nodes)
        warm = self._warm
        cold = not warm.issuperset(devices)
        warm.update(devices)
        first = step_work + perf.launch_work(resumed=resumed_step > 0, cold=cold)
        cpus = float(profiles[0].cpus if len(profiles) == 1 else max(p.cpus for p in profiles))
        if fused and self.packs is not None:
            cpus = cpus / self.packs.fusion.max_members     # a member's share of its pack's
        return _Run(launch.trial_id, launch.attempt, launch.config, devices,
                    self.curves.curve(launch.config, launch.seed), self._steps_for(launch.config),
                    resumed_step, step_work, first,
                    {k: p.utilization for k, p in zip(devices, profiles)},
                    {k: p.memory_gb for k, p in zip(devices, profiles)},
                    cpus, updated_at=now)

    def _out_of_memory(self, run: _Run) -> bool:
        runs = self._runs
        for key in run.devices:
            device = self._devices[key]
            used = sum([runs[t].memory[key] for t in device.runs]) if device.runs else 0
            if used + run.memory[key] > device.gpu.memory_gb + 1e-9:
                return True
        return False

    # ---- stepping ------------------------------------------------------------------------

    def _schedule_step(self, run: _Run, now: float) -> None:
        run.version += 1
        self._seq += 1                         # ``_push``, inline: once per step
        heapq.heappush(self._heap, (now + run.work_left / run.rate, self._seq, "step",
                                    run.trial_id, run.version))

    def _step_done(self, run: _Run, t: float) -> list[Event]:
        run.step += 1
        run.work_left, run.updated_at = 0.0, t
        path = f"sim://trial-{run.trial_id}/step-{run.step}"
        self._checkpoints[path] = run.step
        events: list[Event] = [ResultReported(run.trial_id, run.step, run.curve.at(run.step), path)]
        last = run.max_steps is not None and run.step >= run.max_steps
        if run.preempted and not last:
            self._suspend(run, t)
        elif last or run.stop_requested:
            self._end_run(run.trial_id, t, "finished" if last else "stopped")
            events.append(TrialFinished(run.trial_id))
        else:
            run.waiting_ack = True
        return events

    def _stop(self, trial_id: int, preempt: bool = False) -> None:
        run = self._runs.get(trial_id)
        if run is None:
            return
        if preempt and not run.stop_requested:
            run.preempted = True
            if run.waiting_ack:
                self._suspend(run, self.clock.now)
            return
        run.preempted = False          # a plain Stop (pause, prune, interrupt) wins
        if run.waiting_ack:
            now = self.clock.now
            self._end_run(trial_id, now, "stopped")
            self._push(now, "event", trial_id, TrialFinished(trial_id))
        else:
            run.stop_requested = True

    def _suspend(self, run: _Run, now: float) -> None:
        """A preempted trial saves its state on its devices, then leaves (``suspended``)."""
        run.waiting_ack, run.stop_requested, run.suspending = False, True, True
        run.version += 1                       # no further step
        self._push(now + self.perf.params.suspend_s, "suspended", run.trial_id, run.version)

    def _end_run(self, trial_id: int, now: float, outcome: str) -> None:
        run = self._runs.pop(trial_id)
        if run.pack is not None and self.packs is not None:
            self.packs.leave(trial_id)
        for key in run.devices:
            self._devices[key].runs.remove(trial_id)
            self._nodes[key[0]].hold(run.cpus, -1)
        for iv in run.intervals:
            iv.end, iv.outcome = now, outcome
        self.timeline.intervals.extend(run.intervals)
        self._reprice(run.devices, now)

    # ---- rates ---------------------------------------------------------------------------

    def _reprice(self, keys: Sequence[Key], now: float) -> None:
        """Recompute f_gpu of ``keys``, f_cpu of their nodes, and the rate of every trial hit."""
        hit: set[int] = set()
        packed = self.packs.on if self.packs is not None else _NONE
        runs, devices, perf = self._runs, self._devices, self.perf
        for key in keys:
            device = devices[key]
            demands = ([d for d, _ in self._loads(key)] if key in packed
                       else [runs[t].utilization[key] for t in device.runs])
            device.factor = perf.gpu_factor(device.gpu.arch, device.gpu.compute, demands)
            hit.update(device.runs)
        for node_id in ((keys[0][0],) if len(keys) == 1 else {k[0] for k in keys}):
            node = self._nodes[node_id]
            demand = node.demand(lambda: sum([runs[t].cpus for k in node.devices
                                              for t in devices[k].runs]))
            factor = perf.cpu_factor(node.cpus, demand)
            if factor != node.factor or demand != node.cpu_demand:
                if factor != node.factor:
                    hit.update(t for k in node.devices for t in devices[k].runs)
                node.factor, node.cpu_demand = factor, demand
        touched = set(keys)
        for trial_id in sorted(hit):
            run = runs[trial_id]
            self._set_rate(run, now)
            touched.update(run.devices)
        self._account(touched, now)

    def _loads(self, key: Key) -> list[tuple[float, float]]:
        """``(compute demand, delivered share)`` of each process on device ``key`` (which holds
        packs): a plain trial's, or a pack's (counted once: its members' demand times
        speedup(k) / k, at most 100); the share is the rate of its work (a pack's before its
        fused efficiency)."""
        runs = self._runs
        device = self._devices[key]
        if self.packs is None:
            return []
        out = [(runs[t].utilization[key], runs[t].rate) for t in device.runs if runs[t].pack is None]
        for pack in self.packs.on[key]:
            if pack.members:
                eff = self._pack_efficiency(pack)
                demand = min(100.0, eff * sum(runs[t].utilization[key] for t in pack.members))
                out.append((demand, runs[next(iter(pack.members))].rate / eff))
        return out

    def _pack_efficiency(self, pack: SimPack) -> float:
        """speedup(k) / k of the fused model: a member's step rate in a pack of k, alone on
        its device, over its rate as a trial alone."""
        k = len(pack.members)
        return self.perf.params.fused_model.speedup(k) / k

    def _set_rate(self, run: _Run, now: float) -> None:
        rate = min(self._devices[k].factor * self._nodes[k[0]].factor for k in run.devices)
        if run.pack is not None:
            rate *= self._pack_efficiency(run.pack)
        if run.waiting_ack or run.suspending:
            run.rate = rate
            return
        if run.rate > 0:
            run.work_left = max(0.0, run.work_left - run.rate * (now - run.updated_at))
        run.updated_at = now
        if rate != run.rate:
            run.rate = rate
            self._schedule_step(run, now)

    def _account(self, keys: set[Key], now: float) -> None:
        packed = self.packs.on if self.packs is not None else _NONE
        runs, devices, account = self._runs, self._devices, self.timeline.account
        for key in (keys if len(keys) == 1 else sorted(keys)):
            device = devices[key]
            if not device.alive:
                continue
            gpu = device.gpu
            if key in packed:
                loads = self._loads(key)
                demand = sum(d for d, _ in loads)
                used = sum(d * rate for d, rate in loads)
            elif not device.runs:
                demand = used = 0
            elif len(device.runs) == 1:      # the same sums of one term
                run = runs[device.runs[0]]
                demand = 0 + run.utilization[key]
                used = 0 + run.utilization[key] * run.rate
            else:
                demand = sum(runs[t].utilization[key] for t in device.runs)
                used = sum(runs[t].utilization[key] * runs[t].rate for t in device.runs)
            account(key, now, min(1.0, demand / gpu.capacity), min(1.0, used / gpu.compute),
                    1.0 if device.runs else 0.0)

    # ---- inventory changes ---------------------------------------------------------------

    def _add_node(self, node_id: str, cpus: float) -> None:
        self._nodes[node_id] = _Node(node_id, float(cpus))

    def _add_device(self, node_id: str, gpu: Any) -> Key:
        key = (node_id, str(gpu.id))
        self._devices[key] = _Device(key, gpu)
        self._nodes[node_id].devices.append(key)
        self.timeline.add_device(key, self.clock.now)
        self._inventory = None
        return key

    def _change(self, change: DeviceChange, t: float) -> list[Event]:
        if change.gpu is not None:
            if change.node not in self._nodes:
                self._add_node(change.node, change.cpus)
            self._add_device(change.node, change.gpu)
            return [DeviceAdded(change.node, change.gpu)]
        key = (change.node, str(change.gpu_id))
        device = self._devices.get(key)
        if device is None or not device.alive:
            return []
        events: list[Event] = [DeviceLost(change.node, key[1])]
        for trial_id in list(device.runs):
            self._end_run(trial_id, t, "lost")
            events.append(TrialFailed(trial_id, f"device {key[0]}/{key[1]} failed (simulated)",
                                      cause=FailureCause.DEVICE_LOST))
        device.alive = False
        self.timeline.remove_device(key, t)
        self._inventory = None
        return events

    # ---- results -------------------------------------------------------------------------

    def running(self) -> int:
        return len(self._runs)


def _label(devices: tuple[Key, ...] | None) -> str:
    if not devices:
        return "none"
    return ",".join(f"{n}/{g}" for n, g in devices)


def _detail(event: Event) -> Any:
    if isinstance(event, ResultReported):
        return (event.step, tuple(sorted((k, round(v, 9)) for k, v in event.metrics.items())),
                event.checkpoint)
    if isinstance(event, TrialStarted):
        return event.device
    if isinstance(event, TrialFailed):
        return (event.reason, event.cause.value)
    if isinstance(event, (DeviceLost,)):
        return (event.node_id, event.gpu_id)
    if isinstance(event, DeviceAdded):
        return (event.node_id, str(event.gpu.id))
    return None
