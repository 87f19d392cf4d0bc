"""`kvprobe serve` through the official OpenAI SDK: cached_tokens, streaming with include_usage, errors."""
from __future__ import annotations

import httpx
import openai
import pytest

from kvprobe.serve import start_server

PROMPT = "hello world, this is a long and repeated user prompt. " * 12  # ~650 byte tokens


@pytest.fixture(scope="module")
def server():
    with start_server(model="tiny-random", cache="engine", device="cpu", num_blocks=1024) as handle:
        yield handle


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0)


def ask(client, content: str, **extra):
    params = {"model": "gpt-4o", "max_tokens": 4, "temperature": 0, **extra}
    return client.chat.completions.create(messages=[{"role": "system", "content": "Be brief."},
                                                    {"role": "user", "content": content}], **params)


def test_repeated_prompt_reports_cached_tokens(client):
    first = ask(client, PROMPT + "one")
    second = ask(client, PROMPT + "one")
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert first.model == "gpt-4o" and first.object == "chat.completion"
    assert first.choices[0].finish_reason == "length" and first.usage.completion_tokens == 4
    total = second.usage.prompt_tokens
    assert second.usage.prompt_tokens_details.cached_tokens == (total - 1) // 16 * 16


def test_changed_early_message_reads_nothing(client):
    ask(client, "Monday. " + PROMPT)
    changed = ask(client, "Friday. " + PROMPT)
    assert changed.usage.prompt_tokens_details.cached_tokens <= 16


def test_stream_with_include_usage_ends_with_a_usage_chunk_and_done(server, client):
    ask(client, PROMPT + "stream")
    chunks = list(ask(client, PROMPT + "stream", stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-2].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens_details.cached_tokens > 600
    assert all(c.usage is None for c in chunks[:-1])
    raw = httpx.post(server.base_url + "/v1/chat/completions", timeout=30, json={
        "model": "gpt-4o", "stream": True, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}).text
    assert raw.rstrip().endswith("data: [DONE]") and '"usage"' not in raw


def test_bad_requests_get_openai_errors(client):
    with pytest.raises(openai.BadRequestError) as empty:
        client.chat.completions.create(model="gpt-4o", messages=[])
    assert empty.value.body["type"] == "invalid_request_error" and empty.value.body["param"] == "messages"
    with pytest.raises(openai.BadRequestError, match="temperature"):
        ask(client, "x", temperature=5)
    long = ask(client, "x" * 5000)  # over the tiny model's context: answered in accounting mode
    assert long.usage.prompt_tokens > 5000 and len(long.model_extra["kvprobe"]["model_window"]["attended"]) == 2
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="m", input="x")
    assert ask(client, "still serving").usage.completion_tokens == 4


def test_models_lists_the_served_model(client):
    assert [m.id for m in client.models.list()] == ["tiny-random"]
