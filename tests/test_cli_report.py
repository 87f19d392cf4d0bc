"""`kvprobe report` through the CLI: the table, the JSON contract, Markdown, filters and bad input."""
from __future__ import annotations

import json

from conftest import ROOT

SAMPLE = ROOT / "traces" / "sample_session.jsonl"


def test_table_names_every_miss_and_the_costliest_first(cli):
    res = cli("report", SAMPLE)
    assert res.exit_code == 0, res.output
    assert "a timestamp near the start of the system prompt changed" in res.output
    assert "expired 120s before this request started" in res.output
    assert "tool_choice changed" in res.output
    causes = res.output.split("What the misses cost, by cause")[1]
    # the TTL expiry cost more than the timestamp; each cause with its costliest request and what to do
    assert causes.index("TTL expired") < causes.index("prefix changed at")
    assert "e.g. req_4" in causes and "e.g. req_3" in causes and "what to do:" in causes


def test_json_contract_keys_and_token_weighted_hit_ratio(cli):
    data = json.loads(cli("report", SAMPLE, "--json").stdout)
    totals = data["totals"]
    assert {"requests", "input_tokens", "cache_read_tokens", "cache_write_tokens", "fresh_input_tokens",
            "output_tokens", "token_hit_ratio", "input_equivalent_tokens", "cost_usd"} <= set(totals)
    reqs = data["requests"]
    assert totals["token_hit_ratio"] == round(sum(r["cache_read_tokens"] for r in reqs)
                                              / sum(r["input_tokens"] for r in reqs), 4)
    assert totals["cost_usd"] > 0 and data["fixes"] is not None
    first = reqs[0]
    assert {"id", "session", "agent", "started_at", "input_tokens", "cache_read_tokens", "cache_write_tokens",
            "fresh_input_tokens", "output_tokens", "cost_usd", "predicted", "diagnoses"} <= set(first)
    assert first["write_kind"] == "cold_start"
    diag = {r["id"]: r["diagnoses"] for r in reqs}
    assert diag["req_3"][0]["kind"] == "prefix_changed" and diag["req_3"][0]["path"] == "system[0]"
    assert diag["req_3"][0]["inferred"] is True
    assert diag["req_4"][0]["kind"] == "ttl_expired" and diag["req_4"][0]["seconds_past"] == 120.0
    # the observed usage matches the rules on this trace
    for r in reqs:
        assert r["predicted"]["cache_read_tokens"] == r["cache_read_tokens"]


def test_markdown_for_a_pr_comment(cli):
    res = cli("report", SAMPLE, "--markdown")
    assert res.output.startswith("### kvprobe report")
    assert "| req_4 |" in res.output and "ttl_expired" in res.output


def test_filters_keep_the_simulation_but_show_a_subset(cli):
    data = json.loads(cli("report", SAMPLE, "--json", "--since", "2025-09-10T10:16:00Z").stdout)
    assert [r["id"] for r in data["requests"]] == ["req_4", "req_5", "req_6"]
    # req_6 still reads what req_4 (outside? no: inside) wrote; req_4 still sees req_3's expiry
    assert data["requests"][0]["diagnoses"][0]["kind"] == "ttl_expired"
    nobody = cli("report", SAMPLE, "--json", "--agent", "nobody")
    assert nobody.exit_code == 2 and "none of the 6 requests matches --agent nobody" in nobody.output


def test_price_file_overrides_the_dataset(cli, tmp_path):
    prices = tmp_path / "prices.toml"
    prices.write_text('[models."claude-sonnet-4-5"]\ninput_mtok = 1000.0\noutput_mtok = 0\n'
                      'cache_read_mtok = 0\ncache_write_mtok = 0\n')
    data = json.loads(cli("report", SAMPLE, "--json", "--price-file", prices).stdout)
    assert data["totals"]["cost_usd"] == 0.0  # every input token here is a read or a write
    bad = tmp_path / "bad.toml"
    bad.write_text('[models.x]\ninput = "cheap"\n')
    res = cli("report", SAMPLE, "--price-file", bad)
    assert res.exit_code == 2 and "bad.toml" in res.output and "models.x.input" in res.output


def test_bad_trace_exits_2_with_file_line_field(cli, tmp_path):
    trace = tmp_path / "t.jsonl"
    lines = SAMPLE.read_text().splitlines()
    trace.write_text(lines[0] + "\n" + lines[1][:200] + "\n")
    res = cli("report", trace)
    assert res.exit_code == 2 and "t.jsonl:2" in res.output and "Traceback" not in res.output
    bad_body = tmp_path / "b.jsonl"
    bad_body.write_text(json.dumps({"id": "x", "request": {"model": "claude-sonnet-4-5", "messages": "hi"}}) + "\n")
    res = cli("report", bad_body)
    assert res.exit_code == 2 and "b.jsonl:1" in res.output and "request.messages" in res.output


def test_providers_command_shows_sources(cli):
    data = json.loads(cli("providers", "claude-sonnet-4-6", "--json").stdout)
    [view] = data
    rule = view["rules"]["min_cacheable_tokens"]
    assert rule["value"] == 1024 and rule["alternatives"] == [2048] and rule["checked"] == "2026-12-01"
    assert view["known_model"] is True
    res = cli("providers", "claude-unknown-model", "--json")
    assert json.loads(res.stdout)[0]["known_model"] is False


def test_report_reads_agent_logs_directly_and_counts_skips(cli):
    logs = ROOT / "tests" / "fixtures" / "importers" / "claude"
    res = cli("report", logs, "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    by_id = {r["id"]: r for r in data["requests"]}
    assert by_id["req_01S"]["agent"].startswith("agent-")  # the subagent is attributed
    assert by_id["req_01D"]["diagnoses"][0]["kind"] == "ttl_expired"
    assert any("skipped 1: truncated JSON line" in n for n in data["notes"])
