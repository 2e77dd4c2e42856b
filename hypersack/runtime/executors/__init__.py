"""Executors run the controller's commands and report events back; they differ only here."""
from hypersack.runtime.loop.executor import Executor
from hypersack.runtime.executors.local import LocalExecutor

__all__ = ["Executor", "LocalExecutor"]
