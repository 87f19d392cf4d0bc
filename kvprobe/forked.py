"""When a process beside this one pays (`worth_forking`), and how a forked one ends with its parent.

This module imports little at its top: the report's early helper process (`analysis.helper`) imports it
before the command line has imported anything else. A fork inherits everything this process holds (a parsed
log, a pricer) without pickling it; the executor seam's local pool (`kvprobe.run.pool`) forks its workers.
"""
from __future__ import annotations

import os

from kvprobe.cpus import usable_cpus

# Below this many requests a stage takes milliseconds: the fork, and the child's first writes to the memory it
# shares with this process (copied on write), cost about what running beside this process saves.
MIN_REQUESTS = 1_000


def worth_forking(requests: int) -> bool:
    """A log large enough, a second core to run on, and a system that forks."""
    return requests >= min_requests() and hasattr(os, "fork") and usable_cpus() >= 2


def min_requests() -> int:
    """The smallest log a second process helps with ($KVPROBE_FORK_MIN_REQUESTS overrides: 0 forks for any
    log, a large number never, e.g. to time one process against two)."""
    value = os.environ.get("KVPROBE_FORK_MIN_REQUESTS")
    return int(value) if value and value.isdigit() else MIN_REQUESTS


def end_with_parent() -> None:
    """Linux: have the kernel end this process when the parent dies (killed, it cannot say so); elsewhere
    the child notices when it next writes to the parent."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
