"""`kvprobe serve` refuses what the real APIs refuse, in their shapes, and refuses oversized requests early."""
from __future__ import annotations

import socket

import anthropic
import httpx
import openai
import pytest

from kvprobe.serve import start_server

CLAUDE = "claude-sonnet-4-6"
USER = [{"role": "user", "content": "Fix the login bug."}]


@pytest.fixture(scope="module")
def server():
    with start_server(model="tiny-random", cache="engine", device="cpu", num_blocks=512,
                      max_output_tokens=16) as handle:
        yield handle


@pytest.fixture(scope="module")
def claude(server):
    return anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0)


@pytest.fixture(scope="module")
def gpt(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0)


def _post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.base_url + path, json=body, timeout=30)


def test_unknown_models_are_404_in_each_apis_shape(server, claude, gpt):
    with pytest.raises(anthropic.NotFoundError) as info:
        claude.messages.create(model="no-such-model", max_tokens=2, messages=USER)
    body = info.value.body
    assert body["type"] == "error" and body["error"] == {"type": "not_found_error", "message": "model: no-such-model"}
    assert body["request_id"].startswith("req_")
    with pytest.raises(anthropic.NotFoundError):  # an OpenAI model on the Messages API
        claude.messages.create(model="gpt-4o", max_tokens=2, messages=USER)
    with pytest.raises(openai.NotFoundError) as info:
        gpt.chat.completions.create(model="no-such-model", max_tokens=2, messages=USER)
    assert info.value.body["code"] == "model_not_found" and info.value.body["type"] == "invalid_request_error"
    # what the server runs, and every model the providers' rule files know, are served
    assert claude.messages.create(model="tiny-random", max_tokens=1, messages=USER).usage.output_tokens == 1
    assert gpt.chat.completions.create(model="deepseek-chat", max_tokens=1, messages=USER).usage.completion_tokens == 1


@pytest.mark.parametrize("messages, expected", [
    ([{"role": "user", "content": [{"type": "banana", "text": "x"}]}],
     "messages.0.content.0: Input tag 'banana' found using 'type' does not match"),
    ([{"role": "user", "content": [{"type": "text"}]}], "messages.0.content.0.text: Field required"),
    ([{"role": "user", "content": [{"type": "text", "text": 5}]}], "messages.0.content.0.text: Input should be"),
    ([{"role": "assistant", "content": "Sure."}, *USER], 'first message must use the "user" role'),
    ([{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}],
     "messages.0.content.0.tool_use_id: Field required"),
])
def test_malformed_anthropic_requests_are_400(claude, messages, expected):
    with pytest.raises(anthropic.BadRequestError) as info:
        claude.messages.create(model=CLAUDE, max_tokens=2, messages=messages)
    assert info.value.body["error"]["type"] == "invalid_request_error"
    assert expected in info.value.body["error"]["message"]


def test_stream_must_be_a_boolean_and_a_huge_max_tokens_is_served_clamped(server):
    bad = _post(server, "/v1/messages", {"model": CLAUDE, "max_tokens": 2, "messages": USER, "stream": "yes"})
    assert bad.status_code == 400 and bad.json()["error"]["message"] == "stream: Input should be a valid boolean"
    # An agent's 64,000 (or more) is not the bundled model's to refuse: served at the engine's reply limit
    # (this server's --max-output-tokens 16), and said
    huge = _post(server, "/v1/messages", {"model": CLAUDE, "max_tokens": 10**12, "messages": USER})
    assert huge.status_code == 200 and huge.json()["stop_reason"] in ("end_turn", "max_tokens")
    assert huge.json()["kvprobe"]["max_tokens"]["requested"] == 10**12
    assert huge.json()["kvprobe"]["max_tokens"]["served"] == 16
    bad = _post(server, "/v1/chat/completions", {"model": "gpt-4o", "messages": USER, "stream": "yes"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "stream"
    assert bad.json()["error"]["code"] == "invalid_type"
    huge = _post(server, "/v1/chat/completions", {"model": "gpt-4o", "messages": USER, "max_tokens": 10**12})
    assert huge.status_code == 200 and huge.json()["kvprobe"]["max_tokens"]["served"] == 16


def test_malformed_openai_content_parts_are_400(gpt):
    with pytest.raises(openai.BadRequestError) as info:
        gpt.chat.completions.create(model="gpt-4o", max_tokens=2,
                                    messages=[{"role": "user", "content": [{"type": "banana"}]}])
    assert info.value.body["param"] == "messages[0].content[0].type" and info.value.body["code"] == "invalid_value"
    with pytest.raises(openai.BadRequestError) as info:
        gpt.chat.completions.create(model="gpt-4o", max_tokens=2, messages=[{"role": "user", "content": [
            {"type": "text"}]}])
    assert info.value.body["code"] == "missing_required_parameter"


def test_documented_optional_fields_are_accepted(claude):
    reply = claude.messages.create(
        model=CLAUDE, max_tokens=2, messages=USER, metadata={"user_id": "u1"},
        stop_sequences=["###"], tool_choice={"type": "auto"},
        tools=[{"name": "grep", "description": "Search", "input_schema": {"type": "object"}}],
        extra_body={"diagnostics": {"previous_message_id": None}, "top_k": 5, "top_p": 0.9})
    assert reply.usage.output_tokens <= 2


def test_an_oversized_body_is_413_before_it_is_read(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 40000000\r\n\r\n{")  # 40 MB announced, one byte sent
        answer = b""
        while b"request_too_large" not in answer and len(answer) < 65536:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 413") and b"request_too_large" in answer


def test_a_prompt_far_over_the_prompt_limit_is_refused_without_tokenizing_it(tmp_path):
    long_text = "lorem ipsum dolor " * 300_000  # 5.4 MB: over 100,000 tokens by its size alone
    with start_server(model="tiny-random", device="cpu", num_blocks=512, max_prompt_tokens=100_000) as handle:
        claude = anthropic.Anthropic(base_url=handle.base_url, api_key="x", max_retries=0)
        with pytest.raises(anthropic.BadRequestError) as info:
            claude.messages.create(model=CLAUDE, max_tokens=2, messages=[{"role": "user", "content": long_text}])
        message = info.value.body["error"]["message"]
        assert message.startswith("prompt is too long: at least") and "100000 maximum" in message
        assert claude.messages.create(model=CLAUDE, max_tokens=1, messages=USER).usage.output_tokens == 1


# Bodies the Messages API refuses (its SDK types and API reference): each was answered 200 here.
TOOL = {"name": "grep", "description": "Search", "input_schema": {"type": "object"}}


@pytest.mark.parametrize("extra, expected", [
    ({"temprature": 0.5}, "temprature: Extra inputs are not permitted"),
    ({"system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "permanent"}}]},
     "system.0.cache_control.type: Input should be 'ephemeral'"),
    ({"system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral", "ttl": "99y"}}]},
     "system.0.cache_control.ttl: Input should be '5m' or '1h'"),
    ({"tools": [{"description": "Search", "input_schema": {"type": "object"}}]}, "tools.0.name: Field required"),
    ({"tools": [{"name": "grep", "description": "Search"}]}, "tools.0.custom.input_schema: Field required"),
    ({"tools": [{**TOOL, "name": "grep files"}]},
     "tools.0.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'"),
    ({"top_p": 5}, "top_p: Input should be a number between 0 and 1"),
    ({"top_k": -5}, "top_k: Input should be an integer greater than or equal to 0"),
    ({"metadata": {"user_id": "u1", "trace": {"a": 1}}}, "metadata.trace: Extra inputs are not permitted"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}]},
     "messages: text content blocks must be non-empty"),
    ({"messages": [{"role": "user", "content": ""}]},
     "messages.0: all messages must have non-empty content except for the optional final assistant message"),
])
def test_bodies_the_messages_api_refuses_are_400(server, extra, expected):
    res = _post(server, "/v1/messages", {"model": CLAUDE, "max_tokens": 2, "messages": USER, **extra})
    assert res.status_code == 400, res.text
    assert res.json()["error"] == {"type": "invalid_request_error", "message": expected}


def test_what_the_api_accepts_stays_accepted(claude):
    """A final assistant message may be empty (prefill), a server tool has no schema, 1h is a TTL."""
    reply = claude.messages.create(
        model=CLAUDE, max_tokens=2, extra_body={"top_k": 0, "top_p": 1, "temperature": 0},
        system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        tools=[TOOL, {"type": "web_search_20250305", "name": "web_search", "max_uses": 1}],
        messages=[*USER, {"role": "assistant", "content": ""}])
    assert reply.usage.output_tokens <= 2


def test_a_body_that_is_not_json_by_its_content_type_is_400(server):
    import json

    res = httpx.post(server.base_url + "/v1/messages", timeout=30, headers={"content-type": "text/plain"},
                     content=json.dumps({"model": CLAUDE, "max_tokens": 2, "messages": USER}))
    assert res.status_code == 400 and res.json()["error"]["type"] == "invalid_request_error"
    assert "Content-Type must be application/json" in res.json()["error"]["message"]


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    trace = tmp_path_factory.mktemp("serve") / "served.jsonl"
    with start_server(model="tiny-random", cache="emulate", emulate="anthropic", clock="virtual", device="cpu",
                      num_blocks=512, trace=trace) as handle:
        yield handle, trace


@pytest.mark.parametrize("clock", ["nan", "inf", "-inf", "1e300", "-5", "soon"])
def test_a_clock_header_that_is_no_time_is_400_before_any_work(recording, clock):
    handle, trace = recording
    before = handle.state.requests_served, trace.read_text().count("\n")
    res = httpx.post(handle.base_url + "/v1/messages", timeout=30, headers={"X-Kvprobe-Clock": clock},
                     json={"model": CLAUDE, "max_tokens": 2, "messages": USER})
    assert res.status_code == 400, res.text
    assert "header X-Kvprobe-Clock: expected epoch seconds" in res.json()["error"]["message"]
    assert (handle.state.requests_served, trace.read_text().count("\n")) == before  # nothing was served


@pytest.mark.parametrize("stream", [False, True])
def test_every_answered_request_has_its_trace_line(recording, stream):
    """An output schema nested 300 deep is valid JSON the API takes (and the engine never renders), but no
    JSON Lines writer goes that deep: refused before it is answered (it was answered, then 500 or a stream cut
    after message_stop, with no trace line)."""
    handle, trace = recording
    deep: dict = {"type": "object"}
    for _ in range(300):
        deep = {"type": "object", "properties": {"x": deep}}
    lines = trace.read_text().count("\n")
    res = httpx.post(handle.base_url + "/v1/messages", timeout=60, json={
        "model": CLAUDE, "max_tokens": 2, "messages": USER, "stream": stream,
        "output_config": {"format": {"type": "json_schema", "schema": deep}}})
    assert res.status_code == 400 and "cannot write this request's body" in res.json()["error"]["message"]
    ok = httpx.post(handle.base_url + "/v1/messages", timeout=60, json={
        "model": CLAUDE, "max_tokens": 2, "messages": USER, "stream": stream})
    assert ok.status_code == 200 and "message_stop" in ok.text if stream else ok.status_code == 200
    assert trace.read_text().count("\n") == lines + 1
