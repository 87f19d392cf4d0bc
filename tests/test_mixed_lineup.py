"""`report` on a trace mixing the December 2026 lineup: every request is ruled and priced, or named.

Each request logs the same usage (100 fresh, 10,000 read, 2,000 written, 500 output tokens, where the
provider reports writes); the expected USD is that usage at the model's list prices per million tokens
(the pricing pages as the rule files cite them; genai-prices 0.2.3 for the OpenAI, Gemini, DeepSeek ones).
"""
from __future__ import annotations

import datetime as dt
import json

import orjson
import pytest

from kvprobe.report import build_report
from kvprobe.trace import TraceRecord

NOV = dt.datetime(2026, 11, 2, 12, tzinfo=dt.timezone.utc).timestamp()
SYSTEM = "You are a careful coding agent working in a large repository. " * 40
ANTHROPIC_USAGE = {"input_tokens": 100, "cache_read_input_tokens": 10_000, "cache_creation_input_tokens": 2_000,
                   "output_tokens": 500}
OPENAI_USAGE = {"input_tokens": 12_100, "output_tokens": 500,
                "input_tokens_details": {"cached_tokens": 10_000, "cache_write_tokens": 2_000}}


def claude_body(model: str) -> dict:
    return {"model": model, "max_tokens": 1000,
            "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": "Fix the failing test."}]}


def record(rid: str, body: dict, usage: dict, *, endpoint: str | None = None, response_id: str | None = None,
           usage_key: str = "usage") -> TraceRecord:
    response = {usage_key: usage} | ({"id": response_id} if response_id else {})
    return TraceRecord(id=rid, provider=None, started_at=NOV + len(rid), request=body, response=response,
                       endpoint=endpoint, session=rid)


# (id, record, expected USD: fresh, read, write, output at $/MTok)
LINEUP = [
    ("opus55", record("opus55", claude_body("claude-opus-5-5"), ANTHROPIC_USAGE),
     (100 * 4 + 10_000 * 0.20 + 2_000 * 5 + 500 * 20) / 1e6),
    ("sonnet55", record("sonnet55", claude_body("claude-sonnet-5-5"), ANTHROPIC_USAGE),
     (100 * 2 + 10_000 * 0.10 + 2_000 * 2.5 + 500 * 10) / 1e6),
    ("haiku55", record("haiku55", claude_body("claude-haiku-5-5"), ANTHROPIC_USAGE),  # under 100,000 tokens
     (100 * 0.10 + 10_000 * 0.01 + 2_000 * 0.125 + 500 * 0.5) / 1e6),
    ("fable51", record("fable51", claude_body("claude-fable-5-1"), ANTHROPIC_USAGE),
     (100 * 10 + 10_000 * 0.25 + 2_000 * 12.5 + 500 * 50) / 1e6),
    ("mythos51", record("mythos51", claude_body("claude-mythos-5-1"), ANTHROPIC_USAGE),  # the price overlay
     (100 * 10 + 10_000 * 0.25 + 2_000 * 12.5 + 500 * 50) / 1e6),
    ("gpt56", record("gpt56", {"model": "gpt-5.6-sol", "instructions": SYSTEM, "input": "Fix the failing test."},
                     OPENAI_USAGE, endpoint="/v1/responses"),
     (100 * 4 + 10_000 * 0.40 + 2_000 * 5 + 500 * 20) / 1e6),
    ("gpt61", record("gpt61", {"model": "gpt-6.1-terra", "instructions": SYSTEM, "input": "Fix the failing test."},
                     OPENAI_USAGE, endpoint="/v1/responses"),
     (100 * 1 + 10_000 * 0.05 + 2_000 * 1.25 + 500 * 5) / 1e6),
    ("gemini4", record("gemini4", {"systemInstruction": {"parts": [{"text": SYSTEM}]},
                                   "contents": [{"role": "user", "parts": [{"text": "Fix the failing test."}]}]},
                       {"promptTokenCount": 10_100, "cachedContentTokenCount": 10_000, "candidatesTokenCount": 500},
                       endpoint="/v1beta/models/gemini-4-argon:generateContent", usage_key="usageMetadata"),
     (100 * 2 + 10_000 * 0.10 + 500 * 10) / 1e6),
    ("deepseek4", record("deepseek4", {"model": "deepseek-v4-pro", "messages": [
        {"role": "system", "content": SYSTEM}, {"role": "user", "content": "Fix the failing test."}]},
        {"prompt_tokens": 10_100, "prompt_cache_hit_tokens": 10_000, "prompt_cache_miss_tokens": 100,
         "completion_tokens": 500}, endpoint="/chat/completions"),
     (100 * 0.66 + 10_000 * 0.022 + 500 * 1.98) / 1e6),
    ("bedrock", record("bedrock", claude_body("global.anthropic.claude-opus-5-5"), ANTHROPIC_USAGE,
                       response_id="msg_bdrk_01WuFzkDbE9KWgiWakMRNKcA"),
     (100 * 4 + 10_000 * 0.20 + 2_000 * 5 + 500 * 20) / 1e6),  # the global profile: Anthropic's list price
    ("openrouter", record("openrouter", {"model": "anthropic/claude-opus-5.5", "messages": [
        {"role": "system", "content": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]},
        {"role": "user", "content": "Fix the failing test."}]},
        {"prompt_tokens": 12_100, "completion_tokens": 500,
         "prompt_tokens_details": {"cached_tokens": 10_000, "cache_write_tokens": 2_000}},
        endpoint="https://openrouter.ai/api/v1/chat/completions"),
     (100 * 4 + 10_000 * 0.20 + 2_000 * 5 + 500 * 20) / 1e6),
]
UNKNOWN = [record("future", claude_body("claude-opus-5-7"), ANTHROPIC_USAGE),
           record("qwen", {"model": "qwen3-max", "messages": [{"role": "user", "content": "hi"}]},
                  {"prompt_tokens": 10, "completion_tokens": 1})]


def test_every_request_of_the_lineup_is_ruled_and_priced_or_named():
    report = build_report([], records=[r for _, r, _ in LINEUP] + UNKNOWN, top=0)
    data = report.to_json()
    requests = {r["id"]: r for r in data["requests"]}
    for rid, _, usd in LINEUP:
        req = requests[rid]
        assert req["model_known"] and req["rules_fallback"] is None, rid
        assert req["cost_usd"] == pytest.approx(usd, abs=1e-6), rid
    assert requests["mythos51"]["cost_source"] == "kvprobe-overlay"
    assert (requests["bedrock"]["platform"], requests["openrouter"]["platform"]) == ("bedrock", "openrouter")
    assert requests["bedrock"]["rules_family"] == "claude-opus-5-5"
    assert requests["gpt56"]["rules_family"] == "gpt-5.6" and requests["gemini4"]["rules_family"] == "gemini-4"
    # what no rule or price covers is named, with what it fell back to
    assert {f["model"]: f["fell_back_to"] for f in data["rule_fallbacks"]} == {
        "claude-opus-5-7": "anthropic defaults (no rule names claude-opus-5-7)",
        "qwen3-max": "qwen defaults (no rule names qwen3-max)"}
    assert data["unpriced_models"] == ["claude-opus-5-7", "qwen3-max"]
    assert requests["future"]["cost_usd"] is None and requests["qwen"]["cost_usd"] is None


def test_the_text_json_and_html_reports_name_the_fallbacks(cli, tmp_path):
    trace = tmp_path / "lineup.jsonl"
    trace.write_bytes(b"".join(orjson.dumps(r.to_json()) + b"\n" for _, r, _ in LINEUP[:2]) +
                      b"".join(orjson.dumps(r.to_json()) + b"\n" for r in UNKNOWN[:1]))
    text = cli("report", trace)
    assert text.exit_code == 0
    line = "not in the catalog: anthropic/claude-opus-5-7 (1 request): anthropic defaults (no rule names claude-opus-5-7)"
    assert line in text.output
    data = json.loads(cli("report", trace, "--json").stdout)
    assert data["rule_fallbacks"] == [{"provider": "anthropic", "platform": None, "model": "claude-opus-5-7",
                                       "requests": 1, "fell_back_to": "anthropic defaults (no rule names claude-opus-5-7)"}]
    page = tmp_path / "r.html"
    assert cli("html", trace, "-o", page).exit_code == 0
    assert "claude-opus-5-7 (1 request): anthropic defaults" in page.read_text()


def test_diff_names_the_rules_it_fell_back_to(cli, write_json):
    a = write_json("a.json", claude_body("claude-opus-5-7"))
    b = write_json("b.json", claude_body("claude-opus-5-7") | {"messages": [{"role": "user", "content": "Again."}]})
    text = cli("diff", a, b)
    assert "(not in the catalog: anthropic defaults (no rule names claude-opus-5-7))" in text.output
    data = json.loads(cli("diff", a, b, "--json").stdout)
    assert data["model_known"] is False and data["rules_fallback"].startswith("anthropic defaults")


RULES = '''provider = "anthropic"
model_prefixes = ["claude"]

[rules.min_cacheable_tokens]
value = 1024
source = "test"
checked = "2026-01-01"

[rules.max_breakpoints]
value = 4
source = "test"
checked = "2026-11-30"

[[models]]
family = "claude-x"
match = ["claude-x"]
min_cacheable_tokens = { value = 512, source = "test", checked = "2026-11-01" }
'''


def _trace(path, models):
    path.write_bytes(b"".join(orjson.dumps(record(f"r{i}", claude_body(m), ANTHROPIC_USAGE).to_json()) + b"\n"
                              for i, m in enumerate(models)))
    return path


def test_providers_check_lists_stale_rules_and_uncovered_models_and_exits_1(cli, tmp_path, monkeypatch):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "anthropic.toml").write_text(RULES)
    monkeypatch.setenv("KVPROBE_PROVIDERS_DIR", str(rules))
    stale = cli("providers", "--check", "--as-of", "2026-12-01", "--json")
    assert stale.exit_code == 1
    data = json.loads(stale.stdout)
    # 2026-01-01 -> 2026-12-01 is 334 days; the other two rules are 1 and 30 days old
    assert (data["rules_checked"], data["stale_rules"]) == (3, [{"file": "anthropic.toml", "scope": "anthropic",
                                                                 "rule": "min_cacheable_tokens",
                                                                 "checked": "2026-01-01", "age_days": 334}])
    assert cli("providers", "--check", "--as-of", "2026-12-01", "--days", "334").exit_code == 0
    log = _trace(tmp_path / "t.jsonl", ["claude-x", "claude-x-20261101", "claude-y", "claude-y"])
    uncovered = cli("providers", "--check", "--as-of", "2026-12-01", "--days", "400", "--log", log, "--json")
    assert uncovered.exit_code == 1
    assert json.loads(uncovered.stdout)["uncovered_models"] == [
        {"provider": "anthropic", "platform": None, "model": "claude-y", "requests": 2,
         "fell_back_to": "anthropic defaults (no rule names claude-y)"}]
    text = cli("providers", "--check", "--as-of", "2026-12-01", "--log", log)
    assert "min_cacheable_tokens" in text.output and "claude-y" in text.output
    assert "registry out of date: 1 of 3 rules older than 90 days; 1 of 3 models in the logs not covered" \
        in text.output


def test_the_shipped_registry_covers_the_lineup(cli, tmp_path):
    log = tmp_path / "lineup.jsonl"
    log.write_bytes(b"".join(orjson.dumps(r.to_json()) + b"\n" for _, r, _ in LINEUP))
    result = cli("providers", "--check", "--as-of", "2026-12-01", "--days", "400", "--log", log, "--json")
    data = json.loads(result.stdout)
    assert result.exit_code == 0 and data["ok"] and data["models_seen"] == len(LINEUP)
    bad = cli("providers", "--check", "--as-of", "1st of December")
    assert bad.exit_code == 2 and "--as-of" in bad.output
