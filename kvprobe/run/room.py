"""How many forked workers this machine, and the run's memory budget, have room for.

A forked worker shares this process's pages until it touches them: reading a Python object writes its
reference count, so a worker that walks the parsed log copies most of the pages holding it — up to this
process's resident size (measured: a pricing worker beside a 105,006-request report copied 530 of its 708 MB,
beside a 31,500-request one 256 of 536 MB). A worker is forked only where its copy, counted as this process's
whole resident size, fits twice over:

* in `SPARE` of the memory available now: a copy that does not fit would trade a few seconds for swapping or
  the OOM killer (a 1M-request fleet on a 24 GB machine);
* in the run's memory budget (`MEMORY_BUDGET_MB`, $KVPROBE_MEMORY_MB), with this process: the workers make the
  run faster, never larger than the budget. A log whose own process fills the budget (100,000 requests of a
  fleet: ~700 MB) is priced in that process alone; it then needs what one process needs (measured 748 MB of
  PSS for the run at 105,006 requests, where a forked worker had brought its processes to 1,228 MiB).
"""
from __future__ import annotations

import os
from pathlib import Path

SPARE = 0.5  # of the memory available now, what forked workers may take: the rest stays for this process's growth
# What the run's processes may hold together with the forked workers' copies counted in. A laptop's or a CI
# runner's share: large enough for a worker beside a 31,500-request fleet's report (~390 MB), too small for
# one beside a 105,006-request one's (~710 MB), which runs in one process instead.
MEMORY_BUDGET_MB = 1_024


def room_for(wanted: int, resident_kb: int | None, available_kb: int | None,
             budget_kb: int | None = MEMORY_BUDGET_MB * 1024) -> int:
    """Workers (at most `wanted`) whose copies of this process (`resident_kb` each, at most) fit both in `SPARE`
    of the memory available and, beside this process, in `budget_kb` (None: no budget); `wanted` where the
    resident size is unknown (no /proc to read), the budget alone where the memory available is."""
    if resident_kb is None:
        return wanted
    fits = wanted
    if available_kb is not None:
        fits = min(fits, int(available_kb * SPARE) // max(resident_kb, 1))
    if budget_kb is not None:
        fits = min(fits, (budget_kb - resident_kb) // max(resident_kb, 1))
    return max(0, fits)


def workers_with_room(wanted: int) -> int:
    return room_for(wanted, _kb(Path("/proc/self/status"), "VmRSS:"), _kb(Path("/proc/meminfo"), "MemAvailable:"),
                    budget_kb())


def budget_kb() -> int | None:
    """The run's memory budget: $KVPROBE_MEMORY_MB (0: none, as many workers as the memory available holds),
    else `MEMORY_BUDGET_MB`."""
    value = os.environ.get("KVPROBE_MEMORY_MB", "").strip()
    megabytes = int(value) if value.isdigit() else MEMORY_BUDGET_MB
    return megabytes * 1024 if megabytes else None


def _kb(path: Path, field: str) -> int | None:
    try:
        for line in path.read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None
