"""The Ray executor: the study's trials on every node of a Ray cluster, placed by HyperSack.

Transport only, behind the same protocol as the local executor. Ray's own fractional GPUs cannot
carry HyperSack's placement (Ray picks the GPU index itself and looks at a node's total free GPU),
so Ray is used for what it does well, reaching nodes: one agent actor per node
(``ray_agent.NodeAgent``), pinned with ``NodeAffinitySchedulingStrategy(node, soft=False)`` and
holding the node's GPUs and CPUs for the study, hosts that node's local executor (warm workers,
fused packs, MPS, NVML monitor). The driver's controller places trials on (node, device) pairs,
as it does on one machine (a two-level scheduler: global placement in the driver, node-local
execution in the agents); this executor relays commands to the agent of the node and events
back.

- Inventory: every live node with a GPU or a CPU core (a head started with ``--num-cpus 0`` and
  no GPU serves nothing); its devices are what the local executor would find there (NVML GPUs,
  else the GPUs Ray declares, fake ones included, else CPU slots, one per core Ray declares).
- Nodes that join get an agent and their devices are announced (``DeviceAdded``); a node that
  leaves or whose agent dies becomes ``DeviceLost`` for each of its devices, and its trials
  ``TrialFailed(DEVICE_LOST)``: they restart from their checkpoints elsewhere without a retry.
- Checkpoints are files in the study's run folder beside the SQLite store, which every node must
  see at the same path (shared storage): the driver writes a token there and every agent must
  read it back before the study starts (``ClusterError`` otherwise).
- Acknowledgements name their trials: an agent lets go on exactly the results the driver has
  received (and the loop made durable), never one still on its way.
- A data-parallel trial placed on devices of several nodes runs each node's ranks in that
  node's agent; they rendezvous at rank 0's node (its IP and a port free there). The trial
  reports through rank 0; it has finished when every part has, and failed (the other parts
  cancelled) when any part fails.
- The agents are the driver's actors: when the driver dies, Ray ends them, and their workers
  die with them.
"""
from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from hypersack.core.trial import (Cancel, Command, DeviceAdded, DeviceLost, Event, FailureCause,
                                  Launch, ResultReported, TrialFailed, TrialFinished)
from hypersack.errors import ClusterError, ConfigError, MissingDependencyError
from hypersack.runtime.executors.ray_agent import AgentSetup, NodeAgent
from hypersack.runtime.worker.checkpoints import replace_private

__all__ = ["AgentSetup", "RayExecutor", "ray_executor", "ray_session", "require_ray",
           "storage_check"]

log = logging.getLogger(__name__)

NODE_CHECK_S = 1.0        # how often the driver looks for nodes that joined or left
AGENT_START_S = 120.0     # an agent must be up this soon after the study starts
SHUTDOWN_S = 15.0         # agents get this long to end their workers gracefully
CHECK_FILE = ".hypersack-node-check"


def require_ray() -> Any:
    """The ``ray`` module, or MissingDependencyError naming ``hypersack[ray]``."""
    try:
        import ray
    except ImportError:
        raise MissingDependencyError("executor.backend: ray", "ray", "ray") from None
    return ray


@dataclass(eq=False)
class _Span:
    """A data-parallel trial whose ranks run on several nodes: rank 0's node, the node ids
    whose ranks still run, and whether its failure was reported already."""
    primary: str
    open: set[str]
    failed: bool = False


@dataclass(eq=False)
class _Node:
    """One node's agent as the driver sees it."""
    ray_id: str
    node_id: str
    actor: Any
    ready: Any = None                 # the describe() call of a starting agent
    ip: str = ""
    cluster: Any = None
    polling: Any = None               # the poll() call in flight, if any
    trials: set[int] = field(default_factory=set)
    unacked: set[int] = field(default_factory=set)
    since: float = 0.0                # when its agent was asked to start
    offers: str = ""                  # what Ray declares there, for messages

    @property
    def devices(self) -> list[Any]:
        return [gpu for _, gpu in self.cluster.gpus()] if self.cluster is not None else []


class RayExecutor:
    """Trials on the nodes of the Ray cluster ``ray`` is connected to (see the module doc).

    ``trial_dir(trial_id)``: the trial's folder, sent with each launch. ``ray``: the module (a
    stand-in in tests). The agents start at the first ``inventory()`` or ``start()``; a node
    that cannot serve the study is a ClusterError then, before any trial starts."""

    def __init__(self, setup: AgentSetup, *, trial_dir: Callable[[int], Path],
                 ray: Any = None, clock: Callable[[], float] = time.monotonic):
        self._ray = ray or require_ray()
        self._setup = setup
        self._trial_dir = trial_dir
        self._clock = clock
        self._nodes: dict[str, _Node] = {}      # live, by Ray node id
        self._joining: dict[str, _Node] = {}    # agents starting on nodes that joined
        self._ignored: set[str] = set()         # gone, refused or serving nothing: never again
        self._pending: list[Event] = []
        self._spans: dict[int, _Span] = {}     # trials whose ranks span nodes
        self._last_check = float("-inf")
        self._started = False
        self._agent_class: Any = None

    # ---- lifecycle -------------------------------------------------------------------------

    def inventory(self) -> Any:
        """The devices of every live node, as one placement Cluster (node ids: Ray's, short)."""
        from hypersack.placement import Cluster
        self._ensure_agents()
        return Cluster([n for node in self._nodes.values() for n in node.cluster.nodes])

    def start(self) -> None:
        """Agents up on every node, each with its warm workers."""
        self._ensure_agents()
        self._ray.get([node.actor.start.remote() for node in self._nodes.values()])
        self._started = True

    def _ensure_agents(self) -> None:
        if self._nodes:
            return
        for info in self._live_nodes():
            node = self._spawn(info)
            if node is not None:
                self._joining[node.ray_id] = node
        problems = self._await_agents(list(self._joining.values()))
        self._joining = {}
        if problems:
            self.shutdown(kill=True)
            raise ClusterError("The Ray cluster cannot run this study: " + "; ".join(problems))
        if not self._nodes:
            raise ClusterError("The Ray cluster has no node with a GPU or a CPU core for trials")
        self._last_check = self._clock()

    def _await_agents(self, nodes: list[_Node]) -> list[str]:
        """Wait for starting agents; the ones up join ``_nodes``; returns what went wrong."""
        problems: list[str] = []
        if not nodes:
            return problems
        ready, _ = self._ray.wait([n.ready for n in nodes], num_returns=len(nodes),
                                  timeout=AGENT_START_S)
        for node in nodes:
            if node.ready not in ready:
                problems.append(f"the agent on node {node.node_id} did not start within "
                                f"{AGENT_START_S:g} s (its CPUs/GPUs are held by other work?)")
                self._ray.kill(node.actor)
                continue
            why = self._adopt(node)
            if why:
                problems.append(why)
        return problems

    def _adopt(self, node: _Node) -> str | None:
        """Take an agent whose describe() has returned; the reason it cannot serve, or None."""
        try:
            info = self._ray.get(node.ready)
        except Exception as exc:
            info = {"error": _first_line(exc), "ip": "?"}
        node.ready = None
        if info.get("error"):
            self._ignored.add(node.ray_id)
            with contextlib.suppress(Exception):
                self._ray.kill(node.actor)
            return (f"node {node.node_id} ({info.get('ip')}) cannot serve it: {info['error']} "
                    "(every node needs HyperSack and the trainable's code, the same versions as "
                    "the driver: install them there or ship them with executor.runtime_env)")
        node.ip, node.cluster = info["ip"], info["cluster"]
        self._nodes[node.ray_id] = node
        return None

    def shutdown(self, kill: bool = False) -> None:
        """End every agent (each ends its workers: at once with ``kill``)."""
        nodes = list(self._nodes.values()) + list(self._joining.values())
        self._nodes, self._joining = {}, {}
        calls = []
        for node in nodes:
            with contextlib.suppress(Exception):
                calls.append(node.actor.shutdown.remote(kill))
        if calls:
            with contextlib.suppress(Exception):
                self._ray.wait(calls, num_returns=len(calls), timeout=SHUTDOWN_S)
        for node in nodes:
            with contextlib.suppress(Exception):
                self._ray.kill(node.actor)

    # ---- nodes ----------------------------------------------------------------------------

    def _live_nodes(self) -> list[dict[str, Any]]:
        return [n for n in self._ray.nodes() if n.get("Alive")]

    def _spawn(self, info: dict[str, Any]) -> _Node | None:
        """Start an agent on the node ``info`` (from ``ray.nodes()``) holding its GPUs and
        CPUs; None for a node with neither."""
        ray_id = info["NodeID"]
        resources = info.get("Resources", {})
        gpus, cpus = resources.get("GPU", 0.0), resources.get("CPU", 0.0)
        if gpus < 1 and cpus < 1:
            self._ignored.add(ray_id)
            return None
        strategies = self._ray.util.scheduling_strategies
        pinned = strategies.NodeAffinitySchedulingStrategy(ray_id, soft=False)
        if self._agent_class is None:
            self._agent_class = self._ray.remote(NodeAgent)
        agent = self._agent_class.options(num_cpus=cpus, num_gpus=int(gpus), max_restarts=0,
                                          max_task_retries=0, scheduling_strategy=pinned)
        node_id = ray_id[:12]
        actor = agent.remote(self._setup, node_id, list(range(int(gpus))), cpus)
        return _Node(ray_id, node_id, actor, ready=actor.describe.remote(), since=self._clock(),
                     offers=f"{gpus:g} GPU(s), {cpus:g} CPU(s)")

    def _watch_nodes(self) -> list[Event]:
        """Every NODE_CHECK_S: nodes that left are lost, nodes that joined get an agent, and
        agents that came up bring their devices."""
        now = self._clock()
        if now - self._last_check < NODE_CHECK_S:
            return []
        self._last_check = now
        events: list[Event] = []
        alive = {n["NodeID"]: n for n in self._live_nodes()}
        for ray_id, node in list(self._nodes.items()):
            if ray_id not in alive:
                events += self._lose(node, "it left the Ray cluster")
        for ray_id, info in alive.items():
            if ray_id not in self._nodes and ray_id not in self._joining \
                    and ray_id not in self._ignored:
                joining = self._spawn(info)
                if joining is not None:
                    self._joining[ray_id] = joining
        return events + self._joined()

    def _joined(self) -> list[Event]:
        """Agents on joining nodes that came up bring their devices; one not up within
        AGENT_START_S (the node's CPUs/GPUs held by other work, a node that left meanwhile) is
        given up with a warning naming the node, never waited for in silence."""
        events: list[Event] = []
        refs = [n.ready for n in self._joining.values()]
        ready, _ = self._ray.wait(refs, num_returns=len(refs), timeout=0) if refs else ([], [])
        self._give_up_on_slow_agents(ready)
        for node in [n for n in self._joining.values() if n.ready in ready]:
            del self._joining[node.ray_id]
            why = self._adopt(node)
            if why:
                log.warning("A node joined the Ray cluster but %s", why)
                continue
            if self._started:
                node.actor.start.remote()
            (n,) = node.cluster.nodes
            events += [DeviceAdded(node.node_id, gpu, node_cpus=n.cpus) for gpu in n.gpus]
        return events

    def _give_up_on_slow_agents(self, ready: list[Any]) -> None:
        now = self._clock()
        for node in [n for n in self._joining.values()
                     if n.ready not in ready and now - n.since >= AGENT_START_S]:
            del self._joining[node.ray_id]
            self._ignored.add(node.ray_id)
            with contextlib.suppress(Exception):
                self._ray.kill(node.actor)
            log.warning("A node joined the Ray cluster but its agent did not start within %g s: "
                        "node %s (%s) is not used (its CPUs/GPUs are held by other work?)",
                        AGENT_START_S, node.node_id, node.offers)

    def _lose(self, node: _Node, why: str) -> list[Event]:
        """The node is gone: its devices are lost and its trials failed (DEVICE_LOST)."""
        self._nodes.pop(node.ray_id, None)
        self._ignored.add(node.ray_id)
        with contextlib.suppress(Exception):
            self._ray.kill(node.actor)
        reason = f"node {node.node_id} ({node.ip}) was lost: {why}"
        log.warning("%s", reason)
        events: list[Event] = [DeviceLost(node.node_id, gpu.id) for gpu in node.devices]
        for t in sorted(node.trials):
            events += self._relayed(node, [TrialFailed(t, reason, cause=FailureCause.DEVICE_LOST)])
        return events

    # ---- commands --------------------------------------------------------------------------

    def submit(self, command: Command) -> None:
        if isinstance(command, Launch):
            self._launch(command)
            return
        for node in self._nodes.values():
            if command.trial_id in node.trials:
                node.actor.submit.remote(command)

    def _launch(self, launch: Launch) -> None:
        by_node: dict[str, list[tuple[int, str]]] = {}     # rank 0's node first
        for rank, (node_id, gpu) in enumerate(launch.devices):
            by_node.setdefault(node_id, []).append((rank, gpu))
        nodes = [self._by_node_id(n) for n in by_node] if by_node else [self._least_busy()]
        if any(node is None for node in nodes):      # a node left between placement and launch
            self._pending.append(TrialFailed(launch.trial_id, f"its node {sorted(by_node)} is gone",
                                             cause=FailureCause.DEVICE_LOST))
            return
        trial_dir = str(self._trial_dir(launch.trial_id))
        if len(nodes) == 1:
            nodes[0].trials.add(launch.trial_id)          # type: ignore[union-attr]
            nodes[0].actor.submit.remote(launch, trial_dir)    # type: ignore[union-attr]
            return
        self._launch_span(launch, [n for n in nodes if n is not None], list(by_node.values()),
                          trial_dir)

    def _launch_span(self, launch: Launch, nodes: list[_Node],
                     parts: list[list[tuple[int, str]]], trial_dir: str) -> None:
        """Each node starts its ranks; they meet at rank 0's node (its IP, a port free there)."""
        from hypersack.runtime.worker.messages import WorldSpec
        try:
            port = self._ray.get(nodes[0].actor.free_port.remote(), timeout=60)
        except Exception as exc:
            self._pending.append(TrialFailed(launch.trial_id, f"rank 0's node {nodes[0].node_id} "
                                             f"did not answer ({_first_line(exc)})",
                                             cause=FailureCause.DEVICE_LOST))
            return
        world = WorldSpec(len(launch.devices), 0, port, nodes[0].ip)
        self._spans[launch.trial_id] = _Span(nodes[0].node_id, {n.node_id for n in nodes})
        for node, part in zip(nodes, parts):
            node.trials.add(launch.trial_id)
            node.actor.submit_ranks.remote(launch, trial_dir, [g for _, g in part],
                                           [r for r, _ in part], world)

    def _by_node_id(self, node_id: str) -> _Node | None:
        return next((n for n in self._nodes.values() if n.node_id == node_id), None)

    def _least_busy(self) -> _Node | None:
        nodes = list(self._nodes.values())
        return max(nodes, key=lambda n: len(n.devices) - len(n.trials)) if nodes else None

    def acknowledge(self, trial_ids: Iterable[int], free_below: Mapping[int, int]) -> None:
        """Each node acks exactly the results received from it of the trials of ``trial_ids``,
        with each trial's ``free_below`` (the loop's; a trial it leaves out: 0): pipelining,
        reports below it need not wait."""
        chosen = set(trial_ids)
        for node in self._nodes.values():
            trials = sorted(node.unacked & chosen)
            if trials:
                node.actor.acknowledge.remote(trials, {t: free_below.get(t, 0) for t in trials})
                node.unacked -= set(trials)

    # ---- events ----------------------------------------------------------------------------

    def poll(self, timeout: float) -> list[Event]:
        """Events of every agent since the last poll. Each agent has at most one poll call in
        flight; it waits up to ``timeout`` inside the agent, so this returns as soon as any
        agent has news (or after ``timeout``)."""
        events, self._pending = self._pending, []
        events += self._watch_nodes()
        for node in self._nodes.values():
            if node.polling is None:
                node.polling = node.actor.poll.remote(timeout)
        calls = {node.polling: node for node in self._nodes.values()}
        if not calls:
            time.sleep(0 if events else timeout)
            return events
        ready, _ = self._ray.wait(list(calls), num_returns=1, timeout=0 if events else timeout)
        if ready:
            ready, _ = self._ray.wait(list(calls), num_returns=len(calls), timeout=0)
        for ref in ready:
            events += self._received(calls[ref], ref)
        return events

    def _received(self, node: _Node, ref: Any) -> list[Event]:
        node.polling = None
        try:
            events = self._ray.get(ref)
        except Exception as exc:          # the agent (or its node) died
            return self._lose(node, f"its agent died ({_first_line(exc)})")
        return self._relayed(node, events)

    def _relayed(self, node: _Node, events: list[Event]) -> list[Event]:
        """The events of ``node`` as the study sees them: a spanning trial speaks through rank
        0's node, ends when all its parts have, and fails once (its other parts cancelled)."""
        out: list[Event] = []
        for event in events:
            t = event.trial_id
            if isinstance(event, (TrialFinished, TrialFailed)) and t is not None:
                node.trials.discard(t)
                node.unacked.discard(t)
            span = self._spans.get(t) if t is not None else None
            if span is not None:
                event = self._span_event(span, node, event)     # type: ignore[assignment]
                if event is None:
                    continue
            if isinstance(event, ResultReported):
                node.unacked.add(event.trial_id)
            out.append(event)
        return out

    def _span_event(self, span: _Span, node: _Node, event: Event) -> Event | None:
        t = event.trial_id
        if not isinstance(event, (TrialFinished, TrialFailed)):
            return event if node.node_id == span.primary else None
        span.open.discard(node.node_id)
        out: Event | None = None
        if isinstance(event, TrialFailed) and not span.failed:
            span.failed, out = True, event
            for other in self._nodes.values():
                if other.node_id in span.open and t in other.trials:
                    other.actor.submit.remote(Cancel(t, f"a rank on node {node.node_id} failed"))
        elif isinstance(event, TrialFinished) and not span.open and not span.failed:
            out = event
        if not span.open:
            del self._spans[t]     # type: ignore[arg-type]
        return out

    def trials(self) -> set[int]:
        """The trials launched on the agents whose end (finished or failed) has not come back
        yet, and none of the events waiting to be polled: empty once every trial has ended
        and been polled (tests sharing one executor check it)."""
        running = {t for node in self._nodes.values() for t in node.trials}
        return running | {e.trial_id for e in self._pending if e.trial_id is not None}

    def worker_pids(self) -> dict[str, list[int]]:
        """Node id -> process ids of its live workers (diagnostics and tests)."""
        nodes = list(self._nodes.values())
        pids = self._ray.get([n.actor.worker_pids.remote() for n in nodes])
        return {n.node_id: p for n, p in zip(nodes, pids)}

    def node_ids(self) -> dict[str, str]:
        """Ray's node id -> this executor's node id, of the live nodes."""
        return {ray_id: n.node_id for ray_id, n in self._nodes.items()}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


# ---- the study's connection to Ray -------------------------------------------------------------

@contextlib.contextmanager
def ray_session(address: str | None, runtime_env: dict[str, Any] | None = None) -> Iterator[Any]:
    """Ray connected for one study run: ``address`` None starts a local Ray (dashboard off)
    and stops it afterwards; "auto", "host:port" or "ray://host:port" joins a running cluster
    (left running). A Ray the program already initialised is used as it is. ClusterError when
    the address is unreachable or Ray refuses (a version mismatch, ...), before any trial."""
    ray = require_ray()
    if address not in (None, "auto"):
        _check_reachable(address)
    if ray.is_initialized():
        yield ray
        return
    try:
        ray.init(address=address or "local", runtime_env=runtime_env or None,
                 include_dashboard=False if address is None else None, log_to_driver=False,
                 logging_level=logging.WARNING)
    except Exception as exc:
        where = "start a local Ray" if address is None else f"connect to {address!r}"
        raise ClusterError(f"Ray could not {where}: {_first_line(exc)}") from exc
    try:
        yield ray
    finally:
        ray.shutdown()


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        raise ConfigError("executor.address", address,
                          f"is unreachable from this machine ({exc.strerror or exc}): is a Ray head "
                          "running there (ray start --head) and the port open?") from None


def storage_check(study_dir: Path) -> tuple[str, str]:
    """Write a fresh token into the study's run folder; agents must read it back
    (``AgentSetup.storage_check``)."""
    path = Path(study_dir) / CHECK_FILE
    token = secrets.token_hex(16)
    replace_private(path, token.encode())
    return str(path), token


def driver_paths() -> tuple[tuple[str, ...], str]:
    """The driver's sys.path (absolute) and working directory, for the agents to adopt."""
    return tuple(os.path.abspath(p) for p in sys.path), os.getcwd()


@contextlib.contextmanager
def ray_executor(spec: Any, trainable: Any, plan: Any, study_dir: Path, *,
                 trial_dir: Callable[[int], Path]) -> Iterator[RayExecutor]:
    """The executor of one study run on Ray (``Study.run``'s ``backend: ray`` branch): Ray
    connected (or a local Ray started, ``ray_session``), then a RayExecutor whose agents carry
    ``spec``, ``trainable`` and the pack plan ``plan``; its agents are ended (at once) on the
    way out, after the loop's own graceful shutdown (then a no-op). The caller runs the study
    with it (``runtime.loop.assemble``): this module transports, it never runs the loop."""
    with ray_session(spec.executor.address, spec.executor.runtime_env):
        paths, cwd = driver_paths()
        setup = AgentSetup(spec, str(study_dir), trainable, spec.objective.metric, packs=plan,
                           unsafe_checkpoints=spec.unsafe_checkpoints, sys_path=paths, cwd=cwd,
                           storage_check=storage_check(study_dir))
        executor = RayExecutor(setup, trial_dir=trial_dir)
        try:
            yield executor
        finally:
            executor.shutdown(kill=True)
