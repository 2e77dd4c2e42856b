"""Aten ops per fused training step against a hand-fused model with torch.optim (issue 38), at
small shapes: op counts do not depend on widths or image sizes, so the bounds of
benchmarks/fusion/step_ops.py hold here exactly as at full size (CPU, deterministic)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "fusion"))
import step_ops  # noqa: E402

N = 8


@pytest.fixture(scope="module", params=["resnet18", "mobilenet"])
def rows(request):
    found = step_ops.op_rows(request.param, N, width=2, image_size=4, batch=8, verbose=False)
    return {r["kind"]: r for r in found}


def test_a_fused_step_dispatches_at_most_1_3x_the_ops_of_a_hand_fused_model(rows):
    row = rows["step"]
    assert row["engine"] <= 1.3 * row["reference"], row


def test_mixed_batch_sizes_cost_at_most_2x_the_ops_of_a_hand_fused_model(rows):
    row = rows["mixed"]
    assert row["engine"] <= 2.0 * row["reference"], row


def test_one_adam_step_is_at_most_2x_the_ops_of_torch_foreach(rows):
    row = rows["adam"]
    assert row["engine"] <= 2.0 * row["reference"], row


def test_the_bmm_conv_form_is_counted_beside_the_grouped_one(rows):
    row = rows["step_bmm"]
    grouped, bmm = row["convolutions"]
    assert grouped > bmm and row["compute"][0] > 0
    if row["model"] == "resnet18":              # every ResNet-18 convolution is dense
        assert bmm == 0
