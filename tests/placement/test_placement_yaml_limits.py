"""The cluster YAML form refuses absurd numbers (issue 10) with the shared validators: an
oversubscription ratio of 1e308, a GPU count that would build 10**9 devices."""
from __future__ import annotations

import pytest

from hypersack.placement.yaml_form import cluster_nodes_from_dict
from hypersack.errors import ConfigError
from hypersack.validation import MAX_DEVICES_PER_NODE, MAX_OVERSUBSCRIPTION


def cluster(gpus, **top):
    return {"nodes": [{"cpus": 8, "gpus": gpus}], **top}


def refused(d) -> ConfigError:
    with pytest.raises(ConfigError) as exc:
        cluster_nodes_from_dict(d)
    return exc.value


@pytest.mark.parametrize("ratio", [1e308, float("inf"), float("nan"), 10**400, 0, -1, True, "3"])
def test_cluster_oversubscription_is_a_bounded_number(ratio):
    exc = refused(cluster({"count": 1, "arch": "A100", "memory_gb": 40}, oversubscription={"A100": ratio}))
    assert exc.field == "cluster.oversubscription.A100"
    assert f"<= {MAX_OVERSUBSCRIPTION:g}" in exc.problem


@pytest.mark.parametrize("ratio", [1e308, 10**400, float("nan")])
def test_gpu_oversubscription_is_a_bounded_number(ratio):
    exc = refused(cluster([{"arch": "A100", "memory_gb": 40, "oversubscription": ratio}]))
    assert exc.field == "cluster.nodes[0].gpus[0].oversubscription"


@pytest.mark.parametrize("count", [10**9, 10**400, MAX_DEVICES_PER_NODE + 1, -1, 2.0, True])
def test_gpu_count_is_bounded_before_devices_are_built(count):
    exc = refused(cluster({"count": count, "arch": "A100", "memory_gb": 40}))
    assert exc.field == "cluster.nodes[0].gpus.count"
    assert f"in [0, {MAX_DEVICES_PER_NODE}]" in exc.problem


def test_values_at_the_limits_are_accepted():
    nodes = cluster_nodes_from_dict(cluster({"count": 8, "arch": "A100", "memory_gb": 40},
                                            oversubscription={"A100": MAX_OVERSUBSCRIPTION}))
    assert len(nodes[0].gpus) == 8
    assert nodes[0].gpus[0].oversubscription == MAX_OVERSUBSCRIPTION
