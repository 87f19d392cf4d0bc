"""What a command says on stderr: a progress bar over the bytes of the logs it reads (on a terminal), what was
read and skipped, and an error. Neither Typer nor rich is imported to say it off a terminal (cli/plainout.py
writes the lines rich would), so a command answered before they load (`kvprobe usage`, cli/fastusage.py)
says it as the full command does."""
from __future__ import annotations

import contextlib

from kvprobe.cli import plainout
from kvprobe.cli.plainout import Line

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from kvprobe.importers import ImportReport


@contextlib.contextmanager
def byte_progress(paths: list[str], label: str, enabled: bool = True) -> Iterator[Callable[[int], None] | None]:
    """A rich progress bar on stderr over the bytes of every file under `paths` (hidden when not a TTY)."""
    if not enabled or plainout.plain_target(stderr=True) is not None:  # (off a terminal: rich is not loaded)
        yield None
        return
    from kvprobe.cli.console import err

    if not err.is_terminal:
        yield None
        return
    from kvprobe.importers import discover
    from kvprobe.importers.base import log_bytes

    with contextlib.suppress(Exception):
        total = sum(map(log_bytes, discover(paths)))
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn  # ~0.1 s

    columns = (TextColumn(label, markup=False), BarColumn(), DownloadColumn(), TimeRemainingColumn())
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task(label, total=locals().get("total"))
        yield lambda n: bar.advance(task, n)


EXAMPLES_SHOWN = 5  # skipped lines quoted without --verbose, whatever the number of files they are in


def report_skips(report: ImportReport, verbose: bool = False) -> None:
    """What was read and skipped; a few skipped lines quoted (--verbose: up to five of every file). A folder of
    179 transcripts each cut short quoted two of each: 313 lines of examples under a one-line summary."""
    lines = [Line([(line, None)]) for line in report.summary()]
    if verbose or report.skipped:
        examples = [example for source in report.sources for example in source.examples[: 5 if verbose else 2]]
        shown = examples if verbose else examples[:EXAMPLES_SHOWN]
        lines += [Line([(f"  e.g. {example}", None)], style="dim") for example in shown]
        if not verbose and len(shown) < report.skipped:
            lines.append(Line([(f"  ... {report.skipped - len(shown):,} more skipped line(s) not quoted (`kvprobe "
                                "import --verbose` quotes up to five a file)", None)], style="dim"))
    if not lines or plainout.write(lines, stderr=True):
        return
    from kvprobe.cli.console import err

    for line in lines:
        err.print(line.pieces[0][0], soft_wrap=True, markup=False, style=line.style or None)


def say_error(message: str) -> None:
    """An error as every command says it (`cli.common.fail`): one line on stderr, "error:" bold red on a
    terminal; a newline in a file name or value stays on the line."""
    message = message.replace("\r", "\\r").replace("\n", "\\n")
    if plainout.write([Line([("error:", "bold red"), (f" {message}", None)])], stderr=True):
        return
    from rich.text import Text

    from kvprobe.cli.console import err

    err.print(Text.assemble(("error:", "bold red"), " ", message), soft_wrap=True)
