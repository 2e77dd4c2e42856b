"""The driver's cost per co-located trial (issue 30): the job history's demand and what it learns.

Co-location adds work on the driver for every trial: its demand (history, loader cores, the
execution choice), and on each profile the co-runners on its device, a co-location measurement
and the profile write. This times that path alone (no workers: the trainables' own time is the
same code as before for ``data: synthetic``) for ``--trials`` trials on ``--slots`` CPU slots,
four trials per slot, each profiled once, through the study store's connection (one
transaction per trial, as the loop's turn commits them).

    python benchmarks/driver/colocation_driver.py [--trials 2000] [--slots 8] [--repeat 3]

Prints microseconds per trial (median of ``--repeat``). Runs against the ``hypersack`` on ``PYTHONPATH``: compare the main checkout and this one by turns.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path



def run_once(trials: int, slots: int) -> float:
    from hypersack.core.spec import StudySpec
    from hypersack.core.trial import TrialFinished, TrialProfiled, TrialRecord, TrialState
    from hypersack.runtime.devices.slots import default_slots
    from hypersack.runtime.devices.machine import prepare_machine
    from hypersack.runtime.devices.profiler import Profile
    from hypersack.runtime.storage.sqlite import Storage
    spec = StudySpec.from_dict({
        "name": "bench", "objective": {"metric": "score", "mode": "max"},
        "space": {"width": {"type": "categorical", "choices": [16, 32, 64]},
                  "batch_size": {"type": "categorical", "choices": [32, 64]},
                  "x": {"type": "float", "low": 0.0, "high": 1.0}},
        "budget": {"trials": trials}, "oversubscription": 4})
    with tempfile.TemporaryDirectory() as tmp, Storage(Path(tmp) / "s.db") as store, \
            prepare_machine(spec, Path(tmp) / "runs", store, trainable_name="t",
                            slots=default_slots(slots, gpus=[])) as machine:
        store.set_durability("process")                     # no fsync: time the driver's work
        (observe,) = machine.observers
        demand = machine.demand
        if demand is None:
            raise SystemExit("the machine has no job history")
        live: list[TrialRecord] = []
        start = time.perf_counter()
        for i in range(trials):
            record = TrialRecord(i, {"width": (16, 32, 64)[i % 3], "batch_size": (32, 64)[i % 2],
                                     "x": i / trials}, seed=i, state=TrialState.RUNNING,
                                 devices=[("local", f"cpu{i % slots}")])
            with store.transaction():                     # one loop turn: one commit
                demand(record)
                live.append(record)
                profile = Profile(0.01 * (1 + len(live) % 4), 0.5, 30.0, 0.2, 10, "cpu")
                observe(TrialProfiled(i, profile.to_dict()))
                if len(live) > 4 * slots:                   # four trials per slot at a time
                    done = live.pop(0)
                    done.state = TrialState.COMPLETE
                    observe(TrialFinished(done.trial_id))
        return (time.perf_counter() - start) / trials * 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=2000)
    p.add_argument("--slots", type=int, default=8)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    import hypersack
    times = [run_once(args.trials, args.slots) for _ in range(args.repeat)]
    print(f"{Path(hypersack.__file__).parents[1]}: {statistics.median(times):.0f} us per trial "
          f"(runs: {', '.join(f'{t:.0f}' for t in times)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
