"""Text from traces and file names is printed as it is: never read as rich markup (`x[/]` crashed tables
with MarkupError, exit 1; `[old]/t.jsonl` printed as `/t.jsonl`; `/home/me/[wip]/app` as `/home/me//app`),
and terminal escape sequences in it never reach the terminal raw (shown as `\\x1b`)."""
from __future__ import annotations

import json

import pytest

ESC_RED = "\x1b[31mred\x1b[0m"
TITLE = "\x1b]0;pwned\x07"  # sets the terminal's title


def _trace(folder, name="t.jsonl"):
    records = [("x[/]", "claude[/]x", "s[/]", "/home/me/[wip]/app"),
               (ESC_RED, "claude-sonnet-4-5", f"{TITLE}sess", "/tmp/\x1b[2Jcleared"),
               ("[bold]b[/bold]", ":thumbs_up:", "[link=http://x]s[/link]", "/srv/[red]app")]
    lines = [{"kvprobe": 1, "id": rid, "session": session, "agent": f"agent{session}", "provider": "anthropic",
              "started_at": f"2026-09-10T10:0{i}:00Z", "cwd": cwd, "error": f"HTTP 500: {rid} {ESC_RED}",
              "response": {"model": model, "usage": {"input_tokens": 10, "cache_read_input_tokens": 100,
                                                     "cache_creation_input_tokens": 0, "output_tokens": 3}}}
             for i, (rid, model, session, cwd) in enumerate(records)]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


COMMANDS = [["report"], ["usage", "--by", "session"], ["usage", "--by", "project"], ["usage", "--by", "agent"],
            ["usage", "--by", "model", "--breakdown"], ["gate", "--min-hit-ratio", "0.5"], ["lint"],
            ["report", "--markdown"], ["compare", "SELF"]]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: "-".join(a))
def test_trace_text_is_never_markup_nor_raw_escapes(cli, tmp_path, args):
    trace = _trace(tmp_path / "[old]")
    cmd = [args[0], trace, *[trace if a == "SELF" else a for a in args[1:]]]
    res = cli(*cmd)
    assert res.exit_code in (0, 1), res.output  # gate: a pass or a failed threshold, never a crash
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert "\x1b" not in res.output and "\x07" not in res.output
    if args[0] == "report" and len(args) == 1:
        assert "x[/]" in res.output and "\\x1b[31mred\\x1b[0m" in res.output and "[bold]b[/bold]" in res.output
    if args[-1] == "session":
        assert "s[/]" in res.output and "[link=http://x]s[/link]" in res.output
    if args[-1] == "project":
        assert "/home/me/[wip]/app" in res.output and "/srv/[red]app" in res.output
    if args[-1] == "--breakdown":
        assert "claude[/]x" in res.output and ":thumbs_up:" in res.output


def test_file_names_with_brackets_are_named_as_they_are(cli, tmp_path):
    res = cli("report", tmp_path / "[old]" / "missing.jsonl")
    assert res.exit_code == 2 and "[old]/missing.jsonl" in res.output
    trace = _trace(tmp_path / "[old]")
    res = cli("fix", trace, "-o", tmp_path / "[new]" / "f.jsonl")  # the folder is missing
    assert res.exit_code == 2 and "[new]/f.jsonl" in res.output
    (tmp_path / "[new]").mkdir()
    res = cli("import", trace, "-o", tmp_path / "[new]" / "i.jsonl")
    assert res.exit_code == 0 and "[new]/i.jsonl" in res.output


C1_CSI = "\x9b2J"  # the one-character CSI (U+009B): JSON encoders leave it raw, a terminal clears the screen


@pytest.mark.parametrize("args", [["usage", "--json"], ["report", "--json"]], ids=lambda a: "-".join(a))
def test_json_on_a_terminal_spells_c1_and_del_as_escapes(cli, tmp_path, args):
    """Found by the fuzz on a fresh clone: a bad timestamp carrying U+009B reached `usage --json` raw. The
    JSON keeps every value (\\u escapes parse to the same string), and no raw C1 or DEL byte is printed."""
    trace = _trace(tmp_path)
    lines = trace.read_text().splitlines()
    hostile = json.loads(lines[0])
    hostile.update(id=f"req{C1_CSI}\x7f", first_token_at=f"2026-09-10T10:00:01Z{C1_CSI}")
    trace.write_text("\n".join([json.dumps(hostile), *lines[1:]]) + "\n")
    res = cli(args[0], trace, *args[1:])
    assert res.exit_code in (0, 2), res.output
    assert "\x9b" not in res.output and "\x7f" not in res.output and "\x1b" not in res.output
    if res.exit_code == 0:
        json.loads(res.output)  # still JSON
