"""The kvprobe command line: a thin layer over the library (one module per command).

Command modules are imported only when needed: `kvprobe diff` loads the diff command and not the proxy,
the server or DuckDB, which keeps start-up short (diff's target is half a second including start-up).
`app` (the full CLI, as tests and `--help` use it) is built on first access.
"""
from __future__ import annotations

import gc
import importlib
import sys
from contextlib import suppress

from kvprobe.interrupts import interrupt_behind, raise_swallowed_interrupts, say_interrupted
from kvprobe.nesting import allow_deep_json

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any
    import typer

# name -> (module, attribute, kind, command settings); kind "command" or "group" (a Typer sub-app)
COMMANDS: dict[str, tuple[str, str, str, dict[str, Any]]] = {
    "diff": ("diff_cmd", "diff", "command", {}),
    "lint": ("lint_cmd", "lint", "command", {}),
    "providers": ("providers_cmd", "providers", "command", {}),
    "report": ("report_cmd", "report", "command", {}),
    "fix": ("fix_cmd", "fix", "command", {}),
    "compare": ("compare_cmd", "compare_cmd", "command", {}),
    "gate": ("gate_cmd", "gate", "command", {}),
    "baseline": ("gate_cmd", "baseline_cmd", "command", {}),
    "init-ci": ("init_ci_cmd", "init_ci", "command", {}),
    "run-probe": ("probe_cmd", "run_probe_cmd", "command", {}),
    "capture": ("capture_cmd", "capture", "command", {"context_settings": "CONTEXT"}),
    "import": ("import_cmd", "import_", "command", {}),
    "usage": ("usage_cmd", "usage", "command", {}),
    "serve": ("serve_cmd", "serve", "command", {}),
    "replay": ("replay_cmd", "replay", "command", {}),
    "html": ("html_cmd", "html", "command", {}),
    "plot": ("plot_cmd", "plot", "command", {}),
    "db": ("db_cmd", "app", "group", {}),
    "sql": ("db_cmd", "sql", "command", {}),
    "schema": ("schema_cmd", "schema", "command", {}),
    "watch": ("watch_cmd", "watch", "command", {}),
}


def _print_version(value: bool) -> None:
    import typer

    if value:
        from importlib.metadata import version  # the installed distribution's version: one source of truth

        typer.echo(f"kvprobe {version('kvprobe')}")
        raise typer.Exit()


def build_app(only: str | None = None) -> "typer.Typer":
    """The CLI with every command, or with `only` one of them (what a single invocation needs; "" for none)."""
    import typer  # here, not at the top: `kvprobe --help` answers without it

    def _root(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                           help="Print kvprobe's version and exit.")) -> None:
        """Profile and audit what AI agents pay for prompt caching."""
        allow_deep_json()  # (also here: tests and embedders run the app without main())

    from kvprobe.cli.help import KvprobeGroup

    # plain help (no rich markup: brackets stay), values named by words (cli/help.py), shell completion
    cli = typer.Typer(name="kvprobe", help="Profile and audit what AI agents pay for prompt caching.",
                      no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
                      cls=KvprobeGroup)
    for name, (module_name, attr, kind, settings) in COMMANDS.items():
        if only is not None and name != only:
            continue
        module = importlib.import_module(f"kvprobe.cli.{module_name}")
        if kind == "group":
            cli.add_typer(getattr(module, attr), name=name)
            continue
        options = {k: getattr(module, v) for k, v in settings.items()}
        cli.command(name, **options)(getattr(module, attr))
    # The root callback holds --version, and keeps a lone command from becoming the whole CLI (`kvprobe ARGS`).
    cli.callback()(_root)
    return cli


def __getattr__(name: str) -> Any:
    if name == "app":
        full = build_app()
        globals()["app"] = full
        return full
    raise AttributeError(f"module 'kvprobe.cli' has no attribute {name!r}")


# CPython's cyclic collector re-scans every live object each time their number grows by a quarter: a report
# keeps millions (blocks, skeletons, results), and those re-scans were 18% of `report` on a 1 GB trace
# (3.7 s -> 3.1 s with these settings, same output and peak memory). Nearly everything is freed by reference
# counting anyway; collecting every 200,000 allocations instead of 700 (as mypy does) keeps the collector for
# the long-running commands (serve, watch, capture) and those that drive an engine or a network client (replay,
# run-probe: PyTorch's and asyncio's objects do form cycles) at a fraction of the cost.
GC_THRESHOLDS = (200_000, 30, 30)
# The analyses run with no cyclic collection at all. Even every 200,000 allocations, a young collection walks
# what its objects point to, across a heap that grows with the log: 19 ms each at 10,000 requests, 31 ms at
# 31,500, 67 ms at 105,000 (plus 1 s for each older one), 10% of the report's CPU at 105,000 requests and the
# reason its time per request grew with the log. What it found was cycles of a few hundred objects a run (603
# at 105,000 requests, 770 at 31,500): gen_fleet's fleets, fixes on, one process: CPU 72.6 -> 63.4 s at 105,000
# requests (0.69 -> 0.60 ms a request, flat from 10,000), 22.6 -> 20.1 s at 31,500; the same output and the
# same peak RSS (1,126 MB; 386 MB).
ANALYSES = ("report", "fix", "compare", "gate", "baseline", "html", "plot", "db")
# Commands that end by handing every object they made to the collector's permanent generation (`gc.freeze`):
# the interpreter's collections at exit otherwise walk them all once more, whether collection was on or not
# (report of a 100 MB trace, fixes on: 0.748 -> 0.696 s; os._exit instead, 0.707). What a frozen cycle holds
# is never finalized, so only commands that close what they write themselves are here (atomic outputs and
# `with` blocks; not `db`, whose DuckDB connection is the database's to close).
FROZEN_AT_EXIT = ("report", "fix", "compare", "gate", "baseline", "html", "plot", "usage", "lint", "diff")


_answered_fast = False  # a fast path (--help, diff, usage) answered: what it opened is closed


def entry() -> None:
    """The installed `kvprobe` command and `python -m kvprobe`: `main`, and where a fast path answered, the
    process ends as soon as its output is flushed (`os._exit`). The interpreter's own finalization (every
    module's dictionary cleared, ~140 of them for `diff`) was ~1.3 ms of a 55 ms `diff`, ~1.8 ms of `usage
    --json` of a small folder, ~4.7 ms of `--help`; those paths leave no file open, and their one exit handler
    (the classes' kept code, `dataclass_code.keep`) is run here first, so nothing is skipped that anyone would
    see. Any other command ends as Python ends it (a DuckDB connection, a server's sockets are closed by their
    finalizers)."""
    try:
        main()
        code: object = 0
    except SystemExit as done:
        code = 0 if done.code is None else done.code
        if not _ends_at_once() or code.__class__ is not int:
            raise
    if not _ends_at_once():
        return
    import os

    from kvprobe import dataclass_code

    dataclass_code.keep()

    with suppress(OSError, ValueError):
        sys.stderr.flush()
    os._exit(code)


def _ends_at_once() -> bool:
    """A fast path answered, and no coverage measurement is running (coverage.py saves its data at exit)."""
    return _answered_fast and "coverage" not in sys.modules


def main() -> None:
    """The `kvprobe` command: exit codes as docs/contracts.md §8 says, whatever happens (Ctrl-C at start-up,
    output that cannot be written even at the last flush)."""
    raise_swallowed_interrupts()
    _closed_streams()
    try:
        _run()
    except OSError as exc:  # the fast help's own write
        _flush_stdout(exc)
    except SystemExit as done:
        if done.code == INTERRUPTED and interrupt_behind(done):  # typer makes an interrupt exit 130 silently
            say_interrupted(done)
        _flush_stdout()
        _leave_to_exit()
        raise SystemExit(done.code) from None
    except BaseException as exc:  # Ctrl-C before the command's own handling is in place (imports, start-up)
        if not interrupt_behind(exc):
            raise
        say_interrupted(exc)
        raise SystemExit(INTERRUPTED) from None
    _flush_stdout()
    _leave_to_exit()


class _ClosedOutput:
    """Standard output closed when the process started (`kvprobe usage >&-`), which Python leaves as None: the
    first write was an AttributeError's traceback (exit 1). A write here fails as a write to a closed
    descriptor does, so the output error of docs/contracts.md §8 says it (exit 2); a command that writes
    nothing to it runs as it would."""

    def write(self, text: str) -> int:
        raise _bad_descriptor()

    def flush(self) -> None:  # (nothing is ever pending)
        pass

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise _bad_descriptor()


def _bad_descriptor() -> OSError:
    import errno
    import os

    return OSError(errno.EBADF, os.strerror(errno.EBADF))


def _closed_streams() -> None:
    """Standard output or error closed at start: output fails as `_ClosedOutput` says; messages for a closed
    standard error go nowhere (there is nowhere else to say them)."""
    if sys.stdout is None:
        sys.stdout = _ClosedOutput()  # type: ignore[assignment]
    if sys.stderr is None:
        import os

        sys.stderr = open(os.devnull, "w")  # noqa: SIM115  (the process's own stream, closed at its end)


def _leave_to_exit() -> None:
    """What an analysis made is left to the process's end (FROZEN_AT_EXIT)."""
    if _command() in FROZEN_AT_EXIT:
        gc.freeze()


def _command() -> str | None:
    """The command named on the command line (its first word that is not an option)."""
    return next((arg for arg in sys.argv[1:] if not arg.startswith("-")), None)


INTERRUPTED = 130  # 128 + SIGINT, as shells report a command stopped by Ctrl-C


def _flush_stdout(failed: OSError | None = None) -> None:
    """Standard output is flushed here, not by the interpreter at exit (which prints "Exception ignored" and
    exits 120 when stdout is a full disk or a closed pipe): exit 2 and one line instead."""
    try:
        if failed is not None:
            raise failed
        sys.stdout.flush()
    except (OSError, ValueError) as exc:
        import errno
        import os

        with suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        if getattr(exc, "errno", None) != errno.EPIPE:  # a reader that left (`| head`) needs no message
            with suppress(OSError, ValueError):
                sys.stderr.write(f"error: cannot write the output: {getattr(exc, 'strerror', None) or exc}\n")
        raise SystemExit(2) from None


def _run() -> None:
    global _answered_fast
    first = _command()
    if first in ANALYSES:
        gc.disable()  # (before the report's helper and pool processes are forked: they inherit it)
    else:
        gc.set_threshold(*GC_THRESHOLDS)
    allow_deep_json()  # before the report's helper process is forked
    if sys.argv[1:] in ([], ["--help"]):  # answered without Typer or any command module
        from kvprobe.cli import fasthelp

        if (text := fasthelp.render(COMMANDS)) is not None:
            sys.stdout.write(text)
            _answered_fast = True
            raise SystemExit(0 if sys.argv[1:] else 2)  # a bare `kvprobe` is a usage error, as in Typer
    if first == "report":  # a large trace's tokenizer then loads in a second process while this one imports
        from kvprobe.analysis.helper import prestart  # (before orjson: the helper needs none to load it)

        prestart(arg for arg in sys.argv[sys.argv.index(first) + 1:] if not arg.startswith("-"))
    if first is not None:  # every command reads or writes JSON with orjson, which a Ctrl-C must not cut short
        from kvprobe import dataclass_code
        from kvprobe.interrupts import import_whole

        dataclass_code.install()  # (before the command's modules define their classes)

        import_whole("orjson")
    if sys.argv[1:2] == ["diff"]:  # answered before Typer loads (cli/fastdiff.py)
        from kvprobe.cli import fastdiff

        if (code := fastdiff.run(sys.argv[2:])) is not None:
            _answered_fast = True
            raise SystemExit(code)
    if sys.argv[1:2] == ["usage"]:  # `usage` answered before Typer (and off a terminal rich) loads (cli/fastusage.py)
        from kvprobe.cli import fastusage

        if (code := fastusage.run(sys.argv[2:])) is not None:
            _answered_fast = True
            raise SystemExit(code)
    if first == "report":
        if sys.argv[1:2] == ["report"]:  # `report --json` answered before Typer or rich loads (cli/fastreport.py)
            from kvprobe.cli import fastreport

            if (code := fastreport.run(sys.argv[2:])) is not None:
                raise SystemExit(code)  # (as Python ends: the report's helper and pool processes end with it)
    # one program name however it was started (`python -m kvprobe` too): help and completion say `kvprobe`
    if first is None and "--version" in sys.argv[1:]:
        build_app("")(prog_name="kvprobe")  # no command module is imported just to print the version
    else:
        build_app(first if first in COMMANDS else None)(prog_name="kvprobe")
