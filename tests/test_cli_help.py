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


def test_the_summaries_are_kept_between_runs_and_read_again_once_edited(tmp_path, monkeypatch):
    """Parsing the command modules was ~35 ms of a ~65 ms `--help`: what it read is kept in the user's cache,
    keyed by each module's size, times and inode, so an edited module's new summary shows at once."""
    from kvprobe import toml_cache
    from kvprobe.cli import fasthelp

    monkeypatch.setenv("KVPROBE_CACHE_DIR", str(tmp_path / "cache"))
    module = tmp_path / "cli" / "hello_cmd.py"
    module.parent.mkdir()
    module.write_text('import typer\n\ngroup = typer.Typer(help="Say things.\\n\\nMore.")\n\n\n'
                      'def hello() -> None:\n    """Say hello.\n\n    Details."""\n')
    parsed = []
    real = fasthelp.module_summaries
    monkeypatch.setattr(fasthelp, "module_summaries", lambda path: parsed.append(path) or real(path))
    for _ in range(2):
        (got,) = toml_cache.read_all([module], fasthelp.module_summaries)
        assert got == {"group:group": "Say things.", "command:hello": "Say hello."}
    assert len(parsed) == 1  # the second run read the kept summaries
    module.write_text('def hello() -> None:\n    """Say hello, louder."""\n')
    (got,) = toml_cache.read_all([module], fasthelp.module_summaries)
    assert got == {"command:hello": "Say hello, louder."} and len(parsed) == 2
