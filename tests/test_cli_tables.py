"""Tables at 60, 80 and 120 columns: each table's column priorities decide what stays, text wraps between
words or is cut visibly, indented lines keep their indent when a terminal wraps them, and nothing off a
terminal carries box-drawing characters — for every command that prints a table."""
from __future__ import annotations

import io
import os
import re
import subprocess
import sys

import pytest
from rich.console import Console
from rich.text import Text

from conftest import ROOT
from kvprobe.cli.tables import Col, layout, print_table

SAMPLE = ROOT / "traces" / "sample_session.jsonl"
USAGE_LOGS = [ROOT / "tests" / "fixtures" / "importers" / "claude", ROOT / "tests" / "fixtures" / "importers" / "codex"]
BOX = set("┃│┏┓┗┛┡┩━─╇╈┼╭╮╰╯└├┤┬┴┌┐┘")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _run(*args: object, columns: int, terminal: bool = False, **env: str) -> str:
    """The real program, stdout a pipe (or a forced terminal), at `columns`; its output without styles."""
    base = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "NO_COLOR", "FORCE_COLOR", "LINES")}
    extra = {"COLUMNS": str(columns), **({"FORCE_COLOR": "1"} if terminal else {}), **env}
    res = subprocess.run([sys.executable, "-m", "kvprobe", *map(str, args)], capture_output=True, text=True,
                         env={**base, **extra}, timeout=120, check=False)
    assert res.returncode in (0, 1), res.stderr
    return ANSI.sub("", res.stdout)


def _header(text: str, title: str | None, first: str) -> list[str]:
    """The column names of the table titled `title` (or the first table whose header starts with `first`)."""
    lines = [line.rstrip() for line in text.splitlines()]
    start = lines.index(title) + 1 if title else 0
    head = next(line for line in lines[start:] if (title and re.search(r"\w", line))
                or line.strip("┃ ").startswith(first))
    return [h.strip() for h in re.split(r"\s{2,}|┃", head.strip("┃ ")) if h.strip()]


def _console(width: int, terminal: bool) -> Console:
    return Console(file=io.StringIO(), width=width, force_terminal=terminal,
                   color_system="standard" if terminal else None, highlight=False)


# --- the layout rule, on hand-made tables (widths counted by hand) ---------------------------------------

COLS = (Col("id"), Col("agent", drop=1), Col("tokens", "right", drop=2), Col("cost", "right"),
        Col("why", wrap=True, least=10))
ROWS = [["req_1", "main", "3,265", "$0.0140", "cold start"],
        ["req_2", "scout", "12,500", "$0.0041", "prefix changed at system[0]"]]


@pytest.mark.parametrize(("width", "shown"), [
    # plain: columns apart by 2. Natural: id 5, agent 5, tokens 6, cost 7, why 27 (least 10: "system[0]" 9)
    (60, ["id", "agent", "tokens", "cost", "why"]),  # 5+5+6+7+27 + 4 gaps x 2 = 58
    (40, ["id", "tokens", "cost", "why"]),  # with agent: 5+5+6+7+10+8 = 41 > 40; without: 28+6 = 34
    (30, ["id", "cost", "why"]),  # 5+6+7+10+6 = 34 > 30 -> tokens goes too: 22+4 = 26
])
def test_columns_drop_in_their_priority_order(width, shown):
    widths = layout(COLS, ROWS, width, boxed=False)
    assert [COLS[i].header for i in sorted(widths)] == shown
    assert sum(widths.values()) + 2 * (len(widths) - 1) <= width


def test_a_column_that_is_the_same_in_every_row_goes_first():
    rows = [[r[0], "main", *r[2:]] for r in ROWS]  # one agent throughout: the column tells nothing
    widths = layout(COLS, rows, 40, boxed=False)
    assert [COLS[i].header for i in sorted(widths)] == ["id", "tokens", "cost", "why"]
    # and it gives way to text that would wrap: at 55 all five fit only with `why` wrapped at 24
    # (55 - 5 - 5 - 6 - 7 - 8); without the agent column it is whole, 27
    widths = layout(COLS, rows, 55, boxed=False)
    assert [COLS[i].header for i in sorted(widths)] == ["id", "tokens", "cost", "why"]
    assert widths[4] == 27


def test_a_location_too_long_for_any_layout_keeps_its_end():
    c = _console(30, terminal=False)
    print_table(None, (Col("where", cut="start"), Col("rule")),
                [["sample_session.jsonl:5:17364", "KV108"]], console=c)
    body = c.file.getvalue().splitlines()[1]
    assert body.startswith("…") and "jsonl:5:17364" in body and len(body) <= 30


def test_plain_output_has_no_box_lines_and_spaced_rows_get_a_blank_line():
    rows = [["x", "one\ntwo"], ["y", "three"]]
    c = _console(60, terminal=False)
    print_table(None, (Col("a"), Col("b", wrap=True)), rows, console=c, spaced=True)
    assert c.file.getvalue() == "a  b\nx  one\n   two\n\ny  three\n"
    c = _console(60, terminal=True)
    print_table(None, (Col("a"), Col("b", wrap=True)), rows, console=c, spaced=True)
    assert BOX & set(c.file.getvalue()) and "├" in c.file.getvalue()  # a rule between the rows


# --- a plain table written without rich (cli/table_layout.py) ------------------------------------------------

def test_a_plain_table_is_written_without_rich_as_counted_by_hand():
    """Off a terminal: the title, then columns two spaces apart, each as wide as its widest text (header and
    footer included), numbers right-aligned, no trailing blanks; at 30 columns the agent (drop 1) goes, a
    path keeps its end and a name its start."""
    from kvprobe.cli.table_layout import plain_lines

    cols = (Col("id"), Col("agent", drop=1), Col("where", cut="start"), Col("tokens", "right", footer="15,765"))
    rows = [["req_1", "main", "a/b.jsonl:5", "3,265"], ["req_2", "scout", "a/c.jsonl:17", "12,500"]]
    assert plain_lines("Requests", cols, rows, 80) == ([
        "Requests",
        "id     agent  where         tokens",
        "req_1  main   a/b.jsonl:5    3,265",
        "req_2  scout  a/c.jsonl:17  12,500",
        "                            15,765"], [])
    # 30 columns: without agent 5 + 12 + 6 + 2 x 2 = 27; at 22 `where` is cut to 22 - 5 - 6 - 4 = 7
    assert plain_lines(None, cols, rows, 30)[1] == ["agent"]
    assert plain_lines(None, cols, rows, 22) == ([
        "id     where    tokens",
        "req_1  …sonl:5   3,265",
        "req_2  …onl:17  12,500",
        "                15,765"], ["agent"])


def test_a_plain_table_is_the_one_rich_prints():
    """Tables of every shape the layout makes (columns dropped, values cut at either end, right and left
    aligned, footers, blank and space-led cells) at widths from 20 to 160: the lines written without rich are
    rich's, and where rich would wrap, draw a wide character or a multi-line cell, none are written."""
    import random

    from kvprobe.cli.table_layout import plain_lines
    from kvprobe.cli.tables import build, print_block

    rnd = random.Random(41)
    values = ["a", "claude-opus-4-1", "2026-09-10", "$1.18", "95.4%", "423.8k", "-", "", "n/a*", "…", "Total",
              "/home/me/some/long/project/path", "x y z", "  - gpt-5", "trailing  ", " lead", "café → naïve",
              "a-very-long-session-identifier-0000-4f1c-8a2b"]
    compared = declined = 0
    for _ in range(1500):
        n = rnd.randint(1, 8)
        cols = [Col(rnd.choice(["day", "reqs", "project", "cost", "x", "a long header"]), rnd.choice(["left", "right"]),
                    wrap=rnd.random() < 0.1, drop=rnd.choice([None, None, 1, 2, 3]),
                    footer=rnd.choice(["", "", "Total", "123,456"]), cut=rnd.choice(["end", "start"]))
                for _ in range(n)]
        rows = [[rnd.choice(values) for _ in range(n)] for _ in range(rnd.randint(0, 5))]
        title, width = rnd.choice([None, "Usage by day", "Usage by project"]), rnd.randint(20, 160)
        made = plain_lines(title, cols, rows, width)
        if made is None:
            declined += 1
            continue
        console = _console(width, terminal=False)
        table, hidden = build(title, cols, rows, console)
        print_block(table, console)
        assert made == (console.file.getvalue().splitlines(), hidden), (title, cols, rows, width)
        compared += 1
    assert compared > 1000 and declined > 50
    for title in ("t.db ", "", " lead"):  # trailing blanks stripped, no line for none, leading ones rich's
        made = plain_lines(title, [Col("a")], [["a wide cell"]], 40)
        console = _console(40, terminal=False)
        table, hidden = build(title, [Col("a")], [["a wide cell"]], console)
        print_block(table, console)
        assert made is None or made == (console.file.getvalue().splitlines(), hidden), title
    assert plain_lines("t.db ", [Col("a")], [["a wide cell"]], 40)[0][0] == "t.db"
    assert plain_lines("", [Col("a")], [["a wide cell"]], 40)[0] == ["a", "a wide cell"]
    assert plain_lines(None, [Col("a")], [["全角"]], 80) is None  # two cells wide each: rich's to measure
    assert plain_lines(None, [Col("a")], [["one\ntwo"]], 80) is None
    assert plain_lines(None, [Col("a", wrap=True, least=6)], [["wrap these words"]], 10) is None


def test_an_indented_line_keeps_its_indent_when_a_terminal_wraps_it():
    from kvprobe.cli.common import _Console

    c = _Console(file=io.StringIO(), width=40, force_terminal=True, color_system="standard", highlight=False)
    c.print(Text.assemble("    what to do: ", ("keep the content before the last breakpoint byte-identical",
                                                "cyan")))
    c.print("not indented: this long sentence wraps back to the start of the line as usual")
    lines = ANSI.sub("", c.file.getvalue()).splitlines()
    assert lines[0] == "    what to do: keep the content before"
    # the rest goes on 40 - 4 - 2 = 34 columns: "the last breakpoint byte-identical" is exactly 34
    assert lines[1] == "      the last breakpoint byte-identical"
    assert lines[2].startswith("not indented") and not lines[3].startswith(" ")


# --- every command's tables at 60, 80 and 120 columns ------------------------------------------------------

# (command, table title or None, first header, columns that must stay at 80, at 60)
TABLES = [
    (["report", SAMPLE, "--no-fixes"], "Requests", "time",
     ["time", "id", "read", "write", "hit %", "cost", "why"], ["time", "read", "hit %", "cost", "why"]),
    (["report", SAMPLE, "--no-fixes"], "Costliest blocks over the task", "block",
     ["block", "first", "write", "reads", "total"], ["block", "write", "reads", "total"]),
    (["report", SAMPLE, "--what-if"], "What if: predicted before → after all fixes", "id",
     ["id", "read", "write", "cost"], ["id", "read", "cost"]),
    (["usage", *USAGE_LOGS, "--by", "week", "--breakdown"], "Usage by week", "week",
     ["week", "input", "read", "write", "hit", "cost"], ["week", "read", "hit", "cost"]),
    (["lint", SAMPLE], None, "where", ["where", "rule", "finding and fix"], ["where", "rule", "finding and fix"]),
    (["compare", SAMPLE, SAMPLE], "Tasks: base → candidate", "task", ["task", "cost", "hit ratio", "worse"],
     ["task", "cost", "hit ratio", "worse"]),
    (["providers", "claude-sonnet-4-5"], "anthropic · claude-sonnet-4-5 → claude-sonnet-4-5", "rule",
     ["rule", "value", "source"], ["rule", "value", "source"]),
    (["db", "schema"], "traces: one row per loaded trace file (key: trace_id)", "column",
     ["column", "type", "meaning"], ["column", "type", "meaning"]),
]


@pytest.mark.parametrize(("args", "title", "first", "at80", "at60"), TABLES,
                         ids=[f"{t[0][0]}:{t[1] or t[2]}"[:40] for t in TABLES])
@pytest.mark.parametrize("terminal", [False, True], ids=["piped", "terminal"])
def test_each_table_keeps_what_matters_at_60_80_and_120_columns(args, title, first, at80, at60, terminal):
    for width, wanted in ((120, at80), (80, at80), (60, at60)):
        text = _run(*args, columns=width, terminal=terminal)
        rows = [line for line in text.splitlines() if BOX & set(line) or re.search(r"\S  +\S", line)]
        assert rows and all(len(line) <= width for line in rows), (width, text)  # sentences may run on
        shown = _header(text, title, first)
        assert set(wanted) <= set(shown), (width, shown)
        assert bool(BOX & set(text)) is terminal, width  # box lines on a terminal only


def test_the_report_keeps_write_and_leaves_out_what_says_least_at_80():
    text = _run("report", SAMPLE, "--no-fixes", columns=80, terminal=True)
    assert _header(text, "Requests", "time") == ["time", "id", "read", "write", "hit %", "cost", "why"]
    assert "(not shown at 80 columns: agent, input, fresh; --json has every field)" in text
    piped = _run("report", SAMPLE, "--no-fixes", columns=120)
    assert "not shown" not in piped.split("Total")[0]  # at 120 every request column is there


def test_usage_leaves_out_reasoning_before_the_token_classes():
    args = ("usage", *USAGE_LOGS, "--by", "week", "--breakdown")  # model names make the first column wide
    at80 = _header(_run(*args, columns=80), "Usage by week", "week")
    assert "reasoning" not in at80 and {"reqs", "input", "read", "write"} <= set(at80)
    at120 = _header(_run(*args, columns=120), "Usage by week", "week")
    assert "reasoning" in at120


@pytest.mark.parametrize("env", [{}, {"NO_COLOR": "1", "FORCE_COLOR": "1"}], ids=["piped", "no-color"])
def test_lint_off_a_terminal_is_plain_and_keeps_each_location_whole(env):
    text = _run("lint", SAMPLE, columns=80, **env)
    assert not BOX & set(text) and "\x1b[" not in text
    for where in ("traces/sample_session.jsonl:1:1423", "traces/sample_session.jsonl:3:1423",
                  "traces/sample_session.jsonl:5:17364"):  # named relative to the repository
        assert any(line.startswith(where + " ") for line in text.splitlines()), where


def test_what_to_do_continues_indented_on_an_80_column_terminal():
    text = _run("report", SAMPLE, "--no-fixes", columns=80, terminal=True)
    section = re.split(r"What the misses cost, by cause *\n", text)[1].split("Requests")[0].splitlines()
    start = next(i for i, line in enumerate(section) if line.startswith("  "))  # the causes' examples
    misses = section[start:]
    assert misses and all(line.startswith("  ") for line in misses), misses
    advice = next(i for i, line in enumerate(misses) if "what to do: keep the content before" in line)
    assert misses[advice + 1].startswith("      ") and "changing text" in misses[advice + 1]
