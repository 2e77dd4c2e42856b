"""What a worker process needs around a trainable, shared by the trial worker (``worker``) and
the pack worker (``pack_member_worker``): its output sent to a log file, and what a failure was (out of
device memory, disk full), reported to the driver as facts for core's retry decision."""
from __future__ import annotations

import contextlib
import errno
import os
import sys
from typing import Any, Iterator

__all__ = ["redirected", "is_oom", "is_disk_full", "failure_reason", "memory_limit"]


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
