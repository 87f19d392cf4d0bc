"""How deep kvprobe follows nested JSON (a module of its own: the CLI sets it before importing anything)."""
from __future__ import annotations

import sys

# orjson reads JSON nested up to 1024 levels (deeper is a decode error), and kvprobe's own walks over a
# record (rendering, checks, reprs in messages) take a few Python frames a level: with Python's default limit
# of 1000 frames a 1000-deep tool input was a RecursionError. The CLI allows this many instead.
NESTING_FRAMES = 12_000


def allow_deep_json() -> None:
    """Let any JSON orjson can read be walked (a process-wide setting: the CLI and its helper process set it)."""
    if sys.getrecursionlimit() < NESTING_FRAMES:
        sys.setrecursionlimit(NESTING_FRAMES)
