"""Every exact credential value a source shows (a request header, a URL's password, a LiteLLM api_key) is
scrubbed wherever it appears: an upstream echoes keys in error messages and response text, whatever their
shape. Seen before: HAR import wrote `invalid x-api-key: sk-ant-api03-…` into the trace, `fix` output and
DuckDB; the proxy wrote a gateway token (`corp-gw-token-…`) echoed by the upstream even with --redact;
LiteLLM import copied `api_key` and an `api_base` with a password into the request body.
"""
from __future__ import annotations

import json

import duckdb
import orjson
import pytest

from kvprobe.capture.recorder import Exchange, Recorder

ANTHROPIC_KEY = "sk-ant-api03-Zq9xW2vB7nM4kL1pR8tY6uI3oE5aS0dF-gH2jK4lZ6xC8vB0nM2qW4eR6tY8uI0o"
GATEWAY_KEY = "corp-gw-token-7f3a9c21e4b8d605"  # matches no known key format
PASSWORD = "hunter2-but-longer"
BODY = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [{"role": "user", "content": "Fix the bug."}]}


def _everything(tmp_path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file()
                     and p.suffix in (".jsonl", ".json", ".html"))


def _har(path, key: str):
    reply = {"type": "error", "error": {"type": "authentication_error", "message": f"invalid x-api-key: {key}"}}
    ok = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
          "content": [{"type": "text", "text": f"your gateway said {GATEWAY_KEY}"}], "stop_reason": "end_turn",
          "usage": {"input_tokens": 20, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0,
                    "output_tokens": 3}}
    entries = [{"startedDateTime": f"2026-09-10T10:00:0{i}.000Z", "time": 100,
                "request": {"method": "POST", "url": "https://api.anthropic.com/v1/messages",
                            "headers": [{"name": "x-api-key", "value": k}],
                            "postData": {"mimeType": "application/json", "text": json.dumps(BODY)}},
                "response": {"status": status, "headers": [],
                             "content": {"mimeType": "application/json", "text": json.dumps(body)}}}
               for i, (k, status, body) in enumerate([(key, 401, reply), (GATEWAY_KEY, 200, ok)])]
    path.write_text(json.dumps({"log": {"version": "1.2", "entries": entries}}))
    return path


def test_har_import_scrubs_echoed_keys_from_trace_fix_and_database(cli, tmp_path):
    har = _har(tmp_path / "session.har", ANTHROPIC_KEY)
    assert cli("import", har, "-o", tmp_path / "t.jsonl").exit_code == 0
    first, second = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert first["error"].startswith("HTTP 401: authentication_error: invalid x-api-key: [REDACTED:")
    assert "[REDACTED:credential#" in second["response"]["content"][0]["text"]
    assert cli("fix", tmp_path / "t.jsonl", "-o", tmp_path / "fixed.jsonl").exit_code == 0
    assert cli("db", "load", tmp_path / "t.jsonl", "--db", tmp_path / "k.duckdb").exit_code == 0
    with duckdb.connect(str(tmp_path / "k.duckdb"), read_only=True) as con:
        rows = con.execute("SELECT request_id, error FROM requests").fetchall()
    errors = [error for _, error in rows]
    assert len(rows) == 1  # the 401 failed: it is never priced, so it is no row of `requests` (issue #37 item 5)
    text = _everything(tmp_path) + "\n".join(map(str, errors))  # the written files (not the .har itself)
    assert ANTHROPIC_KEY[:20] not in text and GATEWAY_KEY not in text


def test_a_foreign_trace_with_a_key_in_its_error_never_reaches_outputs(cli, tmp_path):
    record = {"kvprobe": 1, "id": "r1", "provider": "anthropic", "request": BODY,
              "error": f"HTTP 401: invalid x-api-key: {ANTHROPIC_KEY}",
              "response": {"usage": {"input_tokens": 5, "output_tokens": 1}}}
    trace = tmp_path / "foreign.jsonl"
    trace.write_text(json.dumps(record) + "\n")
    assert cli("fix", trace, "-o", tmp_path / "out" / "fixed.jsonl").exit_code == 2  # (folder missing)
    (tmp_path / "out").mkdir()
    assert cli("fix", trace, "-o", tmp_path / "out" / "fixed.jsonl").exit_code == 0
    assert cli("import", trace, "-o", tmp_path / "out" / "i.jsonl").exit_code == 0
    written = (tmp_path / "out" / "fixed.jsonl").read_text() + (tmp_path / "out" / "i.jsonl").read_text()
    assert ANTHROPIC_KEY[:20] not in written and "[REDACTED:" in written


@pytest.mark.parametrize("options", [{}, {"redact": True}])
def test_capture_scrubs_a_key_of_any_shape_it_saw_in_the_headers(tmp_path, options):
    echo = {"type": "error", "error": {"type": "permission_error",
                                       "message": f"gateway rejected token {GATEWAY_KEY} for this model"}}
    rec = Recorder(tmp_path / "trace.jsonl", **options)
    for status, body in ((403, echo), (200, {"id": "msg_1", "type": "message", "role": "assistant",
                                             "model": "claude-sonnet-4-5", "stop_reason": "end_turn",
                                             "content": [{"type": "text", "text": f"token: {GATEWAY_KEY}"}],
                                             "usage": {"input_tokens": 5, "output_tokens": 2}})):
        rec.record(Exchange("POST", "/v1/messages", {"x-api-key": GATEWAY_KEY,
                                                     "authorization": f"Bearer {GATEWAY_KEY}-b"},
                            orjson.dumps(BODY), 1.0, status=status,
                            response_headers={"content-type": "application/json"},
                            response_body=bytearray(orjson.dumps(body))))
    rec.close()
    text = (tmp_path / "trace.jsonl").read_text()
    assert GATEWAY_KEY not in text and text.count("[REDACTED:credential#") >= 2
    first, second = [json.loads(line) for line in text.splitlines()]
    assert first["error"].startswith("HTTP 403: ") and "gateway rejected token [REDACTED:" in first["error"]
    assert second["response"]["content"][0]["text"].startswith("token: [REDACTED:")


def test_a_short_placeholder_key_scrubs_nothing(tmp_path):
    """The local server's api_key="x" must not turn every x of a response into a placeholder."""
    rec = Recorder(tmp_path / "trace.jsonl")
    reply = {"id": "m", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
             "stop_reason": "end_turn", "content": [{"type": "text", "text": "x marks the spot"}],
             "usage": {"input_tokens": 5, "output_tokens": 4}}
    rec.record(Exchange("POST", "/v1/messages", {"x-api-key": "x"}, orjson.dumps(BODY), 1.0, status=200,
                        response_headers={"content-type": "application/json"},
                        response_body=bytearray(orjson.dumps(reply))))
    rec.close()
    assert json.loads((tmp_path / "trace.jsonl").read_text())["response"]["content"][0]["text"] == "x marks the spot"


def test_litellm_client_parameters_never_reach_the_trace(cli, tmp_path):
    payload = {"id": "chatcmpl-9", "call_type": "acompletion", "model": "gpt-4o", "custom_llm_provider": "openai",
               "startTime": 1757498400, "endTime": 1757498401,
               "messages": [{"role": "user", "content": "hello"}],
               "model_parameters": {"temperature": 0.2, "max_tokens": 100, "api_key": GATEWAY_KEY,
                                    "api_base": f"https://svc:{PASSWORD}@llm.corp.example/v1",
                                    "extra_headers": {"X-Corp-Auth": "corp-session-5e8d1c9a77"}},
               "error_str": f"upstream said: bad key {GATEWAY_KEY} at https://svc:{PASSWORD}@llm.corp.example",
               "response": {"usage": {"prompt_tokens": 10, "completion_tokens": 2}}}
    logs = tmp_path / "litellm.jsonl"
    logs.write_text(json.dumps(payload) + "\n")
    assert cli("import", logs, "-o", tmp_path / "t.jsonl").exit_code == 0
    text = (tmp_path / "t.jsonl").read_text()
    (record,) = [json.loads(line) for line in text.splitlines()]
    assert record["request"] == {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}],
                                 "temperature": 0.2, "max_tokens": 100}
    assert GATEWAY_KEY not in text and PASSWORD not in text and "corp-session-5e8d1c9a77" not in text
    assert "bad key [REDACTED:" in record["error"]
