"""What the gate reads besides thresholds: the traces a CI step names (globs too), the baseline, and where the
job summary goes. Each refuses what it cannot use before any work is done (exit 2)."""
from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Any

from kvprobe.errors import InputError

_GLOB = set("*?[")


def expand_traces(args: list[str]) -> list[Path]:
    """The named files and folders in order, each glob expanded (sorted; `**` reaches subfolders), once each.

    Globs are expanded here too because a CI step often passes them quoted (`with: traces: 'runs/*.jsonl'`)."""
    paths: list[Path] = []
    for arg in args:
        if _GLOB & set(arg) and not Path(arg).exists():
            found = sorted(glob.glob(arg, recursive=True))
            if not found:
                raise InputError("matches no file", field=arg)
            paths += [Path(p) for p in found]
        else:
            paths.append(Path(arg))
    seen: set[Path] = set()
    unique = []
    for path in paths:
        key = path.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(path)
    for path in unique:
        if not path.exists():
            raise InputError("does not exist", file=str(path))
    return unique


def require_baseline_requests(baseline: dict[str, Any], path: str) -> dict[str, Any]:
    """A baseline of no request (written from an empty trace by an older kvprobe) passes everything: refused."""
    requests = baseline["totals"].get("requests")
    if not baseline["tasks"] or requests == 0:
        raise InputError("the baseline holds no requests (written from an empty trace?): every comparison with it "
                         "would pass; write it again with `kvprobe baseline TRACE -o FILE` from a run that worked",
                         file=path, field="totals.requests" if requests == 0 else "tasks")
    return baseline


def summary_target() -> Path | None:
    """$GITHUB_STEP_SUMMARY when set: a file to append to (created if missing), never a folder."""
    value = os.environ.get("GITHUB_STEP_SUMMARY")
    if not value:
        return None
    path = Path(value)
    if path.is_dir():
        raise InputError("is a folder; expected the job summary file", file=value, field="$GITHUB_STEP_SUMMARY")
    if not (path.parent if str(path.parent) else Path(".")).is_dir():
        raise InputError("its folder does not exist", file=value, field="$GITHUB_STEP_SUMMARY")
    return path
