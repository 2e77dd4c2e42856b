"""A trainable's bad report fails its trial with a clear reason; it never crashes the driver."""
from __future__ import annotations

import numpy as np
import pytest

import hypersack
from hypersack.errors import ReportError
from hypersack.runtime.worker.messages import BadMessage, Pipe, Reported
from hypersack.validation import check_metric, check_step

pytestmark = pytest.mark.filterwarnings("ignore:Study .*no trial completed:RuntimeWarning")


def _torch():
    """torch, imported where a tensor is made: a worker that unpickles this module's trainables
    imports the module, and only the trials that report a tensor need torch (~3 s of CPU)."""
    import torch
    return torch


def _study(store_path, **kwargs):
    kwargs.setdefault("workers", 1)
    return hypersack.Study(name="bad", space={"x": {"type": "float", "low": 0.0, "high": 1.0}},
                           objective=("score", "max"), n_trials=kwargs.pop("n_trials", 1),
                           storage=store_path, **kwargs)


def _only_trial(study):
    status = study.status()
    assert status["status"] == "complete"
    (trial,) = status["trials"]
    return trial


_BAD = {   # case -> (what the trainable reports, words its trial's error must hold)
    "ndarray": (lambda: ((1,), {"score": np.array([1.0, 2.0])}), ["metric 'score'", "numpy.ndarray"]),
    "tensor": (lambda: ((1,), {"score": _torch().tensor([0.5, 0.25])}), ["metric 'score'", "torch.Tensor"]),
    "huge int": (lambda: ((1,), {"score": 10**400}), ["metric 'score'", "float can hold"]),
    "huge step": (lambda: ((10**30,), {"score": 1.0}), ["step", "integer in [0, 9007199254740992]"]),
    "float step": (lambda: ((1.5,), {"score": 1.0}), ["step", "1.5", "float"]),
    "negative step": (lambda: ((-1,), {"score": 1.0}), ["step", "-1"]),
}


def _reports_bad(config, ctx):
    args, metrics = _BAD[config["case"]][0]()
    ctx.report(*args, **metrics)


def test_a_bad_report_fails_its_trial_and_the_study_completes(store_path):
    study = hypersack.Study(name="bad", space={"case": {"type": "categorical", "choices": list(_BAD)}},
                            objective=("score", "max"), n_trials=len(_BAD), algorithm="grid",
                            storage=store_path, workers=2, max_retries=2)
    assert study.run(_reports_bad, progress=False).status == "complete"
    trials = study.status()["trials"]
    assert sorted(t["config"]["case"] for t in trials) == sorted(_BAD)
    for trial in trials:
        assert trial["state"] == "failed" and trial["attempts"] == 1    # its own error: no retry
        assert trial["error"].startswith("ReportError: ")
        for word in _BAD[trial["config"]["case"]][1]:
            assert word in trial["error"], trial["error"]
        assert "Traceback" in trial["traceback"]
    assert study.results() == []


def _report_scalars(config, ctx):
    torch = _torch()
    ctx.report(np.int64(1), score=torch.tensor(0.5), a=np.float32(0.25), b=np.array(2.0),
               d=2**70)
    ctx.report(torch.tensor(2), score=np.float64(0.75))


def test_tensors_and_numpy_scalars_become_plain_numbers(store_path):
    study = _study(store_path)
    study.run(_report_scalars, progress=False)
    trial = _only_trial(study)
    assert trial["state"] == "complete" and trial["last_step"] == 2 and trial["value"] == 0.75
    first = study.results()[0]
    assert first["step"] == 1 and first["score"] == 0.5 and first["a"] == 0.25 and first["b"] == 2.0
    assert first["d"] == float(2**70)


def test_the_checks_convert_and_refuse_as_documented():
    torch = _torch()
    assert check_step(np.int64(3)) == 3 and type(check_step(torch.tensor(3))) is int
    for bad in (1.5, 2.0, -1, 2**53 + 1, True, "1", None, torch.tensor([1])):
        with pytest.raises(ReportError, match="step"):
            check_step(bad)
    assert type(check_metric("m", np.float32(0.5))) is float
    assert type(check_metric("m", torch.tensor(3))) is int
    assert check_metric("m", 2**64) == float(2**64) and check_metric("m", 2**62) == 2**62
    assert np.isnan(check_metric("m", float("nan")))     # the controller fails the trial on it
    for bad in (True, np.bool_(False), "1", [1.0], {"a": 1}, 1j, np.array([1.0]), torch.tensor([1.0]), None, 10**400,
                torch.tensor(1j)):
        with pytest.raises(ReportError, match="metric 'm'"):
            check_metric("m", bad)


class _Conn:
    """One end of a pipe that hands over given bytes."""

    def __init__(self, data: bytes):
        self.data = data

    def recv_bytes(self) -> bytes:
        return self.data


def test_the_driver_refuses_what_it_cannot_use_with_bad_message():
    import pickle
    wire = pickle.dumps(("report", 1, np.int64(2), {"score": np.float32(0.5)}, None))
    got = Pipe(_Conn(wire)).recv()
    assert got == Reported(1, 2, {"score": 0.5})
    assert type(got.step) is int and type(got.metrics["score"]) is float    # plain numbers
    for data in (b"junk", pickle.dumps(("report", 1, 2.5, {"score": 1.0}, None)),
                 pickle.dumps(("report", 1, 2, {"score": "high"}, None)),
                 pickle.dumps(("report", 1, 2, {3: 1.0}, None)),
                 pickle.dumps(("nonsense", 1)), pickle.dumps(("report", 1))):
        with pytest.raises(BadMessage):
            Pipe(_Conn(data)).recv()


def test_the_driver_fails_a_trial_whose_worker_sends_what_it_cannot_use(store_path):
    study = hypersack.Study(name="raw", space={"wire": {"type": "categorical",
                                                        "choices": ["junk", "ndarray"]}},
                            objective=("score", "max"), n_trials=2, algorithm="grid",
                            storage=store_path, workers=1, max_retries=1)
    assert study.run("fuzz_trainables:sends_raw", progress=False).status == "complete"
    trials = study.status()["trials"]
    assert [t["state"] for t in trials] == ["failed", "failed"]
    errors = sorted(t["error"] for t in trials)
    assert errors[0].startswith("its worker sent a report that cannot be stored: ReportError: "
                                "The value of metric 'score' is array([1., 1.])")
    assert errors[1].startswith("its worker sent an unreadable message (UnpicklingError")
    assert all(t["attempts"] == 1 for t in trials)


def test_a_pack_that_sends_what_the_driver_cannot_use_fails_its_members_and_ends():
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from test_pack_host import _host, _launch    # the pack host's fakes
    from hypersack.core.trial import FailureCause, PackCapped, TrialFailed

    host, _ = _host(max_members=2)
    pack = _launch(host, 0)
    _launch(host, 1)

    def bad():
        raise BadMessage("an unreadable message (UnpicklingError: junk)")
    pack.worker.pipe.inbox.append(None)     # something to read
    pack.worker.pipe.recv = bad
    reason = "its pack sent an unreadable message (UnpicklingError: junk)"
    assert host.drain(pack) == [PackCapped(pack.pack_id, 0),       # the pack is gone
                                TrialFailed(0, reason, None, cause=FailureCause.ERROR),
                                TrialFailed(1, reason, None, cause=FailureCause.ERROR)]
    assert host.packs == [] and host.members == {} and pack.worker.process.exitcode == -9


def _objective_then_loss(config, ctx):
    """The objective at step 1 only; later reports carry only a loss."""
    ctx.report(1, score=0.5, loss=1.0)
    for step in range(2, 11):
        ctx.report(step, loss=1.0 / step)


def test_the_step_shown_with_a_value_is_the_step_of_that_value(store_path):
    study = _study(store_path)
    study.run(_objective_then_loss, progress=False)
    trial = _only_trial(study)
    assert trial["state"] == "complete" and trial["value"] == 0.5
    assert trial["last_step"] == 10 and trial["value_step"] == 1
    assert study.best_trial()["step"] == 1
    assert study.status()["best"]["step"] == 1 and study.status()["best_complete"]["step"] == 1


def _out_of_memory(config, ctx):
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (64 << 30, hard))   # a known limit, far above use
    raise MemoryError()


def test_a_memory_error_says_out_of_memory_and_the_limit(store_path):
    study = _study(store_path, max_retries=0)
    study.run(_out_of_memory, progress=False)
    trial = _only_trial(study)
    assert trial["state"] == "failed"
    assert trial["error"].startswith("MemoryError: out of memory (limit: RLIMIT_AS 64.0 GiB")
