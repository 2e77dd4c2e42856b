"""GPU placement as a multiple-knapsack problem (HyperSack Sec. III-IV): pure decision code, its
own package beside ``core/`` (which asks it where jobs go).

    from hypersack.placement import GPU, Node, Cluster, Job, place
    cluster = Cluster([Node("n0", cpus=16, gpus=[GPU(0, "A100", 40, oversubscription=3)])])
    place([Job("t0", compute=40, memory_gb=4), Job("t1", compute=35, memory_gb=3)], cluster)
    # {'t0': ('n0', 0), 't1': ('n0', 0)}

Policies by name: ``ff``, ``ffd``, ``wf``, ``wfd`` (default, the paper's choice), ``exclusive`` (one
job per GPU: the baseline), ``wfd-ls`` (WFD, then swaps that raise occupancy), ``fill`` (the policy
for tight clusters: Lagrangian price starts and local search), ``auto`` (``fill`` on calls of up
to 100,000 jobs x GPUs, else ``wfd-ls``), ``mip`` (exact,
CP-SAT; needs ``pip install 'hypersack[mip]'``), ``hay`` (Hay's node score and GPU states;
options ``w_frag``, ``w_entire``), ``ray`` (Ray's default scheduler, a baseline), plus any
registered with ``register_policy``. In a study YAML: ``placement: wfd`` or
``placement: {policy: hay, w_frag: 1, w_entire: 2}`` (``parse_placement``).

Inside: the cluster model (``model``, ``cluster``), the load every policy reads (``load``), the one
implementation of the built-in greedy policies (``live``, ``hay``, ``ray_default``; by name in
``policies``), ``wfd-ls`` (``improve``), ``fill`` (``fill``, ``prices``, ``lp_kernels``),
``lagrange``, ``auto``, the exact CP-SAT reference (``mip``), the one checker of Eq. 1-4 and the
occupancy metric (``check``), placement by name (``api``), the numba helpers (``jit``), the tight
instances of the benchmarks (``instances``) and the kernels' warm-up (``python -m
hypersack.placement.warm``).
"""
from hypersack.placement.api import (assign, get_policy, parse_placement, place, policy_names,
                                     register_policy, unregister_policy)
from hypersack.placement.improve import improve
from hypersack.placement.check import check_placement, occupancy, placed_compute
from hypersack.placement.cluster import Cluster, PlacementError, Running
from hypersack.placement.model import GPU, ArchDemand, Job, Node
from hypersack.placement.mip import MipResult, solve_mip

__all__ = ["GPU", "Node", "Cluster", "Job", "ArchDemand", "Running", "PlacementError",
           "assign", "place", "register_policy", "unregister_policy", "policy_names", "get_policy",
           "parse_placement", "check_placement", "occupancy", "placed_compute", "improve",
           "solve_mip", "MipResult"]
