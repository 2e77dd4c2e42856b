"""Driver <-> worker messages: every kind round-trips through the one codec."""
import pytest

from hypersack.runtime.worker import messages as m


def test_every_message_round_trips_and_nested_tasks_too():
    task = m.TrialTask(3, {"lr": 0.1}, 7, 2, "cpu", "/runs/t", "loss", 10, m.WorldSpec(2, 1, 555),
                       True, "checkpoint-a1-1.pt", False, ("k", "mod:fn", None))
    spec = m.PackSpec(1, ("k", None, b"x"), "cuda:0", 8, {"lr": 0.1}, "/runs/p.log")
    member = m.MemberTask(4, {"lr": 0.2}, 9, 1, "/runs/t4", None, None, True)
    samples = [m.RunTrial(task), m.StartPack(spec), m.AddMember(member), m.StopTrial(3), m.Ack(3),
               m.EndPack(), m.Shutdown(), m.Started(3), m.Reported(3, 5, {"loss": 0.5}, "c"),
               m.Profiled(3, {"t": 1.0}), m.Done(3), m.Failed(3, "boom", "tb", True, False),
               m.PackCap(2), m.PackFailed("oom", None, True)]
    for message in samples:
        wire = m.encode(message)
        assert isinstance(wire, tuple) and wire[0] == type(message).tag
        assert m.decode(wire) == message
    assert m.encode(m.RunTrial(task))[1][0] == "trial-task"      # nested: encoded as well


def test_unknown_or_malformed_wire_is_a_clear_error():
    with pytest.raises(ValueError, match="not a HyperSack message"):
        m.decode(("nope", 1))
    with pytest.raises(ValueError, match="not a HyperSack message"):
        m.decode({"run": 1})
    with pytest.raises(ValueError, match="has 2 fields, expected 1"):
        m.decode(("stop", 1, 2))


def test_pipe_poll_sees_a_waiting_message_and_the_end_of_the_connection():
    import multiprocessing as mp
    a, b = mp.Pipe()
    left, right = m.Pipe(a), m.Pipe(b)
    assert not right.poll() and not right.poll(0.01)
    left.send(m.Ack(3, 2))
    assert right.poll() and right.poll()          # polling twice reads nothing
    assert right.recv() == m.Ack(3, 2) and not right.poll()
    left.close()
    assert right.poll()                           # the end is readable: recv says EOF
    with pytest.raises(EOFError):
        right.recv()
    right.close()
    with pytest.raises(OSError):
        right.poll()
