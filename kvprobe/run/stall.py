"""Whether local worker processes have stalled: stopped (SIGSTOP, a debugger, a terminal's job control) or
making no progress at all, so that whoever waits for them stops waiting and computes their work itself.

A worker of this package computes from memory: while it has work, it uses CPU. A stopped process shows it at
once (state T in /proc); a hung one (a deadlock, a wait on something that never comes) by its CPU time not
moving for `stall_seconds()`. Where /proc does not exist, the watch sees neither and the caller's own
deadline (no result for that long) is what ends the wait.
"""
from __future__ import annotations

import os
import time

STALL_SECONDS = 30.0  # no worker CPU time for this long while work is pending: stalled (the rest were slower)


def stall_seconds() -> float:
    """$KVPROBE_STALL_S overrides the window (e.g. a shorter one in tests, a longer one on a swapping machine)."""
    value = os.environ.get("KVPROBE_STALL_S")
    try:
        return float(value) if value else STALL_SECONDS
    except ValueError:
        return STALL_SECONDS


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, CPU ticks used) of a process, or None where /proc cannot tell (gone, not Linux)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()  # the command name may hold spaces and parentheses
    return fields[0], int(fields[11]) + int(fields[12])  # state; utime + stime


class StallWatch:
    """Watches a set of processes that have work to do; `stalled()` is True once one is stopped, or once none
    of them has used CPU for the window."""

    def __init__(self, window: float | None = None) -> None:
        self.window = stall_seconds() if window is None else window
        self._ticks: int | None = None
        self._since = time.monotonic()

    def progressed(self) -> None:
        """Work came back: the window starts again."""
        self._since = time.monotonic()

    def stalled(self, pids: list[int]) -> bool:
        now, ticks, seen = time.monotonic(), 0, False
        for pid in pids:
            stat = _proc_stat(pid)
            if stat is None:
                continue
            seen = True
            if stat[0] in ("T", "t"):
                return True
            ticks += stat[1]
        if seen and ticks != self._ticks:
            self._ticks, self._since = ticks, now
        return now - self._since > self.window
