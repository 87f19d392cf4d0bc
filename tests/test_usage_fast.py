"""`kvprobe usage [PATH...]` is answered before Typer loads, and off a terminal before rich loads
(kvprobe.cli.fastusage: ~0.1 s of start-up, about what ccusage takes for a whole small folder, issue #41),
its JSON and its table the full command's byte for byte; anything else on its command line is left to the
full command, which answers as it always has."""
from __future__ import annotations

import json

import pytest

from cli_process import fast_json_is_the_full_commands, run_kvprobe
from conftest import ROOT

FIX = ROOT / "tests" / "fixtures" / "importers"
CLAUDE, CODEX = FIX / "claude", FIX / "codex"


WATCHED = ("typer", "rich", "kvprobe.cli.usage_cmd")  # what the fast path must not load (rich: off a terminal)


def _kvprobe(tmp_path, *args, **environ):
    """(exit code, stdout, stderr without the last line, modules loaded) of one `kvprobe ...` process."""
    return run_kvprobe(tmp_path, WATCHED, *args, **environ)


@pytest.mark.parametrize("args", [
    (CLAUDE,),
    (CLAUDE, CODEX, "--by", "week"),
    (FIX, "--tz=Europe/Paris", "--since", "2026-09-10", "--until", "20260910", "--breakdown", "--usd"),
    (CLAUDE, "--workers", "2", "--format", "claude_code"),
], ids=["claude", "claude and codex", "every format, a window", "forced format, two processes"])
def test_usage_json_loads_neither_typer_nor_rich_and_prints_what_the_full_command_prints(args, cli, tmp_path):
    out = fast_json_is_the_full_commands(cli, tmp_path, WATCHED, "usage", *args)
    assert '"requests"' in out


@pytest.mark.parametrize("args, message", [
    ((CLAUDE, "--json", "--since", "10 Sept"), "field '--since': expected a date (2026-09-10) or RFC 3339 time"),
    ((CLAUDE, "--json", "--by", "year"), "field '--by': expected one of day,"),
    ((CLAUDE, "--json", "--since", "2031-01-01"), "none of the 5 requests read is in --since 2031-01-01"),
    ((CLAUDE, "--json", "--tz", "Mars/Base"), "field '--tz': unknown time zone"),
    ((ROOT / "docs", "--json"), "no requests found in"),
    ((ROOT / "nowhere", "--json"), "nowhere: file or directory does not exist"),
    ((CLAUDE, "--json", "--workers", "two"), "'--workers': 'two' is not a valid int"),
], ids=["bad date", "bad grouping", "empty window", "bad zone", "no logs", "missing path", "bad number"])
def test_a_usage_error_is_the_full_commands_own(args, message, tmp_path, monkeypatch):
    """Exit 2, one line naming what is wrong, nothing on stdout: as before there was a fast path. A run that
    read the logs and found nothing to add up (no request, none in the window) says so itself, as the full
    command does (stderr byte for byte); any other error is the full command's."""
    from typer.testing import CliRunner

    from kvprobe.cli import build_app

    code, out, said, loaded = _kvprobe(tmp_path, "usage", *args)
    assert (code, out) == (2, "")
    assert message in said
    read_nothing = message.startswith(("none of", "no requests"))
    assert ("typer" in loaded) is not read_nothing
    if read_nothing:
        monkeypatch.setenv("COLUMNS", "200")
        monkeypatch.setenv("KVPROBE_CACHE_DIR", str(tmp_path / "full"))
        full = CliRunner().invoke(build_app(), ["usage", *map(str, args)])
        assert (full.exit_code, full.stderr.rstrip("\n")) == (2, said.rstrip("\n"))


def test_usage_help_is_the_full_commands(tmp_path):
    code, out, _, loaded = _kvprobe(tmp_path, "usage", "--help")
    assert code == 0 and "--breakdown" in out and "typer" in loaded


@pytest.mark.parametrize("columns", ["200", "80", "46"])
@pytest.mark.parametrize("args", [
    (CLAUDE,),
    (CLAUDE, CODEX, "--by", "week", "--breakdown"),
    (FIX, "--usd", "--by", "model"),
    (FIX, "--by", "project", "--tz", "Europe/Paris"),
    (CLAUDE, "--by", "session"),
], ids=["claude", "weeks with models", "every format in dollars", "projects", "sessions (titled)"])
def test_the_usage_table_off_a_terminal_loads_neither_typer_nor_rich_and_is_the_full_commands(
        args, columns, tmp_path, monkeypatch):
    """The table, its notes and the hint under it (stdout), what was read and skipped (stderr): the full
    command's (Typer's, printing through rich) at every width, a narrow one leaving columns out."""
    from typer.testing import CliRunner

    from kvprobe.cli import build_app

    from kvprobe.cli import console

    monkeypatch.setenv("COLUMNS", columns)
    for made in (console.out, console.err):  # (a console made while COLUMNS was set keeps that width, and
        monkeypatch.setattr(made, "_width", int(columns))  # pytest's readline sets it in an xdist worker)
    monkeypatch.setenv("KVPROBE_CACHE_DIR", str(tmp_path / "full"))
    full = CliRunner().invoke(build_app(), ["usage", *map(str, args), "--no-cache"])
    assert full.exit_code == 0, full.output
    code, out, said, loaded = _kvprobe(tmp_path, "usage", *args, "--no-cache", COLUMNS=columns)
    assert (code, loaded) == (0, "[]")
    assert (out, said.rstrip("\n")) == (full.stdout, full.stderr.rstrip("\n"))
    assert out.startswith("Usage by ") and "Why it cost this: kvprobe report" in out
    assert "read " in said and "requests from" in said
    if columns == "46":
        assert "(not shown at 46 columns:" in out


def test_usage_on_a_terminal_is_drawn_by_rich_without_typer(tmp_path):
    """On a terminal (FORCE_COLOR makes one for rich) the table has its box lines, a model's row its branch,
    and colours: rich draws them; Typer is still not loaded."""
    code, out, _, loaded = _kvprobe(tmp_path, "usage", CLAUDE, "--breakdown", FORCE_COLOR="1")
    assert (code, loaded) == (0, "['rich']")
    assert "┃" in out and "└ claude-" in out and "\x1b[" in out


def test_usage_with_no_path_reads_where_the_agents_keep_their_logs(tmp_path):
    """No path: ~/.claude/projects and the other agents' places, as the full command reads them, the hint
    naming the folder found; the JSON and the table both answered without Typer."""
    import shutil

    home = tmp_path / "home"
    shutil.copytree(CLAUDE, home / ".claude" / "projects" / "-home-me-app")
    place = {"HOME": str(home), "CLAUDE_CONFIG_DIR": "", "CODEX_HOME": str(home / ".codex")}
    env = {k: v for k, v in place.items() if v}
    unset = [k for k, v in place.items() if not v]
    code, out, _, loaded = _kvprobe(tmp_path, "usage", "--json", **env, **dict.fromkeys(unset, ""))
    assert (code, loaded) == (0, "[]")
    assert json.loads(out)["totals"]["requests"] == 5
    code, out, said, loaded = _kvprobe(tmp_path, "usage", **env, **dict.fromkeys(unset, ""))
    assert (code, loaded) == (0, "[]")
    assert "Why it cost this: kvprobe report ~/.claude/projects names" in out
    assert said.startswith("read 5 requests from")
    code, _, said, loaded = _kvprobe(tmp_path, "usage", HOME=str(tmp_path / "nobody"), CLAUDE_CONFIG_DIR="",
                                     CODEX_HOME=str(tmp_path / "nobody" / ".codex"))
    assert code == 2 and "no logs found: looked in" in said and "typer" in loaded


def test_the_fast_path_knows_every_option_usage_has():
    """An option added to `usage` and not to the fast path would be refused there and left to Typer (slow,
    not wrong); one the fast path knows that `usage` lacks would be accepted where Typer refuses it."""
    import typer.main

    from kvprobe.cli import build_app, fastusage

    command = typer.main.get_command(build_app("usage")).commands["usage"]
    options = {(name, p.is_flag) for p in command.params if p.param_type_name == "option" for name in p.opts}
    options.discard(("--help", True))
    assert options == {(n, False) for n in fastusage.VALUED} | {(n, True) for n in fastusage.FLAGS}


def test_logs_read_without_history_are_the_same_requests_without_their_message_lists():
    """`usage` reads without rebuilding each request's message list or the events between requests
    (load_any's history=False): the same requests (5 Claude Code, 2 Codex), the same counts of what was read
    and skipped, no `history` and no `events` on any of them (Codex's reasoning-dropped change, which `report`
    reads from a request's history, is nothing `usage` adds up)."""
    from kvprobe.importers import ImportReport, load_any

    told, bare_told = ImportReport(), ImportReport()
    full = list(load_any([CLAUDE, CODEX], report=told))
    bare = list(load_any([CLAUDE, CODEX], report=bare_told, history=False))
    assert [r.extra.get("source_format") for r in bare] == ["claude_code"] * 5 + ["codex"] * 2
    assert all("history" in r.extra for r in full)
    assert not any("history" in r.extra or "events" in r.extra for r in bare)
    for record in full:
        del record.extra["history"]
        record.extra.pop("events", None)
    assert bare == full
    assert bare_told.to_json() == told.to_json()


def test_usage_reads_no_events_and_counts_the_same(tmp_path):
    """The events between requests (a compaction, an interrupt, a /mcp reconnect) are what `report` names as a
    miss's trigger; `usage` reads without them (history=False) and adds up the same requests and tokens."""
    from agent_logs import ClaudeTranscript

    from kvprobe.importers import ImportReport, load_any

    s = ClaudeTranscript("ev")
    s.turn(0, "r1", read=0, write=4000)
    s.compact_boundary(60, pre_tokens=150_000)
    s.assistant(62, "r2", read=0, write=3000)
    s.interrupt(70)
    s.command(80, "/mcp", "Reconnected to github.")
    s.turn(90, "r3", read=3000, write=500)
    folder = tmp_path / "projects" / "-home-me-app"
    s.write(folder / "ev.jsonl")
    told, bare_told = ImportReport(), ImportReport()
    full = list(load_any([folder], report=told))
    bare = list(load_any([folder], report=bare_told, history=False))
    assert [[e["kind"] for e in r.extra.get("events", [])] for r in full] == \
        [[], ["compaction"], ["interrupt", "tools_changed"]]
    assert [r.extra.get("events") for r in bare] == [None, None, None]
    for record in full:
        del record.extra["history"]
        record.extra.pop("events", None)
    assert bare == full
    assert bare_told.to_json() == told.to_json()
    code, out, _, _ = _kvprobe(tmp_path, "usage", tmp_path / "projects", "--json")
    totals = json.loads(out)["totals"]
    assert (code, totals["requests"], totals["cache_write_tokens"], totals["cache_read_tokens"]) == \
        (0, 3, 7500, 3000)


def test_a_first_run_that_finds_no_request_says_so_once(tmp_path):
    """Nothing to add up (logs read as another format, none of their lines a request): the files read and
    skipped, then the error, exit 2 — said by the fast path itself. Handed to the full command, which read
    the files again, it said they were "unchanged since an earlier run" on the first run there was."""
    code, out, said, loaded = _kvprobe(tmp_path, "usage", CLAUDE, "--format", "codex")
    assert (code, out) == (2, "")
    assert said.startswith("read 0 requests from 3 file(s) (3 codex)\n") and "unchanged since" not in said
    assert said.rstrip().endswith("or kvprobe traces") and "error: no requests found in" in said
    assert "typer" not in loaded
    code, _, said, _ = _kvprobe(tmp_path, "usage", CLAUDE, "--since", "2031-01-01")
    assert code == 2 and said.strip().splitlines()[-1] == \
        "error: field '--since': none of the 5 requests read is in --since 2031-01-01"


def test_a_zero_width_is_left_to_rich(tmp_path):
    """COLUMNS=0: rich prints nothing at all (neither the table nor the lines under it), and so does the fast
    path, which leaves every line to rich there."""
    code, out, said, _ = _kvprobe(tmp_path, "usage", CLAUDE, COLUMNS="0")
    assert (code, out, said.strip()) == (0, "", "")
