"""`kvprobe diff A B` answered without Typer (~20 ms of a ~0.1 s start-up; `diff` is the command typed most).

Only a plain command line is taken: two requests and diff's own flags (cli/diff_cmd.py; a test keeps the
two lists equal). Anything else (--help, another option, a third argument) returns False and the full CLI
answers. So does a comparison that fails (a missing file, a record without a body): nothing has been
printed then, and the full command says why as it always has. What is printed is the full command's, byte
for byte: both print through cli/diff_view.py.
"""
from __future__ import annotations

FLAGS = ("--json", "--exit-code", "--no-content")


def run(args: list[str]) -> int | None:
    """Answer `diff` and return its exit code; None when the full CLI must answer instead."""
    paths = [arg for arg in args if not arg.startswith("-")]
    flags = {arg for arg in args if arg.startswith("-")}
    if len(paths) != 2 or not flags <= set(FLAGS) or len(paths) + len(flags) != len(args):
        return None  # (a repeated flag is Typer's to accept; a path starting with "-" is Typer's to read)
    from kvprobe.cli.diff_view import answer, compare
    from kvprobe.errors import KvprobeError

    try:
        done = compare(*paths)
    except (KvprobeError, OSError, RecursionError):
        return None
    answer(done, "--json" in flags, "--no-content" in flags)
    return 1 if "--exit-code" in flags and done.result.breaks_reuse else 0
