"""Help text that reads like other Unix tools: a word for each value (`--price-file PATH`), none for flags.

Typer shows Python types (`<bool>`, `<list[str]>`) where a user expects a word; rather than spell a
metavar on every option of every command, one pass names them all when the CLI is built: a table of
the words that say more than the type, the type's word otherwise. Help is printed without rich markup,
so square brackets (`[tool.kvprobe.gate]`, `[default: ...]`) stay as written.
"""
from __future__ import annotations

import sys
from pathlib import Path, PurePath
from typing import Any

from typer.core import TyperGroup

# option -> the word shown for its value, where the option's name or type would say less
WORDS = {
    "--since": "TIME", "--until": "TIME", "--tz": "ZONE", "--by": "GROUPING", "--base-url": "URL",
    "--session": "ID", "--agent": "NAME", "--api-key": "KEY", "--host": "ADDRESS", "--remote-model": "MODEL",
    "--tolerance": "RATIO", "--upstream-timeout": "SECONDS", "--price-file": "PATH", "--trace": "PATH",
    "--output": "PATH", "--out": "PATH", "--db": "PATH", "--anthropic-upstream": "URL", "--openai-upstream": "URL",
    "--deepseek-upstream": "URL", "--timing": "MODE", "--cache": "MODE", "--too-long": "ACTION",
}


def _base_type(param: Any) -> Any:
    """The Python type of a parameter's values (typer >= 0.15 keeps it; older typer: click's type)."""
    desc = getattr(param, "type_descriptor", None)
    if desc is not None:
        annotation = desc.annotation
        args = getattr(annotation, "__args__", None)
        return Path if desc.is_path else (args[0] if desc.is_list and args else annotation)
    kind = getattr(param, "type", None)
    return {"path": Path, "integer": int, "float": float}.get(getattr(kind, "name", ""), str)


def _word(param: Any) -> str:
    """WORDS, else PATH / N / NUMBER by type, else the option's own name (`--model MODEL`)."""
    opts = list(getattr(param, "opts", []))
    for opt in opts:
        if opt in WORDS:
            return WORDS[opt]
    kind = _base_type(param)
    if isinstance(kind, type) and issubclass(kind, PurePath):
        return "PATH"
    if kind is int:
        return "N"
    if kind is float:
        return "NUMBER"
    return max(opts, key=len).lstrip("-").upper()


def name_values(command: Any) -> None:
    """Give every value a word and every argument its name alone (no `<path>` after `TRACE`)."""
    for param in command.params:
        if param.param_type_name == "option":
            if not param.is_flag and not param.count and param.metavar is None:
                param.metavar = _word(param)
        elif param.param_type_name == "argument":
            if param.metavar is None:
                param.metavar = (param.name or "value").upper()
            if hasattr(param, "display_type_rich"):  # typer >= 0.15 prints a type after the name
                param.display_type_rich = _no_type
    for sub in getattr(command, "commands", {}).values():
        name_values(sub)


def _no_type(*_: Any, **__: Any) -> None:
    return None


class KvprobeGroup(TyperGroup):
    """The top-level group: names the values of every command as typer builds them, and turns what no command
    caught into the documented exit codes (cli.common.unexpected): never a traceback."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        name_values(self)

    def invoke(self, ctx: Any) -> Any:
        try:
            try:
                return super().invoke(ctx)
            finally:  # output to a pipe is buffered: a reader gone or a full disk shows here, still in this try
                sys.stdout.flush()
        except (OSError, RecursionError, KeyboardInterrupt) as exc:
            from kvprobe.cli.common import unexpected

            unexpected(exc)
        except Exception as exc:  # e.g. the RuntimeError Python 3.11 makes of a Ctrl-C inside a class's making
            from kvprobe.cli.common import unexpected
            from kvprobe.interrupts import interrupt_behind

            if (interrupt := interrupt_behind(exc)) is None:
                raise
            unexpected(interrupt)
