"""Large objects a study's trials share (``Study(shared={...})``, Ray Tune's
``tune.with_parameters``): a data set, a tokenizer, an embedding table.

:class:`WithShared` is the trainable the workers get: the user's trainable and the shared
objects, pickled once in the driver with it and sent once to each worker (with the trainable,
which a worker loads once however many trials it runs), never once per trial. Each trial sees
them as ``ctx.shared`` (a read-only mapping by convention: a worker's trials share one copy,
so a change made by one trial is seen by the next trial of that worker, not by other workers).
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from hypersack.errors import ConfigError

__all__ = ["WithShared", "check_shared"]


def check_shared(shared: Any) -> dict[str, Any]:
    """``shared`` as a dict: a mapping with string keys (ConfigError naming ``shared``)."""
    if not isinstance(shared, Mapping) or not all(isinstance(k, str) for k in shared):
        raise ConfigError("shared", shared, "must be a mapping of names (strings) to objects")
    return dict(shared)


class WithShared:
    """``train(config, ctx)`` with ``ctx.shared`` set to ``shared``. ``train``: a callable, or
    a ``module:function`` reference resolved in the worker."""

    def __init__(self, train: Callable[..., Any] | str, shared: Mapping[str, Any]):
        self.train = train
        self.shared = dict(shared)

    def __call__(self, config: dict[str, Any], ctx: Any) -> Any:
        if isinstance(self.train, str):
            from hypersack.runtime.worker.trainable import resolve_reference
            self.train = resolve_reference(self.train)
        ctx.shared = self.shared
        return self.train(config, ctx)
