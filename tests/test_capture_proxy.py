"""The recording proxy, driven by the official SDKs against a local server speaking the real wire formats."""
from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import threading

import anthropic
import httpx2
import openai
import orjson
import pytest

import kvprobe
from kvprobe.capture import CaptureProxy, ProxyThread, Recorder
from kvprobe.capture.testing import DEFAULT_USAGE
from kvprobe.trace import read_trace

ANTHROPIC_KEY = "sk-ant-api03-TESTKEY-do-not-leak-0123456789abcdef"
OPENAI_KEY = "sk-proj-TESTKEY-do-not-leak-0123456789abcdef"
MESSAGES = [{"role": "user", "content": "Fix the login bug."}]
CUT = (anthropic.APIConnectionError, openai.APIConnectionError, httpx2.RemoteProtocolError)
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the SDKs warn on older model ids


@pytest.fixture
def capture(fake, tmp_path):
    """Start a recording proxy in front of the fake provider; yields a factory taking Recorder options."""
    threads: list[ProxyThread] = []

    def start(timeout: float = 30.0, **options):
        recorder = Recorder(tmp_path / "trace.jsonl", **options)
        proxy = CaptureProxy(recorder, {"anthropic": fake.url, "openai": fake.url + "/v1",
                                        "deepseek": fake.url}, upstream_timeout=timeout)
        thread = ProxyThread(proxy)
        thread.start()
        threads.append(thread)
        return proxy, thread

    yield start
    for thread in threads:
        thread.stop(grace=1.0)


def _records(path):
    return list(read_trace(path))


def _anthropic(proxy, **kw):
    return anthropic.Anthropic(api_key=ANTHROPIC_KEY, base_url=proxy.base_urls()["ANTHROPIC_BASE_URL"],
                               max_retries=0, **kw)


def _openai(proxy, **kw):
    return openai.OpenAI(api_key=OPENAI_KEY, base_url=proxy.base_urls()["OPENAI_BASE_URL"], max_retries=0, **kw)


def test_anthropic_json_and_stream_are_recorded_with_usage_and_timing(capture, tmp_path):
    proxy, thread = capture(session="fix-login")
    client = _anthropic(proxy)
    plain = client.messages.create(model="claude-sonnet-4-5", max_tokens=64, messages=MESSAGES)
    with client.messages.stream(model="claude-sonnet-4-5", max_tokens=64, messages=MESSAGES,
                                extra_headers={"X-Kvprobe-Agent": "planner"}) as stream:
        final = stream.get_final_message()
    thread.stop()
    assert plain.usage.cache_read_input_tokens == 2048
    assert final.content[1].input == {"path": "a.py"}  # the client got the tool call intact
    first, second = _records(tmp_path / "trace.jsonl")
    assert first.request == {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": MESSAGES}
    assert first.provider == "anthropic" and first.endpoint == "/v1/messages"
    assert first.session == "fix-login" and second.agent == "planner"
    assert second.extra["stream"] is True and second.request["stream"] is True
    usage = second.usage
    assert usage["cache_read_input_tokens"] == 2048 and usage["cache_creation_input_tokens"] == 256
    assert usage["output_tokens"] == DEFAULT_USAGE["output_tokens"]  # message_delta's count wins
    assert second.response["content"][0]["text"] == "Hello from the local provider."
    assert second.response["content"][1]["input"] == {"path": "a.py"}
    assert second.response["stop_reason"] == "tool_use"
    assert second.started_at <= second.first_token_at <= second.finished_at


def test_openai_chat_and_responses_streams_are_reassembled(capture, tmp_path):
    proxy, thread = capture()
    client = _openai(proxy)
    chunks = list(client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True,
                                                 stream_options={"include_usage": True}))
    events = [e.type for e in client.responses.create(model="gpt-5", input="hi", stream=True)]
    thread.stop()
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == 2048
    assert events[-1] == "response.completed"
    chat, responses = _records(tmp_path / "trace.jsonl")
    assert chat.endpoint == "/v1/chat/completions" and chat.provider == "openai"
    assert chat.response["choices"][0]["message"]["content"] == "Hello from the local provider."
    assert chat.usage["prompt_tokens_details"]["cached_tokens"] == 2048
    assert responses.endpoint == "/v1/responses"
    assert responses.usage["input_tokens_details"]["cached_tokens"] == 2048


def test_responses_reach_the_client_byte_for_byte(capture, fake):
    proxy, _ = capture()
    body = orjson.dumps({"model": "claude-sonnet-4-5", "max_tokens": 5, "stream": True, "messages": MESSAGES})
    with httpx2.Client() as client:
        direct = client.post(fake.url + "/v1/messages", content=body).content
        proxied = client.post(proxy.base_urls()["ANTHROPIC_BASE_URL"] + "/v1/messages", content=body).content
    assert proxied == direct and b"message_stop" in proxied


def test_streams_are_not_buffered(capture, fake):
    """The upstream holds the rest of the stream until the client has seen the first event."""
    proxy, _ = capture()
    client = _anthropic(proxy)
    with client.messages.create(model="claude-sonnet-4-5", max_tokens=5, messages=MESSAGES, stream=True,
                                extra_headers={"x-fake": "hold-first"}) as stream:
        first = next(iter(stream))
        assert first.type == "message_start"  # arrived while the upstream was still holding the rest
        fake.release()
        rest = [event.type for event in stream]
    assert rest[-1] == "message_stop"


def test_upstream_errors_reach_the_client_unchanged_and_are_recorded(capture, tmp_path):
    proxy, thread = capture()
    with pytest.raises(anthropic.RateLimitError) as info:
        _anthropic(proxy).messages.create(model="claude-sonnet-4-5", max_tokens=5, messages=MESSAGES,
                                          extra_headers={"x-fake": "status=429"})
    with pytest.raises(openai.InternalServerError):
        _openai(proxy).chat.completions.create(model="gpt-4o", messages=MESSAGES,
                                               extra_headers={"x-fake": "status=500"})
    thread.stop()
    assert info.value.body["error"]["type"] == "rate_limit_error"
    limited, failed = _records(tmp_path / "trace.jsonl")
    assert limited.error.startswith("HTTP 429") and "rate_limit_error" in limited.error
    assert limited.extra["http_status"] == 429 and limited.response["error"]["type"] == "rate_limit_error"
    assert failed.error.startswith("HTTP 500")


def test_a_reset_mid_stream_reaches_the_client_and_keeps_the_usage_that_arrived(capture, fake, tmp_path):
    proxy, thread = capture()
    with pytest.raises(CUT):
        with _anthropic(proxy).messages.create(model="claude-sonnet-4-5", max_tokens=5, messages=MESSAGES,
                                               stream=True, extra_headers={"x-fake": "hold-after=4,reset-after=4"}
                                               ) as stream:
            for event in stream:
                if event.type == "content_block_delta":  # the proxy has passed on message_start: reset now
                    fake.release()
    thread.stop()
    (record,) = _records(tmp_path / "trace.jsonl")
    assert "mid-response" in record.error
    assert record.usage["cache_read_input_tokens"] == 2048  # from message_start, before the reset
    assert record.response["content"][0]["text"] == "Hello"


def test_an_upstream_that_stalls_is_cut_after_the_timeout_and_recorded(capture, tmp_path):
    """The upstream sends 3 events, then nothing: the proxy cuts it after its timeout of silence. The cut
    under test is the one after the third event; on a machine too busy to deliver the first three events
    within the timeout (cut before them) the same exchange is tried again with the timeout doubled."""
    for attempt, timeout in enumerate((0.3, 0.6, 1.2, 2.4, 4.8)):
        proxy, thread = capture(timeout=timeout)
        with pytest.raises(CUT):
            list(_openai(proxy).chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True,
                                                        extra_headers={"x-fake": "stall-after=3"}))
        thread.stop()
        records = _records(tmp_path / "trace.jsonl")
        assert len(records) == attempt + 1
        if "mid-response" in records[-1].error and _content(records[-1]) == "Hello from":
            break
    record = records[-1]
    assert f"upstream timed out after {timeout:g}s mid-response" in record.error
    assert record.response["choices"][0]["message"]["content"] == "Hello from"


def _content(record) -> str | None:
    choices = (record.response or {}).get("choices") or [{}]
    return (choices[0].get("message") or {}).get("content")


def test_a_client_that_disconnects_mid_stream_does_not_take_the_proxy_down(capture, fake, tmp_path):
    proxy, thread = capture()
    body = orjson.dumps({"model": "claude-sonnet-4-5", "max_tokens": 5, "stream": True, "messages": MESSAGES})
    with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        sock.sendall(b"POST /anthropic/v1/messages HTTP/1.1\r\nHost: x\r\nx-fake: stall-after=3\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        assert b"200 OK" in sock.recv(4096)
    # the proxy still serves, and the abandoned request is recorded
    after = _anthropic(proxy).messages.create(model="claude-sonnet-4-5", max_tokens=5, messages=MESSAGES)
    assert after.usage.output_tokens == DEFAULT_USAGE["output_tokens"]
    thread.stop()
    records = _records(tmp_path / "trace.jsonl")
    assert len(records) == 2
    # the upstream had begun its answer (the prompt read, its usage sent): a call that reached the model, marked
    # as `serve` marks one, not a failed request (`gate --max-failed-requests 0` passes it)
    gone = next(r for r in records if r.extra.get("client_disconnected"))
    assert gone.error is None and gone.usage["cache_read_input_tokens"] == 2048
    assert all(r.error is None for r in records)


def test_a_client_that_leaves_before_the_usage_arrived_is_no_failed_request(capture, fake, tmp_path):
    """Kilo Code leaves without waiting for its title call: the upstream was streaming the answer (the prompt
    read), but an OpenAI stream sends its usage last, so none arrived. `serve` records such a call as reached
    and marked, not failed; capture did record it failed ("1 of 3 requests failed" in `gate`). Now both mark
    it, and `report` simulates its usage from its body instead of leaving it out."""
    proxy, thread = capture()
    body = orjson.dumps({"model": "gpt-4o", "stream": True, "messages": MESSAGES})
    with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        sock.sendall(b"POST /openai/chat/completions HTTP/1.1\r\nHost: x\r\nx-fake: stall-after=3\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        seen = b""
        while b"data:" not in seen:  # the answer has begun
            seen += sock.recv(4096)
    thread.stop()
    (gone,) = _records(tmp_path / "trace.jsonl")
    assert gone.extra["client_disconnected"] is True and gone.error is None and not gone.usage
    report = kvprobe.analyse([str(tmp_path / "trace.jsonl")]).to_json()
    assert report["failed_requests"] == [] and report["requests"][0]["observed"] is False


def test_stopping_flushes_requests_in_flight(capture, tmp_path):
    proxy, thread = capture()
    failures: list[BaseException] = []

    def call() -> None:
        try:
            list(_openai(proxy).chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True,
                                                        extra_headers={"x-fake": "stall-after=2"}))
        except BaseException as exc:  # the cut reaches the client as an error
            failures.append(exc)

    worker = threading.Thread(target=call)
    worker.start()
    while not (tmp_path / "trace.jsonl").exists() or not proxy._busy:
        pass
    thread.stop(grace=0.2)
    worker.join(timeout=10)
    (record,) = _records(tmp_path / "trace.jsonl")
    assert "interrupted" in record.error and failures


def test_secrets_never_reach_the_trace_and_session_headers_are_not_forwarded(capture, fake, tmp_path):
    proxy, thread = capture()
    _anthropic(proxy).messages.create(model="claude-sonnet-4-5", max_tokens=5, messages=MESSAGES,
                                      extra_headers={"X-Kvprobe-Session": "s9", "anthropic-beta": "x-2026"})
    _openai(proxy).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    thread.stop()
    text = (tmp_path / "trace.jsonl").read_text()
    assert "TESTKEY" not in text and "authorization" not in text.lower() and "x-api-key" not in text
    first, _ = _records(tmp_path / "trace.jsonl")
    assert first.session == "s9" and first.extra["request_headers"]["anthropic-beta"] == "x-2026"
    upstream_headers = fake.requests[0]["headers"]
    sent = upstream_headers.get("x-api-key") or upstream_headers.get("authorization", "")
    assert ANTHROPIC_KEY in sent  # the key still reaches the provider
    assert "x-kvprobe-session" not in upstream_headers


def test_gzip_responses_are_forwarded_compressed_and_recorded_decoded(capture, tmp_path):
    proxy, thread = capture()
    reply = _openai(proxy).chat.completions.create(model="gpt-4o", messages=MESSAGES,
                                                   extra_headers={"x-fake": "gzip"})
    thread.stop()
    assert reply.usage.prompt_tokens == 2316
    (record,) = _records(tmp_path / "trace.jsonl")
    assert record.usage["prompt_tokens"] == 2316 and record.error is None


def test_requests_that_are_not_model_calls_pass_through_unrecorded(capture, tmp_path):
    proxy, thread = capture()
    models = _openai(proxy).models.list()
    thread.stop()
    assert [m.id for m in models] == ["fake-model"]
    assert not (tmp_path / "trace.jsonl").read_text()
    assert proxy.recorder.stats.not_recorded == 1


def test_an_unreachable_upstream_gives_the_client_a_clean_502_and_a_record(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    proxy = CaptureProxy(Recorder(tmp_path / "t.jsonl"), {"anthropic": f"http://127.0.0.1:{dead}"})
    with ProxyThread(proxy):
        with pytest.raises(anthropic.InternalServerError) as info:
            _anthropic(proxy).messages.create(model="claude-sonnet-4-5", max_tokens=5, messages=MESSAGES)
    assert info.value.status_code == 502
    (record,) = _records(tmp_path / "t.jsonl")
    assert "could not connect" in record.error


def test_200_concurrent_streams_lose_and_corrupt_nothing(capture, tmp_path):
    proxy, thread = capture()
    url = proxy.base_urls()["ANTHROPIC_BASE_URL"] + "/v1/messages"

    async def one(client, i):
        body = {"model": "claude-sonnet-4-5", "max_tokens": 5, "stream": True,
                "messages": [{"role": "user", "content": f"request {i} " + "x" * (i * 37)}]}
        async with client.stream("POST", url, json=body, headers={"x-kvprobe-session": f"s{i}"}) as resp:
            return b"".join([chunk async for chunk in resp.aiter_bytes()])

    async def main():
        limits = httpx2.Limits(max_connections=200, max_keepalive_connections=200)
        async with httpx2.AsyncClient(limits=limits, timeout=60) as client:
            return await asyncio.gather(*(one(client, i) for i in range(200)))

    bodies = asyncio.run(main())
    thread.stop()
    assert all(b"message_stop" in b for b in bodies)
    records = _records(tmp_path / "trace.jsonl")  # strict: any corrupted line would raise
    assert len(records) == 200 and len({r.id for r in records}) == 200
    for record in records:
        i = int(record.session[1:])
        assert record.request["messages"][0]["content"] == f"request {i} " + "x" * (i * 37)
        assert record.usage["output_tokens"] == DEFAULT_USAGE["output_tokens"] and record.error is None


def test_deepseek_mount_records_deepseek_requests(capture, tmp_path):
    proxy, thread = capture()
    client = openai.OpenAI(api_key="sk-ds", base_url=proxy.base_urls()["DEEPSEEK_BASE_URL"], max_retries=0)
    client.chat.completions.create(model="deepseek-chat", messages=MESSAGES)
    thread.stop()
    (record,) = _records(tmp_path / "trace.jsonl")
    assert record.provider == "deepseek" and record.endpoint == "/chat/completions"


# --- faults found under load (issue: lose nothing, bill nothing twice) ---

def _post(port: int, body: bytes, fault: str = "") -> bytes:
    """One raw HTTP/1.1 request on its own connection; returns everything received until the close."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"POST /anthropic/v1/messages HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     + (f"x-fake: {fault}\r\n".encode() if fault else b"")
                     + b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        chunks = []
        while True:
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                break
            if not data:
                break
            chunks.append(data)
        return b"".join(chunks)


def test_a_request_the_upstream_may_have_read_is_never_sent_twice(capture, fake, tmp_path):
    proxy, thread = capture()
    client = _anthropic(proxy)
    client.messages.create(model="claude-sonnet-4-5", max_tokens=5, messages=MESSAGES)  # pools a connection
    with pytest.raises(anthropic.InternalServerError) as info:  # reuses it; the upstream reads, then closes
        client.messages.create(model="claude-sonnet-4-5", max_tokens=5, messages=MESSAGES,
                               extra_headers={"x-fake": "close-after-read"})
    thread.stop()
    assert info.value.status_code == 502
    arrived = [r for r in fake.requests if r["headers"].get("x-fake") == "close-after-read"]
    assert len(arrived) == 1  # one billed call upstream, not two
    first, second = _records(tmp_path / "trace.jsonl")
    assert first.error is None and "not resent" in second.error


def test_events_received_before_an_upstream_reset_reach_the_client_and_the_record(capture, fake, tmp_path):
    proxy, thread = capture()
    body = orjson.dumps({"model": "claude-sonnet-4-5", "max_tokens": 5, "stream": True, "messages": MESSAGES})

    def events(port: int, prefix: bytes = b"") -> list[int]:
        with concurrent.futures.ThreadPoolExecutor(20) as pool:
            got = list(pool.map(lambda _: _post(port, body, "reset-after=5"), range(20)))
        return [g.count(b"event: ") for g in got]

    direct = events(fake.port)
    proxied = events(proxy.port)
    thread.stop()
    assert direct == [5] * 20
    assert proxied == direct  # message_start, content_block_start, ping and two deltas, every time
    records = _records(tmp_path / "trace.jsonl")
    assert len(records) == 20
    for record in records:
        assert "mid-response" in record.error
        assert record.usage["cache_read_input_tokens"] == 2048  # from message_start, before the reset
        assert record.response["content"][0]["text"] == "Hello from"


def test_a_response_head_over_64_kb_passes_through(capture, fake, tmp_path):
    proxy, thread = capture()
    direct = httpx2.post(fake.url + "/v1/messages", content=orjson.dumps({"model": "m", "max_tokens": 1}),
                         headers={"x-fake": "big-head=70000"})
    proxied = _anthropic(proxy).messages.with_raw_response.create(
        model="claude-sonnet-4-5", max_tokens=5, messages=MESSAGES, extra_headers={"x-fake": "big-head=70000"})
    thread.stop()
    assert direct.status_code == 200 and proxied.status_code == 200
    assert len(proxied.headers["x-fake-padding"]) == 70000
    (record,) = _records(tmp_path / "trace.jsonl")
    assert record.error is None and record.usage["output_tokens"] == DEFAULT_USAGE["output_tokens"]


def test_malformed_upstream_usage_is_recorded_as_an_error_not_as_usage(capture, tmp_path, cli):
    proxy, thread = capture()
    reply = _anthropic(proxy).messages.create(model="claude-sonnet-4-5", max_tokens=5, messages=MESSAGES,
                                              extra_headers={"x-fake-usage": '{"input_tokens": -5}'})
    thread.stop()
    assert reply.usage.input_tokens == -5  # the client gets the upstream's answer unchanged
    (record,) = _records(tmp_path / "trace.jsonl")  # the trace stays readable (strict reader)
    assert record.usage is None and "response.usage.input_tokens" in record.error
    assert record.extra["upstream_invalid_usage"]["usage"]["input_tokens"] == -5
    gate = cli("gate", tmp_path / "trace.jsonl", "--min-hit-ratio", "0.5")
    assert gate.exit_code == 1 and "FAIL failed_requests: 1 of 1 request failed" in gate.output  # never a pass


def test_error_text_is_scrubbed_of_keys_and_hashed_under_hash_only(fake, tmp_path):
    """An upstream error that echoes the key (a short one, as a header and as key=...)."""
    from kvprobe.capture.recorder import Exchange
    body = orjson.dumps({"type": "error", "error": {"type": "authentication_error",
                                                    "message": "invalid x-api-key: sk-x9q7 (key=abc123)"}})
    for options in ({}, {"redact": True}, {"hash_only": True}):
        out = tmp_path / f"t{len(options)}{'h' if options.get('hash_only') else ''}.jsonl"
        rec = Recorder(out, **options)
        rec.record(Exchange("POST", "/v1/messages", {}, orjson.dumps({"model": "claude-sonnet-4-5",
                            "max_tokens": 5, "messages": MESSAGES}), 1.0, status=401,
                            response_headers={"content-type": "application/json"}, response_body=bytearray(body)))
        rec.close()
        text = out.read_text()
        assert "sk-x9q7" not in text and "abc123" not in text, options
        (record,) = _records(out)
        assert record.error.startswith("HTTP 401")
        if options.get("hash_only"):
            assert "invalid" not in record.error and "authentication_error" not in record.error


def test_an_early_hints_response_is_passed_on_and_the_real_one_recorded(capture, tmp_path):
    """103 Early Hints came to the client as the whole answer (it then timed out) and the record said
    "empty response body", though the upstream answered and billed."""
    proxy, thread = capture()
    reply = _anthropic(proxy, timeout=10).messages.create(model="claude-sonnet-4-5", max_tokens=5, messages=MESSAGES,
                                                          extra_headers={"x-fake": "early-hints"})
    thread.stop()
    assert reply.usage.cache_read_input_tokens == DEFAULT_USAGE["cache_read_input_tokens"]
    (record,) = _records(tmp_path / "trace.jsonl")
    assert record.error is None and record.extra["http_status"] == 200
    assert record.usage["cache_read_input_tokens"] == DEFAULT_USAGE["cache_read_input_tokens"]


def test_a_close_delimited_http10_body_ends_the_client_connection_too(capture, tmp_path):
    """An HTTP/1.0 answer without a length ends when the upstream closes; the client can only know the same
    way, and waited for ever while the proxy kept its connection open."""
    proxy, thread = capture()
    client = _anthropic(proxy, timeout=10)
    first = client.messages.create(model="claude-sonnet-4-5", max_tokens=5, messages=MESSAGES,
                                   extra_headers={"x-fake": "http10"})
    second = client.messages.create(model="claude-sonnet-4-5", max_tokens=5, messages=MESSAGES)  # a new connection
    thread.stop()
    assert first.content[0].text == second.content[0].text == "Hello from the local provider."
    records = _records(tmp_path / "trace.jsonl")
    assert len(records) == 2 and all(r.error is None for r in records)
    assert records[0].usage["output_tokens"] == DEFAULT_USAGE["output_tokens"]


def test_conflicting_content_lengths_are_refused(capture, fake, tmp_path):
    proxy, thread = capture()
    with pytest.raises(anthropic.InternalServerError) as bad:  # 502 from the proxy, shaped like an API error
        _anthropic(proxy, timeout=10).messages.create(model="claude-sonnet-4-5", max_tokens=5, messages=MESSAGES,
                                                      extra_headers={"x-fake": "double-length"})
    assert bad.value.status_code == 502
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:  # a client's request too
        body = orjson.dumps({"model": "claude-sonnet-4-5", "max_tokens": 5, "messages": MESSAGES})
        sock.sendall(b"POST /anthropic/v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\nContent-Length: 3\r\n\r\n%s" % (len(body), body))
        answer = sock.recv(65536)
    thread.stop()
    assert answer.startswith(b"HTTP/1.1 400") and b"conflicting Content-Length" in answer
    (record,) = _records(tmp_path / "trace.jsonl")
    assert "conflicting Content-Length headers" in record.error and record.usage is None
    assert len(fake.requests) == 1  # the client's ambiguous request never went upstream
