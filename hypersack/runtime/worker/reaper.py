"""A worker's descendants: every process a trainable started, however it detached itself.

Killing a worker's process group misses a process that left it (``setsid``, a daemon's double
fork). On Linux a worker is a child subreaper (``PR_SET_CHILD_SUBREAPER``): an orphan among its
descendants is reparented to the worker, not to init, so while the worker lives every process
a trainable started is in the worker's tree of processes (parent links, read from ``/proc``).
``end_descendants`` (the worker, at every trial's end and at its exit) and ``kill_tree`` (the
driver, when it kills a worker) end that whole tree: each process is stopped first (SIGSTOP:
it can fork no more), the tree read again until no new process shows, then all are SIGKILLed.
Elsewhere (no ``/proc``, no prctl) both fall back to what the caller does anyway (the worker's
process group). Not covered: a driver killed with SIGKILL (its workers die with it, through
PR_SET_PDEATHSIG, and the group guard ends their groups, but a process that left the group is
then an orphan of init, outside any tree).
"""
from __future__ import annotations

import os
import signal
import sys

__all__ = ["become_subreaper", "descendants", "kill_tree", "end_descendants"]

_PR_SET_CHILD_SUBREAPER = 36
_ROUNDS = 16            # reads of the tree while stopping it (a fork bomb gets this many)


def become_subreaper() -> bool:
    """Linux: make this process the subreaper of its descendants; whether it is one now."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process in ``/proc`` ({} without ``/proc``)."""
    out: dict[int, int] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue            # it ended meanwhile
        fields = data[data.rindex(b")") + 2:].split(b" ", 3)
        if fields[0] not in (b"Z", b"X"):          # a zombie is gone already
            out[int(name)] = int(fields[1])
    return out


def descendants(root: int, skip: frozenset[int] | set[int] = frozenset()) -> list[int]:
    """The live processes below ``root`` (parents before their children), read from ``/proc``
    now, without the pids of ``skip`` and the processes below them."""
    children: dict[int, list[int]] = {}
    for pid, parent in _parents().items():
        children.setdefault(parent, []).append(pid)
    out: list[int] = []
    todo = [p for p in children.get(root, ()) if p not in skip]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(p for p in children.get(pid, ()) if p not in skip)
    return out


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_tree(root: int, *, include_root: bool, keep: frozenset[int] = frozenset()) -> list[int]:
    """SIGKILL every descendant of ``root`` (and ``root`` with ``include_root``), but the pids
    in ``keep`` (and theirs). Stops them all first so none forks meanwhile. Returns the pids
    signalled."""
    if include_root:
        _signal(root, signal.SIGSTOP)
    stopped: list[int] = []
    seen: set[int] = set()
    for _ in range(_ROUNDS):
        new = [p for p in descendants(root, keep) if p not in seen]
        if not new:
            break
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        stopped += new
        seen.update(new)
    for pid in ([root] if include_root else []) + stopped:
        _signal(pid, signal.SIGKILL)
    return stopped


def _has_children() -> bool:
    """Whether this process has a child, running or ended and not yet waited for (one
    ``waitid`` call, nothing read from /proc). True where that cannot be asked."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    except (AttributeError, OSError):
        return True
    return True


def end_descendants(keep: frozenset[int] = frozenset()) -> list[int]:
    """The worker side: SIGKILL every process this process started (directly or not) but those
    of ``keep``, then reap its ended children. Costs one ``waitid`` when it has no child (the
    common case); else a read of ``/proc``. Returns the pids signalled."""
    if not _has_children():
        return []
    me = os.getpid()
    killed = kill_tree(me, include_root=False, keep=keep)
    for pid in killed:
        try:
            os.waitpid(pid, 0)          # a child of ours (directly, or reparented to us)
        except ChildProcessError:
            pass                        # another's child: its parent, killed too, was reaped
    while True:                         # zombies reparented to us meanwhile
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
    return killed
