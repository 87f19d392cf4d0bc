"""`kvprobe diff` end to end through the CLI: output, --json contract, --exit-code, bad input."""
from __future__ import annotations

import json

import pytest

from conftest import ROOT, anthropic_body

EXAMPLES = ROOT / "examples"


def test_example_pair_shows_the_timestamp(cli):
    res = cli("diff", EXAMPLES / "request_a.json", EXAMPLES / "request_b.json")
    assert res.exit_code == 0, res.output
    assert "First change: system[0]" in res.output
    assert "10:07:55" in res.output and "10:08:40" in res.output
    assert "timestamp" in res.output
    assert "not reusable" in res.output


def test_json_output_has_the_contract_keys(cli):
    res = cli("diff", EXAMPLES / "request_a.json", EXAMPLES / "request_b.json", "--json")
    data = json.loads(res.stdout)
    assert {"provider", "identical", "extends", "first_change", "params_changed", "predicted"} <= set(data)
    assert {"path", "char_offset", "token_position", "token_position_exact", "a_snippet",
            "b_snippet"} <= set(data["first_change"])
    assert set(data["predicted"]) >= {"cache_read_tokens", "cache_write_tokens", "fresh_input_tokens"}
    assert data["provider"] == "anthropic" and data["first_change"]["path"] == "system[0]"


def test_no_content_prints_no_prompt_text(cli):
    res = cli("diff", EXAMPLES / "request_a.json", EXAMPLES / "request_b.json", "--no-content")
    assert "10:07:55" not in res.output and "Forge" not in res.output
    data = json.loads(cli("diff", EXAMPLES / "request_a.json", EXAMPLES / "request_b.json", "--no-content",
                          "--json").stdout)
    assert data["first_change"]["a_snippet"] is None


def test_exit_code_flags_breaking_changes(cli, write_json):
    a = write_json("a.json", anthropic_body())
    same = write_json("b.json", anthropic_body())
    assert cli("diff", a, same, "--exit-code").exit_code == 0
    res = cli("diff", EXAMPLES / "request_a.json", EXAMPLES / "request_b.json", "--exit-code")
    assert res.exit_code == 1


def test_trace_records_and_ids(cli, tmp_path):
    trace = tmp_path / "t.jsonl"
    recs = [{"kvprobe": 1, "id": f"r{i}", "started_at": "2026-09-10T10:00:00Z", "request": anthropic_body(),
             "response": {"usage": {"input_tokens": 5}}} for i in range(2)]
    recs[1]["request"]["tool_choice"] = {"type": "any"}
    trace.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    data = json.loads(cli("diff", f"{trace}", f"{trace}#r1", "--json").stdout)
    assert data["params_changed"][0]["name"] == "tool_choice"
    res = cli("diff", f"{trace}", f"{trace}#nope")
    assert res.exit_code == 2 and "no record with id 'nope'" in res.output


@pytest.mark.parametrize("content, expect", [
    ("{not json", "not valid JSON"),
    ('{"hello": 1}', "not a known request format"),
    ('{"model": "claude-sonnet-4-5", "system": "x"}', "not a known request format"),
])
def test_bad_json_inputs_exit_2_naming_the_file(cli, tmp_path, content, expect):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    res = cli("diff", bad, EXAMPLES / "request_a.json")
    assert res.exit_code == 2
    assert "bad.json" in res.output and expect in res.output
    assert "Traceback" not in res.output


def test_missing_messages_names_the_field(cli, write_json):
    path = write_json("nomsg.json", {"model": "gpt-4o", "input": 5})
    res = cli("diff", path, path)
    assert res.exit_code == 2 and "nomsg.json" in res.output and "'input'" in res.output


def test_truncated_jsonl_line_names_file_and_line(cli, tmp_path):
    trace = tmp_path / "cut.jsonl"
    good = json.dumps({"id": "r1", "request": anthropic_body()})
    trace.write_text(good + "\n" + good.replace('"r1"', '"r2"')[:80] + "\n")
    res = cli("diff", f"{trace}#r2", EXAMPLES / "request_a.json")
    assert res.exit_code == 2
    assert "cut.jsonl:2" in res.output and "truncated" in res.output


def test_missing_file(cli):
    res = cli("diff", "does/not/exist.json", EXAMPLES / "request_a.json")
    assert res.exit_code == 2 and "does/not/exist.json" in res.output and "does not exist" in res.output


def test_python_dash_m_works():
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "kvprobe", "diff", str(EXAMPLES / "request_a.json"),
                          str(EXAMPLES / "request_b.json"), "--json"], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["first_change"]["path"] == "system[0]"
