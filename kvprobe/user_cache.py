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
