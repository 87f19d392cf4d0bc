"""`kvprobe --help` (and a bare `kvprobe`) without importing any command module.

Building the full Typer app imports every command and, through them, rich, the proxy, the server and the
analysis: ~0.7 s before a line of help appears. The top-level help only needs each command's one-line
summary, which is read here from the command modules' source (the docstring of the command function, or
the `help=` of a Typer group) with `ast`: no import, and never out of step with what `kvprobe CMD --help`
shows. Anything this cannot read falls back to the full Typer help.
"""
from __future__ import annotations

import ast
import shutil
import textwrap
from pathlib import Path

HERE = Path(__file__).parent
DESCRIPTION = "Profile and audit what AI agents pay for prompt caching."


def _first_paragraph(doc: str) -> str:
    return " ".join(line.strip() for line in doc.strip().split("\n\n", 1)[0].splitlines())


def _typer_help(call: ast.Call) -> str | None:
    for kw in call.keywords:
        if kw.arg == "help":
            try:
                return str(ast.literal_eval(kw.value))
            except ValueError:
                return None
    return None


def summary(module: str, attr: str, kind: str) -> str | None:
    """The summary Typer would show for one command, read from its module's source."""
    tree = ast.parse((HERE / f"{module}.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if kind == "command" and isinstance(node, ast.FunctionDef) and node.name == attr:
            doc = ast.get_docstring(node)
            return _first_paragraph(doc) if doc else ""
        if kind == "group" and isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            if any(isinstance(t, ast.Name) and t.id == attr for t in node.targets):
                text = _typer_help(node.value)
                return _first_paragraph(text) if text is not None else None
    return None


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
    rows = []
    for name, (module, attr, kind, _) in commands.items():
        text = summary(module, attr, kind)
        if text is None:
            return None
        rows.append((name, text))
    width = min(shutil.get_terminal_size((100, 24)).columns, 100)
    name_width = max(len(n) for n, _ in rows) + 2
    lines = ["Usage: kvprobe [OPTIONS] COMMAND [ARGS]...", "", f"  {DESCRIPTION}", "",
             "Options:", *_option_lines(width), "", "Commands:"]
    for name, text in rows:
        wrapped = textwrap.wrap(text, max(width - name_width - 2, 30)) or [""]
        lines.append(f"  {name:<{name_width}}{wrapped[0]}")
        lines.extend(" " * (name_width + 2) + more for more in wrapped[1:])
    lines += ["", "Run `kvprobe COMMAND --help` for a command's options."]
    return "\n".join(lines) + "\n"
