"""Driver <-> worker messages: one frozen dataclass per kind, and one codec for the pipe.

The wire form of a message is a tuple ``(tag, field, field, ...)`` in the dataclass's field
order; fields that are themselves messages (a task inside ``RunTrial``) are encoded the same
way, recursively. ``encode`` / ``decode`` (and ``_fields``, which both readers use) are the
only code that knows this form, and ``Pipe`` wraps a ``multiprocessing`` connection so that the
rest of the runtime sends and receives dataclasses (``Pipe.recv(make)``: or the reader's own
objects built from a message's fields, as the driver reads reports straight into its events).
A stop or an ack names its trial, so a stale one is ignored.

Driver -> worker: ``RunTrial``, ``StartPack``, ``AddMember``, ``StopTrial``, ``Ack``,
``EndPack``, ``Shutdown``. Worker -> driver: ``Started``, ``Reported`` (then the worker waits
for its ``Ack``, or, for a report below the last ack's ``free_below`` that carries no
checkpoint, goes on while fewer than the task's ``report_window`` reports await their acks, and
waits for them all before a report that must wait; one ``Ack`` may cover several; its end
(``Done``, ``Failed``) follows its reports at once, without waiting for their acks), ``Reports``
(posted reports the worker held back, as one message; each counts as one report for the acks),
``Profiled``, ``Done``, ``Failed``, ``Alive`` (a heartbeat, from a thread, while the worker
runs a plain trial), and for packs ``PackCap`` and ``PackFailed`` (the pack as a
whole failed; every member with it).
"""
from __future__ import annotations

import operator
import os
import pickle
import select
import struct
import threading
from dataclasses import dataclass, fields
from multiprocessing.connection import Connection
from typing import Any, Callable, ClassVar, Mapping

from hypersack.errors import ReportError
from hypersack.validation import check_metric, check_step, is_plain_report

__all__ = ["Ack", "AddMember", "Alive", "BadMessage", "Done", "EndPack", "Failed", "MemberTask", "Message",
           "PackCap", "PackFailed", "PackSpec", "Pipe", "Profiled", "Reported", "Reports",
           "RunTrial", "Shutdown", "StartPack", "Started", "StopTrial", "TrialTask", "WorldSpec",
           "decode", "encode"]

_REGISTRY: dict[str, type] = {}


class Message:
    """Base of every message; subclasses set ``tag`` (unique) and are frozen dataclasses."""
    tag: ClassVar[str] = ""
    nested: ClassVar[dict[str, type]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.tag in _REGISTRY:
            raise TypeError(f"message tag {cls.tag!r} is used twice")
        _REGISTRY[cls.tag] = cls


def encode(message: Message) -> tuple:
    """The wire tuple of ``message``."""
    cls = type(message)
    get, nested = _layout(cls)
    values = get(message)
    if nested:
        values = tuple(encode(v) if i in nested and v is not None else v
                       for i, v in enumerate(values))
    return (cls.tag, *values)


def decode(wire: tuple) -> Message:
    """The message a wire tuple encodes; ``ValueError`` for an unknown tag or arity."""
    cls, values = _fields(wire)
    return cls(*values)


def _fields(wire: Any) -> tuple[Any, tuple]:
    """The message class a wire tuple names and its field values in field order (nested
    messages decoded): what ``decode`` builds the message from, and what a reader's own maker
    (``Pipe.recv``) receives. ``ValueError`` for an unknown tag or arity."""
    cls: Any = _REGISTRY.get(wire[0]) if type(wire) is tuple and wire else None
    if cls is None:
        raise ValueError(f"not a HyperSack message: {str(wire)[:80]}")
    get, nested = _layout(cls)
    if len(wire) - 1 != get.arity:
        raise ValueError(f"message {wire[0]!r} has {len(wire) - 1} fields, expected {get.arity}")
    if not nested:
        return cls, wire[1:]
    return cls, tuple(decode(v) if i in nested and v is not None else v
                      for i, v in enumerate(wire[1:]))


class _Fields:
    """A message class's field values as a tuple, in field order (one C-level getter)."""
    __slots__ = ("arity", "_get")

    def __init__(self, names: list[str]):
        self.arity = len(names)
        self._get: Any = operator.attrgetter(*names) if names else None

    def __call__(self, message: Message) -> tuple:
        if self.arity > 1:
            return self._get(message)
        return (self._get(message),) if self.arity else ()


# message class -> (its field getter, the positions of nested message fields): built once per
# class on first use (the dataclass decorator runs after ``__init_subclass__``).
_LAYOUTS: dict[type, tuple[_Fields, frozenset[int]]] = {}


def _layout(cls: type) -> tuple[_Fields, frozenset[int]]:
    layout = _LAYOUTS.get(cls)
    if layout is None:
        names = [f.name for f in fields(cls)]
        nested = getattr(cls, "nested", {})
        layout = _LAYOUTS[cls] = (_Fields(names),
                                  frozenset(i for i, name in enumerate(names) if name in nested))
    return layout


class BadMessage(ValueError):
    """What came through a pipe is not a message this side can use: it cannot be unpickled
    (an object the reader cannot rebuild), is no HyperSack message, or is a report whose step or
    metrics cannot be stored. The reader fails the sender's trial; it never crashes on it."""


class Pipe:
    """A connection that sends and receives messages (``multiprocessing`` underneath).

    Messages travel as plain pickles: never by the reducers ``torch.multiprocessing`` installs
    for ``Connection.send`` (a tensor's storage handed over as a shared file descriptor, which a
    driver that did not start the worker through multiprocessing cannot take). On POSIX the
    reader takes whatever the socket holds in one ``read`` and splits it into messages
    (``multiprocessing``'s framing: a 4-byte big-endian length, or -1 and an 8-byte one), so a
    burst of pipelined reports costs one system call, not two per message; ``poll`` says True
    while a whole message waits in that buffer."""

    def __init__(self, conn: Any):
        self.conn = conn
        self._sending = threading.Lock()     # a worker sends from its heartbeat thread too
        self._poller: Any = None
        self._buffer = bytearray()
        self._at = 0                # where the next message's frame starts in ``_buffer``
        self._fd = conn.fileno() if type(conn) is Connection else None   # None: Windows, a fake

    def send(self, message: Message) -> None:
        """Send ``message`` whole (safe from several threads: one message at a time)."""
        data = pickle.dumps(encode(message), pickle.HIGHEST_PROTOCOL)
        with self._sending:
            self.conn.send_bytes(data)

    def recv(self, make: Mapping[type, Callable[..., Any]] | None = None) -> Any:
        """The next message; where ``make`` names its class, what ``make[class]`` builds from
        its field values instead (given them as the class would be: a reader's own objects,
        the driver's events, made without the message in between). A report's step and metrics
        are plain Python numbers by then (``_checked``). EOFError or OSError: the connection is
        closed; ``BadMessage``: one message was read that is unusable (the stream stays in
        step)."""
        data = self.conn.recv_bytes() if self._fd is None else self._frame(self._fd)
        try:
            cls, values = _fields(pickle.loads(data))
        except Exception as exc:
            raise BadMessage(f"an unreadable message ({_describe(exc)})") from None
        check = _CHECKS.get(cls)
        if check is not None:
            values = check(values)
        build = make.get(cls, cls) if make is not None else cls
        return build(*values)

    def _frame(self, fd: int) -> bytearray:
        """The next message's bytes, reading ``fd`` (blocking) until one is whole."""
        buffer = self._buffer
        while True:
            at = self._at
            size, start = _frame_size(buffer, at)
            end = at + start + (size or 0)
            if size is not None and len(buffer) >= end:
                data = buffer[at + start:end]
                if end == len(buffer):
                    buffer.clear()
                    self._at = 0
                else:
                    self._at = end
                return data
            if at:                  # the bytes before ``at`` are read: drop them first
                del buffer[:at]
                self._at, end = 0, end - at
            chunk = os.read(fd, max(_CHUNK, end - len(buffer)))
            if not chunk:
                raise EOFError
            buffer += chunk

    def poll(self, timeout: float = 0.0) -> bool:
        """Whether a message (or the end of the connection) can be read within ``timeout``
        seconds. One ``poll(2)`` on a poller made once (``Connection.poll`` builds a selector
        per call: a worker asks after every report); a closed connection raises OSError."""
        if len(self._buffer) > self._at and _whole(self._buffer, self._at):
            return True
        if self._poller is None:
            poller = select.poll()
            poller.register(self.conn.fileno(), select.POLLIN | select.POLLHUP | select.POLLERR)
            self._poller = poller
        return bool(self._poller.poll(max(0, int(timeout * 1000 + 0.999))))

    def close(self) -> None:
        self._poller = None
        self._buffer.clear()
        self._at = 0
        self.conn.close()

    def fileno(self) -> int:
        return int(self.conn.fileno())


_CHUNK = 65536          # bytes asked of one read


def _frame_size(buffer: bytearray, at: int = 0) -> tuple[int | None, int]:
    """The size of the message whose frame starts at ``at`` in ``buffer`` (None: its header
    is not all there) and where its bytes start, counted from ``at``."""
    if len(buffer) - at < 4:
        return None, 4
    size = _HEADER.unpack_from(buffer, at)[0]
    if size != -1:
        return size, 4
    if len(buffer) - at < 12:
        return None, 12
    return _LONG.unpack_from(buffer, at + 4)[0], 12


def _whole(buffer: bytearray, at: int = 0) -> bool:
    size, start = _frame_size(buffer, at)
    return size is not None and len(buffer) >= at + start + size


_HEADER = struct.Struct("!i")
_LONG = struct.Struct("!Q")


# ---- tasks (payloads of driver messages) ----------------------------------------------------------

@dataclass(frozen=True)
class WorldSpec(Message):
    """A data-parallel trial's group: ``size`` ranks, this one ``rank``, rank 0's store at
    ``host``:``port`` (this machine's loopback, or rank 0's node when ranks span machines)."""
    tag: ClassVar[str] = "world"
    size: int = 1
    rank: int = 0
    port: int | None = None
    host: str = "127.0.0.1"


@dataclass(frozen=True)
class TrialTask(Message):
    """Everything a worker needs to run one attempt of a plain trial.

    ``trainable``: (key, reference, payload); reference and payload are None when the worker
    has this key loaded already. ``checkpoint``: the committed checkpoint file (the only one
    a restore reads), or None. ``report_window`` (>= 1): how many posted reports may await
    their acks at once (pipelining; see ``runtime.worker.process.PipeChannel``);
    ``free_below``: the launch's (``core.trial.Launch``), what the first ack would say;
    ``max_log_bytes``: the most this attempt adds to its trial.log (None: no cap)."""
    tag: ClassVar[str] = "trial-task"
    nested: ClassVar[dict[str, type]] = {"world": WorldSpec}
    trial_id: int
    config: dict[str, Any]
    seed: int
    attempt: int
    device: str
    trial_dir: str
    metric: str
    max_steps: int | None
    world: WorldSpec
    profile: bool
    checkpoint: str | None
    unsafe_checkpoints: bool
    trainable: tuple
    report_window: int = 1
    free_below: int = 0
    max_log_bytes: int | None = None


@dataclass(frozen=True)
class MemberTask(Message):
    """A trial loaded into a running pack (its seat is the pack's to choose)."""
    tag: ClassVar[str] = "member-task"
    trial_id: int
    config: dict[str, Any]
    seed: int
    attempt: int
    trial_dir: str
    max_steps: int | None
    checkpoint: str | None
    unsafe_checkpoints: bool


@dataclass(frozen=True)
class PackSpec(Message):
    """A pack to start: its task (key, reference, payload), device, seat limit, the first
    member's config (for the memory measure), the pack process's own log file, and how it
    trains (``precision``, ``graphs``, ``conv``: the study's ``pack`` options)."""
    tag: ClassVar[str] = "pack-spec"
    pack_id: int
    task: tuple
    device: str
    max_members: int
    first: dict[str, Any]
    log: str
    precision: str = "fp32"
    graphs: str = "auto"
    conv: str = "grouped"


# ---- driver -> worker ------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunTrial(Message):
    tag: ClassVar[str] = "run"
    nested: ClassVar[dict[str, type]] = {"task": TrialTask}
    task: TrialTask


@dataclass(frozen=True)
class StartPack(Message):
    tag: ClassVar[str] = "pack"
    nested: ClassVar[dict[str, type]] = {"spec": PackSpec}
    spec: PackSpec


@dataclass(frozen=True)
class AddMember(Message):
    tag: ClassVar[str] = "member"
    nested: ClassVar[dict[str, type]] = {"member": MemberTask}
    member: MemberTask


@dataclass(frozen=True)
class StopTrial(Message):
    """Stop this trial at its next report (a pack member: free its seat)."""
    tag: ClassVar[str] = "stop"
    trial_id: int


@dataclass(frozen=True)
class Ack(Message):
    """The trial's ``reports`` oldest unacknowledged reports are durable: it may go on.
    ``free_below``: its reports at steps below this one (carrying no checkpoint) cannot be
    answered with a stop, so the worker need not wait for their acks (pipelining; 0: wait for
    every report)."""
    tag: ClassVar[str] = "ack"
    trial_id: int
    free_below: int = 0
    reports: int = 1


@dataclass(frozen=True)
class EndPack(Message):
    tag: ClassVar[str] = "end-pack"


@dataclass(frozen=True)
class Shutdown(Message):
    tag: ClassVar[str] = "shutdown"


# ---- worker -> driver ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Alive(Message):
    """A busy worker's heartbeat, every ``core.timeouts.HEARTBEAT_S`` (``process.Heartbeat``,
    a thread: a stopped or frozen worker sends none)."""
    tag: ClassVar[str] = "alive"


@dataclass(frozen=True)
class Started(Message):
    tag: ClassVar[str] = "started"
    trial_id: int


@dataclass(frozen=True)
class Reported(Message):
    """A step's result; ``checkpoint``: the file of the state after it that rides with it."""
    tag: ClassVar[str] = "report"
    trial_id: int
    step: int
    metrics: dict[str, Any]
    checkpoint: str | None = None


@dataclass(frozen=True)
class Reports(Message):
    """Several posted reports of one trial, oldest first, as one message: ``results`` holds
    one or more ``(step, metrics)`` pairs, none with a checkpoint (a report that carries one
    is never posted). The worker sends those it held back this way (``PipeChannel``); each
    counts as one report for the acks."""
    tag: ClassVar[str] = "reports"
    trial_id: int
    results: tuple[tuple[int, dict[str, Any]], ...]


@dataclass(frozen=True)
class Profiled(Message):
    tag: ClassVar[str] = "profile"
    trial_id: int
    profile: dict[str, Any]


@dataclass(frozen=True)
class Done(Message):
    """The trainable returned, or honoured a stop at a report."""
    tag: ClassVar[str] = "done"
    trial_id: int


@dataclass(frozen=True)
class Failed(Message):
    """The trial raised; facts for the controller: ``oom``, ``disk_full``."""
    tag: ClassVar[str] = "error"
    trial_id: int
    reason: str
    traceback: str | None = None
    oom: bool = False
    disk_full: bool = False


@dataclass(frozen=True)
class PackCap(Message):
    """The pack measured room for only ``cap`` members (CUDA memory)."""
    tag: ClassVar[str] = "pack-cap"
    cap: int


@dataclass(frozen=True)
class PackFailed(Message):
    """The pack as a whole failed: every member with it."""
    tag: ClassVar[str] = "pack-error"
    reason: str
    traceback: str | None = None
    oom: bool = False



def _checked(values: tuple) -> tuple:
    """A ``Reported``'s field values with its step and metrics as plain Python numbers (what
    the store keeps); BadMessage for a report that slipped past the worker's own check
    (``ctx.report``)."""
    trial_id, step, metrics, checkpoint = values
    if is_plain_report(step, metrics):    # what ``ctx.report`` sends
        return values
    step, metrics = _plain(step, metrics)
    return trial_id, step, metrics, checkpoint


def _checked_all(values: tuple) -> tuple:
    """``_checked`` for the results of a ``Reports`` (one or more ``(step, metrics)`` pairs)."""
    trial_id, results = values
    try:
        if type(results) is tuple and results and all(
                [is_plain_report(step, metrics) for step, metrics in results]):
            return values
        pairs = [(step, metrics) for step, metrics in results]
    except (TypeError, ValueError):
        pairs = []
    if not pairs:
        raise BadMessage(f"reports that are not (step, metrics) pairs: {str(results)[:80]}")
    return trial_id, tuple((step, metrics) if is_plain_report(step, metrics)
                           else _plain(step, metrics) for step, metrics in pairs)


def _plain(step: Any, metrics: Any) -> tuple[int, dict[str, int | float]]:
    """``step`` and ``metrics`` checked in full and made plain; BadMessage if they cannot be."""
    try:
        step = check_step(step)
        given = list(dict(metrics).items())
        return step, {_name(name): check_metric(_name(name), value) for name, value in given}
    except (ReportError, TypeError, ValueError) as exc:
        raise BadMessage(f"a report that cannot be stored: {_describe(exc)}") from None


_CHECKS: dict[type, Callable[[tuple], tuple]] = {Reported: _checked, Reports: _checked_all}


def _name(name: Any) -> str:
    if not isinstance(name, str):
        raise TypeError(f"a metric name must be a string, not {type(name).__name__}")
    return name


def _describe(exc: BaseException) -> str:
    """``Type: text`` of an exception, cut short; never raises."""
    try:
        text = str(exc)
    except Exception:
        text = "?"
    text = text if len(text) <= 500 else text[:500] + "..."
    return f"{type(exc).__name__}: {text}"
