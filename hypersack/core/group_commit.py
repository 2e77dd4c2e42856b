"""Group commit: how long a turn of the study loop waits for more reports before it commits.

Reports that share a turn share one transaction and one fsync, and each report's ack waits for
that commit. Waiting for more reports pays only when more can arrive within the window: as
PostgreSQL's ``commit_delay`` (the window) and ``commit_siblings`` (how many other
transactions must be open for the delay to be taken), the loop waits only while at least
``siblings`` running trials may still report in this turn. A trial may not when it has already
reported in this turn (it waits for that report's ack before it reports again) or ended in it.
With fewer such trials the turn commits at once: a shared commit would seldom come, and every
report in hand would wait for it (with two workers of fast trials, the window alone cost 7-16%
of the trial rate, benchmarks/RESULTS.md).

Pure and clock-free: the caller passes the seconds it has waited so far.
"""
from __future__ import annotations

from dataclasses import dataclass

from hypersack.validation import check_integer, check_number

__all__ = ["GROUP_SIBLINGS", "GROUP_WINDOW_S", "GroupCommit"]

#: A real study's window (seconds): the longest a report's ack waits for others to join.
GROUP_WINDOW_S = 0.002
#: Running trials that must still be able to report for the turn to wait (PostgreSQL's
#: default ``commit_siblings``).
GROUP_SIBLINGS = 5


@dataclass(frozen=True)
class GroupCommit:
    """The rule: ``window_s`` >= 0 seconds at most, and only while at least ``siblings`` >= 1
    running trials may still report in the turn. ``GroupCommit(0.0)``: never wait (one poll
    per turn, the simulator's default); ``siblings`` 1: wait while any running trial may still
    report."""
    window_s: float = GROUP_WINDOW_S
    siblings: int = GROUP_SIBLINGS

    def __post_init__(self) -> None:
        check_number("group_window_s", self.window_s, low=0.0, hint="(seconds)")
        check_integer("group_siblings", self.siblings, low=1)

    def wait_s(self, running: int, settled: int, waited_s: float) -> float:
        """Seconds the turn may still wait for more events before it commits: 0 (commit now)
        once ``waited_s`` has used up the window, or when fewer than ``siblings`` of the
        ``running`` trials may still report (``settled`` of them reported or ended in this
        turn); otherwise the rest of the window. No validation here (the hot path): the
        arguments are counts and seconds >= 0."""
        if running - settled < self.siblings:
            return 0.0
        return max(0.0, self.window_s - waited_s)
