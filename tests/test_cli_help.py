"""`kvprobe --help` answers from the command modules' source without importing them, and says what Typer would."""
from __future__ import annotations

import subprocess
import sys

from kvprobe.cli import COMMANDS, build_app


def _run(*args: str) -> subprocess.CompletedProcess:
    code = "import sys; from kvprobe.cli import main; sys.argv = ['kvprobe', *sys.argv[1:]]; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60)


def _short_help(command) -> str:
    text = command.help or ""
    return " ".join(line.strip() for line in text.strip().split("\n\n", 1)[0].splitlines())


def test_help_lists_every_command_with_typers_own_summary():
    res = _run("--help")
    assert res.returncode == 0
    flat = " ".join(res.stdout.split())
    app = build_app()
    import typer

    group = typer.main.get_group(app)
    for name in COMMANDS:
        summary = " ".join(_short_help(group.commands[name]).split())
        assert summary and f"{name} {summary}" in flat, name


def test_help_imports_no_command_module():
    code = ("import sys; from kvprobe.cli import main; sys.argv = ['kvprobe', '--help']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith(('kvprobe.cli.', 'typer', 'rich'))))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.stdout.strip().splitlines()[-1] == "['kvprobe.cli.fasthelp']"


def test_bare_command_prints_help_and_exits_2_like_typer():
    res = _run()
    assert res.returncode == 2 and "Usage: kvprobe" in res.stdout and "report" in res.stdout


def test_command_help_still_comes_from_typer():
    res = _run("usage", "--help")
    assert res.returncode == 0 and "--since" in res.stdout


def test_fast_help_lists_the_completion_options_typer_offers():
    fast = " ".join(_run("--help").stdout.split())
    for option in ("--install-completion", "--show-completion", "--version"):
        assert option in fast
