"""`kvprobe usage ...` answered without Typer, and without rich off a terminal (~0.1 s of imports, about
what ccusage takes for a whole small folder): its JSON, or its table (cli/usage_view.py).

Only a plain command line is taken: the options `usage` has (cli/usage_cmd.py; a test keeps the two lists
equal), as `--name value` or `--name=value`, and paths. Anything else (--help, an unknown or repeated-looking
form, a value Typer would refuse) returns None and the full CLI answers, errors included: a run that fails
here (a bad date, an unreadable file) has written nothing, and the full CLI says why as it always has; a
run that read no request, or none in its window, says so here, as the full command does. The JSON is the
full command's, byte for byte (both print through cli/jsonout.py), and so is the table (cli/usage_view.py).
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


def run(args: list[str]) -> int | None:
    """Print `usage`'s answer (its table, or its JSON; or why there is none) and return the exit code; None
    when the full CLI must answer instead."""
    line = parse(args)
    if line is None:
        return None
    from kvprobe.cli.import_view import byte_progress, say_error
    from kvprobe.cli.usage_data import collect, day_bound, zone_of
    from kvprobe.cli.usage_view import require_requests
    from kvprobe.errors import KvprobeError
    from kvprobe.importers import ImportReport, default_sources
    from kvprobe.importers.summary import GROUPINGS

    get, json_out = line.values.get, "--json" in line.flags
    by = get("--by", "day")
    if by not in GROUPINGS:
        return None
    # no path: the places the agents keep their logs (none found: the command's error says where it looked)
    sources = line.paths or [str(path) for path in default_sources()]
    if not sources:
        return None
    report = ImportReport()
    try:
        zone = zone_of(get("--tz", "UTC"))
        since, until = get("--since"), get("--until")
        start, end = day_bound(since, "--since", zone), day_bound(until, "--until", zone, end_of_day=True)
        with byte_progress(sources, "reading", not json_out) as progress:
            summary = collect(sources, report, fmt=get("--format"), price_file=get("--price-file"),
                              workers=int(get("--workers", "0")), zone=zone, since=start, until=end,
                              progress=progress, keep_rows="--no-cache" not in line.flags)
    except (KvprobeError, OSError, RecursionError):
        return None  # (the full command says why, as it always has)
    try:  # nothing read, or nothing in the window: said here (read again by the full command, the files it
        # read would be said to be unchanged since an earlier run: this one)
        require_requests(summary, report, sources, {"--since": since, "--until": until})
    except KvprobeError as exc:
        say_error(str(exc))
        return exc.exit_code
    if json_out:
        from kvprobe.cli.jsonout import print_json

        print_json({**summary.to_json(), "import": report.to_json()})
    else:
        from kvprobe.cli.usage_view import show

        show(summary, report, by, "--breakdown" in line.flags, "--usd" in line.flags, sources,
             named=bool(line.paths))
    return 0
