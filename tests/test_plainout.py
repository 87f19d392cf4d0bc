"""Off a terminal `kvprobe diff` writes its text without rich (kvprobe.cli.plainout): the bytes must be the
ones rich's console would write, and anything rich might write otherwise (a wide or control character, a
snippet to cut at the width, a terminal) is left to rich."""
from __future__ import annotations

import io
import os
import subprocess
import sys
from contextlib import redirect_stdout

import pytest
from rich.text import Text

from conftest import ROOT
from kvprobe.cli import console as console_module
from kvprobe.cli import plainout

# (pieces with their styles, the line's style, cut to the width?) as cli/diff_view.py makes them
SNIPPET = [("  - ", None), ("… 2026-09-10T10:07:55Z", "dim"), (". You are Forge, a coding agent for…", "bold red")]
CASES = {
    "ascii": [([("kvprobe diff ", "bold"), ("a.json → b.json  ", None), ("anthropic · claude-sonnet-4-5", "cyan")],
               "", False),
              ([("A: 3,265 tokens   B: 3,348 tokens (estimated)", None)], "", False),
              ([], "", False),
              (SNIPPET, "red", True)],
    "latin and punctuation": [([("Parameter changed: ", "bold"), ("système", "magenta"),
                                (" \"café – naïve\" → ≈ ≤ …", None)], "yellow", False)],
    "a long line not cut": [([("x" * 150, "italic")], "", False)],
    "a cut line exactly the width": [([("  + ", None), ("y" * 76, "bold green")], "green", True)],
    # rich's to write:
    "a cut line past the width": [([("  + ", None), ("y" * 77, "bold green")], "green", True)],
    "wide characters": [([("  + 日本語のテキスト", None)], "green", True)],
    "an emoji": [([("warning: 🚀", None)], "yellow", False)],
    "a control character": [([("  \x1b[31mred\x07", None)], "italic", False)],
    "a tab": [([("a\tb", None)], "", False)],
    "a newline in a name": [([("kvprobe diff a\nb.json", None)], "", False)],
}
PLAIN = {"ascii", "latin and punctuation", "a long line not cut", "a cut line exactly the width"}


def _rich(lines, console):
    """What cli/diff_view.py printed through rich before plainout existed, line by line."""
    buffer = io.StringIO()
    with redirect_stdout(buffer):
        for pieces, style, cut in lines:
            text = Text(style=style)
            for piece, piece_style in pieces:
                text.append(piece, piece_style)
            console.print(text, no_wrap=True, overflow="ellipsis") if cut else console.print(text)
    return buffer.getvalue()


def _plain(lines):
    buffer = io.StringIO()
    with redirect_stdout(buffer):
        wrote = plainout.write([("".join(p for p, _ in pieces), cut) for pieces, _, cut in lines])
    return wrote, buffer.getvalue()


@pytest.fixture
def pipe(monkeypatch):
    """Standard output a pipe (not a terminal), 80 columns; a console made as cli/console.py makes `out`."""
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "80")
    with redirect_stdout(io.StringIO()):
        console = console_module._console()
    return console


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("rich_loaded", [True, False], ids=["rich loaded", "rich not loaded"])
def test_plain_text_is_what_rich_writes_off_a_terminal(case, rich_loaded, pipe, monkeypatch):
    lines = CASES[case]
    expected = _rich(lines, pipe)
    if rich_loaded:  # the full CLI: the console exists, its own settings decide
        monkeypatch.setattr(console_module, "out", pipe)
    else:  # `kvprobe diff` answered before rich loads
        monkeypatch.delitem(sys.modules, "kvprobe.cli.console")
    wrote, got = _plain(lines)
    assert (wrote, got) == ((True, expected) if case in PLAIN else (False, ""))


def test_the_example_lines_by_hand(pipe, monkeypatch):
    monkeypatch.setattr(console_module, "out", pipe)
    assert _plain(CASES["ascii"]) == (True, "kvprobe diff a.json → b.json  anthropic · claude-sonnet-4-5\n"
                                            "A: 3,265 tokens   B: 3,348 tokens (estimated)\n"
                                            "\n"
                                            "  - … 2026-09-10T10:07:55Z. You are Forge, a coding agent for…\n")


@pytest.mark.parametrize("env", [{"FORCE_COLOR": "1"}, {"TTY_COMPATIBLE": "1"}, {"COLUMNS": "40"}],
                         ids=["FORCE_COLOR", "TTY_COMPATIBLE", "a snippet past 40 columns"])
def test_rich_writes_where_it_would_write_something_else(env, pipe, monkeypatch):
    monkeypatch.delitem(sys.modules, "kvprobe.cli.console")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert _plain(CASES["ascii"]) == (False, "")


@pytest.mark.parametrize("flags, start", [
    ((), "kvprobe diff request_a.json → request_b.json  anthropic · claude-sonnet-4-5\n"),
    (("--json",), '{\n  "provider": "anthropic",\n  "model": "claude-sonnet-4-5",\n'),
], ids=["text", "json"])
def test_kvprobe_diff_loads_no_rich(flags, start):
    """The example pair, from a pipe: written without rich (test_diff_fast compares it with the full
    command's output)."""
    code = ("import sys; from kvprobe.cli import main\n"
            "sys.argv = ['kvprobe', 'diff', *sys.argv[1:]]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "sys.stdout.flush(); sys.stderr.write(str('rich' in sys.modules))")
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    res = subprocess.run([sys.executable, "-c", code, str(ROOT / "examples" / "request_a.json"),
                          str(ROOT / "examples" / "request_b.json"), *flags], capture_output=True, text=True,
                         timeout=120, env=env, stdin=subprocess.DEVNULL)
    assert res.stderr == "False"
    assert res.stdout.startswith(start)
