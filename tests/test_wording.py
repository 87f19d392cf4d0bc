"""Figures and words that must agree across commands: one lost-token count for lint and report, titles that
name what was compared, changes in the unit they are meant in, a cost that is not zero never shown as $0.00,
and "nothing found" said with where kvprobe looked."""
from __future__ import annotations

import json

import pytest

from conftest import ROOT
from kvprobe.lint.model import RequestRef, Subject
from kvprobe.request.model import Block, RenderedRequest
from kvprobe.usage import Usage
from kvprobe.wording import usd

SAMPLE = ROOT / "traces" / "sample_session.jsonl"
FIXTURES = ROOT / "tests" / "fixtures" / "importers"


def test_lint_and_report_give_one_figure_for_what_a_change_cost():
    """req_2 logged read 3,265 + write 329: everything it cached (3,594 tokens) sat at or after system[0], so
    the timestamp that changed there in req_3 loses all of it. `report` counts the same 3,594 as missed."""
    from typer.testing import CliRunner

    from kvprobe.cli import app

    runner = CliRunner()
    lint = json.loads(runner.invoke(app, ["lint", str(SAMPLE), "--json", "--fail-on", "never"]).stdout)
    kv102 = next(f for f in lint["findings"] if f["rule"] == "KV102")
    assert kv102["request"] == "req_3" and "3,594 tokens req_2 cached cannot be read" in kv102["message"]
    report = json.loads(runner.invoke(app, ["report", str(SAMPLE), "--json", "--no-fixes"]).stdout)
    assert next(r for r in report["requests"] if r["id"] == "req_3")["missed_read_tokens"] == 3594


def _subject(tokens: list[int], breakpoints: list[int], logged: Usage | None) -> Subject:
    blocks = [Block(f"messages[{i}]", "messages", "text", f"block {i}", tokens=n) for i, n in enumerate(tokens)]
    for i in breakpoints:
        blocks[i].breakpoint = "5m"
    req = RenderedRequest("anthropic", "anthropic_messages", "claude-sonnet-4-5", blocks, {},
                          cache_mode="breakpoints")
    return Subject(RequestRef("r1", "s", 1), req, None, logged=logged)  # type: ignore[arg-type]


def test_what_an_earlier_breakpoint_still_reads_is_not_lost():
    # estimated blocks of 100, 200, 300 and 400 tokens; breakpoints after blocks 0 and 3; block 2 changes.
    # Only the entry through block 0 (100 tokens) stays readable: block 1 is lost with the change after it,
    # 1,000 cached - 100 = 900 lost (estimated)
    s = _subject([100, 200, 300, 400], [0, 3], None)
    assert s.lost_tokens(2) == (900, False)
    # logged read 900 + write 300 = 1,200 cached: 1.2 tokens per estimated one, so 120 stay, 1,080 are lost
    s = _subject([100, 200, 300, 400], [0, 3], Usage(1250, 900, 300))
    assert s.lost_tokens(2) == (1080, True)
    # a change in the first block loses all 1,200; a change after the last breakpoint loses nothing
    assert s.lost_tokens(0) == (1200, True) and s.lost_tokens(4) == (0, True)


def test_diff_of_two_records_of_one_trace_names_them(cli):
    res = cli("diff", f"{SAMPLE}#req_2", f"{SAMPLE}#req_3")
    assert res.exit_code == 0 and res.stdout.splitlines()[0].startswith(
        "kvprobe diff req_2 → req_3 in sample_session.jsonl")
    res = cli("diff", SAMPLE, ROOT / "examples" / "request_b.json")  # a trace without #ID: its first record
    assert res.stdout.splitlines()[0].startswith("kvprobe diff sample_session.jsonl#req_1 → request_b.json")


def test_compare_markdown_shows_dollars_whole_tokens_and_points(cli, tmp_path):
    fixed = tmp_path / "fixed.jsonl"
    assert cli("fix", SAMPLE, "-o", fixed).exit_code == 0
    md = cli("compare", SAMPLE, fixed, "--markdown").stdout
    # the sample: $0.0706, 19,403.5 input-equivalents, hit ratio 39.90%; the fixed trace, as `fix` prints:
    # 8,574 input-equivalents, 82.4% -> +42.5 points (not the relative +106.5%)
    assert "| cost | $0.0706 | $0.0381 | -46.0% |" in md
    assert "| input-equivalent tokens | 19,404 | 8,574 | -55.8% |" in md
    assert "| token hit ratio | 39.9% | 82.4% | +42.5 pp |" in md
    assert ".5000" not in md and "+106.5%" not in md


@pytest.mark.parametrize(("value", "digits", "shown"), [
    (0.00375, 2, "$0.0037"), (0.004054, 2, "$0.0041"), (0.13, 2, "$0.13"), (0.0706, 4, "$0.0706"),
    (0.0000123, 4, "$0.000012"), (0.0, 2, "$0.00"), (None, 2, "n/a"), (1234.5, 2, "$1,234.50"),
])
def test_a_cost_that_is_not_zero_never_reads_as_zero(value, digits, shown):
    assert usd(value, digits) == shown


def test_a_haiku_row_with_3000_written_tokens_shows_its_cost(cli):
    # claude-haiku-4-5 at $1/M input, $1.25/M 5m writes, $5/M output: 4 fresh + 3,000 written + 60 out
    # = 0.000004 + 0.00375 + 0.0003 = $0.004054
    res = cli("usage", FIXTURES / "claude", FIXTURES / "codex", "--by", "model")
    row = next(line for line in res.stdout.splitlines() if line.startswith("claude-haiku-4-5"))
    assert row.split()[-1] == "$0.0041" and "$0.00 " not in row + " "


def test_usage_with_no_logs_says_where_it_looked_and_exits_2(cli, tmp_path, monkeypatch):
    res = cli("usage", tmp_path)
    assert res.exit_code == 2 and f"no requests found in {tmp_path} (0 log files read)" in res.output
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    monkeypatch.delenv("CODEX_HOME", raising=False)
    res = cli("usage")
    assert res.exit_code == 2 and "~/.claude/projects" in res.output and "~/.codex/sessions" in res.output
