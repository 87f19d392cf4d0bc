"""`kvprobe import`: one trace from many logs, sorted, with every skip reported; bad input exits 2."""
from __future__ import annotations

import json
from pathlib import Path

from kvprobe.trace import read_trace

FIX = Path(__file__).parent / "fixtures" / "importers"


def test_import_writes_a_sorted_trace_and_reports_skips(cli, tmp_path):
    out = tmp_path / "trace.jsonl"
    result = cli("import", FIX / "claude", FIX / "har/session.har", "-o", out)
    assert result.exit_code == 0, result.output
    assert "wrote 8 records" in result.output
    assert "skipped 1: synthetic message written by Claude Code (no API call)" in result.output
    assert "skipped 1: request body is not JSON" in result.output
    records = list(read_trace(out))
    starts = [r.started_at for r in records]
    assert starts == sorted(starts) and len(records) == 8


def test_import_json_summary_keys(cli, tmp_path):
    result = cli("import", FIX / "codex", "-o", tmp_path / "t.jsonl", "--json")
    assert result.exit_code == 0
    data = json.loads(result.output)
    assert data["written"] == data["records"] == 2 and data["duplicates"] == 1
    assert data["skipped_reasons"] == {"token_count event without info (rate-limit update only)": 1,
                                       "invalid JSON line": 1}
    (source,) = data["sources"]
    assert set(source) >= {"path", "format", "lines", "records", "duplicates", "ignored", "skipped",
                           "skipped_reasons", "examples"}
    assert source["format"] == "codex" and source["examples"][0].endswith(
        ":4: token_count event without info (rate-limit update only)")


def test_imported_traces_feed_report(cli, tmp_path):
    out = tmp_path / "t.jsonl"
    assert cli("import", FIX / "otel", "-o", out).exit_code == 0
    result = cli("report", out, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["totals"]["requests"] == 2


def test_bad_sources_exit_2_naming_the_file_and_write_nothing(cli, tmp_path):
    junk = tmp_path / "junk.json"
    junk.write_text("[1, 2, 3]")
    out = tmp_path / "t.jsonl"
    result = cli("import", junk, "-o", out)
    assert result.exit_code == 2 and "junk.json" in result.output and "not a recognised" in result.output
    assert not out.exists()
    result = cli("import", tmp_path / "nope.jsonl", "-o", out)
    assert result.exit_code == 2 and "does not exist" in result.output
    result = cli("import", FIX / "codex", "-o", out, "--format", "xml")
    assert result.exit_code == 2 and "unknown format" in result.output
    assert "Traceback" not in result.output


def test_import_can_scrub_secrets_and_text(cli, tmp_path):
    out = tmp_path / "t.jsonl"
    har = tmp_path / "s.har"
    data = json.loads((FIX / "har/session.har").read_text())
    body = json.loads(data["log"]["entries"][1]["request"]["postData"]["text"])
    body["messages"][0]["content"] = "deploy with AKIAIOSFODNN7EXAMPLE please"
    data["log"]["entries"][1]["request"]["postData"]["text"] = json.dumps(body)
    har.write_text(json.dumps(data))
    assert cli("import", har, "-o", out, "--redact").exit_code == 0
    assert "AKIAIOSFODNN7EXAMPLE" not in out.read_text() and "[REDACTED:aws-id#" in out.read_text()
    assert cli("import", har, "-o", out, "--hash-only", "--force").exit_code == 0
    text = out.read_text()
    assert "deploy with" not in text and "You are terse." not in text
    records = list(read_trace(out))
    assert records[0].usage["cache_read_input_tokens"] == 4096  # usage numbers survive
