"""The executor interface the study loop drives (local pool here; Ray and the simulator later)."""
from __future__ import annotations

from typing import Protocol

from hypersack.core.trial import Command, Event


class Executor(Protocol):
    def start(self) -> None:
        """Acquire workers. Called once before the first submit."""

    def free_slots(self) -> int:
        """How many more trials could start now."""

    def submit(self, command: Command) -> None:
        """Launch a trial on a free slot, or ask a running one to stop."""

    def poll(self, timeout: float) -> list[Event]:
        """Events since the last poll; waits up to ``timeout`` seconds when there are none."""

    def acknowledge(self) -> None:
        """The results returned by the last poll are durable: let their trials go on."""

    def shutdown(self, kill: bool = False) -> None:
        """Release every worker; ``kill`` ends running trials at once."""
