"""``fill``'s kicks and polish moves (hypersack/placement/fill_kernels.py): the undo journal
restores a kick exactly, the kicks never lower an answer, stop at the value asked (``enough`` x
the dual bound) and after ``max(patience, 3 per GPU)`` kicks without a gain, the pools (every job in
a fixed order, members = the unplaced jobs) give the moves of sorted pools, refill and evict skip
only GPUs where they cannot gain, and the compiled kernels equal their Python source."""
from __future__ import annotations

import numpy as np
import pytest

from hypersack.placement import jit
from hypersack.placement import fill as F
from hypersack.placement import fill_kernels as fk
from hypersack.placement.instances import tight_instance

MIN_GAIN = 0.25


def _state(seed: int, kicks: int = 0):
    """Seed ``seed``'s tight instance: the call and ``fill``'s polished best answer (no kicks)."""
    job_list, cluster = tight_instance(seed)
    call = F._prepare(job_list, cluster)
    assert isinstance(call, F._Call)
    where, value, _, _ = F._search(call, 2, MIN_GAIN, F.STEPS, F.POLISH, 2.0, kicks, 0, 1)
    return call, where, value


def _kicks(call, where, value, kicks, patience=0, stop=np.inf, seed=1, kernel=None):
    """``_kicks_on`` with ``fill``'s kick settings (``kernel``: the kernel or its ``py_func``)."""
    arrays = call.arrays
    run = kernel or fk._kicks_on
    return run(kicks, patience, seed, *F._KICK, MIN_GAIN, stop, where, value, call.c, call.m, call.q,
               arrays.garch, arrays.gnode, fk._pools(call.c, arrays.n_arch), arrays.n_arch, *call.base)


def _loads_ok(call, where):
    """Every load left >= -EPS (Eq. 2-4) after taking ``where``."""
    arrays = call.arrays
    fc, fm, fq = fk.retake(where, np.arange(len(where)), call.c, call.m, call.q, arrays.garch, arrays.gnode,
                           *call.base)
    return fc.min() >= -fk.EPS and fm.min() >= -fk.EPS and fq.min() >= -fk.EPS


@pytest.mark.parametrize("seed", [3, 30, 96])
def test_the_undo_journal_restores_a_kick_exactly(seed):
    call, where, _ = _state(seed)
    arrays = call.arrays
    c, m, q, garch, gnode = call.c, call.m, call.q, arrays.garch, arrays.gnode
    fc, fm, fq = fk.retake(where, np.arange(len(where)), c, m, q, garch, gnode, *call.base)
    pool, npool, ong, nong = fk._lists(where, c, garch, arrays.n_arch)
    before = [x.copy() for x in (where, fc, fm, fq, pool, npool, ong, nong)]
    journal = (np.empty((2, len(where)), dtype=np.int64), np.empty(2, dtype=np.int64), np.empty(2), np.empty(2),
               np.empty(2))
    state, moved = 12345, 0
    for first, second in ((0, 5), (1, 2), (len(garch) - 1, 0)):
        local = np.array([first, second], dtype=np.int64)
        fk._save(local, ong, nong, fc, fm, fq, gnode, *journal)
        saved_npool = npool.copy()
        for t in range(2):
            state = fk._kick(state, local[t], c, m, q, garch, gnode, where, fc, fm, fq, pool, npool, ong, nong)
        fk.polish(2, MIN_GAIN, local, True, c, m, q, garch, gnode, where, fc, fm, fq, pool, npool, ong, nong)
        moved += not np.array_equal(where, before[0])
        fk._undo(local, where, ong, nong, fc, fm, fq, gnode, *journal)
        npool[:] = saved_npool
        after = (where, fc, fm, fq, pool, npool, nong)
        for x, y in zip(after, before[:6] + [before[7]]):
            assert np.array_equal(x, y)                  # exact: the saved values, not recomputed
        for i in range(len(garch)):
            assert np.array_equal(ong[i, :nong[i]], before[6][i, :nong[i]])
    assert moved                                         # the kicks changed the answer before the undo


@pytest.mark.parametrize("seed", [3, 11, 30, 75])
def test_kicks_never_lower_an_answer_and_report_its_value(seed):
    call, where, value = _state(seed)
    start = where.copy()
    got = _kicks(call, where, value, 120)
    assert got >= value - fk.EPS
    assert got == pytest.approx(fk.value_of(where, call.c, call.arrays.garch), abs=1e-6)
    assert _loads_ok(call, where)
    again = start.copy()                                  # deterministic: same generator, same answer
    assert _kicks(call, again, value, 120) == got and np.array_equal(again, where)


def _values_by_count(call, where, value, count):
    """The value after k kicks without patience, for k = 0..count (the same generator)."""
    out = [value]
    for k in range(1, count + 1):
        out.append(_kicks(call, where.copy(), value, k))
    return out


def test_the_kicks_stop_once_the_value_asked_is_reached():
    call, where, value = _state(30)                      # the kicks gain here
    untouched = where.copy()
    assert _kicks(call, untouched, value, 300, stop=value) == value   # reached before any kick
    assert np.array_equal(untouched, where)
    values = _values_by_count(call, where, value, 150)
    first = next(k for k in range(151) if values[k] > value + fk.EPS)   # the first gain
    stop = (value + values[first]) / 2
    stopped, expected = where.copy(), where.copy()
    got = _kicks(call, stopped, value, 300, stop=stop)
    assert got == _kicks(call, expected, value, first) == values[first]
    assert np.array_equal(stopped, expected)
    assert _kicks(call, where.copy(), value, 300) > got  # without the stop the kicks go on gaining


@pytest.mark.parametrize("patience", [1, 30])
def test_patience_stops_after_at_least_three_kicks_per_gpu_without_a_gain(patience):
    call, where, value = _state(31)                     # 8 GPUs: at least 24 kicks of patience
    wait = max(patience, fk.PATIENCE_PER_GPU * len(call.arrays.garch))
    values = _values_by_count(call, where, value, 90)
    last, stop = 0, 90
    for k in range(1, 91):
        if values[k] > values[k - 1] + fk.EPS:
            last = k
        elif k - last >= wait:
            stop = k
            break
    assert 0 < last < stop < 90                          # a gain, then such a plateau
    patient = where.copy()
    got = _kicks(call, patient, value, 90, patience=patience)
    expected = where.copy()
    assert got == _kicks(call, expected, value, stop)
    assert np.array_equal(patient, expected)


def test_the_pools_are_every_job_in_order_and_their_members_the_unplaced_jobs():
    call, where, _ = _state(11)
    arrays = call.arrays
    pool, npool, ong, nong = fk._lists(where, call.c, arrays.garch, arrays.n_arch)
    for a in range(arrays.n_arch):
        keys = [(call.c[p, a], p) for p in pool[a]]
        assert keys == sorted(keys) and sorted(pool[a]) == list(range(len(where)))
        members = [p for p in pool[a] if where[p] < 0]
        assert npool[a] == len(members)
        top = fk._below(pool, a, len(where) - 1, where)
        assert pool[a, top] == members[-1]
        k = fk._below(pool, a, fk._upto(pool, a, 20.0, call.c) - 1, where)
        assert pool[a, k] == [p for p in members if call.c[p, a] <= 20.0][-1]
    for i in range(len(arrays.garch)):
        jobs_on = [p for p in range(len(where)) if where[p] == i]
        assert sorted(ong[i, :nong[i]]) == jobs_on


def _one_gpu(placed, unplaced):
    """One GPU (architecture 0, node 0; 100 compute, 80 GB, 64 cores) with jobs ``placed`` and the
    pool ``unplaced``: jobs as (compute, memory, cores). The arrays of the search state."""
    demands = placed + unplaced
    jc = np.array([[c] for c, _, _ in demands])
    jm = np.array([[m] for _, m, _ in demands])
    jq = np.array([float(q) for _, _, q in demands])
    garch, gnode = np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
    where = np.array([0] * len(placed) + [-1] * len(unplaced), dtype=np.int64)
    fc, fm, fq = fk.retake(where, np.arange(len(where)), jc, jm, jq, garch, gnode, np.array([100.0]),
                           np.array([80.0]), np.array([64.0]))
    pool, npool, ong, nong = fk._lists(where, jc, garch, 1)
    return jc, jm, jq, garch, gnode, where, fc, fm, fq, pool, npool, ong, nong


def test_a_refill_gaining_just_the_compute_left_is_found():
    # 99.7 placed (0.3 left, above min_gain): 10 out, 5.15 + 5.15 in gains 0.3; no add fits
    state = _one_gpu([(10.0, 1, 1), (89.7, 1, 1)], [(5.15, 1, 1), (5.15, 1, 1)])
    picked = np.empty(fk.REFILL_SCAN, dtype=np.int64)
    p, count = fk._best_refill(0, MIN_GAIN, picked, *state)
    assert (p, count) == (0, 2)
    assert fk._best_refill(0, 0.31, picked, *state) == (-1, 0)        # 0.3 < 0.31: no refill gains


def test_an_evict_gaining_just_the_compute_left_is_found():
    # 4 + 4 out, 8.3 in: gains 0.3 = the compute left; it does not fit without the two out
    state = _one_gpu([(4.0, 1, 1), (4.0, 1, 1), (91.7, 1, 1)], [(8.3, 1, 1)])
    outs = np.empty(3, dtype=np.int64)
    scratch, who = np.empty((512, 3)), np.empty((512, 3), dtype=np.int64)
    count, u = fk._best_evict(0, MIN_GAIN, outs, scratch, who, *state)
    assert (count, u) == (2, 3) and sorted(outs[:2]) == [0, 1]
    assert fk._best_evict(0, 0.31, outs, scratch, who, *state) == (0, -1)


@pytest.mark.skipif(not jit.COMPILED, reason="numba is not installed (pip install hypersack[fast])")
def test_compiled_kicks_and_their_python_source_give_identical_answers():
    for seed, patience, stop in ((3, 1, np.inf), (30, 40, np.inf), (30, 0, 2540.0)):
        call, where, value = _state(seed)
        compiled, plain = where.copy(), where.copy()
        got = _kicks(call, compiled, value, 80, patience=patience, stop=stop)
        assert _kicks(call, plain, value, 80, patience=patience, stop=stop, kernel=fk._kicks_on.py_func) == got
        assert np.array_equal(compiled, plain)


def _polish_always_searching(rounds, gpus, evict, c, m, q, garch, gnode, where, fc, fm, fq, pool, npool, ong,
                             nong):
    """``polish`` as it was: the last add/swap pass always run (the reference for the skip)."""
    picked, outs, scratch, who = fk._room()
    for _ in range(max(1, 2 * rounds)):
        fk.search(rounds, MIN_GAIN, gpus, c, m, q, garch, gnode, where, fc, fm, fq, pool, npool, ong, nong)
        refilled = fk._refills(rounds, MIN_GAIN, gpus, picked, c, m, q, garch, gnode, where, fc, fm, fq, pool,
                               npool, ong, nong)
        evicted = evict and fk._evicts(rounds, MIN_GAIN, gpus, outs, scratch, who, c, m, q, garch, gnode, where,
                                       fc, fm, fq, pool, npool, ong, nong)
        if not (refilled or evicted):
            break
    fk.search(rounds, MIN_GAIN, gpus, c, m, q, garch, gnode, where, fc, fm, fq, pool, npool, ong, nong)


@pytest.mark.parametrize("rounds", [1, 2])
def test_polish_skips_only_a_last_search_that_could_not_move(rounds):
    skipped = 0
    for seed in range(0, 40, 3):
        job_list, cluster = tight_instance(seed)
        call = F._prepare(job_list, cluster)
        if not isinstance(call, F._Call):
            continue
        arrays = call.arrays
        c, m, q, garch, gnode = call.c, call.m, call.q, arrays.garch, arrays.gnode
        answers = []
        for run in (fk.polish, _polish_always_searching):
            where = call.wfd_where.copy()
            fc, fm, fq = fk.retake(where, np.arange(len(where)), c, m, q, garch, gnode, *call.base)
            pool, npool, ong, nong = fk._lists(where, c, garch, arrays.n_arch)
            args = (c, m, q, garch, gnode, where, fc, fm, fq, pool, npool, ong, nong)
            if run is fk.polish:
                run(rounds, MIN_GAIN, np.arange(len(garch)), True, *args)
            else:
                run(rounds, np.arange(len(garch)), True, *args)
            answers.append(where.tolist())
            # settled or not, one more pass moves nothing when polish skipped it
            skipped += run is fk.polish and not fk.search(1, MIN_GAIN, np.arange(len(garch)), *args)
        assert answers[0] == answers[1]
    assert skipped > 0


def test_fill_search_passes_enough_times_the_bound_to_the_kicks():
    job_list, cluster = tight_instance(30)
    call = F._prepare(job_list, cluster)
    assert isinstance(call, F._Call)
    where, value, ceiling, _ = F._search(call, 2, MIN_GAIN, F.STEPS, F.POLISH, 2.0, 0, 0, 1)
    values = _values_by_count(call, where, value, 150)
    first = next(k for k in range(151) if values[k] > value + fk.EPS)
    enough = (call.fixed_value + (value + values[first]) / 2) / ceiling
    _, stopped, _, _ = F._search(call, 2, MIN_GAIN, F.STEPS, F.POLISH, enough, 300, 0, 1)
    assert stopped == values[first]
    _, going_on, _, _ = F._search(call, 2, MIN_GAIN, F.STEPS, F.POLISH, 2.0, 300, 0, 1)
    assert going_on > stopped


def test_polish_runs_the_last_search_when_a_pass_that_moved_ended_the_search():
    # GPU 0 (70 placed, 30 left) takes nothing unplaced; GPU 1 (30 + 40) swaps its 30 for the
    # 50 unplaced: the 30 then fits GPU 0, but only a further pass (the last search) places it
    demands = [(70.0, 1, 1), (30.0, 1, 1), (40.0, 1, 1), (50.0, 1, 1)]
    jc = np.array([[c] for c, _, _ in demands])
    jm = np.array([[float(m)] for _, m, _ in demands])
    jq = np.array([float(q) for _, _, q in demands])
    garch, gnode = np.zeros(2, dtype=np.int64), np.zeros(2, dtype=np.int64)
    where = np.array([0, 1, 1, -1], dtype=np.int64)
    fc, fm, fq = fk.retake(where, np.arange(4), jc, jm, jq, garch, gnode, np.array([100.0, 100.0]),
                           np.array([80.0, 80.0]), np.array([64.0]))
    pool, npool, ong, nong = fk._lists(where, jc, garch, 1)
    fk.polish(1, MIN_GAIN, np.arange(2), True, jc, jm, jq, garch, gnode, where, fc, fm, fq, pool, npool, ong, nong)
    assert where.tolist() == [0, 0, 1, 1]


def test_the_add_swap_scan_looks_past_unplaced_jobs_that_do_not_fit():
    # 30 left; the two largest unplaced jobs below it need 90 GB: the third (27) is the add
    state = _one_gpu([(70.0, 1, 1)], [(29.0, 90, 1), (28.0, 90, 1), (27.0, 1, 1)])
    gain, out, u = fk._best_move(0, MIN_GAIN, *state)
    assert (gain, out, u) == (27.0, -1, 3)
