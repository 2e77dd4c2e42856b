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
               m.Reports(3, ((5, {"loss": 0.5}), (6, {"loss": 0.4}))),
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


def test_a_burst_read_in_one_go_comes_out_message_by_message_in_order():
    """The reader takes what the socket holds at once and splits it: a large message (split over
    several reads) among small ones, and ``poll`` true while a whole one waits in its buffer."""
    import multiprocessing as mp
    a, b = mp.Pipe()
    left, right = m.Pipe(a), m.Pipe(b)
    big = m.Failed(7, "x" * 100_000, None, False, False)
    burst = [m.Reported(7, s, {"loss": 1.0 / (s + 1)}, None) for s in range(5)] + [big, m.Done(7)]
    import threading
    for message in burst[:5]:
        left.send(message)
    sender = threading.Thread(target=lambda: [left.send(x) for x in burst[5:]])   # the big one
    got = [right.recv()]                                                 # may fill the socket
    assert len(right._buffer) > 0          # one read took more than the first message
    sender.start()
    while len(got) < len(burst) and right.poll(1.0):
        got.append(right.recv())
    sender.join(5.0)
    assert got == burst and not right.poll()
    left.close()
    with pytest.raises(EOFError):
        right.recv()


def test_a_report_already_plain_is_taken_as_sent_and_others_are_checked():
    import multiprocessing as mp
    a, b = mp.Pipe()
    left, right = m.Pipe(a), m.Pipe(b)
    plain = m.Reported(1, 3, {"loss": 0.5, "n": 2}, None)
    left.send(plain)
    assert right.recv() is not plain and right._buffer == bytearray()
    left.send(m.Reported(1, 3, {"flag": True}, None))        # a bool slipped past ctx.report
    with pytest.raises(m.BadMessage, match="flag"):
        right.recv()
    left.send(m.Reported(1, 2**60, {"loss": 0.5}, None))     # a step beyond MAX_STEP
    with pytest.raises(m.BadMessage):
        right.recv()


def test_a_reader_may_build_its_own_objects_from_a_messages_checked_fields():
    """``recv(make)``: the maker gets the field values (a report's made plain first); classes
    it does not name come as messages."""
    import multiprocessing as mp
    import numpy as np
    a, b = mp.Pipe()
    left, right = m.Pipe(a), m.Pipe(b)
    make = {m.Reported: lambda *values: ("made", values), m.Reports: lambda *values: values}
    left.send(m.Reported(1, np.int64(3), {"loss": np.float32(0.5)}, "c"))
    left.send(m.Reports(1, ((4, {"loss": 0.25}),)))
    left.send(m.Done(1))
    made = right.recv(make)
    assert made == ("made", (1, 3, {"loss": 0.5}, "c")) and type(made[1][1]) is int
    assert right.recv(make) == (1, ((4, {"loss": 0.25}),))
    assert right.recv(make) == m.Done(1)


def test_a_reports_message_is_checked_like_its_reports_and_a_bad_one_leaves_the_stream_in_step():
    import multiprocessing as mp
    import pickle
    import numpy as np
    a, b = mp.Pipe()
    left, right = m.Pipe(a), m.Pipe(b)
    left.send(m.Reports(1, ((1, {"loss": 0.5}), (np.int64(2), {"loss": np.float64(0.25)}))))
    got = right.recv()
    assert got == m.Reports(1, ((1, {"loss": 0.5}), (2, {"loss": 0.25})))
    assert type(got.results[1][0]) is int and type(got.results[1][1]["loss"]) is float
    bad = [((1, {"loss": 0.5}), (2, {"flag": True})),      # a bool slipped past ctx.report
           ((1, {"loss": 0.5}), (2**60, {"loss": 0.5})),   # a step beyond MAX_STEP
           (), ((1, {"loss": 0.5}), 7), 5]                 # no results; not pairs
    for results in bad:
        a.send_bytes(pickle.dumps(("reports", 1, results)))
        a.send_bytes(pickle.dumps(("done", 1)))
        with pytest.raises(m.BadMessage):
            right.recv()
        assert right.recv() == m.Done(1)                   # the next one reads as sent
