"""capture's mounts: Gemini, Vertex AI and Bedrock through the proxy with the real SDKs, the base-URL variables a
child command gets, and a request that names no mount reaching no upstream at all."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap

import anthropic
import google.oauth2.credentials
import httpx2
import pytest
from google import genai
from google.genai import types

from conftest import ROOT
from kvprobe.capture import CaptureProxy, ProxyThread, Recorder
from kvprobe.capture.mounts import child_env, mount_of_host, vertex_host
from kvprobe.capture.testing import FakeProvider
from kvprobe.trace import read_trace

GEMINI_KEY = "AIzaSyTESTKEY-do-not-leak-0123456789ab"
VERTEX_TOKEN = "ya29.TESTTOKEN-do-not-leak-0123456789"
BEDROCK_KEY = "ABSKQmVkcm9ja0FQSUtleS1TESTKEY0123456789"
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture
def upstreams():
    """Two local providers: `main` stands in for every mount, `other` for OpenAI only (it must stay silent)."""
    main, other = FakeProvider(), FakeProvider()
    main.start(), other.start()
    yield main, other
    main.stop(), other.stop()


@pytest.fixture
def proxy(upstreams, tmp_path):
    main, other = upstreams
    proxy = CaptureProxy(Recorder(tmp_path / "trace.jsonl"),
                         {"anthropic": main.url, "openai": other.url + "/v1", "deepseek": main.url,
                          "gemini": main.url, "vertex": main.url, "bedrock": main.url})
    proxy.thread = ProxyThread(proxy)
    proxy.thread.start()
    yield proxy
    proxy.thread.stop(grace=1.0)


def _gemini(proxy) -> genai.Client:
    return genai.Client(api_key=GEMINI_KEY, http_options=types.HttpOptions(
        base_url=proxy.base_urls()["GOOGLE_GEMINI_BASE_URL"]))


def _stop(proxy) -> list:
    """Stop the proxy (every record is written by then) and read the trace."""
    proxy.thread.stop(grace=1.0)
    return list(read_trace(proxy.recorder.path))


def test_gemini_sdk_calls_are_recorded_as_gemini_and_report_reads_them(proxy, upstreams, tmp_path, cli):
    main, other = upstreams
    client = _gemini(proxy)
    reply = client.models.generate_content(model="gemini-2.5-pro", contents="Fix the login bug.")
    streamed = "".join(c.text for c in client.models.generate_content_stream(model="gemini-2.5-flash",
                                                                           contents="And the logout bug."))
    assert client.models.count_tokens(model="gemini-2.5-pro", contents="hi").total_tokens == 42
    records = _stop(proxy)
    assert reply.usage_metadata.cached_content_token_count == 2048
    assert streamed == "Hello from the local provider."
    assert [r.provider for r in records] == ["gemini", "gemini"]  # countTokens: forwarded, not recorded
    plain, stream = records
    assert plain.endpoint.endswith("/models/gemini-2.5-pro:generateContent")
    assert stream.endpoint.endswith("/models/gemini-2.5-flash:streamGenerateContent") and stream.extra["stream"]
    assert stream.response["candidates"][0]["content"]["parts"][-1]["text"] == "."
    # the final chunk's usage (its output count) wins over the earlier chunks' running ones
    assert stream.usage == {"promptTokenCount": 2316, "cachedContentTokenCount": 2048, "candidatesTokenCount": 9,
                            "totalTokenCount": 2325, "promptTokensDetails": [{"modality": "TEXT",
                                                                               "tokenCount": 2316}]}
    assert GEMINI_KEY not in (tmp_path / "trace.jsonl").read_text()
    assert any(GEMINI_KEY == r["headers"].get("x-goog-api-key") for r in main.requests)  # it still reached Google
    assert other.requests == []
    result = cli("report", tmp_path / "trace.jsonl", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["requests"]
    assert [(r["provider"], r["model"], r["input_tokens"], r["cache_read_tokens"]) for r in rows] == [
        ("gemini", "gemini-2.5-pro", 2316, 2048), ("gemini", "gemini-2.5-flash", 2316, 2048)]


def test_a_key_in_the_query_is_forwarded_but_never_written(proxy, upstreams, tmp_path):
    main, _ = upstreams
    url = f"{proxy.url}/gemini/v1beta/models/gemini-2.5-pro:generateContent?key={GEMINI_KEY}"
    reply = httpx2.post(url, json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})
    records = _stop(proxy)
    assert reply.status_code == 200
    assert main.requests[-1]["target"].endswith(f"?key={GEMINI_KEY}")
    assert records[0].endpoint == "/v1beta/models/gemini-2.5-pro:generateContent"
    assert GEMINI_KEY not in (tmp_path / "trace.jsonl").read_text()


def test_a_request_outside_every_mount_reaches_no_upstream(proxy, upstreams, tmp_path):
    """Before: a Gemini request at the proxy's root went, key and prompt included, to the OpenAI upstream."""
    main, other = upstreams
    body = {"contents": [{"role": "user", "parts": [{"text": "secret prompt"}]}]}
    for path in ("/v1beta/models/gemini-2.5-pro:generateContent", "/v1/chat/completions", "/v1/messages"):
        reply = httpx2.post(proxy.url + path, json=body, headers={"x-goog-api-key": GEMINI_KEY})
        assert reply.status_code == 502
        message = reply.json()["error"]["message"]
        assert "outside every mount" in message and f"{proxy.url}/gemini" in message and GEMINI_KEY not in message
    records = _stop(proxy)
    assert main.requests == [] and other.requests == []
    assert records == [] and proxy.unrouted["/v1/messages"] == 1


def test_an_anthropic_path_without_its_version_reaches_the_api_under_it(proxy, upstreams, tmp_path):
    """OpenCode and Kilo Code (the AI SDK's @ai-sdk/anthropic) take ANTHROPIC_BASE_URL to end in /v1 and post to
    `${base}/messages`; through capture that was /messages upstream, a 404 from the API and from serve alike.
    Both forms reach /v1/messages, and the record names it."""
    main, _ = upstreams
    body = {"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    base = proxy.base_urls()["ANTHROPIC_BASE_URL"]
    for url in (base + "/messages", base + "/v1/messages"):  # the AI SDK's form, then the Anthropic SDKs'
        assert httpx2.post(url, json=body, headers={"x-api-key": "sk-ant-test"}).status_code == 200
    client = anthropic.Anthropic(api_key="sk-ant-test", base_url=base)
    client.messages.create(**body)
    records = _stop(proxy)
    assert [r["path"] for r in main.requests] == ["/v1/messages"] * 3
    assert [r.endpoint for r in records] == ["/v1/messages"] * 3


def test_a_gemini_request_never_reaches_the_openai_upstream(proxy, upstreams):
    main, other = upstreams
    client = _gemini(proxy)  # held: the SDK closes its connection pool when the client is collected
    client.models.generate_content(model="gemini-2.5-pro", contents="hi")
    _stop(proxy)
    (sent,) = main.requests
    assert sent["path"].endswith("/models/gemini-2.5-pro:generateContent") and other.requests == []


def test_vertex_gemini_and_claude_are_recorded_with_the_vertex_platform(proxy, tmp_path):
    env = proxy.base_urls()
    creds = google.oauth2.credentials.Credentials(VERTEX_TOKEN)
    gem = genai.Client(vertexai=True, project="proj", location="us-central1", credentials=creds,
                       http_options=types.HttpOptions(base_url=env["GOOGLE_VERTEX_BASE_URL"]))
    gem.models.generate_content(model="gemini-2.5-pro", contents="hi")
    claude = anthropic.AnthropicVertex(region="us-east5", project_id="proj", access_token=VERTEX_TOKEN,
                                       base_url=env["ANTHROPIC_VERTEX_BASE_URL"], max_retries=0)
    with claude.messages.stream(model="claude-sonnet-4-5@20250929", max_tokens=5,
                                messages=[{"role": "user", "content": "hi"}]) as stream:
        stream.get_final_message()
    records = _stop(proxy)
    assert [(r.provider, r.extra["platform"]) for r in records] == [("gemini", "vertex"), ("anthropic", "vertex")]
    assert "/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict" \
        in records[1].endpoint
    assert records[1].usage["cache_read_input_tokens"] == 2048
    assert VERTEX_TOKEN not in (tmp_path / "trace.jsonl").read_text()


def test_bedrock_invoke_and_its_event_stream_are_recorded(proxy, tmp_path, cli):
    env = proxy.base_urls({"AWS_BEARER_TOKEN_BEDROCK": BEDROCK_KEY})
    client = anthropic.AnthropicBedrock(aws_region="us-east-1", api_key=BEDROCK_KEY, max_retries=0,
                                        base_url=env["ANTHROPIC_BEDROCK_BASE_URL"])
    model = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
    client.messages.create(model=model, max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    # the SDK needs botocore to read the stream; the wire is the same from any client
    streamed = httpx2.post(f"{env['ANTHROPIC_BEDROCK_BASE_URL']}/model/{model.replace(':', '%3A')}"
                           "/invoke-with-response-stream", headers={"authorization": f"Bearer {BEDROCK_KEY}"},
                           json={"anthropic_version": "bedrock-2023-05-31", "max_tokens": 5,
                                 "messages": [{"role": "user", "content": "hi"}]})
    records = _stop(proxy)
    assert streamed.status_code == 200
    assert [(r.provider, r.extra["platform"]) for r in records] == [("anthropic", "bedrock")] * 2
    invoke, stream = records
    assert invoke.endpoint == "/model/us.anthropic.claude-sonnet-4-5-20250929-v1:0/invoke"
    assert stream.response["content"][0]["text"] == "Hello from the local provider."
    assert (stream.usage["cache_read_input_tokens"], stream.usage["output_tokens"]) == (2048, 9)
    assert BEDROCK_KEY not in (tmp_path / "trace.jsonl").read_text()
    rows = json.loads(cli("report", tmp_path / "trace.jsonl", "--json").output)["requests"]
    assert [(r["model"], r["platform"]) for r in rows] == [(model, "bedrock")] * 2


def test_vertex_requests_go_to_the_host_of_their_location():
    assert vertex_host("/v1/projects/p/locations/us-east5/publishers/anthropic/models/m:rawPredict") \
        == "us-east5-aiplatform.googleapis.com"
    assert vertex_host("/v1/projects/p/locations/global/publishers/google/models/m:generateContent") \
        == "aiplatform.googleapis.com"
    assert vertex_host("/v1/projects/p/locations/eu/publishers/anthropic/models/m:rawPredict") \
        == "aiplatform.eu.rep.googleapis.com"
    assert vertex_host("/v1beta1/publishers/google/models/m:generateContent") == "aiplatform.googleapis.com"


def test_bedrock_variables_are_set_only_when_a_request_is_not_signed():
    signed = child_env("http://127.0.0.1:9", {"AWS_ACCESS_KEY_ID": "AKIA0000"})
    bearer = child_env("http://127.0.0.1:9", {"AWS_BEARER_TOKEN_BEDROCK": "x"})
    assert "ANTHROPIC_BEDROCK_BASE_URL" not in signed and "AWS_ENDPOINT_URL_BEDROCK_RUNTIME" not in signed
    assert bearer["ANTHROPIC_BEDROCK_BASE_URL"] == "http://127.0.0.1:9/bedrock"
    assert signed["ANTHROPIC_VERTEX_BASE_URL"] == "http://127.0.0.1:9/vertex/v1"
    assert signed["GOOGLE_GEMINI_BASE_URL"] == "http://127.0.0.1:9/gemini"


CHILD = textwrap.dedent("""
    import json, os, sys, warnings
    warnings.simplefilter("ignore")
    from google import genai
    client = genai.Client(api_key="AIzaSyCHILDSECRET-0123456789")  # the base URL comes from the environment
    client.models.generate_content(model="gemini-2.5-flash-lite", contents="route this")
    names = ["GOOGLE_GEMINI_BASE_URL", "GOOGLE_VERTEX_BASE_URL", "ANTHROPIC_BASE_URL", "OPENAI_BASE_URL",
             "OPENAI_API_BASE", "DEEPSEEK_BASE_URL", "ANTHROPIC_VERTEX_BASE_URL", "KVPROBE_CAPTURE_URL"]
    json.dump({n: os.environ.get(n) for n in names}, open(sys.argv[1], "w"))
""")


def test_capture_points_a_child_gemini_client_at_the_gemini_mount(upstreams, tmp_path):
    main, other = upstreams
    script, seen, out = tmp_path / "agent.py", tmp_path / "env.json", tmp_path / "trace.jsonl"
    script.write_text(CHILD)
    done = subprocess.run([sys.executable, "-m", "kvprobe", "capture", "-o", str(out), "--json",
                           "--gemini-upstream", main.url, "--openai-upstream", other.url + "/v1", "--",
                           sys.executable, str(script), str(seen)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    env = json.loads(seen.read_text())
    base = env["KVPROBE_CAPTURE_URL"]
    assert base.startswith("http://127.0.0.1:")
    assert env["GOOGLE_GEMINI_BASE_URL"] == base + "/gemini" and env["OPENAI_API_BASE"] == base + "/openai"
    assert env["ANTHROPIC_VERTEX_BASE_URL"] == base + "/vertex/v1"
    (record,) = read_trace(out)
    assert record.provider == "gemini" and record.request["contents"][0]["parts"][0]["text"] == "route this"
    assert other.requests == [] and "CHILDSECRET" not in out.read_text()


def test_capture_serve_prints_every_mount_variable(upstreams, tmp_path):
    main, _ = upstreams
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "kvprobe", "capture", "serve", "--port", str(port), "-o",
                             str(tmp_path / "t.jsonl"), "--json", "--gemini-upstream", main.url],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        ready = json.loads(proc.stdout.readline())
        proc.terminate()
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert ready["env"]["GOOGLE_GEMINI_BASE_URL"] == f"http://127.0.0.1:{port}/gemini"
    assert ready["env"]["GOOGLE_VERTEX_BASE_URL"] == f"http://127.0.0.1:{port}/vertex"


def test_the_in_process_hook_knows_each_public_host():
    hosts = {"api.anthropic.com": "anthropic", "generativelanguage.googleapis.com": "gemini",
             "us-east5-aiplatform.googleapis.com": "vertex", "aiplatform.eu.rep.googleapis.com": "vertex",
             "bedrock-runtime.eu-west-1.amazonaws.com": "bedrock", "api.anthropic.com.example.net": None,
             "127.0.0.1": None}
    assert {h: mount_of_host(h) for h in hosts} == hosts


def test_one_upstream_for_every_mount_and_gateways_from_the_environment():
    from kvprobe.capture.runner import default_upstreams
    from kvprobe.errors import InputError

    chosen = default_upstreams({"gemini": "http://127.0.0.1:9/g"}, env={}, everything="http://127.0.0.1:8089/")
    assert chosen == {"anthropic": "http://127.0.0.1:8089", "openai": "http://127.0.0.1:8089/v1",
                      "deepseek": "http://127.0.0.1:8089/v1", "gemini": "http://127.0.0.1:9/g",
                      "vertex": "http://127.0.0.1:8089", "bedrock": "http://127.0.0.1:8089"}
    gateway = default_upstreams({}, env={"ANTHROPIC_VERTEX_BASE_URL": "https://gw.example/v1",
                                         "AWS_REGION": "eu-west-3"})
    assert gateway["vertex"] == "https://gw.example" and gateway["bedrock"] == \
        "https://bedrock-runtime.eu-west-3.amazonaws.com" and gateway["anthropic"] == "https://api.anthropic.com"
    with pytest.raises(InputError) as bad:
        default_upstreams({}, env={"GOOGLE_GEMINI_BASE_URL": "ftp://gw"})
    assert bad.value.field == "GOOGLE_GEMINI_BASE_URL"
