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
    with start_server(model="tiny-random", cache="engine", device="cpu", num_blocks=512) as handle:
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


def test_stream_must_be_a_boolean_and_max_tokens_within_the_model(server):
    bad = _post(server, "/v1/messages", {"model": CLAUDE, "max_tokens": 2, "messages": USER, "stream": "yes"})
    assert bad.status_code == 400 and bad.json()["error"]["message"] == "stream: Input should be a valid boolean"
    huge = _post(server, "/v1/messages", {"model": CLAUDE, "max_tokens": 10**12, "messages": USER})
    assert huge.status_code == 400
    assert "max_tokens: 1000000000000 >" in huge.json()["error"]["message"]
    bad = _post(server, "/v1/chat/completions", {"model": "gpt-4o", "messages": USER, "stream": "yes"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "stream"
    assert bad.json()["error"]["code"] == "invalid_type"
    huge = _post(server, "/v1/chat/completions", {"model": "gpt-4o", "messages": USER, "max_tokens": 10**12})
    assert huge.status_code == 400 and huge.json()["error"]["param"] == "max_tokens"


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


def test_a_prompt_far_over_the_context_is_refused_without_tokenizing_it(server, claude):
    long_text = "lorem ipsum dolor " * 300_000  # 5.4 MB
    with pytest.raises(anthropic.BadRequestError) as info:
        claude.messages.create(model=CLAUDE, max_tokens=2, messages=[{"role": "user", "content": long_text}])
    message = info.value.body["error"]["message"]
    assert message.startswith("prompt is too long: at least") and "maximum" in message  # decided by size alone
    assert claude.messages.create(model=CLAUDE, max_tokens=1, messages=USER).usage.output_tokens == 1
