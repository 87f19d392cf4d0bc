"""The kvprobe command line: a thin layer over the library (one module per command).

Command modules are imported only when needed: `kvprobe diff` loads the diff command and not the proxy,
the server or DuckDB, which keeps start-up short (diff's target is half a second including start-up).
`app` (the full CLI, as tests and `--help` use it) is built on first access.
"""
from __future__ import annotations

import importlib
import sys
from typing import Any

import typer

# name -> (module, attribute, kind, command settings); kind "command" or "group" (a Typer sub-app)
COMMANDS: dict[str, tuple[str, str, str, dict[str, Any]]] = {
    "diff": ("diff_cmd", "diff", "command", {}),
    "providers": ("providers_cmd", "providers", "command", {}),
    "report": ("report_cmd", "report", "command", {}),
    "fix": ("fix_cmd", "fix", "command", {}),
    "compare": ("compare_cmd", "compare_cmd", "command", {}),
    "gate": ("gate_cmd", "gate", "command", {}),
    "baseline": ("gate_cmd", "baseline_cmd", "command", {}),
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
}


def build_app(only: str | None = None) -> typer.Typer:
    """The CLI with every command, or with `only` one of them (what a single invocation needs)."""
    cli = typer.Typer(name="kvprobe", help="Profile and audit what AI agents pay for prompt caching.",
                      no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
    for name, (module_name, attr, kind, settings) in COMMANDS.items():
        if only is not None and name != only:
            continue
        module = importlib.import_module(f"kvprobe.cli.{module_name}")
        if kind == "group":
            cli.add_typer(getattr(module, attr), name=name)
            continue
        options = {k: getattr(module, v) for k, v in settings.items()}
        cli.command(name, **options)(getattr(module, attr))
    if only is not None:  # a lone command would otherwise become the whole CLI (`kvprobe ARGS`)
        cli.callback()(lambda: None)
    return cli


def __getattr__(name: str) -> Any:
    if name == "app":
        full = build_app()
        globals()["app"] = full
        return full
    raise AttributeError(f"module 'kvprobe.cli' has no attribute {name!r}")


def main() -> None:
    first = next((arg for arg in sys.argv[1:] if not arg.startswith("-")), None)
    build_app(first if first in COMMANDS else None)()
