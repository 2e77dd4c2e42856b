"""GPU placement as a multiple-knapsack problem (HyperSack Sec. III-IV), pure decision code.

The cluster model (``model``, ``cluster``), the load every policy reads (``load``), the one
implementation of the built-in greedy policies FF/FFD/WF/WFD, the exclusive baseline, Hay and the
Ray-default baseline (``live``, ``hay``, ``ray_default``; by name in ``policies``), WFD plus local
search ``wfd-ls`` (``improve``), the packer ``fill`` (``fill``, with Lagrangian shadow prices in
``prices``), its one-pass form for large clusters ``lagrange`` (``lagrange``) and ``auto``
(``auto``), the exact CP-SAT reference (``mip``, optional extra ``[mip]``),
the one checker of Eq. 1-4 and the occupancy metric (``check``), and placement by name (``api``).
Users import these names from ``hypersack.placement``.
"""
from hypersack.core.placement.api import (assign, get_policy, parse_placement, place, policy_names,
                                          register_policy, unregister_policy)
from hypersack.core.placement.improve import improve
from hypersack.core.placement.check import check_placement, occupancy, placed_compute
from hypersack.core.placement.cluster import Cluster, PlacementError, Running
from hypersack.core.placement.model import GPU, ArchDemand, Job, Node

__all__ = ["GPU", "Node", "Cluster", "Job", "ArchDemand", "Running", "PlacementError",
           "assign", "place", "register_policy", "unregister_policy", "policy_names", "get_policy",
           "parse_placement", "check_placement", "occupancy", "placed_compute", "improve"]
