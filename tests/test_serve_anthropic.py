"""`kvprobe serve` through the official Anthropic SDK: engine-reported cache usage, streaming, errors."""
from __future__ import annotations

import concurrent.futures
import json

import anthropic
import httpx
import pytest

from kvprobe.serve import start_server

MODEL = "claude-sonnet-4-6"
GREEDY = {"temperature": 0}
LONG = "You are a careful coding agent. Read the files before you edit them. " * 9  # ~620 byte tokens


@pytest.fixture(scope="module")
def server():
    with start_server(model="tiny-random", cache="engine", device="cpu", num_blocks=2048) as handle:
        yield handle


@pytest.fixture(scope="module")
def client(server):
    return anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0)


def body(system: str = LONG, user: str = "Fix the login bug.", **extra) -> dict:
    return {"model": MODEL, "max_tokens": 4, "system": [{"type": "text", "text": system,
                                                          "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": user}], "extra_body": GREEDY, **extra}


def total_input(usage) -> int:
    return usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens


def test_repeated_long_prompt_reads_the_cache(client):
    first = client.messages.create(**body(system=LONG + " first"))
    second = client.messages.create(**body(system=LONG + " first"))
    assert first.usage.cache_read_input_tokens == 0
    assert first.model == MODEL and first.role == "assistant" and first.id.startswith("msg_")
    total = total_input(second.usage)
    # The engine reuses whole 16-token blocks and always computes the last prompt token.
    assert second.usage.cache_read_input_tokens == (total - 1) // 16 * 16
    assert second.usage.input_tokens == total - second.usage.cache_read_input_tokens
    assert second.usage.cache_creation_input_tokens == 0


def test_changed_early_block_reads_nothing(client):
    client.messages.create(**body(system="Today is Monday. " + LONG))
    changed = client.messages.create(**body(system="Today is Friday. " + LONG))
    # Only the blocks before the change could be reused: the chat template's header, under one block.
    assert changed.usage.cache_read_input_tokens <= 16


def test_streaming_reports_usage_in_message_start_and_delta(client):
    client.messages.create(**body(system=LONG + " stream"))
    with client.messages.stream(**body(system=LONG + " stream")) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert final.usage.cache_read_input_tokens > 600
    assert final.usage.output_tokens == 4 and final.stop_reason == "max_tokens"


def _sse(raw: str) -> list[tuple[str, dict]]:
    events = []
    for chunk in raw.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in chunk.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def test_stream_has_the_real_event_sequence(server):
    payload = {**body(), "stream": True}
    del payload["extra_body"]
    raw = httpx.post(server.base_url + "/v1/messages", json=payload, timeout=30).text
    events = _sse(raw)
    names = [name for name, _ in events]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert set(names[3:-3]) == {"content_block_delta"}
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    start = events[0][1]["message"]["usage"]
    assert {"input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "cache_creation"} <= set(start)
    delta = events[-2][1]
    assert delta["delta"]["stop_reason"] == "max_tokens" and delta["usage"]["output_tokens"] == 4


def test_count_tokens_matches_the_usage_of_the_same_prompt(client):
    request = body(system=LONG + " count")
    counted = client.messages.count_tokens(model=MODEL, system=request["system"], messages=request["messages"])
    served = client.messages.create(**request)
    assert counted.input_tokens == total_input(served.usage)


def test_stop_sequence_ends_the_reply(client):
    reply = client.messages.create(**body(max_tokens=16, stop_sequences=["\n"]))
    assert reply.stop_reason == "stop_sequence" and reply.stop_sequence == "\n"
    assert "\n" not in reply.content[0].text


def test_max_tokens_zero_prewarms_the_cache(client):
    warm = client.messages.create(**body(system=LONG + " prewarm", max_tokens=0))
    assert warm.content == [] and warm.usage.output_tokens == 0
    reply = client.messages.create(**body(system=LONG + " prewarm"))
    assert reply.usage.cache_read_input_tokens > 600


def test_bad_requests_get_anthropic_errors_and_the_server_keeps_serving(server, client):
    with pytest.raises(anthropic.BadRequestError) as missing:
        client.post("/v1/messages", cast_to=object, body={"model": MODEL, "messages": [{"role": "user", "content": "x"}]})
    assert missing.value.body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in missing.value.message
    with pytest.raises(anthropic.BadRequestError, match="role"):
        client.messages.create(model=MODEL, max_tokens=4, messages=[{"role": "robot", "content": "x"}])
    # Longer than the tiny model's 1,024-token context: answered, the model on the prompt's two ends
    long = client.messages.create(model=MODEL, max_tokens=4, messages=[{"role": "user", "content": "x" * 5000}])
    # (1,024 - 4 reply tokens = 1,020 for the prompt: a head of 1,020 // 4 = 255, a tail of at most 765
    # starting on a multiple of 765 // 2 = 382)
    total, window = long.usage.input_tokens, long.model_extra["kvprobe"]["model_window"]
    start = -(-(total - 765) // 382) * 382
    assert total > 5000 and window["attended"] == [[0, 255], [start, total]]
    assert window["accounted_only"] == [[255, start]]
    with pytest.raises(anthropic.NotFoundError):
        client.post("/v1/nothing", cast_to=object, body={})
    bad_json = httpx.post(server.base_url + "/v1/messages", content=b"{not json", timeout=10)
    assert bad_json.status_code == 400 and bad_json.json()["type"] == "error"
    assert client.messages.create(**body()).stop_reason == "max_tokens"


def test_concurrent_requests_are_served_together(client):
    def ask(i: int):
        return client.messages.create(**body(system=LONG + " shared", user=f"question {i}", max_tokens=8))
    client.messages.create(**body(system=LONG + " shared"))
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        replies = list(pool.map(ask, range(6)))
    assert all(r.usage.output_tokens == 8 for r in replies)
    assert all(r.usage.cache_read_input_tokens > 600 for r in replies)  # the shared system prompt


def test_disconnected_stream_is_aborted_and_the_server_continues(server, client):
    payload = {**body(max_tokens=300), "stream": True}
    del payload["extra_body"]
    with httpx.stream("POST", server.base_url + "/v1/messages", json=payload, timeout=30) as response:
        for line in response.iter_lines():
            if line.startswith("event: content_block_delta"):
                break
    assert client.messages.create(**body()).usage.output_tokens == 4
    health = httpx.get(server.base_url + "/health", timeout=10).json()
    assert health["status"] == "ok" and health["requests_served"] > 10


def test_an_engine_failure_fails_only_the_requests_in_flight(server, client, monkeypatch):
    engine = server.engine
    real_step = engine.step
    calls = {"n": 0}

    def flaky_step():
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("simulated kernel failure")
        return real_step()
    monkeypatch.setattr(engine, "step", flaky_step)
    with pytest.raises(anthropic.InternalServerError, match="simulated kernel failure"):
        client.messages.create(**body(user="doomed"))
    assert client.messages.create(**body(user="fine")).usage.output_tokens == 4
    assert httpx.get(server.base_url + "/health", timeout=10).json()["engine"]["step_failures"] == 1


def test_a_request_that_thinks_is_answered_with_a_thinking_block_first(client):
    """The API answers `thinking: enabled` with a thinking block before the text, and agents send it back (LiteLLM
    drops `thinking` from a conversation whose last answer has none): served whole and streamed the same way,
    and sent back, the next request reads the first one's cache as with the real API."""
    thinking = {"type": "enabled", "budget_tokens": 1024}
    first = client.messages.create(**body(system=LONG + " think", thinking=thinking))
    assert [b.type for b in first.content] == ["thinking", "text"]
    assert first.content[0].signature and first.content[0].thinking
    with client.messages.stream(**body(system=LONG + " think", thinking=thinking)) as stream:
        streamed = stream.get_final_message()
    assert [b.type for b in streamed.content] == ["thinking", "text"]
    assert streamed.content[0].signature == f"kvprobe-{streamed.id}"
    follow = body(system=LONG + " think", thinking=thinking)
    follow["messages"] += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                           {"role": "user", "content": "And the logout bug?"}]
    again = client.messages.create(**follow)
    assert again.usage.cache_read_input_tokens > 0
    plain = client.messages.create(**body(system=LONG + " think"))
    assert [b.type for b in plain.content] == ["text"]  # no thinking asked for: none given
