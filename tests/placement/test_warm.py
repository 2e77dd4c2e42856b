"""hypersack.placement.warm: its instances take every path of fill and lagrange, so the
set-up's warm-up compiles every kernel (a later first call loads them from numba's cache)."""
from __future__ import annotations

from hypersack.placement import fill as fill_module
from hypersack.placement import lagrange as lagrange_module
from hypersack.placement.warm import _instance


def _groups(cluster) -> int:
    return len({(node.id, gpu.arch, gpu.memory_gb) for node in cluster.nodes for gpu in node.gpus})


def test_the_instances_take_every_path_of_both_policies() -> None:
    small_jobs, small = _instance(3, 300)
    large_jobs, large = _instance(24, 400)
    for jobs in (small_jobs, large_jobs):
        singles = [job for job in jobs if job.gpus == 1]
        assert len(singles) > fill_module.SAMPLE                     # fill samples its price steps
        assert any(job.gpus > 1 for job in jobs)                     # data-parallel jobs
        assert {gpu.arch for node in small.nodes for gpu in node.gpus} == {"A100", "H100"}
    assert len(small.nodes) <= lagrange_module.MAX_UNITS           # priced group by group
    assert len(large.nodes) > lagrange_module.MAX_UNITS            # pooled by type
    assert _groups(large) > _groups(small)
