"""A Ray cluster of several raylets on this machine, to try the Ray backend without machines.

    python examples/ray_local_cluster.py --nodes 2 --cpus 1      # prints RAY_ADDRESS=...
    export RAY_ADDRESS=...                                        # in another shell
    hypersack run examples/digits_ray.yaml                        # address: auto finds it

Each raylet is a Ray node of its own (``ray.cluster_utils.Cluster``), with ``--cpus`` CPUs and
``--gpus`` GPUs (declared: fake ones where the machine has none; trainables that really use CUDA
need real ones). The dashboard is off and the cluster's files go to a temp folder of its own
(``hypersack.runtime.executors.ray_cluster.local_cluster``). Ctrl-C (or SIGTERM) shuts down exactly this
cluster's processes.
"""
from __future__ import annotations

import argparse
import contextlib
import signal
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2, help="raylets (Ray nodes), >= 1")
    parser.add_argument("--cpus", type=int, default=1, help="CPUs each node declares")
    parser.add_argument("--gpus", type=int, default=0, help="GPUs each node declares")
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.cpus < 0 or args.gpus < 0:
        parser.error("--nodes must be >= 1, --cpus and --gpus >= 0")
    from hypersack.runtime.executors.ray_cluster import local_cluster
    with local_cluster(args.nodes, args.cpus, args.gpus, connect=False) as cluster:
        cluster.wait_for_nodes()
        print(f"RAY_ADDRESS={cluster.address}", flush=True)
        print(f"{args.nodes} nodes up; Ctrl-C to stop them", file=sys.stderr, flush=True)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        signal.signal(signal.SIGINT, signal.default_int_handler)   # also when started with &
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    return 0


if __name__ == "__main__":
    sys.exit(main())
