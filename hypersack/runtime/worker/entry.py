"""Worker start-up: each worker is its own program, never a re-run of the driver's script.

multiprocessing's spawn start method imports the driver's ``__main__`` in every child (so a
script without an ``if __name__ == "__main__":`` guard would start a study per worker). HyperSack
starts a worker as ``python -c <bootstrap> FD`` instead, as Ray starts its workers: the child
imports only HyperSack's worker code; a trainable (or FusableTask) defined in the driver's
``__main__`` travels by value with cloudpickle (``hypersack.runtime.worker.trainable``), together with the
functions and classes it uses from there.

The child gets, from the driver: its working directory, its environment plus the slot's variables
(set before the interpreter starts, so ``CUDA_VISIBLE_DEVICES`` holds for every import), its
``sys.path`` (so modules next to the script, or on a path the driver added, import the same), the
interpreter flags (``-O``, ``-X ...``), and its end of a duplex socket pair as a
``multiprocessing.connection.Connection``; stdin is /dev/null. ``WorkerProcess`` is the driver's
handle: the part of ``multiprocessing.Process`` the pool uses (``pid``, ``sentinel``,
``is_alive``, ``exitcode``, ``join``, ``kill``). Each worker leads a session and process
group of its own (so a terminal's Ctrl-C reaches the driver alone, which decides what it
means), and ``kill`` ends the whole group and every process below the worker (its subreaper,
``hypersack.runtime.worker.reaper``): processes a trainable started go with their worker.
Live workers are killed when the driver exits (as multiprocessing does with daemon children);
on Linux a worker also dies with its driver (PR_SET_PDEATHSIG, set in ``worker_main``), and a
guard process takes the rest of its group with it (``worker.guard_process_group``).
"""
from __future__ import annotations

import atexit
import json
import multiprocessing as mp
import os
import select
import signal
import subprocess
import sys
import weakref
from multiprocessing.connection import Connection
from typing import Mapping

from hypersack.runtime.worker.reaper import kill_tree

__all__ = ["WorkerProcess", "main"]

SYS_PATH_VAR = "HYPERSACK_WORKER_SYS_PATH"

# Runs before anything of HyperSack is importable: it restores the driver's sys.path first.
BOOTSTRAP = ("import json, os, sys; "
             f"sys.path[:] = json.loads(os.environ.pop({SYS_PATH_VAR!r})); "
             "from hypersack.runtime.worker.entry import main; main()")

_LIVE: "weakref.WeakSet[WorkerProcess]" = weakref.WeakSet()


class WorkerProcess:
    """A started worker process and the driver's end of its duplex connection (``conn``)."""

    def __init__(self, env: Mapping[str, str], *, name: str = "hypersack-worker"):
        self.name = name
        parent, child = mp.Pipe(duplex=True)      # a socket pair on POSIX
        child_fd = child.fileno()
        environ = {**os.environ, **env, SYS_PATH_VAR: json.dumps([_absolute(p) for p in sys.path])}
        flags = subprocess._args_from_interpreter_flags()  # type: ignore[attr-defined]
        command = [sys.executable, *flags, "-c", BOOTSTRAP,
                   str(child_fd)]
        exit_r, exit_w = os.pipe()                # fallback sentinel: EOF once the child is gone
        try:
            self._popen = subprocess.Popen(command, env=environ, pass_fds=(child_fd, exit_w),
                                           stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            child.close()
            os.close(exit_w)
        self.conn: Connection = parent
        self.pid: int = self._popen.pid
        self.sentinel: int = _pid_sentinel(self._popen.pid, exit_r)
        weakref.finalize(self, _close_quietly, self.sentinel)
        _LIVE.add(self)

    def is_alive(self) -> bool:
        return self._popen.poll() is None

    @property
    def exitcode(self) -> int | None:
        """None while running; negative: killed by that signal (as multiprocessing reports)."""
        return self._popen.poll()

    def join(self, timeout: float | None = None) -> None:
        """Wait until the process has ended, at most ``timeout`` seconds (None: no limit). With
        a limit it waits on the exit sentinel, so it returns as soon as the process ends
        (``Popen.wait(timeout)`` polls with sleeps of up to 50 ms)."""
        if timeout is None:
            self._popen.wait()
            return
        if self._popen.poll() is None:
            _readable(self.sentinel, timeout)
            self._popen.poll()

    def kill(self) -> None:
        """SIGKILL the worker, every process below it (what its trainable started, however it
        detached: the worker is their subreaper, ``reaper.kill_tree``) and every process of its
        group; the group is signalled even when the worker is gone already (its children may
        not be)."""
        running = self._popen.poll() is None
        if running:
            kill_tree(self.pid, include_root=True)
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if running:
            try:
                self._popen.kill()
            except ProcessLookupError:
                pass


def _absolute(entry: str) -> str:
    """sys.path entries as absolute paths ('' is the working directory), so they mean the same
    in the child whatever it does with its own working directory."""
    return os.path.abspath(entry) if entry == "" or not os.path.isabs(entry) else entry


def _pid_sentinel(pid: int, exit_r: int) -> int:
    """A file descriptor that becomes readable when the process ends: a pidfd (Linux >= 5.3),
    else ``exit_r``, the read end of a pipe whose write end only the child holds (EOF when it
    and any child it forked have exited, as with multiprocessing's own sentinel)."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        return exit_r
    os.close(exit_r)
    return fd


def _readable(fd: int, timeout: float) -> bool:
    """Whether ``fd`` is readable (or closed) within ``timeout`` seconds."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    return bool(poller.poll(max(0, int(timeout * 1000 + 0.999))))


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


@atexit.register
def _kill_live_workers() -> None:
    for worker in list(_LIVE):
        worker.kill()


def main() -> None:
    """The worker program: ``argv[1]`` is the file descriptor of its connection to the driver."""
    from hypersack.runtime.worker.process import worker_main
    conn = Connection(int(sys.argv[1]))
    worker_main(conn, {})
