"""What every command's output owes a terminal, a pipe and a CI log: tables that fit, words never split,
no styles when piped or under NO_COLOR, help that reads like other tools, shell completion."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT

SAMPLE = ROOT / "traces" / "sample_session.jsonl"
BOX = set("┃│┏┓┗┛┡┩━─╇╈┼╭╮╰╯")


def _kvprobe(*args: str, **env: str) -> subprocess.CompletedProcess:
    """The real program with stdout on a pipe (not a terminal), in a chosen environment."""
    base = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "NO_COLOR", "FORCE_COLOR", "LINES")}
    return subprocess.run([sys.executable, "-m", "kvprobe", *map(str, args)], capture_output=True, text=True,
                          env={**base, **env}, timeout=120, check=False)


def _table(stdout: str, title: str) -> list[str]:
    """The lines of the table titled `title`: up to the next blank line, note or sentence."""
    lines = stdout.splitlines()
    start = lines.index(title) + 1
    body = []
    for line in lines[start:]:
        if not line.strip() or line.startswith(("(not shown", "Total", "Fixes", "Costliest", "With all")):
            break
        body.append(line)
    return body


@pytest.fixture
def width():
    """Set the width the consoles render at (what COLUMNS sets for a real run), restored afterwards."""
    from kvprobe.cli.common import out

    saved = out._width

    def set_width(columns: int) -> None:
        out.width = columns
    yield set_width
    out._width = saved


def _split_or_cut(narrow: str, wide: str, title: str) -> list[str]:
    """Words of the narrow table that are not whole words of the unconstrained one: split cells. A word too
    long for any layout may be cut, visibly: its start and "…" (the whole value is in --json)."""
    words = set(" ".join(_table(wide, title)).split())

    def cut(w: str) -> bool:
        return w.endswith("…") and len(w) > 1 and any(x.startswith(w[:-1]) for x in words)
    return [w for line in _table(narrow, title) for w in line.split() if w not in words and not cut(w)]


@pytest.mark.parametrize(("args", "titles"), [
    (["report", SAMPLE, "--what-if"], ["Requests", "Costliest blocks over the task",
                                       "What if: predicted before → after all fixes"]),
    (["providers", "claude-sonnet-4-5"], ["anthropic · claude-sonnet-4-5 → claude-sonnet-4-5"]),
    (["usage", SAMPLE, "--by", "session"], ["Usage by session"]),
    (["compare", SAMPLE, SAMPLE], ["Tasks: base → candidate"]),
    (["db", "schema"], ["traces: one row per loaded trace file (key: trace_id)"]),
])
def test_tables_fit_80_columns_and_no_word_is_split(cli, width, args, titles):
    width(400)
    wide = cli(*args)
    width(80)
    narrow = cli(*args)
    assert narrow.exit_code == wide.exit_code == 0, narrow.output
    for title in titles:
        rows = _table(narrow.stdout, title)
        assert len(rows) >= 2 and all(len(line) <= 80 for line in rows), "\n".join(rows)
        # every word printed at 80 columns is a whole word of the unconstrained table: nothing split or cut
        assert not _split_or_cut(narrow.stdout, wide.stdout, title), "\n".join(rows)
    assert not BOX & set(narrow.stdout)  # not a terminal: plain, no box lines


def test_piped_at_80_columns_the_requests_table_keeps_whole_cells():
    """The real program, its stdout a pipe, COLUMNS=80: what a CI log or `| less` gets."""
    res = _kvprobe("report", SAMPLE, "--no-fixes", COLUMNS="80")
    assert res.returncode == 0 and "\x1b[" not in res.stdout and not BOX & set(res.stdout)
    rows = _table(res.stdout, "Requests")
    assert all(len(line) <= 80 for line in rows)
    # the sample's logged costs per request, as the README lists them, each whole on its request's line
    for rid, cost in (("req_1", "$0.0140"), ("req_3", "$0.0167"), ("req_4", "$0.0181"), ("req_6", "$0.0061")):
        assert any(rid in line and cost in line for line in rows), (rid, cost, rows)
    assert any("TTL expired 2m00s before" in line for line in rows)
    assert "(not shown at 80 columns: agent, fresh; --json has every field)" in res.stdout
    fragments = {w for line in rows for w in line.split()} - set(" ".join([
        "time id input read write hit % cost why 10:07:55 10:08:25 10:09:10 10:16:10 10:16:40 10:17:10",
        "req_1 req_2 req_3 req_4 req_5 req_6 3,265 3,594 3,923 4,252 4,581 4,910 0 2,268 4,252 329 658 2,313",
        "91 50 87 $0.0140 $0.0041 $0.0167 $0.0181 $0.0116 $0.0061 cold start prefix changed at system[0]",
        "TTL expired 2m00s before tool_choice changed"]).split())
    assert not fragments, fragments


def test_wide_terminal_shows_every_column(cli, width):
    width(160)
    res = cli("report", SAMPLE, "--no-fixes")
    assert "not shown" not in res.stdout and _table(res.stdout, "Requests")[0].split()[2] == "agent"


def test_no_color_means_no_styles_even_on_a_forced_terminal():
    forced = _kvprobe("providers", "deepseek-chat", COLUMNS="120", FORCE_COLOR="1")
    assert "\x1b[" in forced.stdout and BOX & set(forced.stdout)  # what this test would otherwise miss
    plain = _kvprobe("providers", "deepseek-chat", COLUMNS="120", FORCE_COLOR="1", NO_COLOR="1")
    assert plain.returncode == 0 and "\x1b[" not in plain.stdout and not BOX & set(plain.stdout)
    assert "min_cacheable_tokens" in plain.stdout


def test_predicted_total_says_which_is_which(cli):
    res = cli("report", SAMPLE)
    assert "Total (logged usage): 6 requests" in res.stdout
    assert "With all fixes (predicted before → after):" in res.stdout
    assert "the logged total is $0.0706)" in res.stdout


def test_messages_show_json_or_words_not_python_values(cli):
    res = cli("report", SAMPLE)
    assert 'tool_choice changed from not set to {"type": "any"}' in res.stdout
    assert "keep tool_choice unset for the whole task" in res.stdout
    assert "None" not in res.output and "{'" not in res.output and "'}" not in res.output


def _commands() -> list[list[str]]:
    from kvprobe.cli import COMMANDS

    names = [[n] for n, spec in COMMANDS.items() if spec[2] == "command"]
    return names + [["db", "load"], ["db", "schema"]]


@pytest.mark.parametrize("command", _commands(), ids=" ".join)
def test_help_names_values_with_words_and_flags_with_none(cli, command):
    res = cli(*command, "--help")
    assert res.exit_code == 0
    python_types = r"<(bool|str|int|float|path|Path|list\[\w+\]|tuple\[.*?\]|datetime)(\.\.\.)?>"
    assert not re.search(python_types, res.output), res.output
    for line in res.output.splitlines():
        flag = re.match(r"\s+(?:-\w, )?(--json|--help|--force|--what-if|--no-fixes)\b(\S*)\s", line)
        if flag:
            assert flag.group(2) == "" and not re.match(r"\s+\S+ [A-Z]", line), line


def test_help_keeps_square_brackets(cli):
    gate = " ".join(cli("gate", "--help").output.split())
    assert "the nearest kvprobe.toml [gate] or pyproject.toml [tool.kvprobe.gate]" in gate
    usage = " ".join(cli("usage", "--help").output.split())
    assert "[default: ~/.claude/projects and ~/.codex/sessions, with ~/.gemini/tmp, ~/.qwen/projects, " \
           "~/.local/share/opencode, ~/.kimi/sessions, ~/.copilot/otel, Cline's tasks, " \
           "~/.openhands/conversations and ~/.vibe where present]" in usage
    assert "--price-file PATH" in usage and "--since TIME" in usage
    serve = " ".join(cli("serve", "--help").output.split())
    assert "--model MODEL" in serve and "--port PORT" in serve


def test_shell_completion_is_offered_and_completes_commands_and_options(cli):
    from typer.testing import CliRunner

    from kvprobe.cli import app

    top = cli("--help").stdout
    assert "--install-completion" in top and "--show-completion" in top
    runner = CliRunner()
    # typer finds the shell among the process's parents: run it from bash, as a user would
    script = subprocess.run(["bash", "-c", f'"{sys.executable}" -m kvprobe --show-completion; true'],
                            capture_output=True, text=True, timeout=120, check=False)
    assert "complete -o default -F _kvprobe_completion kvprobe" in script.stdout, script.stderr
    env = {"_KVPROBE_COMPLETE": "complete_bash", "COMP_CWORD": "1", "COMP_WORDS": "kvprobe rep"}
    assert runner.invoke(app, [], prog_name="kvprobe", env=env).stdout.split() == ["report", "replay"]
    env.update(COMP_CWORD="2", COMP_WORDS="kvprobe gate --min")
    assert runner.invoke(app, [], prog_name="kvprobe", env=env).stdout.split() == ["--min-hit-ratio"]


def test_python_dash_m_calls_itself_kvprobe():
    assert _kvprobe("gate").stderr.startswith("Usage: kvprobe gate")
