"""The worker process: started once, runs trials one after another.

Protocol over one duplex pipe, in the messages of ``hypersack.runtime.worker.messages``: the driver
sends RunTrial / StopTrial / Ack / Shutdown (and StartPack, which turns the worker into a fused
pack until EndPack); the worker answers Started, Reported (then waits for its Ack, or goes on
within the task's report window, ``PipeChannel``; a report carries the file name of the
checkpoint that rides with it), Reports (posted reports held back to leave together, at most
``HOLD_S``), Profiled, Done, Failed. A task
names the trial's committed checkpoint: the only file a restore reads; other checkpoint files in
the folder (left by killed attempts) are deleted.
("pack", spec) turns the worker into a fused pack until the driver ends it (protocol in
``hypersack.runtime.worker.pack``); it then takes plain trials or packs again.
"""
from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator

from hypersack.core.timeouts import HEARTBEAT_S
from hypersack.errors import HyperSackError, TrialStopped
from hypersack.runtime.worker.process_io import (LogCap, failure_reason, is_disk_full, is_oom,
                                                  redirected)
from hypersack.runtime.worker.reaper import become_subreaper, end_descendants
from hypersack.runtime.worker.seeding import seed_everything
from hypersack.runtime.worker.messages import (Ack, Alive, Done, Failed, Message, Pipe, Profiled, Reported,
                                               Reports, RunTrial, Shutdown, StartPack, Started,
                                               StopTrial, TrialTask, WorldSpec)

_SHUTDOWN = object()


#: The longest a posted report is held back to leave with later ones (seconds): the outbox's
#: thread sends what it holds by then, whatever the trainable is doing.
HOLD_S = 0.01


class Outbox:
    """The worker's sends to the driver while it runs a trial, and the posted reports it holds
    back to send as one message (``Reports``) with the ones after them.

    Every message of a trial leaves through here (``send`` first sends what is held), so the
    driver reads them in the order they were made. What is held leaves at the latest
    ``hold_s`` seconds after the first of it was held: a daemon thread, started at the first
    hold, sends it then if nothing else has (the bound on a held report's delay, whatever the
    trainable computes meanwhile; ``hold_s=None``: no thread, held until released or sent
    past). Only the trial's thread holds and sends; the outbox's thread only releases."""

    def __init__(self, pipe: Pipe, hold_s: float | None = HOLD_S):
        self.pipe = pipe
        self._hold_s = hold_s
        self._lock = threading.Condition()
        self._held: list[Reported] = []
        self._due = 0.0
        self._thread: threading.Thread | None = None

    @property
    def held(self) -> int:
        """How many reports are held (posted, not sent yet)."""
        return len(self._held)

    def hold(self, report: Reported) -> None:
        """Keep ``report`` to send with the next message (or by the outbox's thread)."""
        with self._lock:
            if not self._held and self._hold_s is not None:
                self._due = time.monotonic() + self._hold_s
                if self._thread is None:
                    self._thread = threading.Thread(target=self._send_when_due, daemon=True,
                                                    name="hypersack-outbox")
                    self._thread.start()
                self._lock.notify()
            self._held.append(report)

    def release(self) -> None:
        """Send what is held now (one message), if anything."""
        if self._held:          # only this thread adds: empty here is empty
            with self._lock:
                self._release()

    def send(self, message: Message) -> None:
        """Send what is held, then ``message``."""
        with self._lock:
            self._release()
            self.pipe.send(message)

    def _release(self) -> None:
        held, self._held = self._held, []
        if len(held) == 1:
            self.pipe.send(held[0])
        elif held:
            self.pipe.send(Reports(held[0].trial_id, tuple((r.step, r.metrics) for r in held)))

    def _send_when_due(self) -> None:
        """The outbox's thread: send what is held once it is due."""
        with self._lock:
            while True:
                left = self._due - time.monotonic() if self._held else None
                if left is None or left > 0:
                    self._lock.wait(left)
                    continue
                try:
                    self._release()
                except (OSError, ValueError):   # the pipe is closed: the trial's next send says so
                    pass


class PipeChannel:
    """The context's channel to the driver, for one trial.

    Up to ``window`` posted reports may await their acks at once: ``post`` first waits while
    ``window`` do, then sends and returns; ``request`` sends and waits until every report sent
    is acknowledged (``flush``). An ack covers its ``reports`` oldest unacknowledged reports.
    ``free_below`` is the last ack's: reports at lower steps may be posted.

    A report posted while earlier ones await their acks is held (``Outbox``): the driver has
    those to store, and a turn of its own for them; the held ones leave together, as one
    message, when those acks are in (seen at the trial's next report, or when it asks for a
    stop), before any other message (a report that must wait, the trial's end, its failure),
    before the worker waits for room in the window, or ``HOLD_S`` after the first was held,
    whichever comes first. A report posted with none awaiting its ack leaves at once.
    """

    def __init__(self, pipe: Pipe, trial_id: int, window: int = 1, free_below: int = 0,
                 outbox: Outbox | None = None):
        self._pipe = pipe
        self._out = outbox if outbox is not None else Outbox(pipe)
        self._trial_id = trial_id
        self._window = max(1, window)
        self._stop = False
        self._unacked = 0                  # posted (sent or held), not acknowledged
        self.free_below = free_below       # the launch's, until the first ack says
        self.shutdown = False

    def send(self, message: Message) -> None:
        self._out.send(message)

    def request(self, message: Reported) -> None:
        self.post(message, hold=False)
        self.flush()

    def post(self, message: Reported, hold: bool = True) -> None:
        """Send a report whose ack a later report that must wait waits for (the trial's end does
        not wait); held (see the class) when ``hold`` and earlier ones await their acks."""
        if self._unacked >= self._window:
            self._out.release()
            while self._unacked >= self._window:
                self._handle(self._pipe.recv())
        if not hold or not self._unacked:
            self._out.send(message)
            self._unacked += 1
            return
        self._out.hold(message)
        self._unacked += 1

    def may_post(self, step: int) -> bool:
        """Whether a report at ``step`` may be posted (no decision can stop the trial there)."""
        return step < self.free_below

    def flush(self) -> None:
        """Wait until every report posted is acknowledged (what is held is sent first)."""
        if self._unacked:
            self._out.release()
        while self._unacked:
            self._handle(self._pipe.recv())

    def stop_requested(self) -> bool:
        while self._pipe.poll():
            self._handle(self._pipe.recv())
        return self._stop

    def _handle(self, message: Message) -> None:
        """Apply a driver message (a stop, a shutdown, this trial's ack). An ack that leaves
        only held reports unacknowledged sends them."""
        if isinstance(message, StopTrial) and message.trial_id == self._trial_id:
            self._stop = True
        elif isinstance(message, Shutdown):
            self._stop = self.shutdown = True
        elif isinstance(message, Ack) and message.trial_id == self._trial_id:
            self._unacked = max(0, self._unacked - message.reports)
            self.free_below = message.free_below
            if self._unacked and self._unacked <= self._out.held:
                self._out.release()


def _die_with_parent() -> None:
    """Linux: SIGKILL this worker when the driver dies, so an orphan never writes a checkpoint
    that a resumed study's new worker is reading."""
    if sys.platform.startswith("linux"):
        _set_parent_death_signal(signal.SIGKILL)


#: The pid of the group guard while it is this worker's child (the fallback without pidfds):
#: ``end_descendants`` spares it.
_GUARD: set[int] = set()


def guard_process_group() -> None:
    """Linux, in a worker that leads its own process group: start a small guard that waits for
    the worker's end, however it comes (a clean exit, a kill by the driver, the driver's own
    death through PR_SET_PDEATHSIG), then SIGKILLs the whole group, itself included: processes
    a trainable started never outlive their worker. Elsewhere, or in a worker started without
    a group of its own (the guard must never signal the driver's group), it does nothing.

    The guard is started through a second fork, so it is not the worker's child (the worker
    then has no child at all between trials: ``reaper.end_descendants`` costs one call), and
    watches the worker through a pidfd; without pidfds it is the worker's child, woken by
    PR_SET_PDEATHSIG (and spared by ``end_descendants``, ``_GUARD``)."""
    if not sys.platform.startswith("linux") or os.getpgrp() != os.getpid():
        return
    worker = os.getpid()
    try:
        watch = os.pidfd_open(worker)
    except (AttributeError, OSError):
        watch = None
    first = os.fork()
    if first != 0:
        if watch is not None:
            os.close(watch)
            os.waitpid(first, 0)        # the middle process, gone at once
        else:
            _GUARD.add(first)
        return
    try:
        if watch is not None and os.fork() != 0:
            return                      # the middle process: the guard is its child
        _guard(worker, watch)
    finally:
        os._exit(0)


def _guard(worker: int, watch: int | None) -> None:
    """The guard: no Python cleanup, no inherited pipes held open; waits for the worker's end
    (``watch``: a pidfd of it, readable once it has ended; None: PR_SET_PDEATHSIG), then
    SIGKILLs the worker's group."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if watch is not None:
        os.dup2(watch, 3)
        watch = 3
    os.closerange(4 if watch is not None else 3, _max_fd())
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if watch is not None:
        poller = select.poll()
        poller.register(watch, select.POLLIN)
        while not poller.poll():
            pass
    else:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
        _set_parent_death_signal(signal.SIGUSR1)
        if os.getppid() == worker:          # else the worker is gone already
            signal.sigwait({signal.SIGUSR1})
    os.killpg(worker, signal.SIGKILL)


def _max_fd() -> int:
    try:
        return int(os.sysconf("SC_OPEN_MAX"))
    except (OSError, ValueError):
        return 1024


def _set_parent_death_signal(sig: int) -> None:
    """Linux: ``sig`` is sent to this process when its parent dies (PR_SET_PDEATHSIG)."""
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, int(sig))
    except (OSError, AttributeError):
        pass


def worker_main(conn, env: dict[str, str]) -> None:
    """Entry point of a worker process. It ends quietly when its pipe breaks (the driver went
    away, or a trainable closed it): the driver's death is reported by the driver's successor,
    not by its workers; a worker that cannot talk is reported dead by its driver."""
    _die_with_parent()
    guard_process_group()
    become_subreaper()
    os.environ.update(env)
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the driver decides what Ctrl-C means
    try:
        _serve(Pipe(conn))
    except (OSError, EOFError):     # its pipe is broken or closed (its trainable closed it)
        return
    finally:
        end_trial_processes()


class Heartbeat:
    """A busy worker's heartbeat: while ``beating``, a daemon thread sends ``Alive`` every
    ``interval`` seconds; the first is sent by ``beating`` itself, before the trial's code
    runs (so a trial that stops at once is heard from once, and judged). A stopped or frozen
    process sends none: the driver's controller judges the silence
    (``core.timeouts.silence``)."""

    def __init__(self, pipe: Pipe, interval: float = HEARTBEAT_S):
        self._pipe, self._interval = pipe, interval
        self._busy = threading.Event()
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def beating(self) -> Iterator[None]:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name="hypersack-heartbeat")
            self._thread.start()
        self._pipe.send(Alive())
        self._busy.set()
        try:
            yield
        finally:
            self._busy.clear()

    def _run(self) -> None:
        while True:
            self._busy.wait()
            try:
                self._pipe.send(Alive())
            except (OSError, ValueError):     # the pipe is closed: the worker is ending
                return
            time.sleep(self._interval)


def end_trial_processes() -> None:
    """End every process the trial started (however detached: ``reaper``), but the guard."""
    end_descendants(frozenset(_GUARD))


def _serve(pipe: Pipe) -> None:
    trainables: dict[str, Callable[..., Any]] = {}
    outbox = Outbox(pipe)           # one per worker: its thread serves trial after trial
    heart = Heartbeat(pipe)
    cap = LogCap()
    while True:
        try:
            message = pipe.recv()
        except (EOFError, OSError):
            return
        if isinstance(message, Shutdown):
            return
        if isinstance(message, RunTrial):
            if run_task(pipe, message.task, trainables, outbox, heart, cap) is _SHUTDOWN:
                return
        elif isinstance(message, StartPack):
            from hypersack.runtime.worker.pack import run_pack_task
            with heart.beating():        # a pack beats for its members, as a trial does
                ended = run_pack_task(pipe, message.spec, trainables)
            end_trial_processes()
            if ended == "shutdown":
                return


def run_task(pipe: Pipe, task: TrialTask, trainables: dict[str, Callable[..., Any]],
             outbox: Outbox | None = None, heart: Heartbeat | None = None,
             cap: LogCap | None = None):
    """Run one trial, with stdout and stderr appended to its log file. Whatever the trainable
    raises (KeyboardInterrupt and SystemExit included) is its trial's failure, with its
    traceback; a log that cannot be written (a full disk) fails the trial with a message, never
    a traceback on the driver's terminal. Every message of the trial leaves through
    ``outbox`` (the worker's; None: one of its own); ``heart`` beats from its Started on;
    ``cap`` keeps its log under ``task.max_log_bytes`` (None: one of its own)."""
    from hypersack.runtime.worker import checkpoints

    from hypersack.runtime.worker.trainable import receive
    receive(task.trainable)
    trial_id = task.trial_id
    trial_dir = Path(task.trial_dir)
    channel = PipeChannel(pipe, trial_id, task.report_window, task.free_below, outbox)
    try:
        checkpoints.ensure_private_dir(trial_dir)
        log_fd = checkpoints.open_private(trial_dir / "trial.log", append=True)
    except (OSError, HyperSackError) as exc:
        channel.send(Started(trial_id))
        channel.send(_failed(trial_id, exc, None))
        return None
    if task.world.rank == 0:
        checkpoints.remove_other_checkpoints(trial_dir, [task.checkpoint])
    with open(log_fd, "ab", buffering=0) as log, redirected(log):
        channel.send(Started(trial_id))
        try:
            print(f"--- trial {trial_id} attempt {task.attempt} on {task.device} ---", flush=True)
        except OSError as exc:        # the log cannot be written (a full disk)
            channel.send(_failed(trial_id, exc, None))
            return None
        with heart.beating() if heart is not None else contextlib.nullcontext(), \
                (cap or LogCap()).watching(log.fileno(), task.max_log_bytes):
            _run_trainable(task, trainables, channel)
    return _SHUTDOWN if channel.shutdown else None


def _run_trainable(task: TrialTask, trainables: dict[str, Callable[..., Any]],
                   channel: PipeChannel) -> None:
    """Call the trainable and send how its trial ended (Done or Failed), once every process it
    started has ended (``end_trial_processes``)."""
    from hypersack.runtime.worker.context import TrialContext
    trial_id = task.trial_id
    try:
        train = _trainable(task.trainable, trainables)
        seed_everything(task.seed)
        world, sync = _join_world(task.world, task.device)
        meter = _profiler(task) if world.rank == 0 else None
        ctx = TrialContext(trial_id=trial_id, seed=task.seed, device=task.device,
                           attempt=task.attempt, trial_dir=Path(task.trial_dir),
                           channel=channel, max_steps=task.max_steps, world=world,
                           sync_stop=sync, meter=meter, committed_checkpoint=task.checkpoint,
                           unsafe_checkpoints=task.unsafe_checkpoints, objective=task.metric)
        try:
            returned = train(dict(task.config), ctx)
            _report_returned(ctx, returned, task.metric)
        finally:
            _leave_world(world)
            _send_profile(channel, trial_id, meter)
        # No wait for the last acks: the pipe keeps Done behind every report (held ones leave
        # first), the driver stores them in that order (one turn, or turns in order), and a
        # stale ack that comes once the worker is idle, or busy with its next trial, names this
        # trial: it is ignored.
        end: Message = Done(trial_id)
    except TrialStopped:
        end = Done(trial_id)
    except (Exception, SystemExit, KeyboardInterrupt) as exc:   # the trial's, not the worker's
        text = traceback.format_exc()
        _log_quietly(text)
        end = _failed(trial_id, exc, text)
    _flush_quietly()
    end_trial_processes()
    channel.send(end)


def _failed(trial_id: int, exc: BaseException, text: str | None) -> Failed:
    """The Failed message for ``exc`` (its reason never raises, whatever ``exc`` is)."""
    reason = failure_reason(exc)
    return Failed(trial_id, reason[:10_000], text, is_oom(exc), is_disk_full(exc))


def _log_quietly(text: str) -> None:
    """Write ``text`` to the trial's log (stderr) if the log takes it (a full disk may not:
    ``redirected`` then drops it)."""
    try:
        print(text, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def _flush_quietly() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def _profiler(task: TrialTask):
    """A Profiler measuring the trial's first steps (each report ends one), or None."""
    if not task.profile:
        return None
    from hypersack.runtime.devices.profiler import Profiler
    try:
        profiler = Profiler(iterations=10, warmup=1, device=task.device)
        profiler.mark()      # the first step (set-up included) runs from here to the first report
        return profiler
    except Exception:       # profiling must never cost a trial
        return None


def _send_profile(channel: PipeChannel, trial_id: int, meter) -> None:
    if meter is None or not meter.measured:
        return
    try:
        channel.send(Profiled(trial_id, meter.profile().to_dict()))
    except Exception:
        pass


def _join_world(world: WorldSpec, device: str):
    """Join the trial's torch.distributed group when it spans several workers.

    Returns the World and a ``sync(flag) -> bool`` that makes every rank agree with rank 0 (used
    by ``ctx.report`` so all ranks stop at the same step), or None for a single worker.
    """
    from hypersack.runtime.worker.context import World
    size = world.size
    if size <= 1:
        return World(), None
    import datetime

    import torch.distributed as dist
    rank = world.rank
    backend = dist_backend(device)
    timeout = datetime.timedelta(seconds=300)
    store = dist.TCPStore(world.host, int(world.port or 0), size, is_master=rank == 0,
                          timeout=timeout)
    dist.init_process_group(backend, store=store, rank=rank, world_size=size, timeout=timeout)
    calls = [0]

    def sync(flag: bool) -> bool:
        # Through the rendezvous store, not a collective: a collective's work object is freed
        # by a gloo thread that needs the GIL, which can deadlock with the group's teardown.
        calls[0] += 1
        key = f"hypersack/stop/{calls[0]}"
        if rank == 0:
            store.set(key, "1" if flag else "0")
            return flag
        return store.get(key) == b"1"
    _WORLD_STORE["store"] = store
    return World(rank, size), sync


def dist_backend(device: str) -> str:
    """NCCL on a GPU, gloo on the CPU; ``HYPERSACK_DIST_BACKEND`` (set in a slot's env)
    overrides it: gloo lets two ranks share one GPU, which NCCL refuses."""
    return os.environ.get("HYPERSACK_DIST_BACKEND") or ("nccl" if device.startswith("cuda")
                                                        else "gloo")


# The trial's rendezvous store while it runs (rank 0 hosts it: it must outlive the other ranks'
# last use of it, see _leave_world).
_WORLD_STORE: dict[str, Any] = {}
LEAVE_TIMEOUT_S = 60.0       # as the executor's RANK_GRACE_S: ranks that take longer are killed
_LEAVE_KEY = "hypersack/left"


def _leave_world(world) -> None:
    """Leave the trial's process group. On a clean end every rank first checks in at a barrier
    through the store and rank 0 (the store's host) leaves last: otherwise rank 0 could free the
    store while another rank still reads the last stop agreement from it (DistNetworkError:
    "Failed to recv, got 0 bytes"). On an error no barrier: the executor kills the other ranks."""
    store = _WORLD_STORE.pop("store", None)
    if world.size <= 1:
        return
    import torch.distributed as dist
    failing = sys.exc_info()[0]
    if store is not None and (failing is None or issubclass(failing, TrialStopped)):
        _barrier(store, world.rank, world.size)
    if dist.is_initialized():
        dist.destroy_process_group()


def _barrier(store, rank: int, size: int) -> None:
    """Every rank adds itself; rank 0 waits (up to LEAVE_TIMEOUT_S) until all have."""
    import time
    try:
        arrived = store.add(_LEAVE_KEY, 1)
        deadline = time.monotonic() + LEAVE_TIMEOUT_S
        while rank == 0 and arrived < size and time.monotonic() < deadline:
            time.sleep(0.01)
            arrived = store.add(_LEAVE_KEY, 0)
    except Exception:       # a rank that cannot reach the store anymore has nothing left to wait for
        pass


# Why a trainable could not be loaded in this worker, by key: the driver sends a trainable's
# reference or payload once per worker, so a later trial must get the first error again.
_LOAD_ERRORS: dict[str, BaseException] = {}
def _trainable(spec: tuple, cache: dict[str, Callable[..., Any]]) -> Callable[..., Any]:
    from hypersack.runtime.worker.trainable import receive, received
    key = spec[0]
    if key not in cache:
        if not receive(spec) and key in _LOAD_ERRORS:
            raise _LOAD_ERRORS[key]
        try:
            cache[key] = received(key).load(adapt=_task_as_trainable)
        except Exception as exc:
            _LOAD_ERRORS[key] = exc
            raise
    return cache[key]


def _task_as_trainable(obj: Any) -> Callable[..., Any] | None:
    """A ``FusableTask`` named as a plain trainable (``execution: separate``): a pack of one."""
    from hypersack.runtime.worker.pack import TaskTrainable, is_task
    return TaskTrainable(obj) if is_task(obj) else None


def _report_returned(ctx, returned: Any, metric: str) -> None:
    """A trainable may return its final result: a number (the objective) or a dict of metrics."""
    if returned is None:
        return
    step = 0 if ctx.last_step is None else ctx.last_step + 1
    if isinstance(returned, dict):
        ctx.report(step, **returned)
    else:
        ctx.report(step, **{metric: returned})
