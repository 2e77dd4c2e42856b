"""Pipelined reports: which steps are decision points (algorithms, controller), what the ack
carries, and the worker side (a posted report does not wait; the next one waits for its ack)."""
from __future__ import annotations

import random

import pytest

from hypersack.core.algorithms import make_algorithm
from hypersack.core.algorithms.base import NO_DECISION, Decision
from hypersack.core.controller import Budget, Controller
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace
from hypersack.core.trial import ResultReported, TrialStarted
from hypersack.runtime.worker.context import TrialContext
from hypersack.runtime.executors.local import LocalExecutor
from hypersack.runtime.worker.messages import Ack, Done, Reported, Reports, StopTrial
from hypersack.runtime.worker.process import Outbox, PipeChannel

from controller_helpers import on_slots

SPACE = SearchSpace({"x": {"type": "float", "low": 0.0, "high": 1.0}})
OBJECTIVE = Objective("loss", "min")


def _algorithm(spec):
    return make_algorithm(spec, SPACE, OBJECTIVE, 0)


# ---- decision points -------------------------------------------------------------------------

def test_rasda_decides_at_every_step():
    algorithm = _algorithm({"type": "rasda", "min_t": 1, "max_t": 27, "sf": 3, "rf": 3})
    algorithm.suggest(0)
    assert algorithm.next_decision_step(0) == 0


@pytest.mark.parametrize("algorithm", [
    lambda: _algorithm({"type": "random"}),
    lambda: make_algorithm("grid", SearchSpace({"x": {"type": "categorical", "choices": [1, 2]}}),
                           OBJECTIVE, 0),
])
def test_algorithms_that_never_stop_early_have_no_decision_point(algorithm):
    """Their ``on_result`` always CONTINUEs: no report of theirs needs to wait for a decision."""
    algorithm = algorithm()
    algorithm.suggest(0)
    assert algorithm.next_decision_step(0) == NO_DECISION
    assert algorithm.on_result(0, 5, {"loss": 0.1}) is Decision.CONTINUE


@pytest.mark.parametrize("spec", [
    {"type": "asha", "min_t": 1, "max_t": 27, "reduction_factor": 3},
    {"type": "asha", "min_t": 2, "max_t": 32, "reduction_factor": 2, "mode": "stop"},
    {"type": "sha", "n": 9, "min_t": 1, "max_t": 9, "reduction_factor": 3},
    {"type": "hyperband", "max_t": 27, "reduction_factor": 3},
])
def test_a_report_below_the_next_decision_step_always_continues(spec):
    """Random trials report random step sequences: every report below the step the algorithm
    named before it gets CONTINUE, and some report at or past it gets another decision."""
    algorithm = _algorithm(spec)
    rng = random.Random(3)
    live: dict[int, int] = {}
    decided_at_point = 0
    for trial_id in range(40):
        suggestion = algorithm.suggest(trial_id)
        if suggestion is None or suggestion.resume is not None:
            break
        live[trial_id] = 0
    for _ in range(400):
        if not live:
            break
        trial_id = rng.choice(sorted(live))
        point = algorithm.next_decision_step(trial_id)
        step = live[trial_id] + rng.randint(1, 3)
        live[trial_id] = step
        decision = algorithm.on_result(trial_id, step, {"loss": rng.random()})
        if step < point:
            assert decision is Decision.CONTINUE, (trial_id, step, point)
        elif decision is not Decision.CONTINUE:
            decided_at_point += 1
        if decision is not Decision.CONTINUE or step >= 40:
            del live[trial_id]
            algorithm.on_complete(trial_id, 0.5, "pruned")
    assert decided_at_point > 0


def test_asha_names_its_milestones_and_none_past_the_last():
    algorithm = _algorithm({"type": "asha", "min_t": 1, "max_t": 27, "reduction_factor": 3,
                            "mode": "stop"})
    algorithm.suggest(0)
    assert algorithm.next_decision_step(0) == 1
    assert algorithm.on_result(0, 1, {"loss": 0.1}) is Decision.CONTINUE     # first at its rung
    assert algorithm.next_decision_step(0) == 3
    algorithm.on_result(0, 9, {"loss": 0.1})
    assert algorithm.next_decision_step(0) == NO_DECISION                    # 27 = max_t: no rung
    assert algorithm.next_decision_step(99) == 0                             # unknown: every step


def _controller(spec):
    controller = Controller(_algorithm(spec), OBJECTIVE, Budget(trials=2), options=on_slots(1))
    controller.launches(0.0)
    controller.handle(TrialStarted(0, "cpu"), 0.0)
    return controller


def test_the_controller_names_the_algorithms_point_unless_a_stop_is_pending():
    controller = _controller({"type": "asha", "min_t": 2, "max_t": 18, "reduction_factor": 3})
    assert controller.next_decision_step(0) == 2
    controller.handle(ResultReported(0, 1, {"loss": 0.5}), 1.0)
    assert controller.next_decision_step(0) == 2
    controller.interrupt()                         # a stop is asked: every report counts again
    assert controller.next_decision_step(0) == 0
    assert controller.next_decision_step(7) == 0   # no such trial


def test_the_end_game_has_no_decision_point():
    controller = _controller({"type": "asha", "min_t": 2, "max_t": 18, "reduction_factor": 3})
    controller.trials[0].info["end_game"] = True
    assert controller.next_decision_step(0) == NO_DECISION


def test_an_ack_carries_the_free_below_the_loop_gives():
    executor = object.__new__(LocalExecutor)
    sent: list = []

    class _Worker:
        def send(self, message):
            sent.append(message)
    executor._jobs = {4: object()}
    executor._awaiting = {4: _Worker(), 5: _Worker(), 6: _Worker()}
    executor._unacked = {4: 3, 5: 1}                      # trial 4: three reports read
    executor.acknowledge([4, 5], {4: 9})                  # 5: left out of free_below: 0
    assert sent == [Ack(4, 9, 3), Ack(5, 0, 1)] and list(executor._awaiting) == [6]
    assert executor._unacked == {}


# ---- the worker side -------------------------------------------------------------------------

class _FakePipe:
    """The driver's end, scripted: ``replies`` are handed out one per ``recv``."""

    def __init__(self):
        self.sent: list = []
        self.inbox: list = []
        self.recvs = 0

    def send(self, message):
        self.sent.append(message)

    def recv(self):
        self.recvs += 1
        if not self.inbox:
            raise AssertionError("the worker waited for a message that the driver never sent")
        return self.inbox.pop(0)

    def poll(self, timeout=0.0):
        return bool(self.inbox)


def test_a_posted_report_returns_at_once_and_the_next_one_waits_for_its_ack():
    pipe = _FakePipe()
    channel = PipeChannel(pipe, 1)
    channel.post(Reported(1, 1, {"loss": 1.0}))
    assert pipe.recvs == 0 and len(pipe.sent) == 1
    pipe.inbox = [StopTrial(2), Ack(1, 6)]              # a stale stop of another trial first
    channel.post(Reported(1, 2, {"loss": 0.9}))
    assert pipe.recvs == 2 and len(pipe.sent) == 2 and channel.free_below == 6
    assert not channel.stop_requested()
    pipe.inbox = [Ack(1, 6)]
    channel.flush()                                     # waits for the last ack
    pipe.inbox = [Ack(1, 6)]
    channel.request(Reported(1, 3, {"loss": 0.8}))     # nothing in flight: waits for its own
    assert pipe.inbox == [] and len(pipe.sent) == 3
    channel.flush()                                     # nothing in flight: returns at once
    assert channel.may_post(5) and not channel.may_post(6)


def test_an_ack_read_while_polling_for_a_stop_is_not_waited_for_again():
    pipe = _FakePipe()
    channel = PipeChannel(pipe, 1)
    channel.post(Reported(1, 1, {"loss": 1.0}))
    pipe.inbox = [Ack(1, 4), StopTrial(1)]
    assert channel.stop_requested()
    channel.flush()                                     # the ack was taken: no recv blocks


class _Channel:
    """A ``PipelinedChannel`` (``runtime.worker.context``) that records what the context sends."""

    def __init__(self, free_below):
        self.free_below = free_below
        self.calls: list[tuple[str, int, str | None]] = []

    def send(self, message):
        self.calls.append(("send", message.step, message.checkpoint))

    def may_post(self, step):
        return step < self.free_below

    def post(self, message):
        self.calls.append(("post", message.step, message.checkpoint))

    def request(self, message):
        self.calls.append(("request", message.step, message.checkpoint))

    def stop_requested(self):
        return False


def test_the_context_posts_only_reports_below_the_point_without_a_checkpoint(tmp_path):
    channel = _Channel(free_below=3)
    ctx = TrialContext(trial_id=1, seed=0, device="cpu", attempt=1, trial_dir=tmp_path,
                       channel=channel)
    ctx.report(1, loss=1.0)
    ctx.report(2, checkpoint={"w": 1}, loss=0.9)
    ctx.report(3, loss=0.8)
    kinds = [(kind, step, ck is not None) for kind, step, ck in channel.calls]
    assert kinds == [("post", 1, False), ("request", 2, True), ("request", 3, False)]


def test_a_first_report_without_the_objective_waits_for_its_ack(tmp_path):
    """The driver fails the trial on it: the trial stops at that report, not one later."""
    channel = _Channel(free_below=100)
    ctx = TrialContext(trial_id=1, seed=0, device="cpu", attempt=1, trial_dir=tmp_path,
                       channel=channel, objective="score")
    ctx.report(0, loss=1.0)
    ctx.report(1, loss=0.9)                      # not the first: the driver only checks the first
    assert [kind for kind, _, _ in channel.calls] == ["request", "post"]
    other = _Channel(free_below=100)
    ctx = TrialContext(trial_id=2, seed=0, device="cpu", attempt=1, trial_dir=tmp_path,
                       channel=other, objective="score")
    ctx.report(0, score=1.0)
    assert [kind for kind, _, _ in other.calls] == ["post"]


def test_a_pipe_channel_starts_from_the_launchs_free_below():
    channel = PipeChannel(_FakePipe(), 1, window=4, free_below=5)
    assert channel.may_post(4) and not channel.may_post(5)
    assert not PipeChannel(_FakePipe(), 1).may_post(0)


def test_a_channel_without_pipelining_waits_for_every_report(tmp_path):
    class Plain(_Channel):
        may_post = None          # type: ignore[assignment]
    channel = Plain(free_below=100)
    ctx = TrialContext(trial_id=1, seed=0, device="cpu", attempt=1, trial_dir=tmp_path,
                       channel=channel)
    ctx.report(1, loss=1.0)
    assert channel.calls == [("request", 1, None)]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_a_report_with_a_non_finite_metric_waits_for_its_ack_even_below_the_point(tmp_path, bad):
    """The driver may fail the trial on it: the trial must stop at this report, not one later."""
    channel = _Channel(free_below=100)
    ctx = TrialContext(trial_id=1, seed=0, device="cpu", attempt=1, trial_dir=tmp_path,
                       channel=channel)
    ctx.report(1, loss=1.0, other=2)
    ctx.report(2, loss=bad)
    ctx.report(3, loss=0.5, aux=bad)
    ctx.report(4, loss=0.4)
    assert [kind for kind, _, _ in channel.calls] == ["post", "request", "request", "post"]


def _held_channel(pipe, window, free_below=0):
    """A channel whose outbox holds until released (no thread: nothing leaves on a timer)."""
    return PipeChannel(pipe, 1, window=window, free_below=free_below,
                       outbox=Outbox(pipe, hold_s=None))


def _steps(sent):
    """The steps each sent message carries: a report's, a Reports' (a list), or its kind."""
    return [m.step if isinstance(m, Reported) else [s for s, _ in m.results]
            if isinstance(m, Reports) else type(m).__name__ for m in sent]


def test_a_window_lets_that_many_posted_reports_await_their_acks_and_one_ack_covers_several():
    pipe = _FakePipe()
    channel = _held_channel(pipe, window=3)
    for step in (1, 2, 3):
        channel.post(Reported(1, step, {"loss": 1.0}))
    assert pipe.recvs == 0 and _steps(pipe.sent) == [1]     # three in flight, none waited
    pipe.inbox = [Ack(1, 50, 2)]                            # the first two are durable
    channel.post(Reported(1, 4, {"loss": 0.9}))             # the fourth waits for room
    assert pipe.recvs == 1 and channel.free_below == 50
    assert _steps(pipe.sent) == [1, [2, 3]]                 # the held ones left before it waited
    channel.post(Reported(1, 5, {"loss": 0.8}))             # 3 and 4 in flight: room for one
    assert pipe.recvs == 1 and _steps(pipe.sent) == [1, [2, 3]]      # 4 and 5 held
    pipe.inbox = [Ack(1, 50, 1), Ack(1, 50, 3)]
    channel.request(Reported(1, 6, {"loss": 0.7}))          # room for it, then waits for all
    assert pipe.inbox == [] and pipe.recvs == 3
    assert _steps(pipe.sent) == [1, [2, 3], [4, 5], 6]       # held ones first, then it at once
    channel.flush()                                         # nothing in flight: no recv
    assert pipe.recvs == 3


def test_reports_posted_while_earlier_ones_await_their_acks_leave_as_one_message_in_order():
    pipe = _FakePipe()
    channel = _held_channel(pipe, window=32)
    channel.post(Reported(1, 0, {"loss": 1.0}))             # none in flight: leaves at once
    assert _steps(pipe.sent) == [0]
    for step in (1, 2, 3):
        channel.post(Reported(1, step, {"loss": 1.0 / (step + 1)}))
    assert _steps(pipe.sent) == [0]                         # 0 awaits its ack: 1-3 held
    channel.send(Done(1))                                   # the trial's end: held ones first
    assert _steps(pipe.sent) == [0, [1, 2, 3], "Done"]
    assert pipe.sent[1] == Reports(1, ((1, {"loss": 0.5}), (2, {"loss": 1 / 3}),
                                       (3, {"loss": 0.25})))


def test_an_ack_that_leaves_only_held_reports_unacked_sends_them():
    """Seen when the trial asks for a stop (after each report), or at its next report."""
    pipe = _FakePipe()
    channel = _held_channel(pipe, window=32)
    channel.post(Reported(1, 0, {"loss": 1.0}))
    channel.post(Reported(1, 1, {"loss": 0.9}))
    channel.post(Reported(1, 2, {"loss": 0.8}))
    assert _steps(pipe.sent) == [0]
    pipe.inbox = [Ack(1, 99, 1)]                            # 0 is durable; 1 and 2 are held
    assert not channel.stop_requested()
    assert _steps(pipe.sent) == [0, [1, 2]]
    channel.post(Reported(1, 3, {"loss": 0.7}))             # 1 and 2 in flight: held
    pipe.inbox = [Ack(1, 99, 1)]                            # 1 is durable, 2 still in flight
    assert not channel.stop_requested() and _steps(pipe.sent) == [0, [1, 2]]
    pipe.inbox = [Ack(1, 99, 1)]                            # 2 too: the next report takes 3
    channel.stop_requested()
    assert _steps(pipe.sent) == [0, [1, 2], 3]              # alone: a plain report


def test_held_reports_leave_on_the_outboxs_thread_while_the_trial_computes():
    """The bound: what is held leaves ``hold_s`` after it was held, with no call of the trial."""
    import multiprocessing as mp
    from hypersack.runtime.worker.messages import Pipe
    a, b = mp.Pipe()
    worker, driver = Pipe(a), Pipe(b)
    channel = PipeChannel(worker, 1, window=32, outbox=Outbox(worker, hold_s=0.05))
    channel.post(Reported(1, 0, {"loss": 1.0}))
    channel.post(Reported(1, 1, {"loss": 0.9}))
    channel.post(Reported(1, 2, {"loss": 0.8}))
    assert driver.recv() == Reported(1, 0, {"loss": 1.0})
    assert driver.poll(30.0)                                # the trial makes no call meanwhile
    assert driver.recv() == Reports(1, ((1, {"loss": 0.9}), (2, {"loss": 0.8})))
    channel.post(Reported(1, 3, {"loss": 0.7}))             # held again; the thread serves it
    assert driver.poll(30.0) and driver.recv() == Reported(1, 3, {"loss": 0.7})
    channel.send(Done(1))
    assert driver.recv() == Done(1) and not driver.poll(0.1)


def test_a_window_of_one_waits_for_the_posted_report_before_the_next():
    pipe = _FakePipe()
    channel = PipeChannel(pipe, 1, window=1)
    channel.post(Reported(1, 1, {"loss": 1.0}))
    with pytest.raises(AssertionError, match="never sent"):
        channel.post(Reported(1, 2, {"loss": 0.9}))
    assert len(pipe.sent) == 1


def test_the_local_executor_reads_reports_as_events_and_counts_each_for_the_ack():
    import multiprocessing as mp
    from types import SimpleNamespace

    from hypersack.runtime.worker.messages import Pipe
    executor = object.__new__(LocalExecutor)
    executor._awaiting, executor._unacked = {}, {}
    ends = [mp.Pipe() for _ in range(2)]
    rank0 = SimpleNamespace(rank=0, pipe=Pipe(ends[0][1]))
    rank1 = SimpleNamespace(rank=1, pipe=Pipe(ends[1][1]))
    job = SimpleNamespace(trial_id=4, workers=[rank0, rank1])
    executor._jobs = {4: job}
    sender = Pipe(ends[0][0])
    sender.send(Reported(4, 0, {"loss": 0.1}))
    sender.send(Reported(9, 0, {"loss": 0.1}))                 # another trial's: ignored
    sender.send(Reports(4, ((1, {"loss": 0.2}), (2, {"loss": 0.3}))))
    events = executor._drain(job, rank0)
    assert events == [ResultReported(4, 0, {"loss": 0.1}), ResultReported(4, 1, {"loss": 0.2}),
                      ResultReported(4, 2, {"loss": 0.3})]
    assert all(type(e) is ResultReported for e in events)
    assert executor._awaiting == {4: rank0} and executor._unacked == {4: 3}
    Pipe(ends[1][0]).send(Reports(4, ((1, {"loss": 0.2}),)))    # a rank other than 0: ignored
    assert executor._drain(job, rank1) == [] and executor._unacked == {4: 3}


def test_the_local_executor_hands_the_launchs_free_below_to_the_task(tmp_path):
    from types import SimpleNamespace

    from hypersack.core.trial import Launch
    from hypersack.runtime.worker.messages import WorldSpec
    executor = object.__new__(LocalExecutor)
    executor._trainable = SimpleNamespace(key="k", reference=None, payload=None)
    executor._trial_dir = lambda trial_id: tmp_path / str(trial_id)
    executor._metric, executor._window, executor._unsafe_checkpoints = "score", 32, False
    executor._max_log_bytes = None
    executor._steps_for = lambda config: None
    executor._profile = lambda config: False
    worker = SimpleNamespace(has_trainable=True, slot=SimpleNamespace(device="cpu"))
    launch = Launch(3, {"x": 1}, seed=0, attempt=1, free_below=NO_DECISION)
    task = executor._task(launch, worker, WorldSpec())
    assert task.free_below == NO_DECISION and task.report_window == 32


def _three_reports(config, ctx):
    for step in range(3):
        ctx.report(step, loss=1.0 - step / 10)


def test_a_trial_ends_without_waiting_for_the_acks_of_its_posted_reports(tmp_path):
    """The worker sends Done behind its posted reports at once (the pipe keeps the order, and
    the driver stores them before or with the end): no recv, so no turn of the driver's just
    for the acks; the stale acks that come later name this trial and are ignored."""
    from hypersack.runtime.worker.messages import TrialTask, WorldSpec
    from hypersack.runtime.worker.process import run_task

    pipe = _FakePipe()                 # recv raises: nothing may wait for the driver
    task = TrialTask(7, {}, 0, 1, "cpu", str(tmp_path / "t7"), "loss", None, WorldSpec(), False,
                     None, False, ("three", None, None), report_window=32, free_below=100)
    run_task(pipe, task, {"three": _three_reports}, Outbox(pipe, hold_s=None))
    assert pipe.recvs == 0
    assert _steps(pipe.sent) == ["Started", 0, [1, 2], "Done"]


@pytest.mark.parametrize("ending", ["returns", "raises", "stopped"])
def test_a_trials_held_reports_leave_before_how_it_ended(tmp_path, ending):
    """Done or Failed never overtakes a held report: the driver stores them all first."""
    from hypersack.runtime.worker import process
    from hypersack.runtime.worker.messages import TrialTask, WorldSpec
    pipe = _FakePipe()

    def train(config, ctx):
        for step in range(4):
            if ending == "stopped" and step == 2:
                pipe.inbox.append(StopTrial(1))          # seen after the report at step 2
            ctx.report(step, loss=1.0 / (step + 1))
        if ending == "raises":
            raise ValueError("boom")
    task = TrialTask(1, {}, 0, 1, "cpu", str(tmp_path / "t"), "loss", None, WorldSpec(), False,
                     None, False, ("k", None, None), report_window=32, free_below=NO_DECISION)
    process.run_task(pipe, task, {"k": train}, Outbox(pipe, hold_s=None))
    end = {"returns": "Done", "raises": "Failed", "stopped": "Done"}[ending]
    held = [1, 2] if ending == "stopped" else [1, 2, 3]
    assert _steps(pipe.sent) == ["Started", 0, held, end]


def test_the_readers_events_are_made_as_their_class_makes_them_unless_its_init_does_more():
    import dataclasses

    from hypersack.runtime.executors import local
    assert local._new_result is local._fast_result          # ResultReported only sets fields
    made = local._fast_result(4, 2, {"loss": 0.5}, "c")
    assert made == ResultReported(4, 2, {"loss": 0.5}, "c") and type(made) is ResultReported
    assert local._fast_result(4, 2, {"loss": 0.5}) == ResultReported(4, 2, {"loss": 0.5})
    assert repr(made) == repr(ResultReported(4, 2, {"loss": 0.5}, "c"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.step = 3                                        # type: ignore[misc]
    names = ("trial_id", "step", "metrics", "checkpoint")

    @dataclasses.dataclass(frozen=True)
    class Plain:
        trial_id: int
        step: int
        metrics: dict
        checkpoint: str | None = None

    @dataclasses.dataclass(frozen=True)
    class Checks(Plain):
        def __post_init__(self):
            pass

    @dataclasses.dataclass(frozen=True)
    class More(Plain):
        extra: int = 0

    @dataclasses.dataclass(frozen=True, slots=True)
    class Slotted:
        trial_id: int
        step: int
        metrics: dict
        checkpoint: str | None = None

    @dataclasses.dataclass(frozen=True)
    class Hidden(Plain):
        seen: dataclasses.InitVar[int] = 0

    assert local._plain_init(Plain, names)
    for cls in (Checks, More, Slotted, Hidden, dict):
        assert not local._plain_init(cls, names), cls
    assert not local._plain_init(Plain, names[:3])
