"""The worker process: started once, runs trials one after another.

Protocol over one duplex pipe. Driver -> worker: ("run", task), ("stop", trial_id),
("ack", trial_id), ("shutdown",). Worker -> driver: ("started", trial_id), ("report", trial_id,
step, metrics) [then waits for its ack], ("checkpoint", trial_id, path, step), ("done", trial_id),
("error", trial_id, reason, traceback). Stops and acks name their trial, so a stale one is ignored.
("pack", spec) turns the worker into a fused pack until the driver ends it (protocol in
``hypersack.runtime.pack_worker``); it then takes plain trials or packs again.
"""
from __future__ import annotations

import contextlib
import os
import random
import signal
import sys
import traceback
from pathlib import Path
from typing import Any, Callable

from hypersack.errors import TrialStopped

_SHUTDOWN = object()


class PipeChannel:
    """The context's channel to the driver, for one trial."""

    def __init__(self, conn, trial_id: int):
        self._conn = conn
        self._trial_id = trial_id
        self._stop = False
        self.shutdown = False

    def send(self, message: tuple) -> None:
        self._conn.send(message)

    def request(self, message: tuple) -> None:
        self._conn.send(message)
        while not self._handle(self._conn.recv()):
            pass

    def stop_requested(self) -> bool:
        while self._conn.poll():
            self._handle(self._conn.recv())
        return self._stop

    def _handle(self, message: tuple) -> bool:
        """Apply a driver message; True when it is the awaited ack."""
        kind = message[0]
        if kind == "stop" and message[1] == self._trial_id:
            self._stop = True
        elif kind == "shutdown":
            self._stop = self.shutdown = True
        return kind == "ack" and message[1] == self._trial_id


def _die_with_parent() -> None:
    """Linux: SIGKILL this worker when the driver dies, so an orphan never writes a checkpoint
    that a resumed study's new worker is reading."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def worker_main(conn, env: dict[str, str]) -> None:
    """Entry point of a worker process."""
    _die_with_parent()
    os.environ.update(env)
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the driver decides what Ctrl-C means
    trainables: dict[str, Callable[..., Any]] = {}
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message[0] == "shutdown":
            return
        if message[0] == "run":
            if run_task(conn, message[1], trainables) is _SHUTDOWN:
                return
        elif message[0] == "pack":
            from hypersack.runtime.pack_worker import run_pack_task
            if run_pack_task(conn, message[1], trainables) == "shutdown":
                return


def run_task(conn, task: dict[str, Any], trainables: dict[str, Callable[..., Any]]):
    """Run one trial, with stdout and stderr appended to its log file."""
    from hypersack.runtime.context import TrialContext

    trial_id = task["trial_id"]
    trial_dir = Path(task["trial_dir"])
    trial_dir.mkdir(parents=True, exist_ok=True)
    channel = PipeChannel(conn, trial_id)
    with open(trial_dir / "trial.log", "ab", buffering=0) as log, redirected(log):
        print(f"--- trial {trial_id} attempt {task['attempt']} on {task['device']} ---", flush=True)
        conn.send(("started", trial_id))
        try:
            train = _trainable(task["trainable"], trainables)
            _seed_everything(task["seed"])
            world, sync = _join_world(task.get("world") or {}, task["device"])
            meter = _sampler(task) if world.rank == 0 else None
            ctx = TrialContext(trial_id=trial_id, seed=task["seed"], device=task["device"],
                               attempt=task["attempt"], trial_dir=trial_dir, channel=channel,
                               max_steps=task.get("max_steps"), world=world, sync_stop=sync,
                               meter=meter)
            try:
                returned = train(dict(task["config"]), ctx)
                _report_returned(ctx, returned, task["metric"])
            finally:
                _leave_world(world)
                _send_profile(conn, trial_id, meter)
            conn.send(("done", trial_id))
        except TrialStopped:
            conn.send(("done", trial_id))
        except (Exception, SystemExit) as exc:   # a trainable's sys.exit() ends its trial, not the worker
            text = traceback.format_exc()
            print(text, file=sys.stderr, flush=True)
            conn.send(("error", trial_id, f"{type(exc).__name__}: {exc}", text, is_oom(exc)))
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
    return _SHUTDOWN if channel.shutdown else None


def _sampler(task: dict[str, Any]):
    """A Sampler measuring the trial's first steps (each report ends one), or None."""
    if not task.get("profile"):
        return None
    from hypersack.runtime.profiler import Sampler
    try:
        sampler = Sampler(iterations=10, warmup=1, device=task["device"])
        sampler.mark()      # the first step (set-up included) runs from here to the first report
        return sampler
    except Exception:       # profiling must never cost a trial
        return None


def _send_profile(conn, trial_id: int, meter) -> None:
    if meter is None or not meter.measured:
        return
    try:
        conn.send(("profile", trial_id, meter.profile().to_dict()))
    except Exception:
        pass


def is_oom(exc: BaseException) -> bool:
    """The trainable ran out of device memory (CUDA OOM)."""
    torch = sys.modules.get("torch")
    oom_type = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    return (oom_type is not None and isinstance(exc, oom_type)) or "out of memory" in str(exc).lower()


def _join_world(world: dict[str, Any], device: str):
    """Join the trial's torch.distributed group when it spans several workers.

    Returns the World and a ``sync(flag) -> bool`` that makes every rank agree with rank 0 (used
    by ``ctx.report`` so all ranks stop at the same step), or None for a single worker.
    """
    from hypersack.runtime.context import World
    size = int(world.get("size") or 1)
    if size <= 1:
        return World(), None
    import datetime

    import torch.distributed as dist
    rank = int(world["rank"])
    backend = dist_backend(device)
    timeout = datetime.timedelta(seconds=300)
    store = dist.TCPStore("127.0.0.1", int(world["port"]), size, is_master=rank == 0,
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
    return World(rank, size), sync


def dist_backend(device: str) -> str:
    """NCCL on a GPU, gloo on the CPU; ``HYPERSACK_DIST_BACKEND`` (set in a slot's env)
    overrides it: gloo lets two ranks share one GPU, which NCCL refuses."""
    return os.environ.get("HYPERSACK_DIST_BACKEND") or ("nccl" if device.startswith("cuda")
                                                        else "gloo")


def _leave_world(world) -> None:
    if world.size > 1:
        import torch.distributed as dist
        if dist.is_initialized():
            dist.destroy_process_group()


def _trainable(spec: tuple, cache: dict[str, Callable[..., Any]]) -> Callable[..., Any]:
    from hypersack.runtime.trainable import TrainableRef
    key, reference, payload = spec
    if key not in cache:
        cache[key] = TrainableRef(key, reference, payload).load()
    return cache[key]


def _report_returned(ctx, returned: Any, metric: str) -> None:
    """A trainable may return its final result: a number (the objective) or a dict of metrics."""
    if returned is None:
        return
    step = 0 if ctx.last_step is None else ctx.last_step + 1
    if isinstance(returned, dict):
        ctx.report(step, **returned)
    else:
        ctx.report(step, **{metric: returned})


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    try:
        import numpy as np
        np.random.seed(seed % 2**32)
    except ImportError:
        pass
    if "torch" in sys.modules:
        sys.modules["torch"].manual_seed(seed)


@contextlib.contextmanager
def redirected(log):
    """Point file descriptors 1 and 2 (so also C extensions' output) at ``log``."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])
