"""`kvprobe usage ... --json` answered without Typer or rich (~0.1 s of imports, about what ccusage takes for
a whole small folder).

Only a plain command line is taken: the options `usage` has (cli/usage_cmd.py; a test keeps the two lists
equal), as `--name value` or `--name=value`, and paths. Anything else (--help, an unknown or repeated-looking
form, a value Typer would refuse) returns False and the full CLI answers, errors included: a run that fails
here (no requests, a bad date, an unreadable file) has written nothing, and the full CLI says why as it
always has. The JSON is the full command's, byte for byte (both print through cli/jsonout.py).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

# usage's options: those that take a value, and the flags (booleans)
VALUED = ("--by", "--since", "--until", "--tz", "--format", "--price-file", "--workers")
FLAGS = ("--breakdown", "--usd", "--json", "--no-cache")
_INT = re.compile(r"[+-]?\d+")


@dataclass
class Line:
    """A `usage` command line, as Typer would read it."""

    paths: list[str] = field(default_factory=list)
    values: dict[str, str] = field(default_factory=dict)
    flags: set[str] = field(default_factory=set)


def parse(args: list[str]) -> Line | None:
    """The arguments after `usage`, or None for any form this path leaves to Typer."""
    line = Line()
    at = 0
    while at < len(args):
        arg = args[at]
        at += 1
        if not arg.startswith("-"):
            line.paths.append(arg)
            continue
        name, eq, value = arg.partition("=")
        if name in FLAGS and not eq:
            line.flags.add(name)
        elif name in VALUED:
            if not eq:
                if at == len(args):
                    return None
                value, at = args[at], at + 1
            line.values[name] = value  # (the last one given wins, as in Typer)
        else:
            return None
    workers = line.values.get("--workers", "0")
    return line if _INT.fullmatch(workers) else None


def run(args: list[str]) -> bool:
    """Print `usage --json`'s answer and return True; False when the full CLI must answer instead."""
    line = parse(args)
    if line is None or "--json" not in line.flags or not line.paths:
        return False  # (no path: the default places, and the error when there are none, are the command's)
    from kvprobe.cli.usage_data import collect, day_bound, zone_of
    from kvprobe.errors import KvprobeError
    from kvprobe.importers import ImportReport
    from kvprobe.importers.summary import GROUPINGS

    get = line.values.get
    if get("--by", "day") not in GROUPINGS:
        return False
    report = ImportReport()
    try:
        zone = zone_of(get("--tz", "UTC"))
        since, until = get("--since"), get("--until")
        start, end = day_bound(since, "--since", zone), day_bound(until, "--until", zone, end_of_day=True)
        summary = collect(line.paths, report, fmt=get("--format"), price_file=get("--price-file"),
                          workers=int(get("--workers", "0")), zone=zone, since=start, until=end,
                          keep_rows="--no-cache" not in line.flags)
    except (KvprobeError, OSError, RecursionError):
        return False
    if not report.records or ((since or until) and not summary.totals.requests):
        return False  # nothing read, or nothing in the window: the command's errors say which
    from kvprobe.cli.jsonout import print_json

    print_json({**summary.to_json(), "import": report.to_json()})
    return True
