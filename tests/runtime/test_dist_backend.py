"""Which torch.distributed backend a data-parallel rank joins with."""
from hypersack.runtime.worker.process import dist_backend


def test_nccl_on_gpus_gloo_on_cpus(monkeypatch):
    monkeypatch.delenv("HYPERSACK_DIST_BACKEND", raising=False)
    assert dist_backend("cuda:0") == "nccl"
    assert dist_backend("cpu") == "gloo"


def test_a_slot_may_ask_for_gloo_on_a_gpu(monkeypatch):
    """Two ranks on one GPU (the GPU suite's check 7 on a single-GPU machine) need gloo."""
    monkeypatch.setenv("HYPERSACK_DIST_BACKEND", "gloo")
    assert dist_backend("cuda:0") == "gloo"
