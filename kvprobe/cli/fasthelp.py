"""`kvprobe --help` (and a bare `kvprobe`) without importing any command module.

Building the full Typer app imports every command and, through them, rich, the proxy, the server and the
analysis: ~0.7 s before a line of help appears. The top-level help only needs each command's one-line
summary, which is read here from the command modules' source (the docstring of the command function, or
the `help=` of a Typer group) with `ast`: no import, and never out of step with what `kvprobe CMD --help`
shows. Anything this cannot read falls back to the full Typer help. The summaries read are kept between
runs in the user's cache with each module's size, times and inode, as the provider rules are
(`kvprobe.toml_cache`): parsing the modules was ~35 ms of a ~65 ms `--help`, and an edited module is read
again at once.
"""
from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).parent
TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any
DESCRIPTION = "Profile and audit what AI agents pay for prompt caching."


def _first_paragraph(doc: str) -> str:
    return " ".join(line.strip() for line in doc.strip().split("\n\n", 1)[0].splitlines())


def _typer_help(call: Any) -> str | None:
    import ast

    for kw in call.keywords:
        if kw.arg == "help":
            try:
                return str(ast.literal_eval(kw.value))
            except ValueError:
                return None
    return None


def module_summaries(path: Path) -> dict[str, str]:
    """Every summary one command module holds, by "command:<function>" (its docstring's first paragraph, ""
    without one) and "group:<name>" (a Typer group's `help=`); what cannot be read is left out."""
    import ast

    found: dict[str, str] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef):
            doc = ast.get_docstring(node)
            found[f"command:{node.name}"] = _first_paragraph(doc) if doc else ""
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            text = _typer_help(node.value)
            if text is not None:
                found.update((f"group:{t.id}", _first_paragraph(text)) for t in node.targets if hasattr(t, "id"))
    return found


def summaries(modules: list[str]) -> dict[str, dict[str, str]]:
    """Each module's summaries (`module_summaries`), kept parsed between runs."""
    from kvprobe import toml_cache

    paths = [HERE / f"{module}.py" for module in modules]
    return dict(zip(modules, toml_cache.read_all(paths, module_summaries)))


def _columns() -> int:
    """The terminal's width as shutil.get_terminal_size reads it ($COLUMNS, then the terminal, else 100),
    without importing shutil (its archive modules: ~6 ms of `--help`)."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns > 0:
        return columns
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 100
    except (AttributeError, ValueError, OSError):
        return 100


# the root options, as Typer lists them (the completion pair is Typer's own)
OPTIONS = (("--version", "Print kvprobe's version and exit."),
           ("--install-completion", "Install completion for the current shell."),
           ("--show-completion", "Show completion for the current shell, to copy it or customize the installation."),
           ("--help", "Show this message and exit."))


def _option_lines(width: int) -> list[str]:
    name_width = max(len(o) for o, _ in OPTIONS) + 2
    lines = []
    for option, text in OPTIONS:
        wrapped = textwrap.wrap(text, max(width - name_width - 2, 30))
        lines.append(f"  {option:<{name_width}}{wrapped[0]}")
        lines.extend(" " * (name_width + 2) + more for more in wrapped[1:])
    return lines


def render(commands: dict[str, tuple[str, str, str, dict]]) -> str | None:
    """The top-level help text, or None when a summary cannot be read (the caller uses Typer's)."""
    try:
        kept = summaries(sorted({module for module, *_ in commands.values()}))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    rows = []
    for name, (module, attr, kind, _) in commands.items():
        text = kept[module].get(f"{kind}:{attr}")
        if text is None:
            return None
        rows.append((name, text))
    width = min(_columns(), 100)
    name_width = max(len(n) for n, _ in rows) + 2
    lines = ["Usage: kvprobe [OPTIONS] COMMAND [ARGS]...", "", f"  {DESCRIPTION}", "",
             "Options:", *_option_lines(width), "", "Commands:"]
    for name, text in rows:
        wrapped = textwrap.wrap(text, max(width - name_width - 2, 30)) or [""]
        lines.append(f"  {name:<{name_width}}{wrapped[0]}")
        lines.extend(" " * (name_width + 2) + more for more in wrapped[1:])
    lines += ["", "Run `kvprobe COMMAND --help` for a command's options."]
    return "\n".join(lines) + "\n"
