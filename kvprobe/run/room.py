"""How many forked workers this machine has the memory for.

A forked worker shares this process's pages until it touches them: reading a Python object writes its
reference count, so a worker that walks the parsed log copies most of the pages holding it — up to this
process's resident size (measured: a pricing worker beside a 31,500-request report took 256 MB, half of the
report's own 536 MB). Forking workers whose copies do not fit would trade a few seconds for swapping or the
OOM killer; the stage then runs in this process instead (a 1M-request fleet on a 24 GB machine).
"""
from __future__ import annotations

from pathlib import Path

SPARE = 0.5  # of the memory available now, what forked workers may take: the rest stays for this process's growth


def room_for(wanted: int, resident_kb: int | None, available_kb: int | None) -> int:
    """Workers (at most `wanted`) whose copies of this process (`resident_kb` each, at most) fit in `SPARE` of
    the memory available; `wanted` where either figure is unknown (no /proc to read)."""
    if resident_kb is None or available_kb is None:
        return wanted
    return max(0, min(wanted, int(available_kb * SPARE) // max(resident_kb, 1)))


def workers_with_room(wanted: int) -> int:
    return room_for(wanted, _kb(Path("/proc/self/status"), "VmRSS:"), _kb(Path("/proc/meminfo"), "MemAvailable:"))


def _kb(path: Path, field: str) -> int | None:
    try:
        for line in path.read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None
