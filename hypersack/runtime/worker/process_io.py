"""What a worker process needs around a trainable, shared by the trial worker (``worker``) and
the pack worker (``pack_member_worker``): its output sent to a log file, and what a failure was (out of
device memory, disk full), reported to the driver as facts for core's retry decision."""
from __future__ import annotations

import contextlib
import errno
import os
import sys
import threading
from typing import Any, Iterator

__all__ = ["redirected", "is_oom", "is_disk_full", "failure_reason", "memory_limit", "LogCap"]


def is_oom(exc: BaseException) -> bool:
    """The trainable ran out of device memory (CUDA OOM)."""
    torch = sys.modules.get("torch")
    oom_type = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    if oom_type is not None and isinstance(exc, oom_type):
        return True
    try:
        return "out of memory" in str(exc).lower()
    except Exception:           # an exception whose message cannot be made
        return False


def failure_reason(exc: BaseException) -> str:
    """``"Type: message"`` of a trial's exception; never raises, whatever ``exc`` is. A
    ``MemoryError`` (host memory; Python gives it no message) says "out of memory" and the
    limit the process ran under when one is known (``memory_limit``)."""
    try:
        text = str(exc)
    except Exception:
        return f"{type(exc).__name__} (its message cannot be shown)"
    if isinstance(exc, MemoryError):
        limit = memory_limit()
        detail = f"; {text}" if text else ""
        where = f" (limit: {limit})" if limit else " (no memory limit is set: the machine's memory)"
        return f"{type(exc).__name__}: out of memory{where}{detail}"
    return f"{type(exc).__name__}: {text}"


def memory_limit() -> str | None:
    """The host memory limits this process runs under, as text (``RLIMIT_AS 2.0 GiB, cgroup
    memory.max 8.0 GiB``), or None when neither is set (or they cannot be read)."""
    limits = []
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            limits.append(f"RLIMIT_AS {_size(soft)}")
    except (ImportError, OSError, ValueError):
        pass
    cgroup = _cgroup_memory_max()
    if cgroup is not None:
        limits.append(f"cgroup memory.max {_size(cgroup)}")
    return ", ".join(limits) or None


def _cgroup_memory_max() -> int | None:
    """Linux: the memory limit of this process's cgroup (v2 ``memory.max``, v1
    ``memory.limit_in_bytes``), or None when unlimited or unknown."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            name = f"/sys/fs/cgroup{path.rstrip('/')}/memory.max"
        elif "memory" in controllers.split(","):
            name = f"/sys/fs/cgroup/memory{path.rstrip('/')}/memory.limit_in_bytes"
        else:
            continue
        try:
            with open(name) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:      # v1 says "unlimited" with a huge number
            return int(text)
    return None


def _size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} bytes" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024       # type: ignore[assignment]
    return f"{n} bytes"


def is_disk_full(exc: BaseException | None) -> bool:
    """The trial failed because the disk is full (ENOSPC anywhere in the exception's chain)."""
    seen = 0
    while exc is not None and seen < 16:
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


@contextlib.contextmanager
def redirected(log: Any) -> Iterator[None]:
    """Point file descriptors 1 and 2 (so also C extensions' output) at ``log``. Output the log
    could not take (a full disk) is dropped on the way out: it never reaches the original
    stdout or stderr (the driver's terminal), and leaving never raises for it."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        _flush_or_drop()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


def _flush_or_drop() -> None:
    """Flush Python's stdout and stderr into file descriptors 1 and 2; what cannot be written
    there is flushed into /dev/null instead (a buffered stream keeps unwritten data otherwise,
    and would write it wherever fd 1 points next)."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        return
    except (OSError, ValueError):
        pass
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
    finally:
        os.close(null)


class LogCap:
    """Keeps what one attempt of a trial adds to its log under a limit.

    While ``watching(fd, limit)``, a daemon thread (one per worker, idle between trials) looks
    at the log's size every ``period_s``. Once the attempt has added more than ``limit``
    bytes, file descriptors 1 and 2 are pointed at /dev/null (the rest of the trial's output,
    C extensions' included, is dropped), the log is cut back to the limit and a line marking
    the cut is appended; output written past it afterwards (a process the trial started that
    holds the log itself) is cut away again at each look and when the watch ends. So the log
    holds at most ``limit`` bytes of the attempt plus the mark; between two looks it may hold
    more for a moment (what the trial writes in ``period_s``)."""

    def __init__(self, period_s: float = 0.1):
        self._period_s = period_s
        self._lock = threading.Condition()
        self._fd: int | None = None
        self._end = 0                   # the size the log may reach
        self._cut: int | None = None    # the log's size once cut (with the mark), or None
        self._limit = 0
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def watching(self, fd: int, limit: int | None) -> Iterator[None]:
        if limit is None:
            yield
            return
        with self._lock:
            self._fd, self._limit, self._cut = fd, limit, None
            self._end = os.fstat(fd).st_size + limit
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="hypersack-log-cap")
                self._thread.start()
            self._lock.notify()
        try:
            yield
        finally:
            _flush_or_drop()
            with self._lock:
                self._look()
                self._fd = None

    def _run(self) -> None:
        with self._lock:
            while True:
                if self._fd is not None:
                    self._look()
                self._lock.wait(self._period_s if self._fd is not None else None)

    def _look(self) -> None:
        """Cut the log if the attempt's output passed its limit (under the lock)."""
        fd = self._fd
        if fd is None:
            return
        try:
            size = os.fstat(fd).st_size
            if self._cut is None and size > self._end:
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, 1)
                os.dup2(null, 2)
                os.close(null)
                os.ftruncate(fd, self._end)
                os.write(fd, (f"\n--- HyperSack: this attempt wrote more than "
                              f"executor.max_log_mb ({self._limit / 1e6:g} MB) to its log; the "
                              "rest of its output is dropped ---\n").encode())
                self._cut = os.fstat(fd).st_size
            elif self._cut is not None and size > self._cut:
                os.ftruncate(fd, self._cut)
        except OSError:
            pass                        # a full disk: the trial's own writes say so
