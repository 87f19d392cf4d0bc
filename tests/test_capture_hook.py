"""The in-process hook: `http_client()` / `async_http_client()` handed to the official SDKs."""
from __future__ import annotations

import asyncio
import socket

import anthropic
import httpx
import httpx2
import openai
import pytest
from google import genai
from google.genai import types

import kvprobe.capture
from kvprobe.capture.testing import DEFAULT_USAGE
from kvprobe.trace import read_trace

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
MESSAGES = [{"role": "user", "content": "Summarise the design doc."}]


def test_sync_anthropic_client_records_json_and_streams(fake, tmp_path):
    out = tmp_path / "trace.jsonl"
    http = kvprobe.capture.http_client(out=out, session="doc", agent="main")
    client = anthropic.Anthropic(api_key="sk-ant-api03-HOOKSECRET-0123456789abcdef", base_url=fake.url,
                                 http_client=http, max_retries=0)
    reply = client.messages.create(model="claude-sonnet-4-5", max_tokens=32, messages=MESSAGES)
    with client.messages.stream(model="claude-sonnet-4-5", max_tokens=32, messages=MESSAGES) as stream:
        streamed = stream.get_final_message()
    assert reply.usage.cache_read_input_tokens == streamed.usage.cache_read_input_tokens == 2048
    plain, stream_record = read_trace(out)
    assert plain.session == "doc" and plain.agent == "main" and plain.provider == "anthropic"
    assert plain.request["messages"] == MESSAGES and plain.usage["cache_creation_input_tokens"] == 256
    assert stream_record.extra["stream"] is True
    assert stream_record.usage["output_tokens"] == DEFAULT_USAGE["output_tokens"]
    assert stream_record.started_at <= stream_record.first_token_at <= stream_record.finished_at
    assert "HOOKSECRET" not in out.read_text()


def test_async_openai_client_records_a_stream(fake, tmp_path):
    out = tmp_path / "trace.jsonl"

    async def main():
        client = openai.AsyncOpenAI(api_key="sk-proj-HOOKSECRET-0123456789abcdef", base_url=fake.url + "/v1",
                                    http_client=kvprobe.capture.async_http_client(out=out), max_retries=0)
        stream = await client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True,
                                                      stream_options={"include_usage": True})
        return [chunk async for chunk in stream]

    chunks = asyncio.run(main())
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == 2048
    (record,) = read_trace(out)
    assert record.response["choices"][0]["message"]["content"] == "Hello from the local provider."
    assert record.usage["prompt_tokens_details"]["cached_tokens"] == 2048 and record.error is None


def test_a_stream_abandoned_early_is_recorded_as_cut(fake, tmp_path):
    out = tmp_path / "trace.jsonl"
    client = anthropic.Anthropic(api_key="k", base_url=fake.url, max_retries=0,
                                 http_client=kvprobe.capture.http_client(out=out))
    with client.messages.create(model="claude-sonnet-4-5", max_tokens=5, messages=MESSAGES, stream=True) as stream:
        next(iter(stream))
    (record,) = read_trace(out)
    assert "closed before the body was read" in record.error
    assert record.usage["cache_read_input_tokens"] == 2048


def test_errors_are_recorded_and_still_raised(fake, tmp_path):
    out = tmp_path / "trace.jsonl"
    http = kvprobe.capture.http_client(out=out)
    client = openai.OpenAI(api_key="k", base_url=fake.url + "/v1", http_client=http, max_retries=0)
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES, extra_headers={"x-fake": "status=429"})
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    offline = openai.OpenAI(api_key="k", base_url=f"http://127.0.0.1:{dead}/v1", http_client=http, max_retries=0)
    with pytest.raises(openai.APIConnectionError):
        offline.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    limited, unreachable = read_trace(out)
    assert limited.error.startswith("HTTP 429")
    assert "ConnectError" in unreachable.error and unreachable.request["model"] == "gpt-4o"


def test_the_hook_works_with_plain_httpx_too(fake, tmp_path):
    import httpx

    out = tmp_path / "trace.jsonl"
    with kvprobe.capture.http_client(out=out, httpx_module=httpx) as client:
        assert isinstance(client, httpx.Client) and not isinstance(client, httpx2.Client)
        reply = client.post(fake.url + "/v1/messages", json={"model": "claude-sonnet-4-5", "max_tokens": 5,
                                                               "messages": MESSAGES})
        assert reply.json()["usage"]["cache_read_input_tokens"] == 2048
    (record,) = read_trace(out)
    assert record.usage["cache_read_input_tokens"] == 2048


def test_the_gemini_sdk_records_through_the_hook(fake, tmp_path):
    out = tmp_path / "trace.jsonl"
    hooked = kvprobe.capture.http_client(out=str(out), httpx_module=httpx)  # google-genai is built on httpx
    client = genai.Client(api_key="AIzaSyHOOKSECRET-0123456789",
                          http_options=types.HttpOptions(base_url=fake.url, httpx_client=hooked))
    client.models.generate_content(model="gemini-2.5-pro", contents="hi")
    assert "".join(c.text for c in client.models.generate_content_stream(model="gemini-2.5-pro", contents="hi")) \
        == "Hello from the local provider."
    hooked.close()
    plain, stream = read_trace(out)
    assert (plain.provider, stream.provider) == ("gemini", "gemini") and stream.extra["stream"] is True
    assert stream.usage["cachedContentTokenCount"] == 2048 and "HOOKSECRET" not in out.read_text()
