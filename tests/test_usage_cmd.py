"""`kvprobe usage`: tokens by class, hit ratio and cost by day/session/agent/model."""
from __future__ import annotations

import json
from pathlib import Path

import pytest


FIX = Path(__file__).parent / "fixtures" / "importers"


def _usage_json(cli, *args):
    result = cli("usage", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_totals_are_sums_and_hit_ratio_is_a_ratio_of_sums(cli):
    data = _usage_json(cli, FIX / "claude")
    t = data["totals"]
    assert t["requests"] == 5
    assert t["input_tokens"] == t["cache_read_tokens"] + t["cache_write_tokens"] + t["fresh_input_tokens"]
    assert t["token_hit_ratio"] == round(t["cache_read_tokens"] / t["input_tokens"], 4)
    assert {row["agent"] for row in data["by_agent"]} == {"main", "agent-7a2b"}
    assert {row["day"] for row in data["by_day"]} == {"2026-09-10", "2026-09-11"}
    assert sum(row["requests"] for row in data["by_session"]) == 5
    assert data["import"]["skipped"] == 2


# Published list prices, USD per million tokens: (input, 5m cache write, cache read, output). OpenAI bills no
# cache write; its cached tokens are the read price.
PRICES = {"claude-haiku-4-5": (1.0, 1.25, 0.10, 5.0), "claude-sonnet-4-5": (3.0, 3.75, 0.30, 15.0),
          "gpt-5-codex": (1.25, 0.0, 0.125, 10.0), "gpt-4o": (2.50, 0.0, 1.25, 10.0), "gpt-4.1": (2.0, 0.0, 0.50, 8.0)}
# Every priced request of the fixtures, read by hand from the files: model as logged, price row, fresh input,
# cache write, cache read, output (reasoning included). Fresh input is what the log's input leaves.
FIXTURE_REQUESTS = [
    ("claude-haiku-4-5-20251001", "claude-haiku-4-5", 4, 3_000, 0, 60),  # claude subagent
    ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5", 3, 12_000, 0, 180),
    ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5", 5, 400, 12_000, 90),
    ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5", 10, 12_600, 0, 300),
    ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5", 6, 200, 12_400, 40),  # the resumed session
    ("gpt-5-codex", "gpt-5-codex", 8_000, 0, 0, 300),
    ("gpt-5-codex", "gpt-5-codex", 8_600 - 7_936, 0, 7_936, 200),
    ("claude-sonnet-4-5", "claude-sonnet-4-5", 7, 0, 4_096, 12),  # HAR
    ("gpt-4o", "gpt-4o", 1_500 - 1_024, 0, 1_024, 3),
    ("claude-sonnet-4-5", "claude-sonnet-4-5", 1_000, 1_000, 12_000, 200),  # LiteLLM
    ("gpt-4o", "gpt-4o", 3_000 - 2_048, 0, 2_048, 50),
    ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5", 500, 2_500, 12_000, 220),  # OpenTelemetry
    ("gpt-4.1", "gpt-4.1", 9_000 - 8_192, 0, 8_192, 120),
]


def _hand_cost(row: str, fresh: int, write: int, read: int, output: int) -> float:
    p_in, p_write, p_read, p_out = PRICES[row]
    return (fresh * p_in + write * p_write + read * p_read + output * p_out) / 1e6


def test_cost_is_each_request_priced_by_the_published_list(cli):
    """$0.1790848 in all (e.g. the Haiku request: 4 x $1 + 3,000 x $1.25 + 60 x $5 per million = $0.004054)."""
    data = _usage_json(cli, FIX)
    expected = sum(_hand_cost(*r[1:]) for r in FIXTURE_REQUESTS)
    assert expected == pytest.approx(0.1790848, abs=1e-9)
    assert data["totals"]["cost_usd"] == pytest.approx(expected, abs=1e-6)
    assert data["totals"]["requests"] == len(FIXTURE_REQUESTS) and data["records_without_usage"] == 1
    by_model = {row["model"]: row for row in data["by_model"]}
    for model in {r[0] for r in FIXTURE_REQUESTS}:
        hand = sum(_hand_cost(*r[1:]) for r in FIXTURE_REQUESTS if r[0] == model)
        assert by_model[model]["cost_usd"] == pytest.approx(hand, abs=1e-6), model
    assert by_model["gpt-5-codex"]["cache_read_tokens"] == 7936


def test_since_until_and_grouping_table(cli):
    data = _usage_json(cli, FIX / "claude", "--since", "2026-09-11")
    assert data["totals"]["requests"] == 1
    result = cli("usage", FIX / "claude", "--by", "model")
    assert result.exit_code == 0 and "Usage by model" in result.output and "claude-haiku-4-5" in result.output


def test_price_file_overrides_and_unknown_models(cli, tmp_path):
    prices = tmp_path / "prices.toml"
    prices.write_text('[models."gpt-5-codex"]\ninput_mtok = 1.0\ncache_read_mtok = 0.1\noutput_mtok = 10.0\n')
    data = _usage_json(cli, FIX / "codex", "--price-file", prices)
    expected = (8000 + 8600 - 7936) * 1e-6 + 7936 * 0.1e-6 + 500 * 10e-6
    assert data["totals"]["cost_usd"] == pytest.approx(expected, abs=1e-6)


def test_bad_options_exit_2(cli):
    assert cli("usage", FIX, "--by", "year").exit_code == 2
    result = cli("usage", FIX, "--since", "last tuesday")
    assert result.exit_code == 2 and "--since" in result.output
    assert cli("usage", FIX, "--tz", "Mars/Olympus").exit_code == 2


def test_default_locations_are_claude_code_and_codex(cli, monkeypatch):
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(FIX / "claude"))
    monkeypatch.setenv("CODEX_HOME", str(FIX / "codex"))
    data = _usage_json(cli)
    assert data["totals"]["requests"] == 5 + 2
    assert {s["format"] for s in data["import"]["sources"]} == {"claude_code", "codex"}


def test_json_keys_are_stable(cli):
    data = _usage_json(cli, FIX / "codex")
    assert set(data) == {"totals", "by_day", "by_week", "by_month", "by_project", "by_session", "by_agent",
                         "by_model", "unknown_models", "records_without_usage", "requests_without_model",
                         "logged_cost_of_unpriced_usd", "price_notes", "import"}
    row_keys = {"requests", "input_tokens", "cache_read_tokens", "cache_write_tokens", "cache_write_5m_tokens",
                "cache_write_1h_tokens", "fresh_input_tokens", "output_tokens", "reasoning_output_tokens", "token_hit_ratio",
                "cost_usd", "unpriced_requests", "errors",
                # the cost by token class (the bill's names, report --json `bill`)
                "cache_read_usd", "cache_write_5m_usd", "cache_write_1h_usd", "cache_write_usd", "fresh_input_usd",
                "output_usd"}
    assert set(data["totals"]) == row_keys | {"models"}
    assert set(data["by_model"][0]) == row_keys | {"model", "platform"}
    assert set(data["by_day"][0]) == row_keys | {"day", "models"}


# Amazon Bedrock's list prices for Claude Haiku 4.5 (regional endpoints, USD per million tokens: input 1.10,
# output 5.50, cache read 0.11, 5m cache write 1.375), as the bundled price data has them for `aws`; the
# first-party prices are 1.00 / 5.00 / 0.10 / 1.25, which `usage` used before it asked for the platform.
BEDROCK_HAIKU_45 = {"fresh": 1.10, "output": 5.50, "read": 0.11, "write_5m": 1.375}


def test_bedrock_served_requests_cost_the_same_in_usage_and_report(cli, tmp_path):
    from agent_logs import ClaudeTranscript

    s = ClaudeTranscript("b1", id_prefix="msg_bdrk_01")  # Bedrock's own message ids
    s.turn(0, "r1", read=0, write=5_000, fresh=3, output=50, model="claude-haiku-4-5-20251001")
    s.turn(10, "r2", read=5_000, write=200, fresh=3, output=80, model="claude-haiku-4-5-20251001")
    path = s.write(tmp_path / "b1.jsonl")
    # by hand: 6 fresh, 5,000 read, 5,200 written (5m), 130 output
    p = BEDROCK_HAIKU_45
    expected = (6 * p["fresh"] + 5_000 * p["read"] + 5_200 * p["write_5m"] + 130 * p["output"]) / 1e6
    assert round(expected, 6) == 0.008422
    data = _usage_json(cli, path)
    assert data["totals"]["cost_usd"] == pytest.approx(expected, abs=1e-6)
    [row] = data["by_model"]
    assert (row["model"], row["platform"]) == ("claude-haiku-4-5-20251001", "bedrock")
    assert data["totals"]["models"][0]["platform"] == "bedrock"
    report = cli("report", path, "--json")
    assert report.exit_code == 0, report.output
    assert json.loads(report.output)["totals"]["cost_usd"] == pytest.approx(expected, abs=1e-6)
    table = cli("usage", path, "--by", "model")
    assert "claude-haiku-4-5-20251001 (bedrock)" in " ".join(table.output.split())


def test_one_model_served_first_party_and_by_bedrock_is_two_rows(cli, tmp_path):
    from agent_logs import ClaudeTranscript

    for name, prefix in (("own", "msg_01"), ("aws", "msg_bdrk_01")):
        s = ClaudeTranscript(name, id_prefix=prefix)
        s.turn(0, f"r-{name}", read=0, write=1_000_000, fresh=0, output=0, model="claude-haiku-4-5-20251001")
        s.write(tmp_path / f"{name}.jsonl")
    data = _usage_json(cli, tmp_path)
    # a million 5m-written tokens: $1.25 first-party, $1.375 on Bedrock
    rows = {(r["model"], r["platform"]): r["cost_usd"] for r in data["by_model"]}
    assert rows == {("claude-haiku-4-5-20251001", None): 1.25, ("claude-haiku-4-5-20251001", "bedrock"): 1.375}


def test_a_folder_of_files_cut_short_quotes_a_few_skipped_lines_and_counts_the_rest(cli, tmp_path):
    """Twelve transcripts, each ending in a line cut short (a session still being written): the summary says
    12 skipped, quotes five of them, and counts the seven it does not quote, instead of two lines a file."""
    user = {"parentUuid": None, "sessionId": "s", "type": "user", "uuid": "u1",
            "timestamp": "2026-09-10T10:00:00.000Z", "message": {"role": "user", "content": "hi"}}
    answer = {"parentUuid": "u1", "sessionId": "s", "type": "assistant", "uuid": "a1", "requestId": "req_1",
              "timestamp": "2026-09-10T10:00:03.000Z",
              "message": {"id": "msg_1", "model": "claude-sonnet-4-5", "role": "assistant", "content": [],
                          "usage": {"input_tokens": 10, "output_tokens": 5}}}
    for k in range(12):
        lines = [dict(user, sessionId=f"s{k}"), dict(answer, sessionId=f"s{k}", requestId=f"req_{k}",
                                                     message={**answer["message"], "id": f"msg_{k}"})]
        text = "\n".join(json.dumps(line) for line in lines) + '\n{"parentUuid": "a1", "sessionId": "s'
        (tmp_path / f"{k:02d}-session.jsonl").write_text(text + "\n")
    result = cli("usage", tmp_path)
    assert result.exit_code == 0, result.output
    err = result.stderr
    assert "skipped 12: truncated JSON line" in err
    assert err.count("  e.g. ") == 5
    assert "7 more skipped line(s) not quoted" in err


def test_a_captured_gemini_request_is_priced_by_the_model_its_url_names(cli, tmp_path):
    """Gemini names the model in the URL, not the body: a captured trace's requests are that model's (the
    response's modelVersion, else the endpoint's /models/<model>:), as `report` prices them; not "no model"."""
    usage = {"promptTokenCount": 9_110, "cachedContentTokenCount": 8_192, "candidatesTokenCount": 24,
             "totalTokenCount": 9_134}
    lines = [{"kvprobe": 1, "id": "g1", "provider": "gemini", "started_at": "2026-12-07T08:41:50Z",
              "endpoint": "/v1beta/models/gemini-2.5-pro:streamGenerateContent",
              "response": {"usageMetadata": usage}},
             {"kvprobe": 1, "id": "g2", "provider": "gemini", "started_at": "2026-12-07T08:41:55Z",
              "endpoint": "/v1beta/models/gemini-2.5-flash:generateContent",
              "response": {"usageMetadata": usage, "modelVersion": "gemini-2.5-flash"}}]
    trace = tmp_path / "gemini.jsonl"
    trace.write_text("".join(json.dumps(x) + "\n" for x in lines))
    data = json.loads(cli("usage", trace, "--json").stdout)
    assert sorted(m["model"] for m in data["by_model"]) == ["gemini-2.5-flash", "gemini-2.5-pro"]
    assert data["requests_without_model"] == 0 and data["totals"]["cost_usd"] > 0


def test_the_session_table_names_each_session_by_its_first_prompt(cli, tmp_path):
    """`usage --by session` in a terminal: a session is named as its user knows it (its first prompt, as
    `report`'s bill does), not by its id; the JSON keeps the ids."""
    from agent_logs import ClaudeTranscript

    projects = tmp_path / "projects" / "-home-me-app"
    for name, prompt in (("5a1c3a9e-0000-4000-8000-000000000001", "Fix the flaky login test"),
                         ("5a1c3a9e-0000-4000-8000-000000000002", "Add a CSV export")):
        s = ClaudeTranscript(name)
        s.user(0, prompt)
        s.assistant(2, f"{name}-r1", read=0, write=5_000)
        s.write(projects / f"{name}.jsonl")
    text = cli("usage", tmp_path / "projects", "--by", "session").stdout
    assert "Fix the flaky login test" in text and "Add a CSV export" in text
    assert "5a1c3a9e-0000-4000-8000-000000000001" not in text
    data = json.loads(cli("usage", tmp_path / "projects", "--json").stdout)
    assert {row["session"] for row in data["by_session"]} == {"5a1c3a9e-0000-4000-8000-000000000001",
                                                              "5a1c3a9e-0000-4000-8000-000000000002"}
