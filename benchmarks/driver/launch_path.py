"""The driver's CPU per trial on the launch path, measured in process (``time.process_time``),
without worker processes (no pipe, no noise from the workers sharing the cores):

* **the controller**: a study of ``--trials`` random-search trials on ``--slots`` CPU slots
  with the job history's demand (``prepare_machine``, as a local study has it), driven through
  ``Controller.turn`` as the loop drives it: each turn one trial starts, reports once and
  finishes, and the turn launches the next (its room asked, the trial created and placed, its
  stay opened);
* **the executor**: ``LocalExecutor.submit`` of one ``Launch`` per trial, each trial's folder
  from the ``Storage`` and its profile decision from the job history, the ``RunTrial`` encoded
  and pickled as the pipe would send it (workers are stand-ins: nothing is written), then the
  trial's folder asked again as the user-attrs importer asks it when the trial stops.

Runs against any checkout (``PYTHONPATH=<checkout>``), so a branch and its base can be taken
by turns:

    python benchmarks/driver/launch_path.py [--trials 3000] [--slots 2] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import tempfile
import time
from pathlib import Path
from typing import Any

from hypersack.core.algorithms.random_search import RandomSearch
from hypersack.core.controller import Budget, Controller, ControllerOptions
from hypersack.core.spec import StudySpec
from hypersack.core.trial import Launch, ResultReported, TrialFinished, TrialStarted
from hypersack.runtime.devices.machine import prepare_machine
from hypersack.runtime.devices.slots import default_slots
from hypersack.runtime.executors.local import LocalExecutor
from hypersack.runtime.storage.sqlite import Storage
from hypersack.runtime.worker.messages import encode
from hypersack.runtime.worker.trainable import TrainableRef


def _spec(trials: int) -> StudySpec:
    return StudySpec.from_dict({"name": "s", "objective": {"metric": "score", "mode": "max"},
                                "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
                                "budget": {"trials": trials}})


def controller_per_trial(trials: int, slots: int) -> float:
    """Driver CPU (us) per trial of ``Controller.turn`` with the job history's demand."""
    spec = _spec(trials)
    with tempfile.TemporaryDirectory() as d, prepare_machine(
            spec, Path(d) / "runs", Path(d) / "s.db", trainable_name="t",
            slots=default_slots(slots, gpus=[])) as machine:
        c = Controller(RandomSearch(spec.space, spec.objective, seed=0), spec.objective,
                       Budget(trials=trials), options=ControllerOptions(
                           inventory=machine.cluster, demand=machine.demand))
        c0, now = time.process_time(), 0.0
        turn = c.turn([], now)
        running = [launch.trial_id for launch in turn.launches]
        while not turn.done:
            now += 1.0
            t = running.pop(0)
            events = [TrialStarted(t, "slot"), ResultReported(t, 1, {"score": 0.5}), TrialFinished(t)]
            for event in events:
                for observe in machine.observers:
                    observe(event)
            turn = c.turn(events, now)
            running += [launch.trial_id for launch in turn.launches]
        if len(c.trials) != trials:
            raise RuntimeError(f"{len(c.trials)} trials made, {trials} expected")
        return 1e6 * (time.process_time() - c0) / trials


class _Worker:
    """A stand-in worker: the message is encoded and pickled as ``Pipe.send`` does, not sent."""

    def __init__(self, slot: Any):
        self.slot, self.has_trainable, self.trial_id, self.rank = slot, True, None, 0

    def send(self, message: Any) -> None:
        pickle.dumps(encode(message), pickle.HIGHEST_PROTOCOL)


def executor_per_launch(trials: int, slots: int) -> float:
    """Driver CPU (us) per ``LocalExecutor.submit(Launch)`` (and the folder's second ask)."""
    spec = _spec(trials)
    with tempfile.TemporaryDirectory() as d, Storage(Path(d) / "s.db") as store, prepare_machine(
            spec, Path(d) / "runs", Path(d) / "s.db", trainable_name="t",
            slots=default_slots(slots, gpus=[])) as machine:
        row = store.create_study("s", {})
        ex = LocalExecutor(machine.slots, TrainableRef("k", "mod:fn"),
                           trial_dir=lambda t: store.trial_dir(row, t), metric="score",
                           steps_for=spec.steps_for, profile=machine.profile)
        ex._pool.take = lambda slot, share: _Worker(slot)    # type: ignore[method-assign]
        keys = [slot.key for slot in machine.slots]
        launches = [Launch(t, {"x": t / trials}, t, 1, None, (("local", keys[t % len(keys)]),),
                           free_below=1) for t in range(trials)]
        c0 = time.process_time()
        for launch in launches:
            ex.submit(launch)
            ex._jobs.pop(launch.trial_id)
            store.trial_dir(row, launch.trial_id)
        return 1e6 * (time.process_time() - c0) / trials


def _allow_slots(slots: int) -> None:
    """Raise this process's per-core limit on local workers so that ``slots`` fit (no process
    is started here: the slots are the placement inventory only)."""
    from hypersack import validation
    cores = max(1, os.cpu_count() or 1)
    validation.MAX_LOCAL_WORKERS_PER_CPU = max(validation.MAX_LOCAL_WORKERS_PER_CPU,
                                               -(-slots // cores))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=3000)
    p.add_argument("--slots", type=int, default=2)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    _allow_slots(args.slots)
    row = {"trials": args.trials, "slots": args.slots,
           "controller_us_per_trial": round(controller_per_trial(args.trials, args.slots), 1),
           "executor_us_per_launch": round(executor_per_launch(args.trials, args.slots), 1)}
    print(json.dumps(row) if args.json else
          f"controller: {row['controller_us_per_trial']} us CPU per trial; executor: "
          f"{row['executor_us_per_launch']} us CPU per launch ({args.slots} slots)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
