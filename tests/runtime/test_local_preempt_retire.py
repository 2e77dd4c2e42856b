"""A preempted trial's worker: on a GPU slot it ends with the trial (its device memory is freed
for the trial that takes the GPU); on a CPU slot it goes back to the pool warm.

The GPU slot here is a fake on a CPU machine: ``Slot.gpu`` set, ``CUDA_VISIBLE_DEVICES`` naming
it; the trivial trainable never touches CUDA, so only the executor's bookkeeping is exercised.
"""
from __future__ import annotations

import pytest

from hypersack.core.trial import Launch, Preempt, ResultReported, TrialFailed, TrialFinished
from hypersack.runtime.devices.slots import Slot
from hypersack.runtime.executors.local import LocalExecutor
from hypersack.runtime.worker.trainable import TrainableRef

from executor_helpers import ack_reports, collect

CONFIG = {"x": 0.5, "steps": 4, "sleep": 0.0}


def _executor(tmp_path, gpu: int | None) -> LocalExecutor:
    env = {"CUDA_VISIBLE_DEVICES": "" if gpu is None else str(gpu), "OMP_NUM_THREADS": "1"}
    ex = LocalExecutor([Slot(0, gpu, env)], TrainableRef.of("trainables:checkpointing"),
                       trial_dir=lambda t: tmp_path / f"trial-{t}", metric="score")
    ex.start()
    return ex


def _of(events: list, trial_id: int, kind: type) -> list:
    return [e for e in events if isinstance(e, kind) and e.trial_id == trial_id]


def _preempt_after_first_report(ex: LocalExecutor) -> tuple[int, ResultReported]:
    device = next((n.id, g.id) for n, g in ex.inventory().gpus())
    ex.submit(Launch(0, CONFIG, seed=1, attempt=1, devices=(device,)))
    events = collect(ex, lambda ev: bool(_of(ev, 0, ResultReported)), timeout=120, ack=False)
    (pid,) = ex.worker_pids()
    ex.submit(Preempt(0))                 # it waits for its ack: it leaves at this report
    ack_reports(ex, events)
    events += collect(ex, lambda ev: bool(_of(ev, 0, TrialFinished)), timeout=120)
    assert not _of(events, 0, TrialFailed)
    (last,) = _of(events, 0, ResultReported)
    return pid, last


@pytest.mark.parametrize("gpu", [0, None], ids=["gpu-slot", "cpu-slot"])
def test_a_preempted_trial_retires_its_worker_only_on_a_gpu_and_resumes_on_a_new_one(tmp_path, gpu):
    ex = _executor(tmp_path, gpu)
    try:
        pid, last = _preempt_after_first_report(ex)
        assert last.step == 1 and last.checkpoint is not None
        if gpu is None:
            assert ex.worker_pids() == [pid]           # warm again, for the next trial
        else:
            assert pid not in ex.worker_pids()         # ended: its device memory is freed
        device = next((n.id, g.id) for n, g in ex.inventory().gpus())
        ex.submit(Launch(0, CONFIG, seed=1, attempt=2, checkpoint=last.checkpoint,
                         devices=(device,)))
        again = collect(ex, lambda ev: bool(_of(ev, 0, TrialFinished)), timeout=120)
        assert [e.step for e in _of(again, 0, ResultReported)] == [2, 3, 4]
        assert not _of(again, 0, TrialFailed)
        assert (pid in ex.worker_pids()) is (gpu is None)
    finally:
        ex.shutdown(kill=True)
