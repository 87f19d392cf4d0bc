"""`kvprobe report PATH... --json` answered without Typer, click or rich (~35 ms of a small report's ~0.17 s,
where a peer answers a small trace in ~0.09 s: issue #41).

Only the plain form is taken: paths and `--json`, with the fixes' flags (`--no-fixes`, `--what-if`) and
`--predicted`, as the full command reads them (cli/report_cmd.py; a test keeps the lists in step). Any other
option, a path that starts with `-`, or $KVPROBE_CLUSTER set returns None and the full CLI answers. A report
that fails here (a missing file, a malformed line, no request) has printed nothing: the full CLI reads the
input again and says why, as it always has. The JSON is the full command's, byte for byte (both print
`Report.json_items` through cli/jsonout.py).
"""
from __future__ import annotations

import os

FLAGS = ("--json", "--no-fixes", "--what-if", "--predicted")


def run(args: list[str]) -> int | None:
    """Print the report's JSON and return the exit code; None when the full CLI must answer instead."""
    paths = [arg for arg in args if not arg.startswith("-")]
    flags = {arg for arg in args if arg.startswith("-")}
    if "--json" not in flags or not flags <= set(FLAGS) or not paths or os.environ.get("KVPROBE_CLUSTER"):
        return None
    from pathlib import Path

    from kvprobe.cli.jsonout import print_json_items
    from kvprobe.errors import KvprobeError
    from kvprobe.report import build_report

    fixes = False if "--no-fixes" in flags else (True if "--what-if" in flags else None)
    try:  # (no filter, no price file, the default --top: build_report's own defaults)
        rep = build_report([Path(p) for p in paths], fixes=fixes, predicted_only="--predicted" in flags)
    except (KvprobeError, OSError, RecursionError):
        return None  # (the full command says why, as it always has)
    if not (rep.results or rep.failed):
        return None  # nothing read: the full command's error
    print_json_items(rep.json_items())
    return 0
