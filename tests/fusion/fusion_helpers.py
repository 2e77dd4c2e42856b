"""A tiny fusable task (BatchNorm + dropout, 40 samples), a recording member source, and
stand-ins for a CUDA graph and the allocator's graph pools."""
from __future__ import annotations

import weakref
from typing import Any, Mapping

import torch
from torch import nn

from hypersack.fusion.optim import OptimizerConfig, Schedule
from hypersack.fusion.runner import run_pack
from hypersack.fusion.task import FusableTask, Member

N_TRAIN, N_VAL, FEATURES, CLASSES = 40, 12, 6, 3


class TinyTask(FusableTask):
    """Linear -> BatchNorm1d -> ReLU -> Dropout -> Linear on fixed random data.

    Config: hidden (architecture), batch_size, epochs, dropout, bn (bool, architecture),
    optimizer kind and any OptimizerConfig field (lr, momentum, nesterov, betas, ...),
    schedule (a Schedule or None).
    """

    name = "tiny"
    architecture_keys = ("hidden", "bn")

    def __init__(self):
        g = torch.Generator().manual_seed(123)
        self._x = torch.randn(N_TRAIN + N_VAL, FEATURES, generator=g)
        self._y = torch.randint(0, CLASSES, (N_TRAIN + N_VAL,), generator=g)

    def build_model(self, config):
        hidden, bn = config.get("hidden", 8), config.get("bn", True)
        # No bias before BatchNorm: its true gradient is 0, and Adam/Adagrad would turn the
        # rounding noise of that 0 into lr-sized steps (ill-conditioned for an exactness test).
        layers = [nn.Linear(FEATURES, hidden, bias=not bn)]
        if bn:
            layers.append(nn.BatchNorm1d(hidden))
        layers += [nn.ReLU(), nn.Dropout(config.get("dropout", 0.0)), nn.Linear(hidden, CLASSES)]
        return nn.Sequential(*layers)

    def optimizer(self, config, steps_per_epoch):
        fields = {k: v for k, v in config.items() if k in OptimizerConfig.__dataclass_fields__}
        fields["kind"] = config.get("optimizer", "adam")
        fields.setdefault("schedule", Schedule())
        return OptimizerConfig(**fields)

    def batch_size(self, config):
        return config.get("batch_size", 8)

    def max_steps(self, config, default):
        return config.get("epochs", default or 2)

    def train_data(self):
        return self._x[:N_TRAIN], self._y[:N_TRAIN]

    def val_data(self):
        return self._x[N_TRAIN:], self._y[N_TRAIN:]

    def loss(self, outputs, targets):
        return nn.functional.cross_entropy(outputs, targets, reduction="none")

    def metrics(self, outputs, targets):
        return {"loss": nn.functional.cross_entropy(outputs, targets).item()}


class ListSource:
    """Hands out members in order; records everything; ``stop_at[trial_id] = step`` stops."""

    def __init__(self, members: list[Member], stop_at: Mapping[int, int] | None = None):
        self.pending = list(members)
        self.stop_at = dict(stop_at or {})
        self.reports: dict[int, list[tuple[int, dict]]] = {}
        self.checkpoints: dict[int, Any] = {}
        self.events: list[tuple] = []
        self.failures: dict[int, BaseException] = {}

    def next_member(self):
        member = self.pending.pop(0) if self.pending else None
        if member is not None:
            self.events.append(("load", member.trial_id))
        return member

    def checkpoint(self, trial_id, state):
        self.checkpoints[trial_id] = state

    def report(self, trial_id, step, metrics):
        self.reports.setdefault(trial_id, []).append((step, dict(metrics)))
        self.events.append(("report", trial_id, step))
        return self.stop_at.get(trial_id) == step

    def finished(self, trial_id):
        self.events.append(("finished", trial_id))

    def failed(self, trial_id, error):
        self.failures[trial_id] = error
        self.events.append(("failed", trial_id))


def run_members(task, members, max_members=8, stop_at=None, dtype=torch.float64,
                conv="grouped"):
    source = ListSource(members, stop_at)
    stats = run_pack(task, source, max_members=max_members, dtype=dtype, conv=conv)
    return source, stats


def alone(task, member, dtype=torch.float64):
    """The reference: the same member trained by the same trainer with N = 1."""
    source, _ = run_members(task, [member], max_members=1, dtype=dtype)
    return source


def assert_same_state(got, want, rtol=1e-10, atol=1e-12):
    assert got["epoch"] == want["epoch"] and got["iteration"] == want["iteration"]
    assert got["model"].keys() == want["model"].keys()
    for name in want["model"]:
        torch.testing.assert_close(got["model"][name], want["model"][name], rtol=rtol, atol=atol)
    for name in want["optimizer"]["state"]:
        torch.testing.assert_close(got["optimizer"]["state"][name],
                                   want["optimizer"]["state"][name], rtol=rtol, atol=atol)


class FakeGraph:
    """Stands in for a CUDA graph: replay runs the recorded step again (eagerly)."""

    def __init__(self, step, key):
        self.step, self.key, self.replays = step, key, 0

    def replay(self):
        self.replays += 1
        self.step(self.key)


class FakeAllocator:
    """Stands in for the CUDA caching allocator's graph pools, as strict as PyTorch's: a
    capture that begins on a pool whose graphs were all destroyed, while the pool still holds
    memory (never given back here: no ``empty_cache``), fails PyTorch's assertion
    ``it->second->use_count > 0``; a new pool starts at one user."""

    def __init__(self):
        self.use_count: dict[Any, int] = {}
        self.begun: list[Any] = []

    def begin(self, pool):
        if pool in self.use_count and self.use_count[pool] <= 0:
            raise RuntimeError("it->second->use_count > 0 INTERNAL ASSERT FAILED")
        self.use_count[pool] = self.use_count.get(pool, 0) + 1
        self.begun.append(pool)

    def release(self, pool):
        self.use_count[pool] -= 1

    def capture(self, step, key, device, pool):
        """A ``StepRunner`` capture: the step runs once (as recorded), the graph holds
        ``pool`` until it is destroyed."""
        self.begin(pool)
        step(key)
        return PooledFakeGraph(step, key, self, pool)


class PooledFakeGraph(FakeGraph):
    """A ``FakeGraph`` that gives its pool back to its ``FakeAllocator`` when destroyed."""

    def __init__(self, step, key, allocator, pool):
        super().__init__(step, key)
        weakref.finalize(self, allocator.release, pool)
