"""The Ray executor's relaying, on a stand-in for ``ray`` (no cluster, milliseconds): which agent
gets which command and acknowledgement, what a lost or joining node becomes, which node errors
stop the study before it starts. The real cluster runs in test_ray_executor.py and the
executor contract suite."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from hypersack.placement import GPU, Cluster, Node
from hypersack.core.trial import (Cancel, DeviceAdded, DeviceLost, FailureCause, Launch,
                                  ResultReported, Stop, TrialFailed, TrialFinished, TrialStarted)
from hypersack.runtime.worker.messages import WorldSpec
from hypersack.errors import ClusterError
from hypersack.runtime.executors.ray import NODE_CHECK_S, RayExecutor
from hypersack.runtime.executors.ray_agent import AgentSetup


class Ref:
    def __init__(self, value: Any = None, error: Exception | None = None, done: bool = True):
        self.value, self.error, self.done = value, error, done


class FakeAgent:
    """Records calls; ``events`` are returned by the next poll; ``dead`` makes calls fail."""

    def __init__(self, node_id: str, gpus: int, error: str | None = None, stuck: bool = False):
        self.node_id, self.gpus, self.error, self.stuck = node_id, gpus, error, stuck
        self.calls: list[tuple] = []
        self.events: list = []
        self.dead = False

    def describe(self) -> dict:
        cluster = Cluster([Node(self.node_id, 4, tuple(GPU(f"gpu{i}", "gpu", 80.0)
                                                       for i in range(self.gpus)))])
        return {"node": self.node_id, "ip": "10.0.0.1", "pid": 1, "cluster": cluster,
                "error": self.error}

    def free_port(self) -> int:
        return 4321

    def poll(self, timeout: float) -> list:
        events, self.events = self.events, []
        return events

    def __getattr__(self, name: str) -> Any:
        def method(*args):
            self.calls.append((name, *args))
        return method


class Handle:
    def __init__(self, agent: FakeAgent):
        self.agent = agent

    def __getattr__(self, name: str) -> Any:
        def remote(*args):
            if self.agent.dead:
                return Ref(error=RuntimeError("ActorDiedError: the actor died"))
            if self.agent.stuck:                # never scheduled: no call ever completes
                return Ref(done=False)
            return Ref(getattr(self.agent, name)(*args))
        return SimpleNamespace(remote=remote)


class FakeRay:
    """The parts of ``ray`` the executor uses: nodes, remote/options, get, wait, kill."""

    def __init__(self, nodes: dict[str, dict]):
        self.node_table = nodes           # ray id -> {"CPU": .., "GPU": .., "error": ..}
        self.agents: dict[str, FakeAgent] = {}
        self.killed: list[str] = []
        self.util = SimpleNamespace(scheduling_strategies=SimpleNamespace(
            NodeAffinitySchedulingStrategy=lambda node_id, soft: node_id))

    def nodes(self) -> list[dict]:
        return [{"NodeID": k, "Alive": v.get("alive", True),
                 "Resources": {"CPU": v["CPU"], "GPU": v["GPU"]}} for k, v in self.node_table.items()]

    def remote(self, cls: Any) -> Any:
        fake = self

        class Options:
            def options(self, **kw: Any) -> Any:
                ray_id = kw["scheduling_strategy"]

                def make(setup, node_id, gpu_ids, cpus):
                    info = fake.node_table[ray_id]
                    agent = FakeAgent(node_id, len(gpu_ids), info.get("error"),
                                      info.get("stuck", False))
                    fake.agents[node_id] = agent
                    return Handle(agent)
                return SimpleNamespace(remote=make)
        return Options()

    def get(self, ref: Any, timeout: float | None = None) -> Any:
        if isinstance(ref, list):
            return [self.get(r) for r in ref]
        if ref.error is not None:
            raise ref.error
        return ref.value

    def wait(self, refs: list, num_returns: int = 1, timeout: float | None = None):
        ready = [r for r in refs if r.done]
        return ready, [r for r in refs if not r.done]

    def kill(self, handle: Any) -> None:
        self.killed.append(handle.agent.node_id)


def _executor(nodes: dict[str, dict]) -> tuple[RayExecutor, FakeRay, list[float]]:
    ray = FakeRay({k: dict(v) for k, v in nodes.items()})
    now = [0.0]
    ex = RayExecutor(AgentSetup(None, "/tmp", None, "score"), trial_dir=lambda t: f"/runs/{t}",
                     ray=ray, clock=lambda: now[0])
    return ex, ray, now


TWO = {"a" * 20: {"CPU": 2, "GPU": 2}, "b" * 20: {"CPU": 2, "GPU": 1}}
A, B = "a" * 12, "b" * 12


def test_the_inventory_has_each_node_under_its_short_id_and_nodes_without_resources_serve_nothing():
    ex, ray, _ = _executor({**TWO, "c" * 20: {"CPU": 0, "GPU": 0}})
    devices = [(n.id, g.id) for n, g in ex.inventory().gpus()]
    assert devices == [(A, "gpu0"), (A, "gpu1"), (B, "gpu0")]
    assert set(ray.agents) == {A, B}


def test_a_launch_goes_to_its_node_with_its_folder_and_stop_and_cancel_follow_it():
    ex, ray, _ = _executor(TWO)
    ex.start()
    ex.submit(Launch(7, {}, seed=1, attempt=1, devices=((B, "gpu0"),)))
    ex.submit(Stop(7, "paused"))
    ex.submit(Cancel(7, "timed out"))
    ex.submit(Stop(99, "unknown trial: ignored"))
    assert [c[0] for c in ray.agents[B].calls] == ["start", "submit", "submit", "submit"]
    assert ray.agents[B].calls[1][1].trial_id == 7 and ray.agents[B].calls[1][2] == "/runs/7"
    assert [c[0] for c in ray.agents[A].calls] == ["start"]


def test_acknowledgements_name_exactly_the_results_received_from_that_node():
    ex, ray, _ = _executor(TWO)
    ex.start()
    for t, node in ((1, A), (2, B), (3, A)):
        ex.submit(Launch(t, {}, seed=t, attempt=1, devices=((node, "gpu0"),)))
    ray.agents[A].events = [ResultReported(1, 1, {"score": 1.0}), ResultReported(3, 1, {}),
                            TrialFinished(3)]
    events = ex.poll(0.0)
    assert len(events) == 3
    ex.acknowledge([1, 3], {1: 10, 3: 30})
    # 3 finished: nothing to ack; the ack carries the loop's free_below (pipelining)
    assert ("acknowledge", [1], {1: 10}) in ray.agents[A].calls
    assert not any(c[0] == "acknowledge" for c in ray.agents[B].calls)
    ex.acknowledge([1, 3], {1: 10, 3: 30})          # each result is acked once
    assert sum(c[0] == "acknowledge" for c in ray.agents[A].calls) == 1


def test_a_node_whose_agent_dies_loses_its_devices_and_fails_its_trials_as_device_lost():
    ex, ray, _ = _executor(TWO)
    ex.start()
    ex.submit(Launch(1, {}, seed=1, attempt=1, devices=((A, "gpu1"),)))
    ex.submit(Launch(2, {}, seed=2, attempt=1, devices=((B, "gpu0"),)))
    ray.agents[A].dead = True
    events = ex.poll(0.0)
    assert DeviceLost(A, "gpu0") in events and DeviceLost(A, "gpu1") in events
    (failed,) = [e for e in events if isinstance(e, TrialFailed)]
    assert failed.trial_id == 1 and failed.cause is FailureCause.DEVICE_LOST
    assert [n.id for n in ex.inventory().nodes] == [B]
    assert A in ray.killed


def test_a_node_that_leaves_the_cluster_is_lost_at_the_next_check():
    ex, ray, now = _executor(TWO)
    ex.start()
    ex.submit(Launch(1, {}, seed=1, attempt=1, devices=((B, "gpu0"),)))
    ray.node_table["b" * 20]["alive"] = False
    assert not [e for e in ex.poll(0.0) if isinstance(e, DeviceLost)]    # not checked yet
    now[0] += NODE_CHECK_S
    events = ex.poll(0.0)
    assert DeviceLost(B, "gpu0") in events
    assert TrialFailed(1, events[-1].reason, cause=FailureCause.DEVICE_LOST) in events


def test_a_node_that_joins_gets_an_agent_and_brings_its_devices_and_cores():
    ex, ray, now = _executor(TWO)
    ex.start()
    ray.node_table["c" * 20] = {"CPU": 8, "GPU": 1}
    now[0] += NODE_CHECK_S
    events = ex.poll(0.0)
    assert [e for e in events if isinstance(e, DeviceAdded)] == [
        DeviceAdded("c" * 12, GPU("gpu0", "gpu", 80.0), node_cpus=4)]
    assert ray.agents["c" * 12].calls == [("start",)]
    ex.submit(Launch(5, {}, seed=5, attempt=1, devices=(("c" * 12, "gpu0"),)))
    assert ray.agents["c" * 12].calls[-1][0] == "submit"


def _spanning(ex: RayExecutor, ray: FakeRay) -> None:
    ex.start()
    ex.submit(Launch(4, {}, seed=1, attempt=1, devices=((A, "gpu1"), (B, "gpu0"), (A, "gpu0"))))


def test_a_launch_across_nodes_starts_each_nodes_ranks_meeting_at_rank_zeros_node():
    ex, ray, _ = _executor(TWO)
    _spanning(ex, ray)
    world = WorldSpec(3, 0, 4321, "10.0.0.1")
    assert ray.agents[A].calls[-1][0] == "submit_ranks"
    assert ray.agents[A].calls[-1][2:] == ("/runs/4", ["gpu1", "gpu0"], [0, 2], world)
    assert ray.agents[B].calls[-1][2:] == ("/runs/4", ["gpu0"], [1], world)
    ex.submit(Stop(4, "paused"))
    assert ray.agents[A].calls[-1][0] == ray.agents[B].calls[-1][0] == "submit"   # both parts


def test_a_spanning_trial_speaks_through_rank_zero_and_finishes_when_every_part_has():
    ex, ray, _ = _executor(TWO)
    _spanning(ex, ray)
    ray.agents[B].events = [TrialStarted(4, "b/cpu"), ResultReported(4, 1, {"s": 0.0})]
    ray.agents[A].events = [TrialStarted(4, "a/cpu"), ResultReported(4, 1, {"s": 1.0})]
    events = ex.poll(0.0)
    assert events == [TrialStarted(4, "a/cpu"), ResultReported(4, 1, {"s": 1.0})]
    ex.acknowledge([4], {4: 40})
    assert ("acknowledge", [4], {4: 40}) in ray.agents[A].calls
    assert not any(c[0] == "acknowledge" for c in ray.agents[B].calls)
    ray.agents[A].events = [TrialFinished(4)]
    assert ex.poll(0.0) == []                     # rank 1 still runs on B
    ray.agents[B].events = [TrialFinished(4)]
    assert ex.poll(0.0) == [TrialFinished(4)]
    calls = (len(ray.agents[A].calls), len(ray.agents[B].calls))
    ex.submit(Stop(4, "late"))                    # forgotten on both nodes: nothing is sent
    assert (len(ray.agents[A].calls), len(ray.agents[B].calls)) == calls


def test_a_spanning_trial_fails_once_and_its_other_parts_are_cancelled():
    ex, ray, _ = _executor(TWO)
    _spanning(ex, ray)
    ray.agents[B].events = [TrialFailed(4, "rank 1 raised", cause=FailureCause.ERROR)]
    (failed,) = ex.poll(0.0)
    assert failed.reason == "rank 1 raised"
    assert ray.agents[A].calls[-1][0] == "submit" and isinstance(ray.agents[A].calls[-1][1], Cancel)
    ray.agents[A].events = [TrialFailed(4, "cancelled", cause=FailureCause.CANCELLED)]
    assert ex.poll(0.0) == []


def test_losing_one_node_of_a_spanning_trial_fails_it_as_device_lost_and_cancels_the_rest():
    ex, ray, _ = _executor(TWO)
    _spanning(ex, ray)
    ray.agents[B].dead = True
    events = ex.poll(0.0)
    (failed,) = [e for e in events if isinstance(e, TrialFailed)]
    assert failed.trial_id == 4 and failed.cause is FailureCause.DEVICE_LOST
    assert isinstance(ray.agents[A].calls[-1][1], Cancel)


def test_a_node_that_cannot_serve_stops_the_study_before_it_starts_naming_the_node():
    ex, ray, _ = _executor({**TWO, "d" * 20: {"CPU": 1, "GPU": 0,
                                              "error": "ModuleNotFoundError: trainables"}})
    with pytest.raises(ClusterError, match=r"node d{12} .*ModuleNotFoundError: trainables"):
        ex.inventory()
    assert set(ray.killed) >= {A, B, "d" * 12}


def test_a_joining_node_whose_agent_never_starts_is_given_up_with_a_warning(caplog):
    from hypersack.runtime.executors.ray import AGENT_START_S
    ex, ray, now = _executor(TWO)
    ex.start()
    ray.node_table["c" * 20] = {"CPU": 8, "GPU": 1, "stuck": True}   # its resources held
    now[0] += NODE_CHECK_S
    assert ex.poll(0.0) == [] and "c" * 12 in ray.agents
    now[0] += AGENT_START_S
    with caplog.at_level("WARNING", logger="hypersack.runtime.executors.ray"):
        assert ex.poll(0.0) == []
    assert ray.killed == ["c" * 12]
    assert f"node {'c' * 12} (1 GPU(s), 8 CPU(s)) is not used" in caplog.text
    ray.agents.clear()
    now[0] += NODE_CHECK_S
    ex.poll(0.0)
    assert not ray.agents          # never tried again
    assert sorted(ex.node_ids().values()) == [A, B]
