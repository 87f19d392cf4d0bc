"""`kvprobe diff` writes its text without rich where it can (kvprobe.cli.plainout): the bytes must be the ones
rich's console would write, off a terminal and on one, and anything rich might write otherwise (a wide or
control character, a line to wrap or cut, a style plainout does not know) is left to rich."""
from __future__ import annotations

import fcntl
import io
import os
import pty
import struct
import subprocess
import sys
import termios
from contextlib import redirect_stdout

import pytest
from rich.text import Text

from conftest import ROOT
from kvprobe.cli import console as console_module
from kvprobe.cli import plainout
from kvprobe.cli.plainout import Line

A, B = ROOT / "examples" / "request_a.json", ROOT / "examples" / "request_b.json"
# lines as cli/diff_view.py makes them
SNIPPET = Line([("  - ", None), ("… 2026-09-10T10:07:55Z", "dim"),
                (". You are Forge, a coding agent for…", "bold red")], "red", cut=True)
CASES = {
    "ascii": [Line([("kvprobe diff ", "bold"), ("a.json → b.json  ", None),
                    ("anthropic · claude-sonnet-4-5", "cyan")]),
              Line([("A: 3,265 tokens   B: 3,348 tokens (estimated)", None)]),
              Line([]),
              SNIPPET,
              Line([("  a timestamp near the start of the system prompt changed", None)], "italic"),
              Line([("  system[0] (5m) through 2,268 tokens: ", None), ("not reusable", "red")]),
              Line([("Predicted: ", "bold"), ("read 0", "green"), (" · ", None), ("write 3,348", "yellow")])],
    "latin and punctuation": [Line([("Parameter changed: ", "bold"), ("système", "magenta"),
                                    (" \"café – naïve\" → ≈ ≤ …", None)], "yellow")],
    "two unstyled pieces in a styled line": [Line([("warning: ", None), ("", "bold"), ("two pieces", None)],
                                                  "yellow")],
    "a long line": [Line([("x" * 150, "italic")])],
    "a cut line inside the width": [Line([("  + ", None), ("y" * 75, "bold green")], "green", cut=True)],
    "a cut line at the width": [Line([("  + ", None), ("y" * 76, "bold green")], "green", cut=True)],
    "a cut line past the width": [Line([("  + ", None), ("y" * 77, "bold green")], "green", cut=True)],
    "wide characters": [Line([("  + 日本語のテキスト", None)], "green", cut=True)],
    "an emoji": [Line([("warning: 🚀", None)], "yellow")],
    "a control character": [Line([("  \x1b[31mred\x07", None)], "italic")],
    "a tab": [Line([("a\tb", None)])],
    "a newline in a name": [Line([("kvprobe diff a\nb.json", None)])],
    "a style plainout does not know": [Line([("x", "underline")])],
}
# what plainout writes itself (the rest is rich's): off a terminal a long line is written whole
OFF_TERMINAL = {"ascii", "latin and punctuation", "two unstyled pieces in a styled line", "a long line",
                "a cut line inside the width", "a cut line at the width", "a style plainout does not know"}
# on a terminal a line is written only strictly inside the width, in the styles plainout knows
ON_TERMINAL = {"ascii", "latin and punctuation", "two unstyled pieces in a styled line", "a cut line inside the width"}


def _rich(lines, console):
    """What cli/diff_view.py prints through rich, line by line."""
    buffer = io.StringIO()
    with redirect_stdout(buffer):
        for line in lines:
            text = Text(style=line.style)
            for piece, style in line.pieces:
                text.append(piece, style)
            console.print(text, no_wrap=True, overflow="ellipsis") if line.cut else console.print(text)
    return buffer.getvalue()


def _plain(lines):
    buffer = io.StringIO()
    with redirect_stdout(buffer):
        wrote = plainout.write(lines)
    return wrote, buffer.getvalue()


def _console(monkeypatch, **env):
    """A console made as cli/console.py makes `out`, under `env`, 80 columns wide. (The width is the
    console's, not $COLUMNS: pytest's readline sets COLUMNS in the process environment, and a test that set
    and restored it would take it from every later test's subprocesses.)"""
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "NO_COLOR", "COLORTERM"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with redirect_stdout(io.StringIO()):
        console = console_module._console()
    console.width = 80
    monkeypatch.setattr(plainout, "_width", lambda: 80)  # (the width plainout reads when rich is not loaded)
    return console


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("rich_loaded", [True, False], ids=["rich loaded", "rich not loaded"])
def test_plain_text_is_what_rich_writes_off_a_terminal(case, rich_loaded, monkeypatch):
    console = _console(monkeypatch)
    expected = _rich(CASES[case], console)
    if rich_loaded:  # the full CLI: the console exists, its own settings decide
        monkeypatch.setattr(console_module, "out", console)
    else:  # `kvprobe diff` answered before rich loads
        monkeypatch.delitem(sys.modules, "kvprobe.cli.console")
    assert _plain(CASES[case]) == ((True, expected) if case in OFF_TERMINAL else (False, ""))


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("env", [{}, {"TERM": "xterm-256color"}, {"COLORTERM": "truecolor"}, {"NO_COLOR": "1"}],
                         ids=["standard colours", "256 colours", "true colour", "NO_COLOR"])
def test_styled_text_is_what_rich_writes_on_a_terminal(case, env, monkeypatch):
    console = _console(monkeypatch, FORCE_COLOR="1", **env)  # (FORCE_COLOR: a terminal to rich)
    assert console.is_terminal
    expected = _rich(CASES[case], console)
    monkeypatch.setattr(console_module, "out", console)
    assert _plain(CASES[case]) == ((True, expected) if case in ON_TERMINAL else (False, ""))


def test_the_example_lines_by_hand(monkeypatch):
    monkeypatch.setattr(console_module, "out", _console(monkeypatch))
    assert _plain(CASES["ascii"][:4]) == (True, "kvprobe diff a.json → b.json  anthropic · claude-sonnet-4-5\n"
                                                "A: 3,265 tokens   B: 3,348 tokens (estimated)\n"
                                                "\n"
                                                "  - … 2026-09-10T10:07:55Z. You are Forge, a coding agent for…\n")


@pytest.mark.parametrize("env, width", [({"FORCE_COLOR": "1"}, 80), ({"TTY_COMPATIBLE": "1"}, 80), ({}, 40)],
                         ids=["FORCE_COLOR", "TTY_COMPATIBLE", "a snippet past 40 columns"])
def test_rich_writes_where_it_would_write_something_else(env, width, monkeypatch):
    _console(monkeypatch, **env)
    monkeypatch.setattr(plainout, "_width", lambda: width)
    monkeypatch.delitem(sys.modules, "kvprobe.cli.console")
    assert _plain(CASES["ascii"]) == (False, "")


# ends the process with whether rich was loaded on standard error
_RUN = ("import sys, atexit\n"
        "atexit.register(lambda: sys.stderr.write(f'rich loaded: {\"rich\" in sys.modules}'))\n"
        "sys.argv = ['kvprobe', 'diff', *sys.argv[1:]]\n"
        "from kvprobe.cli import main\nmain()")


def _environment(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "NO_COLOR", "COLUMNS",
                                                           "LINES", "COLORTERM")}
    return {**env, "TERM": "xterm", **extra}


@pytest.mark.parametrize("flags, start", [
    ((), "kvprobe diff request_a.json → request_b.json  anthropic · claude-sonnet-4-5\n"),
    (("--json",), '{\n  "provider": "anthropic",\n  "model": "claude-sonnet-4-5",\n'),
], ids=["text", "json"])
def test_kvprobe_diff_to_a_pipe_loads_no_rich(flags, start):
    res = subprocess.run([sys.executable, "-c", _RUN, str(A), str(B), *flags], capture_output=True, text=True,
                         timeout=120, env=_environment(), stdin=subprocess.DEVNULL)
    assert res.stderr == "rich loaded: False"
    assert res.stdout.startswith(start)


def test_kvprobe_diff_on_a_terminal_loads_no_rich_and_prints_rich_s_styles():
    """The example pair on a 100-column terminal: the codes rich writes (bold 1, dim 2, italic 3, red 31,
    green 32, yellow 33, magenta 35, cyan 36), the indented lines' indent unstyled."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
    proc = subprocess.Popen([sys.executable, "-c", _RUN, str(A), str(B)], stdin=slave, stdout=slave, stderr=slave,
                            env=_environment())
    os.close(slave)
    got = b""
    while True:
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        got += chunk
    proc.wait(timeout=120)
    os.close(master)
    e = "\x1b["
    assert got.decode().split("\r\n") == [
        f"{e}1mkvprobe diff {e}0mrequest_a.json → request_b.json  {e}36manthropic · claude-sonnet-4-5{e}0m",
        "A: 3,265 tokens   B: 3,348 tokens (estimated)",
        f"{e}1mFirst change: {e}0m{e}1;35msystem[0]{e}0m  char 29  token ≈277",
        f"{e}31m  - {e}0m{e}2;31m… 2026-09-10T10:0{e}0m{e}1;31m7:55Z. You are Forge, a coding agent for…{e}0m",
        f"{e}32m  + {e}0m{e}2;32m… 2026-09-10T10:0{e}0m{e}1;32m8:40Z. You are Forge, a coding agent for…{e}0m",
        f"  {e}3ma timestamp near the start of the system prompt changed{e}0m",
        f"{e}1mBreakpoints in B:{e}0m",
        f"  system[0] (5m) through 2,268 tokens: {e}31mnot reusable{e}0m",
        f"  messages[6].content[0] (5m) through 3,348 tokens: {e}31mnot reusable{e}0m",
        f"{e}1mPredicted for B if A was cached: {e}0m{e}32mread 0{e}0m · {e}33mwrite 3,348{e}0m · "
        f"{e}31mfresh 0{e}0m tokens",
        "rich loaded: False"]
