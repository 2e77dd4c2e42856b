"""A real Ray cluster of several raylets on this machine (``ray.cluster_utils.Cluster``), for
the tests, the benchmarks and trying the Ray backend without machines.

Each raylet is a Ray node of its own with the CPUs and GPUs it declares (fake GPUs where the
machine has none). Only what a study needs runs: the dashboard and the autoscaler's monitor
are off; a connected driver is not sent the workers' logs. The cluster's files go to a short temp
folder of its own (Ray's socket paths are limited in length; its address file is not
``/tmp/ray``'s), removed afterwards; shutting down ends exactly this cluster's processes (never
``ray stop``)."""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from typing import Any, Iterator

from hypersack.validation import check_integer
from hypersack.runtime.executors.ray import require_ray

__all__ = ["local_cluster"]

START_ATTEMPTS = 2        # a raylet that fails to come up (a port taken meanwhile) is retried


@contextlib.contextmanager
def local_cluster(nodes: int = 2, cpus: int = 1, gpus: int = 0, *, connect: bool = True,
                  system_config: dict[str, Any] | None = None) -> Iterator[Any]:
    """``nodes`` raylets of ``cpus`` CPUs and ``gpus`` GPUs each; yields the
    ``ray.cluster_utils.Cluster`` (add and remove nodes with its ``add_node``/``remove_node``).

    ``connect``: the driver is connected (``ray.init``) while it runs, and disconnected after.
    ``system_config``: Ray's ``_system_config`` for the whole cluster (the head's; the other
    nodes read it there), e.g. ``{"health_check_period_ms": 500}``. A start that fails is
    retried once from scratch; ConfigError for a bad ``nodes``, ``cpus`` or ``gpus``."""
    for name, value, low in (("nodes", nodes, 1), ("cpus", cpus, 0), ("gpus", gpus, 0)):
        check_integer(name, value, low=low)
    ray = require_ray()
    folder = tempfile.mkdtemp(prefix="hsray", dir="/tmp")     # short: Ray's socket paths
    saved = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = folder
    cluster = None
    try:
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                cluster = _start(ray, nodes, cpus, gpus, connect, system_config)
                break
            except Exception:                 # _start left nothing running
                if attempt == START_ATTEMPTS:
                    raise
        yield cluster
    finally:
        _stop(ray, cluster)
        if saved is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = saved
        shutil.rmtree(folder, ignore_errors=True)


def _start(ray: Any, nodes: int, cpus: int, gpus: int, connect: bool,
           system_config: dict[str, Any] | None) -> Any:
    from ray.cluster_utils import Cluster
    head: dict[str, Any] = {"num_cpus": cpus, "num_gpus": gpus, "include_dashboard": False,
                            "no_monitor": True}
    if connect:
        head["include_log_monitor"] = False      # the driver takes no logs (log_to_driver=False)
    if system_config:
        head["_system_config"] = dict(system_config)
    cluster = Cluster(initialize_head=True, head_node_args=head)
    try:
        for _ in range(nodes - 1):
            cluster.add_node(num_cpus=cpus, num_gpus=gpus)
        if connect:
            ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.WARNING)
    except BaseException:
        _stop(ray, cluster)
        raise
    return cluster


def _stop(ray: Any, cluster: Any) -> None:
    """The driver disconnected, then the cluster's own processes ended."""
    ray.shutdown()
    if cluster is not None:
        cluster.shutdown()
