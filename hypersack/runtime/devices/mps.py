"""One NVIDIA MPS control daemon per study (HyperSack Sec. II-C, IV-C5 step 1 and 9).

``MpsDaemon(study_dir)`` keeps everything inside ``<study_dir>/mps/``: ``pipe/`` (the daemon's
named pipes and sockets: ``CUDA_MPS_PIPE_DIRECTORY``), ``log/`` (``CUDA_MPS_LOG_DIRECTORY``) and
``daemon.json``, the lock file naming the driver process that owns the daemon.

- ``start()`` first cleans a stale daemon left by a crashed run (lock owner dead, or a control
  socket without a lock): ``echo quit | nvidia-cuda-mps-control`` with the same pipe directory,
  then SIGTERM / SIGKILL to any process still serving that directory. Then it runs
  ``nvidia-cuda-mps-control -d`` and waits for the control socket to appear.
- ``stop()`` quits the daemon the same way; it runs on ``__exit__`` (normal exit, Ctrl-C,
  exceptions) and from ``atexit``; a kill -9 of the driver is handled by the next ``start()``.
- Where MPS is missing or refused (binary not on PATH, the daemon fails to start, no permission,
  a container without the driver's MPS support), ``start()`` returns False, ``active`` stays
  False and ``env_for`` gives no MPS variables: trials share the GPU by plain time slicing.
  That fallback is announced by ONE :class:`MpsUnavailableWarning` per study directory.

UNIX socket paths are limited to ~107 bytes; when ``<study_dir>/mps/pipe`` is too long the
daemon is pointed at a short symlink to it under the system temp directory.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import math
import os
import shutil
import signal
import subprocess
import tempfile
import time
import warnings
from pathlib import Path
from typing import Callable

from hypersack.errors import HyperSackError
from hypersack.validation import check_number

__all__ = ["MpsDaemon", "MpsUnavailableWarning", "MPS_CONTROL"]

MPS_CONTROL = "nvidia-cuda-mps-control"
_MAX_PIPE_DIR = 80          # leaves room for the socket names MPS puts inside the directory
_warned: set[str] = set()   # study directories already warned about (one warning per study)


class MpsUnavailableWarning(RuntimeWarning):
    """MPS could not be used: trials on one GPU share it by time slicing instead."""


class MpsDaemon:
    """The study's MPS control daemon. Not thread-safe: the driver owns it.

    ``binary``: the control program (looked up on PATH); ``timeout_s``: how long start and quit
    may take; ``pid_alive``: injected liveness check of the lock's owner (tests).
    """

    def __init__(self, study_dir: str | Path, *, binary: str = MPS_CONTROL, timeout_s: float = 10.0,
                 pid_alive: Callable[[int], bool] | None = None):
        self.root = Path(study_dir).resolve() / "mps"
        self.pipe_dir = self.root / "pipe"
        self.log_dir = self.root / "log"
        self.lock_file = self.root / "daemon.json"
        self.binary = binary
        self.timeout_s = timeout_s
        self._pid_alive = pid_alive or _pid_alive
        self._pipe_env = str(self.pipe_dir)
        self.active = False
        self.reason: str | None = None      # why MPS is off, once start() failed

    # ---- public -----------------------------------------------------------------------------

    def start(self) -> bool:
        """Start the daemon (cleaning a stale one first); False, with one warning, on fallback."""
        if self.active:
            return True
        exe = shutil.which(self.binary)
        if exe is None:
            return self._fallback(f"{self.binary} is not on PATH (MPS is not installed here)")
        self._prepare_dirs()
        self.cleanup_stale(exe)
        problem = self._launch(exe)
        if problem is not None:
            if self._daemon_pids():          # started but never answered: do not leave it behind
                self._quit(exe)
                self._kill_remaining()
            self._drop_symlink()
            return self._fallback(problem)
        self._write_lock()
        self.active = True
        atexit.register(self.stop)
        return True

    def stop(self) -> None:
        """Quit the daemon (idempotent); kills what still serves the pipe directory."""
        if not self.active:
            return
        self.active = False
        atexit.unregister(self.stop)
        exe = shutil.which(self.binary)
        if exe is not None:
            self._quit(exe)
        self._kill_remaining()
        self.lock_file.unlink(missing_ok=True)
        self._drop_symlink()

    def env_for(self, job_share_percent: float) -> dict[str, str]:
        """Environment for one worker whose job gets ``job_share_percent`` (0 < x <= 100) of a
        GPU's compute. Empty when MPS is off (time slicing needs no variables)."""
        check_number("compute_share", job_share_percent, low=0.0, low_open=True, high=100.0,
                     hint="(a percentage)")
        if not self.active:
            return {}
        return {"CUDA_MPS_PIPE_DIRECTORY": self._pipe_env,
                "CUDA_MPS_LOG_DIRECTORY": str(self.log_dir),
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(max(1, math.ceil(job_share_percent)))}

    def __enter__(self) -> "MpsDaemon":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def cleanup_stale(self, exe: str | None = None) -> bool:
        """Quit a daemon left by a crashed run of this study; True if one was found.

        Raises HyperSackError when the lock's owner is another live process (the study is
        running elsewhere)."""
        owner = self._read_lock()
        if owner is not None and self._owner_running(owner):
            raise HyperSackError(
                f"The MPS daemon in {self.root} belongs to the running process "
                f"{owner['owner_pid']}: is this study already running?")
        if owner is None and not self._control_exists():
            return False
        exe = exe or shutil.which(self.binary)
        if exe is not None:
            self._quit(exe)
        self._kill_remaining()
        self.lock_file.unlink(missing_ok=True)
        return True

    # ---- internals --------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["CUDA_MPS_PIPE_DIRECTORY"] = self._pipe_env
        env["CUDA_MPS_LOG_DIRECTORY"] = str(self.log_dir)
        return env

    def _prepare_dirs(self) -> None:
        self.pipe_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._pipe_env = str(self.pipe_dir)
        if len(self._pipe_env) > _MAX_PIPE_DIR:
            link = self._symlink_path()
            if not (link.is_symlink() and os.readlink(link) == str(self.pipe_dir)):
                link.unlink(missing_ok=True)
                link.symlink_to(self.pipe_dir, target_is_directory=True)
            self._pipe_env = str(link)

    def _symlink_path(self) -> Path:
        digest = hashlib.sha1(str(self.pipe_dir).encode()).hexdigest()[:12]
        return Path(tempfile.gettempdir()) / f"hs-mps-{os.getuid()}-{digest}"

    def _drop_symlink(self) -> None:
        link = self._symlink_path()
        if link.is_symlink():
            link.unlink(missing_ok=True)

    def _control_exists(self) -> bool:
        return (self.pipe_dir / "control").exists()

    def _launch(self, exe: str) -> str | None:
        """Run ``-d``; None when the control socket appeared, else what went wrong."""
        # Output goes to a file, not a pipe: a daemon child that keeps the parent's stdout open
        # would make a pipe reader wait for it forever.
        out_path = self.log_dir / "start.out"
        try:
            with open(out_path, "w") as out:
                done = subprocess.run([exe, "-d"], env=self._env(), stdin=subprocess.DEVNULL,
                                      stdout=out, stderr=subprocess.STDOUT,
                                      timeout=self.timeout_s, start_new_session=True)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{self.binary} -d could not run: {exc}"
        if done.returncode != 0:
            said = out_path.read_text(errors="replace").strip().splitlines()
            return f"{self.binary} -d failed (exit {done.returncode}): {said[-1] if said else 'no output'}"
        deadline = time.monotonic() + self.timeout_s
        while not self._control_exists():
            if time.monotonic() > deadline:
                return f"the MPS control daemon did not create {self.pipe_dir / 'control'}"
            time.sleep(0.02)
        return None

    def _quit(self, exe: str) -> None:
        """``echo quit | nvidia-cuda-mps-control``; waits for the daemon's processes to go."""
        try:
            subprocess.run([exe], input="quit\n", env=self._env(), capture_output=True, text=True,
                           timeout=self.timeout_s)
        except (OSError, subprocess.TimeoutExpired):
            pass
        deadline = time.monotonic() + self.timeout_s
        while self._daemon_pids() and time.monotonic() < deadline:
            time.sleep(0.02)

    def _kill_remaining(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = self._daemon_pids()
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
            deadline = time.monotonic() + 2.0
            while self._daemon_pids() and time.monotonic() < deadline:
                time.sleep(0.02)
        (self.pipe_dir / "control").unlink(missing_ok=True)

    def _daemon_pids(self) -> list[int]:
        """Live processes of this user whose environment names our pipe directory and whose
        command line is an MPS program (control daemon or server)."""
        wanted = {f"CUDA_MPS_PIPE_DIRECTORY={p}".encode() for p in {self._pipe_env, str(self.pipe_dir)}}
        pids = []
        for entry in Path("/proc").glob("[0-9]*"):
            try:
                if b"nvidia-cuda-mps" not in (entry / "cmdline").read_bytes():
                    continue
                if wanted & set((entry / "environ").read_bytes().split(b"\0")) \
                        and _state(entry) not in ("Z", "X"):
                    pids.append(int(entry.name))
            except (OSError, ValueError):
                continue
        return pids

    def _write_lock(self) -> None:
        data = {"owner_pid": os.getpid(), "owner_start": _start_time(os.getpid()), "pipe_dir": self._pipe_env, "daemons": self._daemon_pids(),
                "started_at": time.time()}
        tmp = self.lock_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.lock_file)

    def _owner_running(self, owner: dict) -> bool:
        """The lock's owner is another live process (same pid and same start time)."""
        pid = owner.get("owner_pid")
        if not isinstance(pid, int) or pid == os.getpid() or not self._pid_alive(pid):
            return False
        recorded = owner.get("owner_start")
        return recorded is None or _start_time(pid) in (None, recorded)

    def _read_lock(self) -> dict | None:
        try:
            return json.loads(self.lock_file.read_text())
        except (OSError, ValueError):
            return None

    def _fallback(self, reason: str) -> bool:
        self.reason = reason
        key = str(self.root)
        if key not in _warned:
            _warned.add(key)
            warnings.warn(MpsUnavailableWarning(
                f"MPS is off for this study ({reason}); trials sharing a GPU will be time-sliced "
                f"instead, which is slower when they run concurrently"), stacklevel=3)
        return False


def _state(proc: Path) -> str:
    """The one-letter state of /proc/PID (R, S, Z...)."""
    stat = (proc / "stat").read_text()
    return stat[stat.rindex(")") + 2:].split()[0]


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (tells a reused pid apart)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2:].split()[19]
    except (OSError, ValueError, IndexError):
        return None


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return _state(Path(f"/proc/{pid}")) not in ("Z", "X")
    except (OSError, ValueError):
        return True
