"""Data-parallel teardown: rank 0 hosts the rendezvous store and must not free it while another
rank still reads the last stop agreement (issue 12, item 5: DistNetworkError "Failed to recv,
got 0 bytes" on the final report of RASDA trials on two devices)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

RANK = textwrap.dedent('''
    import gc, sys, time
    from hypersack.runtime.messages import WorldSpec
    from hypersack.runtime.worker import _join_world, _leave_world
    rank, port, syncs = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    world, sync = _join_world(WorldSpec(2, rank, port), "cpu")
    for i in range(syncs):
        if rank == 1 and i == syncs - 1:
            time.sleep(1.0)            # the other rank is slower to its last report
        agreed = sync(i == syncs - 1)
    assert agreed is True
    _leave_world(world)
    del sync
    gc.collect()                       # rank 0: the store's server goes with it
    print(f"rank {rank} left", flush=True)
''')


@pytest.mark.slow
def test_rank_zero_keeps_the_store_until_every_rank_has_read_the_last_agreement(tmp_path):
    pytest.importorskip("torch.distributed")
    from hypersack.runtime.executors.local import _free_port
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    port = _free_port()
    procs = [subprocess.Popen([sys.executable, "-c", RANK, str(rank), str(port), "3"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in (0, 1)]
    outs = [p.communicate(timeout=120) for p in procs]
    for rank, (p, (out, err)) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, f"rank {rank}: {err[-2000:]}"
        assert f"rank {rank} left" in out
