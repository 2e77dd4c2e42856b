"""The node agent of the Ray executor: one per node, hosting that node's local executor.

Transport only. The driver (``executors.ray.RayExecutor``) starts one agent actor on each node,
pinned there and holding the node's GPUs and CPUs for the study. The agent runs what the local
executor runs on one machine (warm workers, fused packs, MPS, the NVML monitor: ``LocalExecutor``
and ``machine.prepare_node``), with the node's devices; the driver places trials on
(node, device) pairs and relays commands and events. This module imports no Ray at import time:
the driver wraps ``NodeAgent`` with ``ray.remote``.

Device ids inside the agent are the local executor's (``gpu0``, ``cpu1``); the agent's events
name its node by the id the driver gave it, and a trial's device label is ``<node>/<label>``.
Checkpoints are plain files under the study's run folder, which every node must see at the same
path (a shared file system): ``AgentSetup.storage_check`` proves it before any trial starts.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from hypersack.core.trial import (Command, DeviceAdded, DeviceLost, Event, FailureCause, Launch,
                                  TrialFailed, TrialStarted)

__all__ = ["AgentSetup", "NodeAgent", "node_cluster", "node_slots"]


@dataclass
class AgentSetup:
    """What every agent needs, sent once when it starts.

    ``spec``: the StudySpec; ``study_dir``: the study's run folder (absolute, on shared storage);
    ``trainable``: the TrainableRef workers load; ``packs``: the TaskPackPlan of a fused study, or
    None; ``sys_path``/``cwd``: the driver's, adopted where they exist on the node (a trainable
    next to the study file imports the same); ``storage_check``: (file, token) the driver wrote
    in the run folder, which the agent must read back, or None (tests without storage)."""
    spec: Any
    study_dir: str
    trainable: Any
    metric: str
    packs: Any = None
    unsafe_checkpoints: bool = False
    profile: bool = True
    sys_path: tuple[str, ...] = ()
    cwd: str | None = None
    storage_check: tuple[str, str] | None = None


def node_slots(workers: int | None, gpu_ids: Iterable[Any], cpus: float) -> Any:
    """The slots of a node Ray gave ``gpu_ids`` and ``cpus``: None where it has GPUs (the local
    detection then finds them: NVML, else the CUDA_VISIBLE_DEVICES Ray set), else one CPU slot
    per core Ray declares (``workers`` caps either)."""
    from hypersack.runtime.devices.slots import default_slots
    if list(gpu_ids):
        return None
    return default_slots(workers, gpus=[], cpu_count=max(1, int(cpus)))


class NodeAgent:
    """Hosts one node's ``LocalExecutor``. Errors while setting up are kept and returned by
    ``describe`` (the driver turns them into one ClusterError naming the node); an error while
    submitting a command fails that trial at the next poll instead of being lost."""

    def __init__(self, setup: AgentSetup, node_id: str, gpu_ids: list[Any], cpus: float):
        self._node = node_id
        self._dirs: dict[int, str] = {}
        self._failed: list[Event] = []
        self._stack = contextlib.ExitStack()
        self._error: str | None = None
        self._executor: Any = None
        self._cluster: Any = None
        try:
            _adopt_paths(setup.sys_path, setup.cwd)
            _check_storage(setup.storage_check)
            self._setup(setup, gpu_ids, cpus)
        except Exception as exc:       # reported by describe(): the node cannot serve the study
            self._error = f"{type(exc).__name__}: {exc}"
            self._stack.close()

    def _setup(self, setup: AgentSetup, gpu_ids: list[Any], cpus: float) -> None:
        from hypersack.runtime.executors.local import LocalExecutor
        from hypersack.runtime.devices.machine import prepare_node
        spec = setup.spec
        slots = node_slots(spec.executor.workers, gpu_ids, cpus)
        machine = self._stack.enter_context(prepare_node(spec, Path(setup.study_dir), slots=slots))
        self._cluster = node_cluster(machine.cluster, self._node, bool(gpu_ids), cpus)
        self._executor = LocalExecutor(
            machine.slots, setup.trainable, trial_dir=self._trial_dir, metric=setup.metric,
            steps_for=spec.steps_for, cluster=machine.cluster, share_env=machine.share_env,
            profile=lambda config: setup.profile, device_events=machine.device_events,
            packs=setup.packs, unsafe_checkpoints=setup.unsafe_checkpoints,
            report_window=1,     # the driver acks what it has seen: one report in flight
            max_log_bytes=spec.executor.max_log_bytes)

    def _trial_dir(self, trial_id: int) -> Path:
        return Path(self._dirs[trial_id])

    def describe(self) -> dict[str, Any]:
        """``node``, ``ip``, ``pid``, and ``cluster`` (this node as a placement Cluster with the
        driver's node id) or ``error`` (why this node cannot serve the study)."""
        from ray.util import get_node_ip_address
        node_ip: Callable[[], str] = get_node_ip_address     # ray's is unannotated
        return {"node": self._node, "ip": node_ip(), "pid": os.getpid(),
                "cluster": self._cluster, "error": self._error}

    def start(self) -> None:
        self._executor.start()

    def submit(self, command: Command, trial_dir: str | None = None) -> None:
        if trial_dir is not None:
            self._dirs[command.trial_id] = trial_dir
        try:
            self._executor.submit(command)
        except Exception as exc:       # a trial this node cannot run: a fact for the controller
            self._failed.append(TrialFailed(command.trial_id, f"node {self._node}: {exc}",
                                            cause=FailureCause.ERROR))

    def submit_ranks(self, launch: Launch, trial_dir: str, keys: list[str], ranks: list[int],
                     world: Any) -> None:
        """Start some ranks of a data-parallel trial whose ranks span nodes (``world``: the
        group's size and rank 0's host and port)."""
        self._dirs[launch.trial_id] = trial_dir
        try:
            self._executor.launch_ranks(launch, keys, ranks, world)
        except Exception as exc:
            self._failed.append(TrialFailed(launch.trial_id, f"node {self._node}: {exc}",
                                            cause=FailureCause.ERROR))

    def free_port(self) -> int:
        """A TCP port free on this node's interfaces (a spanning trial's rank-0 store)."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            return int(s.getsockname()[1])

    def poll(self, timeout: float) -> list[Event]:
        events, self._failed = self._failed, []
        events += self._executor.poll(0.0 if events else timeout)
        return [self._named(event) for event in events]

    def _named(self, event: Event) -> Event:
        """The event with this node's id (device events) or device label (trial starts)."""
        if isinstance(event, TrialStarted):
            return dataclasses.replace(event, device=f"{self._node}/{event.device}")
        if isinstance(event, (DeviceAdded, DeviceLost)):
            return dataclasses.replace(event, node_id=self._node)
        return event

    def acknowledge(self, trial_ids: list[int], free_below: dict[int, int]) -> None:
        """The driver's ack of the results received from this node (``RayExecutor.acknowledge``),
        relayed as given."""
        self._executor.acknowledge(trial_ids, free_below)

    def worker_pids(self) -> list[int]:
        return self._executor.worker_pids() if self._executor is not None else []

    def shutdown(self, kill: bool = False) -> None:
        try:
            if self._executor is not None:
                self._executor.shutdown(kill=kill)
        finally:
            self._stack.close()


def _adopt_paths(sys_path: Iterable[str], cwd: str | None) -> None:
    """Put the driver's ``sys.path`` entries that exist here in front, and move to its working
    directory when it exists here (a local cluster, or the same layout on every node)."""
    for entry in reversed([p for p in sys_path if p and os.path.isdir(p)]):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    if cwd and os.path.isdir(cwd):
        os.chdir(cwd)


def _check_storage(check: tuple[str, str] | None) -> None:
    """The run folder is the driver's: the token file it wrote reads back the same here."""
    if check is None:
        return
    path, token = check
    from hypersack.errors import UnsafePathError
    from hypersack.runtime.worker.checkpoints import read_private
    try:
        seen = read_private(Path(path), limit=1024).decode(errors="replace")
    except OSError as exc:
        seen = f"<{exc.strerror or exc}>"
    except UnsafePathError as exc:
        seen = f"<{exc}>"
    if seen != token:
        raise RuntimeError(
            f"the study's run folder {os.path.dirname(path)!r} is not the driver's here (read "
            f"{seen[:40]!r} from {os.path.basename(path)}): on Ray every node must see the "
            "study's storage folder at the same path (a shared file system); put storage_path "
            "there")


def node_cluster(cluster: Any, node_id: str, has_gpus: bool, cpus: float) -> Any:
    """The node's one-node placement Cluster (``cluster``: the local detection's) under
    ``node_id``. A GPU node's host cores are the ``cpus`` Ray declares for it (the agent holds
    them all for the study), not the local detection's figure, which knows nothing of Ray (the
    machine's core count with NVML, one core per GPU without it): a trial needing more cores
    than one per GPU must fit a GPU node that has them. A CPU-only node's slots were made from
    ``cpus`` already (``node_slots``); so was its figure. A node Ray gives no CPU keeps the
    local figure."""
    from hypersack.placement import Cluster, Node
    return Cluster([Node(node_id, float(cpus) if has_gpus and cpus >= 1 else n.cpus, n.gpus)
                    for n in cluster.nodes])
