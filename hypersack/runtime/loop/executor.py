"""The executor interface the study loop drives: local processes, the simulator, Ray (one agent per node).

Executors are transport: they carry trials to devices and report facts back as events. Every
decision (placement, retries, timeouts, routing rules) is the controller's (``hypersack.core``).
The contract is tested against every executor in ``tests/contracts/test_executor_contract.py``.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Protocol

from hypersack.core.trial import Command, Event


class Executor(Protocol):
    def start(self) -> None:
        """Acquire workers. Called once before the first submit."""

    def inventory(self) -> Any:
        """The devices trials may be placed on, as a ``hypersack.placement.Cluster``."""

    def submit(self, command: Command) -> None:
        """Launch a trial on the devices its Launch names; Stop: end it at its next report;
        Cancel: end it now and report TrialFailed(reason, cause) with the Cancel's own (CANCELLED,
        or WORKER_DIED for a trial that stopped responding)."""

    def poll(self, timeout: float) -> list[Event]:
        """Events since the last poll; waits up to ``timeout`` seconds when there are none. A
        trial that reported waits, and reports nothing more, until ``acknowledge``."""

    def acknowledge(self, trial_ids: Iterable[int], free_below: Mapping[int, int]) -> None:
        """The results returned by the polls of the last turn are durable: let the trials of
        ``trial_ids`` go on (the loop's ``run.acknowledgements``: every trial that reported in
        the turn; a trial not named keeps waiting, a named one that does not wait is ignored).
        ``free_below``: each named trial's next decision point, below which its reports need
        not wait for an ack (pipelining; a trial it leaves out: 0, every report waits). The
        executor carries both as given; one that does not pipeline ignores ``free_below``."""

    def shutdown(self, kill: bool = False) -> None:
        """Release every worker; ``kill`` ends running trials at once."""
