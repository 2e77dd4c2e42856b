"""The Profiler with an injected clock and probes; profile_trainable over real trainables."""
from __future__ import annotations

import pytest

from hypersack.errors import ConfigError
from hypersack.runtime.devices.nvml import FakeNvml
from hypersack.runtime.devices.profile_trainable import profile_trainable
from hypersack.runtime.devices.profiler import (NullProfiler, Profile, ProfilingError, Profiler,
                                                UtilizationMeter, _nvml_reader)


class Clock:
    """Advances only when told: ``tick(dt)``."""

    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t

    def tick(self, dt: float) -> None:
        self.t += dt


def test_iterations_exclude_warmup_and_split_data_time():
    clock = Clock()
    resets = []
    s = Profiler(iterations=3, warmup=1, clock=clock, peak_memory=lambda: 3 * 1024 ** 3,
                reset_memory=lambda: resets.append(clock.t), arch="cpu")
    durations = [(5.0, 9.0), (0.5, 1.5), (0.5, 1.5), (1.0, 2.0), (7.0, 7.0)]
    for data, compute in durations:
        with s.iteration():
            clock.tick(data)
            s.data_loaded()
            clock.tick(compute)
    assert s.done and s.measured == 3
    p = s.profile()
    assert p.time_per_iter_s == pytest.approx(2.0)             # median of 2, 2, 3
    assert p.data_time_fraction == pytest.approx(2.0 / 7.0)
    assert p.peak_memory_gb == pytest.approx(3.0)
    assert p.gpu_util_percent is None and p.iters_measured == 3 and p.device_arch == "cpu"
    assert resets == [114.0]          # peak memory is reset when the first measured one starts
    assert p.epoch_time_s(100) == pytest.approx(200.0)
    assert p.job_time_s(100, 3) == pytest.approx(600.0)


def test_failed_iteration_is_not_counted():
    clock = Clock()
    s = Profiler(iterations=2, warmup=0, clock=clock, peak_memory=lambda: 0, reset_memory=lambda: None)
    with pytest.raises(RuntimeError):
        with s.iteration():
            clock.tick(50)
            raise RuntimeError("nan loss")
    with s.iteration():
        clock.tick(1)
    assert s.measured == 1 and s.profile().time_per_iter_s == 1.0


def test_marks_delimit_iterations():
    clock = Clock()
    s = Profiler(iterations=2, warmup=1, clock=clock, peak_memory=lambda: 0, reset_memory=lambda: None)
    s.mark()
    for dt in (10, 1, 3, 99):
        clock.tick(dt)
        s.mark()
    assert s.profile().time_per_iter_s == pytest.approx(2.0)
    assert s.profile().data_time_fraction == 0.0


def test_no_measured_iteration_is_an_error():
    s = Profiler(iterations=2, warmup=1, peak_memory=lambda: 0, reset_memory=lambda: None)
    with s.iteration():
        pass
    with pytest.raises(ProfilingError, match="at least 2 iterations"):
        s.profile()


def test_utilisation_is_averaged_over_measured_iterations_only():
    readings = iter([40.0, None, 60.0, 80.0, 80.0, 80.0, 80.0] + [80.0] * 1000)
    clock = Clock()
    started = []

    def read():
        started.append(True)
        return next(readings)

    s = Profiler(iterations=1, warmup=1, clock=clock, peak_memory=lambda: 0,
                reset_memory=lambda: None, utilization=read, util_interval_s=3600)
    with s.iteration():
        clock.tick(1)
    assert started == []                # no sampling during warm-up
    with s.iteration():
        clock.tick(1)
    assert s.profile().gpu_util_percent == pytest.approx(40.0)   # the final reading at stop


def test_utilization_sampler_thread_skips_none_and_errors():
    values = iter([None, 10.0, ValueError, 30.0] + [None] * 100000)

    def read():
        v = next(values)
        if v is ValueError:
            raise ValueError("nvml hiccup")
        return v

    u = UtilizationMeter(read, interval_s=0.001)
    u.start()
    import time
    deadline = time.monotonic() + 10
    while len(u.readings) < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    u.stop()
    assert u.readings == [10.0, 30.0] and u.mean == 20.0


def test_nvml_reader_reads_the_first_visible_gpu():
    fake = FakeNvml([("NVIDIA L4", 24), ("NVIDIA H100 80GB HBM3", 80)])
    fake.set_load(fake.devices[1].uuid, utilization=55)
    read = _nvml_reader(fake, cuda_visible="1")
    assert read() == 55.0
    assert _nvml_reader(FakeNvml(init_error=9), cuda_visible=None) is None
    assert _nvml_reader(fake, cuda_visible="") is None


def test_bad_arguments():
    with pytest.raises(ConfigError, match="profiling.iterations"):
        Profiler(iterations=0)
    with pytest.raises(ConfigError, match="profiling.warmup"):
        Profiler(warmup=-1)


def test_profile_round_trips_through_a_dict():
    p = Profile(0.1, 2.5, 40.0, 0.2, 10, "H100")
    assert Profile.from_dict(p.to_dict()) == p


# ---- profile_trainable: real trainables, real clock ------------------------------------------

def reporting_trainable(config, ctx):
    """Reports every step; never stops by itself."""
    step = 0
    while True:
        sum(i * i for i in range(config["work"]))
        step += 1
        ctx.report(step, loss=1.0 / step)


def sampler_trainable(config, ctx):
    """Times its own iterations and reports once per 'epoch' of 1000 iterations."""
    for epoch in range(1000):
        for _ in range(1000):
            with ctx.profiler.iteration():
                data = list(range(config["work"]))
                ctx.profiler.data_loaded()
                sum(i * i for i in data)
        ctx.report(epoch, loss=1.0)


def test_profile_trainable_stops_a_reporting_trainable():
    p = profile_trainable(reporting_trainable, {"work": 2000}, n_iters=5)
    assert p.iters_measured == 5 and p.time_per_iter_s > 0
    assert p.device_arch == "cpu" and p.gpu_util_percent is None
    assert p.peak_memory_gb > 0.001           # the process's real peak RSS


def test_profile_trainable_with_explicit_iterations_stops_mid_epoch():
    p = profile_trainable(sampler_trainable, {"work": 2000}, n_iters=4, warmup=2)
    assert p.iters_measured == 4
    assert 0 < p.data_time_fraction < 1


def test_profile_trainable_that_ends_too_early():
    def two_steps(config, ctx):
        ctx.report(1, loss=1.0)

    with pytest.raises(ProfilingError):
        profile_trainable(two_steps, {}, n_iters=3)


def test_profile_trainable_torch_model():
    torch = pytest.importorskip("torch")

    def train(config, ctx):
        torch.manual_seed(0)
        model = torch.nn.Linear(32, 4)
        opt = torch.optim.SGD(model.parameters(), lr=config["lr"])
        for step in range(100):
            with ctx.profiler.iteration():
                x, y = torch.randn(config["batch_size"], 32), torch.randint(0, 4, (config["batch_size"],))
                ctx.profiler.data_loaded()
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
            ctx.report(step, loss=loss)

    p = profile_trainable(train, {"lr": 0.1, "batch_size": 16}, n_iters=3)
    assert p.iters_measured == 3 and p.time_per_iter_s > 0


def test_null_sampler_runs_the_body_and_measures_nothing():
    s, ran = NullProfiler(), []
    for _ in range(3):
        with s.iteration():
            s.data_loaded()
            ran.append(1)
        s.mark()
    assert ran == [1, 1, 1] and not s.done and s.measured == 0


def test_ctx_sampler_is_the_profiler_under_its_old_name_with_a_warning():
    """Glossary: the paper's Sampler is the *profiler*; ``ctx.sampler`` still works, warning."""
    import warnings as _warnings

    from hypersack.runtime.worker.context import TrialContext
    ctx = object.__new__(TrialContext)
    ctx._profiler_override, ctx._meter = "mine", None
    with pytest.warns(DeprecationWarning, match="ctx.profiler"):
        assert ctx.sampler == "mine"
    with _warnings.catch_warnings():
        _warnings.simplefilter("error")
        assert ctx.profiler == "mine"
