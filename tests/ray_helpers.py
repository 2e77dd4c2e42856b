"""A real local Ray cluster for tests: raylets on this machine, dashboard off, in a short temp
folder of its own (socket paths; its address file is not /tmp/ray's), a failed start retried
once, and shut down with its own processes only (never ``ray stop``)."""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from typing import Any, Iterator


@contextlib.contextmanager
def local_cluster(num_cpus: int, num_gpus: int, nodes: int = 2) -> Iterator[Any]:
    """``nodes`` raylets of ``num_cpus`` CPUs and ``num_gpus`` fake GPUs each; the driver is
    connected while it runs. Yields the ``ray.cluster_utils.Cluster``."""
    import ray
    from ray.cluster_utils import Cluster

    folder = tempfile.mkdtemp(prefix="hsray", dir="/tmp")
    saved = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = folder
    cluster = None
    try:
        for attempt in (1, 2):
            try:
                cluster = Cluster(initialize_head=True, head_node_args={
                    "num_cpus": num_cpus, "num_gpus": num_gpus, "include_dashboard": False})
                for _ in range(nodes - 1):
                    cluster.add_node(num_cpus=num_cpus, num_gpus=num_gpus)
                ray.init(address=cluster.address, log_to_driver=False,
                         logging_level=logging.WARNING)
                break
            except Exception:
                ray.shutdown()
                if cluster is not None:
                    cluster.shutdown()
                cluster = None
                if attempt == 2:
                    raise
        yield cluster
    finally:
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
        if saved is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = saved
        shutil.rmtree(folder, ignore_errors=True)
