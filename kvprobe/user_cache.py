"""Where kvprobe keeps what it can rebuild (looked-up prices, parsed rule files): $KVPROBE_CACHE_DIR, else
$XDG_CACHE_HOME/kvprobe, else ~/.cache/kvprobe. Nothing in it is a source of truth: a file there that is
missing, stale or unreadable only costs the time of rebuilding it, and an unwritable folder is no error."""
from __future__ import annotations

import os
from pathlib import Path


def folder() -> Path:
    named = os.environ.get("KVPROBE_CACHE_DIR")
    if named:
        return Path(named)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kvprobe"


def write(path: Path, data: bytes, mode: int = 0o644) -> bool:
    """Write a cache file atomically, its folder made; False where it cannot be (a read-only or full disk, a
    file where the folder would be): a cache that cannot be written only costs the rebuilding next run."""
    from kvprobe.errors import KvprobeError
    from kvprobe.output import write_bytes_atomic

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(path, data, mode)  # (its InputError: the temp file could not be made)
    except (OSError, KvprobeError):
        return False
    return True
