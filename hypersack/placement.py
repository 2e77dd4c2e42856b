"""Public API of GPU placement: the cluster model, the policies and the Eq. 1-4 checker.

    from hypersack.placement import GPU, Node, Cluster, Job, place
    cluster = Cluster([Node("n0", cpus=16, gpus=[GPU(0, "A100", 40, oversubscription=3)])])
    place([Job("t0", compute=40, memory_gb=4), Job("t1", compute=35, memory_gb=3)], cluster)
    # {'t0': ('n0', 0), 't1': ('n0', 0)}

Policies by name: ``ff``, ``ffd``, ``wf``, ``wfd`` (default, the paper's choice), ``exclusive`` (one
job per GPU: the baseline), ``wfd-ls`` (WFD, then swaps that raise occupancy), ``fill`` (the packer
for tight clusters: Lagrangian price starts and local search), ``auto`` (``fill`` on calls of up
to 100,000 jobs x GPUs, else ``wfd-ls``), ``mip`` (exact,
CP-SAT; needs ``pip install 'hypersack[mip]'``), ``hay`` (Hay's node score and GPU states;
options ``w_frag``, ``w_entire``), ``ray`` (Ray's default scheduler, a baseline), plus any
registered with ``register_policy``. In a study YAML: ``placement: wfd`` or
``placement: {policy: hay, w_frag: 1, w_entire: 2}`` (``parse_placement``).
"""
from hypersack.core.placement import (GPU, ArchDemand, Cluster, Job, Node, PlacementError, Running,
                                      assign, check_placement, get_policy, improve, occupancy,
                                      parse_placement, place, placed_compute, policy_names,
                                      register_policy, unregister_policy)
from hypersack.core.placement.mip import MipResult, solve_mip

__all__ = ["GPU", "Node", "Cluster", "Job", "ArchDemand", "Running", "PlacementError",
           "assign", "place", "register_policy", "unregister_policy", "policy_names", "get_policy",
           "parse_placement", "check_placement", "occupancy", "placed_compute", "improve",
           "solve_mip", "MipResult"]
