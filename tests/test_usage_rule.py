"""The usage rule checks counts together, not only one by one (docs/contracts.md §1, "Usage rule").

Each count below is valid alone; together they say a part is larger than the whole that includes it
(cached input above all input, a 5m/1h split above the writes it splits, DeepSeek hits above the prompt,
reasoning above output). Such usage made the gate pass on a negative cost and a hit ratio of 4950%. Strict
readers stop with exit 2 naming file, line and field; importers count a skip; capture keeps the upstream's
usage aside as `upstream_invalid_usage`. Source logs' own counts (Codex, LiteLLM, OpenTelemetry) that are no
counts at all (negative, 1e20, true, {}, "-5", "NaN") are counted skips too, never a silent 0.
"""
from __future__ import annotations

import json

import orjson
import pytest

from kvprobe.capture.recorder import Exchange, Recorder
from kvprobe.trace import read_trace

GATE = ("--max-cost-usd", "0", "--min-hit-ratio", "100%")


def _trace(tmp_path, provider: str, model: str, usage: dict, key: str = "usage"):
    record = {"kvprobe": 1, "id": "req_1", "provider": provider, "started_at": "2026-09-10T10:00:00Z",
              "response": {"model": model, key: usage}}
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(record) + "\n")
    return path


IMPOSSIBLE = [  # (provider, model, usage key, usage, the field named)
    ("openai", "gpt-4o", "usage", {"prompt_tokens": 10, "completion_tokens": 5,
                                   "prompt_tokens_details": {"cached_tokens": 50000}},
     "response.usage.prompt_tokens_details.cached_tokens"),
    ("openai", "gpt-4o", "usage", {"input_tokens": 100, "output_tokens": 5,
                                   "input_tokens_details": {"cached_tokens": 101}},
     "response.usage.input_tokens_details.cached_tokens"),
    ("openai", "gpt-4o", "usage", {"prompt_tokens": 100, "completion_tokens": 5,
                                   "completion_tokens_details": {"reasoning_tokens": 6}},
     "response.usage.completion_tokens_details.reasoning_tokens"),
    ("deepseek", "deepseek-chat", "usage", {"prompt_tokens": 10, "prompt_cache_hit_tokens": 5000,
                                            "prompt_cache_miss_tokens": 0, "completion_tokens": 3},
     "response.usage.prompt_cache_hit_tokens"),
    ("gemini", "gemini-2.5-flash", "usageMetadata", {"promptTokenCount": 10, "cachedContentTokenCount": 5000,
                                                     "candidatesTokenCount": 3},
     "response.usageMetadata.cachedContentTokenCount"),
    ("anthropic", "claude-sonnet-4-5", "usage", {"input_tokens": 10, "cache_creation_input_tokens": 100,
                                                 "cache_creation": {"ephemeral_5m_input_tokens": 0,
                                                                    "ephemeral_1h_input_tokens": 5000},
                                                 "output_tokens": 3},
     "response.usage.cache_creation.ephemeral_1h_input_tokens"),
    ("anthropic", "claude-sonnet-4-5", "usage", {"input_tokens": 10, "output_tokens": 3,
                                                 "cache_read_input_tokens": 12.5},
     "response.usage.cache_read_input_tokens"),  # a count is whole: 12.5 was read as 12
    ("openai", "qwen-plus", "usage", {"prompt_tokens": 100, "completion_tokens": 3, "prompt_tokens_details": {
        "cached_tokens": 50, "cache_creation_input_tokens": 60}},  # Qwen's explicit cache writes
     "response.usage.prompt_tokens_details.cached_tokens"),
    ("gemini", "gemini-2.5-flash", "usage", {"total_input_tokens": 10, "total_cached_tokens": 500,
                                             "total_output_tokens": 3},  # Gemini's Interactions API
     "response.usage.total_cached_tokens"),
    ("openai", "gpt-5.6", "usage", {"input_tokens": 100, "output_tokens": 5, "input_tokens_details": {
        "cached_tokens": 60, "cache_write_tokens": 41}},  # reads and writes together above all input
     "response.usage.input_tokens_details.cached_tokens"),
    ("openai", "gpt-5", "usage", {"input_tokens": 100, "output_tokens": 5,
                                  "output_tokens_details": {"reasoning_tokens": 6}},
     "response.usage.output_tokens_details.reasoning_tokens"),
]


@pytest.mark.parametrize(("provider", "model", "key", "usage", "field"), IMPOSSIBLE,
                         ids=["chat-cached", "responses-cached", "reasoning", "deepseek-hits", "gemini-cached",
                              "anthropic-split", "fractional", "qwen-writes", "interactions-cached",
                              "responses-written", "responses-reasoning"])
def test_impossible_usage_never_passes_a_gate(cli, tmp_path, provider, model, key, usage, field):
    trace = _trace(tmp_path, provider, model, usage, key)
    gate = cli("gate", trace, *GATE)
    assert gate.exit_code == 2, gate.output
    assert "PASS" not in gate.output and f"t.jsonl:1 field '{field}'" in " ".join(gate.output.split())
    assert cli("report", trace, "--json").exit_code == 2
    good = {"kvprobe": 1, "id": "ok", "provider": "anthropic", "started_at": "2026-11-02T10:00:00Z",
            "response": {"model": "claude-sonnet-4-5", "usage": {"input_tokens": 10, "output_tokens": 1}}}
    with trace.open("a") as fh:  # beside a request it can read: the bad line is skipped, not the whole file
        fh.write(json.dumps(good) + "\n")
    lenient = cli("usage", trace, "--json")  # a lenient reader: a counted skip naming the field
    assert lenient.exit_code == 0, lenient.output
    imported = json.loads(lenient.stdout)["import"]
    assert imported["records"] == 1 and imported["skipped"] == 1
    assert field in imported["sources"][0]["examples"][0]


@pytest.mark.parametrize(("provider", "model", "key", "usage", "fresh"), [
    ("openai", "gpt-4o", "usage", {"prompt_tokens": 100, "completion_tokens": 5,
                                   "prompt_tokens_details": {"cached_tokens": 100},
                                   "completion_tokens_details": {"reasoning_tokens": 5}}, 0),
    ("openai", "gpt-5.6", "usage", {"input_tokens": 100, "output_tokens": 5,
                                    "input_tokens_details": {"cached_tokens": 60, "cache_write_tokens": 40},
                                    "output_tokens_details": {"reasoning_tokens": 5}}, 0),
    ("deepseek", "deepseek-chat", "usage", {"prompt_tokens": 100, "prompt_cache_hit_tokens": 64,
                                            "prompt_cache_miss_tokens": 36, "completion_tokens": 3}, 36),
    ("gemini", "gemini-2.5-flash", "usageMetadata", {"promptTokenCount": 100, "cachedContentTokenCount": 100}, 0),
    ("anthropic", "claude-sonnet-4-5", "usage", {"input_tokens": 10, "cache_creation_input_tokens": 100,
                                                 "cache_read_input_tokens": 4000, "output_tokens": 3.0,
                                                 "cache_creation": {"ephemeral_5m_input_tokens": 40,
                                                                    "ephemeral_1h_input_tokens": 60}}, 10),
])
def test_parts_equal_to_their_whole_are_valid(cli, tmp_path, provider, model, key, usage, fresh):
    """The limit itself is fine: everything read from the cache; 5m + 1h = all writes; 3.0 is a whole count."""
    res = cli("report", _trace(tmp_path, provider, model, usage, key), "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["totals"]["fresh_input_tokens"] == fresh


def _rollout(tmp_path, last: dict):
    lines = [{"timestamp": "2026-09-10T11:00:00.000Z", "type": "session_meta",
              "payload": {"id": "sess-a", "cwd": "/home/me/app", "model_provider": "openai"}},
             {"timestamp": "2026-09-10T11:00:00.100Z", "type": "turn_context", "payload": {"model": "gpt-5-codex"}},
             {"timestamp": "2026-09-10T11:00:05.000Z", "type": "event_msg", "payload": {
                 "type": "token_count", "info": {"last_token_usage": last, "total_token_usage": last}}}]
    path = tmp_path / "rollout-2026-09-10T11-00-00-sess-a.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_codex_counts_written_as_digits_are_the_counts(cli, tmp_path):
    """Counts as digit strings (as OTLP JSON writes 64-bit integers) or whole floats read as the counts: the
    same totals as plain integers (8,000 input of which 6,000 read and 1,500 written: 500 fresh)."""
    plain = {"input_tokens": 8000, "cached_input_tokens": 6000, "cache_write_input_tokens": 1500,
             "output_tokens": 30, "reasoning_output_tokens": 10, "total_tokens": 8030}
    written = {**plain, "input_tokens": "8000", "cached_input_tokens": 6000.0, "output_tokens": "30"}
    totals = []
    for last in (plain, written):
        res = cli("usage", _rollout(tmp_path, last), "--json")
        assert res.exit_code == 0, res.output
        totals.append(json.loads(res.stdout)["totals"])
    assert totals[0] == totals[1]
    assert (totals[0]["fresh_input_tokens"], totals[0]["cache_read_tokens"], totals[0]["cache_write_tokens"],
            totals[0]["output_tokens"]) == (500, 6000, 1500, 30)


@pytest.mark.parametrize("last", [
    {"input_tokens": 10, "cached_input_tokens": 50000, "output_tokens": 3},  # cached above all input
    {"input_tokens": -5000, "cached_input_tokens": 0, "output_tokens": 3},
    {"input_tokens": 1e20, "cached_input_tokens": 0, "output_tokens": 3},
    {"input_tokens": True, "cached_input_tokens": 0, "output_tokens": 3},
    {"input_tokens": {}, "cached_input_tokens": 0, "output_tokens": 3},
    {"input_tokens": 8000, "cached_input_tokens": "-5", "output_tokens": 3},
    {"input_tokens": 8000, "cached_input_tokens": 6000, "cache_write_input_tokens": 2001, "output_tokens": 3},
])
def test_codex_counts_that_are_no_counts_are_counted_skips(cli, tmp_path, last):
    rollout = _rollout(tmp_path, last)
    res = cli("usage", rollout, "--json")  # nothing left to total: exit 2, the skip counted and named
    assert res.exit_code == 2, res.output
    said = " ".join(res.output.split())
    assert "skipped 1: invalid usage" in said and ("cached" in said or "input_tokens" in said)
    imported = cli("import", rollout, "-o", tmp_path / "out.jsonl")  # nothing valid: nothing written
    assert imported.exit_code == 2 and "skipped 1: invalid usage" in imported.output
    assert not (tmp_path / "out.jsonl").exists()


def test_litellm_and_otel_bad_counts_are_counted_skips(cli, tmp_path):
    litellm = tmp_path / "litellm.jsonl"
    payload = {"id": "chatcmpl-1", "call_type": "acompletion", "model": "gpt-4o", "startTime": 1757498400,
               "response": {"usage": {"prompt_tokens": -100, "completion_tokens": 5}}}
    litellm.write_text(json.dumps(payload) + "\n")
    spans = tmp_path / "spans.json"
    attrs = [{"key": "gen_ai.provider.name", "value": {"stringValue": "openai"}},
             {"key": "gen_ai.request.model", "value": {"stringValue": "gpt-4o"}}]
    doc = {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": [
        {"spanId": f"s{i}", "traceId": "t1", "startTimeUnixNano": "1757498400000000000",
         "attributes": attrs + [{"key": "gen_ai.usage.input_tokens", "value": value},
                                {"key": "gen_ai.usage.output_tokens", "value": {"intValue": "7"}}]}
        for i, value in enumerate([{"intValue": "-500"}, {"stringValue": "NaN"}, {"intValue": "500"}])]}]}]}
    spans.write_text(json.dumps(doc))
    res = cli("usage", litellm, spans, "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["import"]["skipped_reasons"] == {"invalid usage": 3}
    assert data["totals"]["requests"] == 1 and data["totals"]["input_tokens"] == 500  # "500": OTLP's int64
    examples = " ".join(e for s in data["import"]["sources"] for e in s["examples"])
    assert "usage.prompt_tokens: expected a token count, got -100" in examples
    assert 'gen_ai.usage.input_tokens: expected a token count, got "-500"' in examples
    assert 'gen_ai.usage.input_tokens: expected a token count, got "NaN"' in examples


def test_capture_keeps_impossible_upstream_usage_aside(tmp_path, cli):
    """An upstream that reports more cached tokens than prompt tokens: the client's answer is its business;
    the record's usage is absent, the reported object is kept under upstream_invalid_usage."""
    usage = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12,
             "prompt_tokens_details": {"cached_tokens": 50000}}
    body = {"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}], "usage": usage}
    rec = Recorder(tmp_path / "trace.jsonl")
    rec.record(Exchange("POST", "/v1/chat/completions", {}, orjson.dumps(
        {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}), 1.0, status=200,
        response_headers={"content-type": "application/json"}, response_body=bytearray(orjson.dumps(body))))
    rec.close()
    (record,) = read_trace(tmp_path / "trace.jsonl")
    assert record.usage is None and record.extra["upstream_invalid_usage"] == {"usage": usage}
    assert "response.usage.prompt_tokens_details.cached_tokens" in record.error
    # the request failed as far as the trace can say (an error, no usage): the gate fails it, never a pass
    assert cli("gate", tmp_path / "trace.jsonl", *GATE).exit_code == 1


def _gemini_session(folder, tokens: dict) -> None:
    chats = folder / "tmp" / "abc123" / "chats"
    chats.mkdir(parents=True)
    doc = {"sessionId": "11111111-aaaa-bbbb-cccc-000000000001", "projectHash": "abc123",
           "startTime": "2026-02-10T10:00:00.000Z", "messages": [
               {"id": "m1", "timestamp": "2026-02-10T10:00:00.000Z", "type": "user", "content": "hi"},
               {"id": "m2", "timestamp": "2026-02-10T10:00:05.000Z", "type": "gemini", "content": "hello",
                "model": "gemini-2.5-pro", "tokens": {"input": 10000, "output": 200, **tokens}}]}
    (chats / "session-2026-02-10T10-00-11111111.json").write_text(json.dumps(doc))


def _opencode_message(folder, tokens: dict) -> None:
    messages = folder / "storage" / "message" / "ses_A"
    messages.mkdir(parents=True)
    (messages / "msg_002.json").write_text(json.dumps({
        "id": "msg_002", "sessionID": "ses_A", "role": "assistant", "time": {"created": 1770800001000},
        "providerID": "openai", "modelID": "gpt-5", "tokens": {"input": 2000, "output": 100, **tokens}}))


@pytest.mark.parametrize(("write", "tokens", "named"), [
    (_gemini_session, {"cached": -9000}, "tokens.cached: expected a token count, got -9000"),
    (_gemini_session, {"thoughts": "many"}, 'tokens.thoughts: expected a token count, got "many"'),
    (_opencode_message, {"reasoning": 1e20}, "tokens.reasoning: expected a token count, got 1e+20"),
    (_opencode_message, {"cache": {"read": True}}, "tokens.cache.read: expected a token count, got true"),
])
def test_gemini_cli_and_opencode_bad_counts_are_counted_skips(cli, tmp_path, write, tokens, named):
    write(tmp_path, tokens)
    res = cli("usage", tmp_path, "--json")  # nothing left to total: exit 2, the skip counted and named
    assert res.exit_code == 2, res.output
    said = " ".join(res.output.split())
    assert "skipped 1: invalid usage" in said and named in said
