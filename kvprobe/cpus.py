"""How many CPUs this process may run on (what parallel parsing sizes itself by)."""
from __future__ import annotations

import os


def usable_cpus() -> int:
    """The CPUs this process is allowed (a container's or taskset's limit), not the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
