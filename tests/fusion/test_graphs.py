"""The graph cache of a pack's step (hypersack.fusion.graphs), driven on the CPU with a
stand-in capture: bounded by shape, evicting the least recently replayed, keeping alive what
a live graph reads, and capturing per width bucket rather than per mix of batch sizes."""
from __future__ import annotations

import gc
import weakref

import pytest

torch = pytest.importorskip("torch")

from fusion_helpers import FakeAllocator, FakeGraph, TinyTask  # noqa: E402

from hypersack.fusion import layers  # noqa: E402
from hypersack.fusion.graphs import StepRunner, keep_alive  # noqa: E402
from hypersack.fusion.runner import Pack, PackStats, train_recorded  # noqa: E402
from hypersack.fusion.stack import StackOptions  # noqa: E402
from hypersack.fusion.task import Member  # noqa: E402


def fake_runner(step, max_graphs=8):
    captured = []

    def capture(step_, key, device, pool=None):
        step_(key)              # what a capture records runs once (tensors made here)
        captured.append(FakeGraph(step_, key))
        return captured[-1]
    return StepRunner(step, "on", torch.device("cpu"), warmup=1, capture=capture,
                      max_graphs=max_graphs), captured


def test_graphs_are_cached_by_key_up_to_a_bound_least_recently_replayed_out():
    runner, captured = fake_runner(lambda key: None, max_graphs=2)
    for key in ("a", "a", "b", "b", "a", "c", "c"):   # warm-up, capture, ..., c evicts b
        runner(key)
    assert [g.key for g in captured] == ["a", "b", "c"] and runner.captures == 3
    assert list(runner.graphs) == ["a", "c"]
    runner("b")                                         # evicted: warmed up and captured again
    runner("b")
    assert runner.captures == 4 and list(runner.graphs) == ["c", "b"]


def test_a_tensor_a_graph_reads_lives_as_long_as_the_graph_entry():
    made = []

    def step(key):
        t = keep_alive(torch.full((3,), float(len(made))))
        made.append(weakref.ref(t))
    runner, _ = fake_runner(step, max_graphs=1)
    runner("a")                     # made[0]: warm-up, not a capture, nothing held
    runner("a")                     # made[1]: the capture, held by a's entry; made[2]: replay
    gc.collect()
    assert made[0]() is None and made[1]() is not None and made[2]() is None
    runner("b")                     # made[3]: warm-up
    runner("b")                     # made[4]: b's capture evicts a, whose tensor may go now
    gc.collect()
    assert made[1]() is None and made[4]() is not None


def test_the_dropout_offsets_cache_hands_its_tensors_to_the_graph_being_captured():
    layers._OFFSETS.clear()
    runner, _ = fake_runner(lambda key: layers._element_offsets(key, torch.device("cpu")))
    runner(5)
    runner(5)
    held = runner.graphs[5].held
    assert len(held) == 1 and held[0] is layers._OFFSETS[(5, torch.device("cpu"))]
    for count in range(6, 6 + layers._MAX_OFFSETS):     # the cache evicts 5's offsets ...
        layers._element_offsets(count, torch.device("cpu"))
    assert (5, torch.device("cpu")) not in layers._OFFSETS
    assert torch.equal(held[0], layers._element_offsets(5, torch.device("cpu")))  # ... still held


def test_a_member_leaving_changes_the_width_but_not_its_bucket_so_nothing_is_recaptured():
    pack = Pack(TinyTask(), "cpu", torch.float64, StackOptions(capacity=4))
    for i, batch in enumerate((5, 7, 6, 8)):
        pack.load(Member(i, {"optimizer": "adam", "batch_size": batch, "epochs": 3}, seed=i))
    stack = pack.stack
    stack.runner, captured = fake_runner(stack._device_step)
    stats = PackStats()
    for _ in range(3):
        train_recorded(pack, stats, lambda: 4)
    pack.free([3])                       # the batch-8 member leaves: widest batch now 7
    for _ in range(3):
        train_recorded(pack, stats, lambda: 4)
    assert [g.key[0] for g in captured] == [8]     # one capture, width bucket 8 for both
    assert stats.captures == stack.runner.captures == 1 and stats.compactions == 0


# ---- memory pools (the MobileNet capture assert of the H200 run, issue 38) ---------------------

def pooled_runner(allocator, step=lambda key: None, max_graphs=8):
    return StepRunner(step, "on", torch.device("cpu"), warmup=1, capture=allocator.capture,
                      max_graphs=max_graphs)


def test_a_pack_after_another_packs_graphs_are_gone_captures_on_a_pool_of_its_own():
    allocator = FakeAllocator()
    first = pooled_runner(allocator)
    first("a")
    first("a")                       # captured: the pool has one user
    del first                        # that pack ends: its graph and the pool's last user go
    gc.collect()
    second = pooled_runner(allocator)
    second("a")
    second("a")                      # raised "use_count > 0" when every pack shared one pool
    assert second.captures == 1 and second.enabled
    assert len(set(map(id, allocator.begun))) == 2


def test_after_a_reset_the_next_capture_takes_a_fresh_pool():
    allocator = FakeAllocator()
    runner = pooled_runner(allocator)
    for key in ("a", "a", "b", "b"):
        runner(key)
    pool = runner.pool
    runner.reset()                   # the stack's rows were replaced: every graph goes
    gc.collect()
    runner("a")
    runner("a")
    assert runner.enabled and runner.captures == 3 and runner.pool is not pool


def test_an_evicted_graph_goes_only_after_its_replacement_is_captured_into_the_same_pool():
    allocator = FakeAllocator()
    runner = pooled_runner(allocator, max_graphs=1)
    for key in ("a", "a", "b", "b", "a", "a"):       # each capture evicts the only other graph
        runner(key)
    assert runner.enabled and runner.captures == 3
    assert len(set(map(id, allocator.begun))) == 1    # one pool, never without a user


def test_a_cache_keeps_nothing_made_during_a_capture_that_failed():
    layers._OFFSETS.clear()
    made = []

    def failing(step, key, device, pool):
        step(key)                    # makes offsets "during the capture" (never written on CUDA)
        raise RuntimeError("capture failed")
    runner = StepRunner(lambda key: made.append(layers._element_offsets(key, torch.device("cpu"))),
                        "on", torch.device("cpu"), warmup=0, capture=failing)
    with pytest.warns(RuntimeWarning, match="capture failed"):
        runner(7)                    # the capture fails; the step runs eagerly
    assert not runner.enabled and len(made) == 2
    assert layers._OFFSETS[(7, torch.device("cpu"))] is made[1] is not made[0]


def test_a_constant_made_during_a_capture_is_not_cached_in_the_views():
    from hypersack.fusion.fused_ops import FuseContext
    from hypersack.fusion.graphs import _holding
    ctx = FuseContext(n=2, params={"w": torch.zeros(2, 3)}, buffers={}, training=True)
    like = torch.zeros(2)
    with _holding():
        during = ctx._constant([1, 4], like)
    assert ("#constant", (1, 4)) not in ctx.views
    after = ctx._constant([1, 4], like)
    assert after is not during and ctx.views[("#constant", (1, 4))] is after
