"""Data-parallel teardown: rank 0 hosts the rendezvous store and must not free it while another
rank still reads the last stop agreement (issue 12, item 5: DistNetworkError "Failed to recv,
got 0 bytes" on the final report of RASDA trials on two devices)."""
from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SYNCS = 3

# Rank 1, in a process of its own, is slower to its last report: it reads the last agreement
# after rank 0 has made it and gone on to leave.
RANK_ONE = textwrap.dedent('''
    import sys, time
    from hypersack.runtime.worker.messages import WorldSpec
    from hypersack.runtime.worker.process import _join_world, _leave_world
    port, syncs = int(sys.argv[1]), int(sys.argv[2])
    world, sync = _join_world(WorldSpec(2, 1, port), "cpu")
    for i in range(syncs):
        if i == syncs - 1:
            time.sleep(1.0)
        agreed = sync(i == syncs - 1)
    assert agreed is True
    _leave_world(world)
    print("rank 1 left", flush=True)
''')


def _rank_zero(port: int, outcome: list) -> None:
    """Rank 0, in this process (a thread): agrees, leaves, then frees the store as a worker
    process that ends would."""
    from hypersack.runtime.worker.messages import WorldSpec
    from hypersack.runtime.worker.process import _join_world, _leave_world
    try:
        world, sync = _join_world(WorldSpec(2, 0, port), "cpu")
        for i in range(SYNCS):
            agreed = sync(i == SYNCS - 1)
        _leave_world(world)
        del sync
        gc.collect()                     # the store's server goes with it
        outcome.append(agreed)
    except BaseException as exc:         # reported by the test
        outcome.append(exc)


@pytest.mark.slow
def test_rank_zero_keeps_the_store_until_every_rank_has_read_the_last_agreement():
    pytest.importorskip("torch.distributed")
    import torch.distributed as dist
    from hypersack.runtime.executors.local import _free_port
    if dist.is_initialized():
        pytest.skip("this process already belongs to a process group")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    port = _free_port()
    rank_one = subprocess.Popen([sys.executable, "-c", RANK_ONE, str(port), str(SYNCS)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    outcome: list = []
    rank_zero = threading.Thread(target=_rank_zero, args=(port, outcome), daemon=True)
    rank_zero.start()
    try:
        out, err = rank_one.communicate(timeout=120)
        rank_zero.join(timeout=120)
    finally:
        rank_one.kill()
        if dist.is_initialized():
            dist.destroy_process_group()
    assert outcome == [True]
    assert rank_one.returncode == 0, f"rank 1: {err[-2000:]}"
    assert "rank 1 left" in out
