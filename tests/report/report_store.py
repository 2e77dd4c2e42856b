"""A small stored study with every kind of stay and a failure, written through the real Storage."""
from __future__ import annotations

from hypersack.core.stays import Stay, StayOutcome
from hypersack.core.trial import TrialRecord, TrialState
from hypersack.runtime.devices.monitor import Sample
from hypersack.runtime.storage.sqlite import Storage

T0 = 1_700_000_000.0
OUTCOMES = [StayOutcome.FINISHED, StayOutcome.PAUSED, StayOutcome.PREEMPTED, StayOutcome.RESIZED,
            StayOutcome.PRUNED, StayOutcome.FAILED, StayOutcome.LOST]
STATES = {StayOutcome.FINISHED: TrialState.COMPLETE, StayOutcome.PAUSED: TrialState.PAUSED,
          StayOutcome.PRUNED: TrialState.PRUNED, StayOutcome.FAILED: TrialState.FAILED}


def fill_store(path, name="small", n=8, status="complete", open_last=False, gpus=("gpu0", "gpu1"),
               target=None, units=False):
    """``n`` trials on two GPUs (two at a time on each, half-device shares, plain trials); ``lr``
    is sampled log-uniformly and ``batch`` is constant. ``gpus``: the device ids (``cpu0``..:
    CPU slots, and then no utilisation samples); ``target``: the trial budget (default ``n``);
    ``units``: a second numeric parameter, ``units`` (an integer, linear), for the contour plot."""
    import hypersack
    spec = hypersack.Study(name=name, objective=("acc", "max"), n_trials=target or n, storage=path,
                           space={"lr": {"type": "float", "low": 0.001, "high": 1.0, "log": True},
                                  "opt": {"type": "categorical", "choices": ["a", "b"]},
                                  "batch": 32,
                                  **({"units": {"type": "int", "low": 8, "high": 64}} if units else {})}
                           ).spec.to_dict()
    with Storage(path) as store:
        row = store.create_study(name, spec)
        for i in range(n):
            outcome = OUTCOMES[i % len(OUTCOMES)]
            state = STATES.get(outcome, TrialState.COMPLETE)
            start = T0 + 10 * (i // 4)
            end = None if open_last and i == n - 1 else start + 8 + i % 3
            if end is None:
                state = TrialState.RUNNING
            value = None if state is TrialState.FAILED else 0.1 * i
            config = {"lr": 0.01 * (i + 1), "opt": "ab"[i % 2], "batch": 32,
                      **({"units": 8 + (7 * i) % 57} if units else {})}
            record = TrialRecord(i, config, seed=i, state=state,
                                 attempts=1, last_step=3, metrics={"acc": value or 0.0}, value=value,
                                 started_at=start, finished_at=end if state.finished else None,
                                 error="boom" if state is TrialState.FAILED else None,
                                 traceback="Traceback (most recent call last):\n  ValueError: boom"
                                 if state is TrialState.FAILED else None)
            stay = Stay(i, 1, "n0", gpus[i % len(gpus)], start, 50.0, end=end,
                        outcome=None if end is None else outcome)
            results = [(i, s, {"acc": 0.1 * i * s / 3}) for s in (1, 2, 3)]
            store.save_batch(row.study_id, [record], results, stays=[stay])
        if not gpus[0].startswith("cpu"):
            store.save_samples(row.study_id, [("n0", "gpu0", Sample(T0 + k, 40.0 + k, 1.0, 2))
                                              for k in range(5)])
        store.set_status(row.study_id, status)
    return path


#: ``fill_multi_store``'s complete trials: (loss min, latency_ms min); ids 2 and 5 are dominated
#: (by 1, and by every other), 1 and 4 tie (both on the front).
MULTI_VALUES = [(1.0, 5.0), (2.0, 3.0), (3.0, 4.0), (4.0, 1.0), (2.0, 3.0), (5.0, 5.0)]


def fill_multi_store(path, name="multi"):
    """A stored multi-objective study (loss min, latency_ms min): ``MULTI_VALUES`` complete
    trials, then one failed trial, on one CPU slot."""
    import hypersack
    spec = hypersack.Study(name=name, objective=[("loss", "min"), ("latency_ms", "min")],
                           n_trials=7, storage=path,
                           space={"x": {"type": "float", "low": 0.0, "high": 1.0}}).spec.to_dict()
    with Storage(path) as store:
        row = store.create_study(name, spec)
        for i, values in enumerate([*MULTI_VALUES, None]):
            state = TrialState.FAILED if values is None else TrialState.COMPLETE
            metrics = {} if values is None else {"loss": values[0], "latency_ms": values[1]}
            record = TrialRecord(i, {"x": i / 10}, seed=i, state=state, attempts=1, last_step=1,
                                 metrics=metrics, value=None if values is None else values[0],
                                 values=None if values is None else list(values),
                                 started_at=T0 + i, finished_at=T0 + i + 1,
                                 error="boom" if values is None else None)
            stay = Stay(i, 1, "n0", "cpu0", T0 + i, 100.0, end=T0 + i + 1,
                        outcome=StayOutcome.FAILED if values is None else StayOutcome.FINISHED)
            store.save_batch(row.study_id, [record], [(i, 1, metrics)] if metrics else [],
                             stays=[stay])
        store.set_status(row.study_id, "complete")
    return path


def fill_pack_store(path, name="packed", members=4, outlier=False):
    """A fused pack of ``members`` trials (pack 3, seats 0..) on ``cpu0`` from T0 to T0 + 20
    (members leave at T0 + 10 + k), then a plain trial alone on ``cpu0`` from T0 + 30 to T0 + 40
    that its new worker began at T0 + 35 (5 s of start-up).
    Each reports loss 1 / (id + step) at steps 1 and 2; ``outlier``: the last trial's step 1
    loss is 1e6."""
    import hypersack
    spec = hypersack.Study(name=name, objective=("loss", "min"), n_trials=members + 1, storage=path,
                           space={"lr": {"type": "float", "low": 0.001, "high": 1.0,
                                         "log": True}}).spec.to_dict()
    with Storage(path) as store:
        row = store.create_study(name, spec)
        for i in range(members + 1):
            fused = i < members
            start, end = (T0, T0 + 10 + i) if fused else (T0 + 30, T0 + 40)
            record = TrialRecord(i, {"lr": 0.001 * 10 ** i}, seed=i, state=TrialState.COMPLETE,
                                 attempts=1, last_step=2, metrics={"loss": 1.0 / (i + 1)},
                                 value=1.0 / (i + 1), started_at=start, finished_at=end,
                                 info={"fused": {"pack": 3, "seat": i}} if fused else
                                 {"began_at": {"1": T0 + 35}})      # a new worker: 5 s start-up
            stay = Stay(i, 1, "n0", "cpu0", start, 100.0, pack=3 if fused else None, end=end,
                        outcome=StayOutcome.FINISHED)
            results = [(i, s, {"loss": 1e6 if outlier and not fused and s == 1 else 1.0 / (i + s)})
                       for s in (1, 2)]
            store.save_batch(row.study_id, [record], results, stays=[stay])
        store.set_status(row.study_id, "complete")
    return path
