"""Fused packs, decided in one place: which configs an algorithm groups into packs
(``grouping``: the fusibility key, ``pack_opt`` and the paper's baselines), and where a trial
runs among the running packs (``seating``: whether it fuses, the pack and seat it takes, a new
pack's cap, a member's demand), how many slots a pack's stack computes (``slots``:
compaction, growth, padded-width buckets), a study's pack policy (``plan``: ``PackPlan``)
and ``execution: auto``'s measured choice (``choice``). Pure: the controller asks and names the outcome in its
``Launch`` (``pack``, ``seat``); executors obey it. A *pack* is a fused process of members in
seats; a *group* is an algorithm's set of similar configs.
"""
from hypersack.core.packs.choice import (FUSED_MARGIN, FusionChoice, FusionProbe, choose_fusion,
                                         expected_occupancy, planned_width, study_rates,
                                         study_waves, wave_occupancy)
from hypersack.core.packs.grouping import (METRICS, batch_size_packs, distance_matrix,
                                           encode_configs, fusibility_key, group_by_key,
                                           member_cap, pack_opt, random_packs)
from hypersack.core.packs.slots import bucket_width, compacted_capacity, grown_capacity
from hypersack.core.packs.plan import PackPlan
from hypersack.core.packs.seating import (CONV_FORMS, EXECUTION_MODES, GRAPH_MODES, PACK_HEADROOM, PRECISIONS, PackBook, PackPolicy, PackSeats, Seat,
                                          choose_pack, group_key, member_demand, member_job, pack_cap,
                                          runs_fused)

__all__ = ["bucket_width", "compacted_capacity", "grown_capacity", "PackPlan", "FUSED_MARGIN", "FusionChoice", "FusionProbe", "choose_fusion", "expected_occupancy", "planned_width", "study_rates", "study_waves", "wave_occupancy", "CONV_FORMS", "EXECUTION_MODES", "GRAPH_MODES", "PRECISIONS", "METRICS", "batch_size_packs", "distance_matrix", "encode_configs", "fusibility_key",
           "group_by_key", "member_cap", "pack_opt", "random_packs", "PACK_HEADROOM", "PackBook",
           "PackPolicy", "PackSeats", "Seat", "choose_pack", "group_key", "member_demand", "member_job",
           "pack_cap", "runs_fused"]
