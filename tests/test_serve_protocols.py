"""What real agent CLIs send, served: the Responses API through the openai SDK (`client.responses.create`),
Gemini's generateContent / streamGenerateContent?alt=sse / countTokens over real HTTP (httpx: the wire format
Gemini CLI's SDK speaks), Anthropic mid-conversation system messages and a Claude Code-shaped 50 KB body,
structured outputs, and the request records `report` reads back with the right provider and endpoint."""
from __future__ import annotations

import json

import anthropic
import httpx
import openai
import pytest

from kvprobe.serve import start_server

CLAUDE = "claude-opus-5-5"
GEMINI = "gemini-3.1-pro-preview"
LONG = "You are a careful coding agent. Read the files before you edit them. " * 9  # ~620 byte tokens


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    return tmp_path_factory.mktemp("served") / "served.jsonl"


@pytest.fixture(scope="module")
def server(trace):
    with start_server(model="tiny-random", cache="engine", device="cpu", num_blocks=2048, max_output_tokens=8,
                      trace=trace) as handle:
        yield handle


@pytest.fixture(scope="module")
def gpt(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0)


@pytest.fixture(scope="module")
def claude(server):
    return anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0)


def _records(trace) -> list[dict]:
    return [json.loads(line) for line in trace.read_text().splitlines()]


# -- the Responses API ------------------------------------------------------------------------------------

def test_responses_report_cached_tokens_the_second_time(gpt):
    first = gpt.responses.create(model="gpt-5", instructions=LONG, input="Fix the login bug.", store=False,
                                 prompt_cache_key="k1", include=["reasoning.encrypted_content"])
    again = gpt.responses.create(model="gpt-5", instructions=LONG, input="Fix the login bug.", store=False,
                                 prompt_cache_key="k1")
    assert first.object == "response" and first.status == "completed" and first.output[0].type == "message"
    assert first.usage.input_tokens_details.cached_tokens == 0
    total = again.usage.input_tokens
    assert again.usage.input_tokens_details.cached_tokens == (total - 1) // 16 * 16  # the engine's blocks
    assert again.usage.output_tokens_details.reasoning_tokens == 0
    assert again.usage.total_tokens == total + again.usage.output_tokens


def test_responses_stream_the_api_event_sequence(gpt):
    with gpt.responses.stream(model="gpt-5", input=[
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": LONG}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello"}]},
            {"type": "function_call", "call_id": "call_1", "name": "ls", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "a.txt"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"}]) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert set(kinds[4:-4]) <= {"response.output_text.delta"}
    assert final.output_text == final.output[0].content[0].text and final.usage.input_tokens > 600


def test_previous_response_id_puts_the_stored_conversation_first(gpt):
    first = gpt.responses.create(model="gpt-5", input=LONG + " Remember the number 7.")
    second = gpt.responses.create(model="gpt-5", input="Which number?", previous_response_id=first.id)
    assert second.previous_response_id == first.id
    assert second.usage.input_tokens > first.usage.input_tokens
    assert second.usage.input_tokens_details.cached_tokens >= 600  # the first request's prompt, reused
    assert gpt.responses.retrieve(first.id).id == first.id
    with pytest.raises(openai.BadRequestError) as info:
        gpt.responses.create(model="gpt-5", input="x", previous_response_id="resp_nope")
    assert info.value.body["param"] == "previous_response_id"
    assert "resp_nope" in info.value.body["message"]


# -- Gemini -------------------------------------------------------------------------------------------------

def _gemini(server, method: str, body: dict, model: str = GEMINI, query: str = "") -> httpx.Response:
    return httpx.post(f"{server.base_url}/v1beta/models/{model}:{method}{query}", json=body, timeout=60,
                      headers={"x-goog-api-key": "x"})


GEMINI_BODY = {"systemInstruction": {"parts": [{"text": LONG}]},
               "contents": [{"role": "user", "parts": [{"text": "Fix the login bug."}]}],
               "tools": [{"functionDeclarations": [{"name": "ls", "description": "List files",
                                                    "parametersJsonSchema": {"type": "object"}}]}],
               "generationConfig": {"temperature": 1, "topP": 0.95, "thinkingConfig": {"includeThoughts": True}}}


def test_gemini_generate_content_and_count_tokens(server):
    counted = _gemini(server, "countTokens", {"contents": GEMINI_BODY["contents"]}).json()["totalTokens"]
    first = _gemini(server, "generateContent", GEMINI_BODY).json()
    again = _gemini(server, "generateContent", GEMINI_BODY).json()
    usage = again["usageMetadata"]
    assert first["candidates"][0]["content"]["role"] == "model" and first["modelVersion"] == GEMINI
    assert "cachedContentTokenCount" not in first["usageMetadata"]  # the API leaves zero counts out
    assert usage["cachedContentTokenCount"] == (usage["promptTokenCount"] - 1) // 16 * 16
    assert usage["totalTokenCount"] == usage["promptTokenCount"] + usage["candidatesTokenCount"]
    assert 0 < counted < usage["promptTokenCount"]  # the contents alone: no system instruction, no tools


def test_gemini_stream_is_server_sent_events_ending_with_usage(server):
    raw = _gemini(server, "streamGenerateContent", GEMINI_BODY, query="?alt=sse").text
    chunks = [json.loads(line[6:]) for line in raw.split("\r\n\r\n") if line.startswith("data: ")]
    assert chunks and all(c["candidates"][0]["content"]["role"] == "model" for c in chunks)
    assert chunks[-1]["candidates"][0]["finishReason"] in ("STOP", "MAX_TOKENS")
    assert chunks[-1]["usageMetadata"]["promptTokenCount"] > 600
    text = "".join(p.get("text", "") for c in chunks for p in c["candidates"][0]["content"]["parts"])
    assert text == _gemini(server, "generateContent", GEMINI_BODY).json()["candidates"][0]["content"]["parts"][0][
        "text"] or text  # (sampled at temperature 1: only that some text came)
    array = _gemini(server, "streamGenerateContent", GEMINI_BODY).json()  # no alt=sse: a JSON array
    assert isinstance(array, list) and array[-1]["usageMetadata"]["promptTokenCount"] > 600


def test_gemini_errors_are_google_shaped(server):
    missing = _gemini(server, "generateContent", GEMINI_BODY, model="nosuch-model")
    assert missing.status_code == 404 and missing.json()["error"]["status"] == "NOT_FOUND"
    bad = _gemini(server, "generateContent", {"contents": []})
    assert bad.status_code == 400 and bad.json()["error"]["status"] == "INVALID_ARGUMENT"


def test_a_json_schema_request_gets_json_of_that_schema(server):
    body = {"contents": [{"role": "user", "parts": [{"text": "Score this task."}]}],
            "generationConfig": {"responseMimeType": "application/json", "responseJsonSchema": {
                "type": "OBJECT", "properties": {"complexity_reasoning": {"type": "STRING"},
                                                 "complexity_score": {"type": "INTEGER", "minimum": 1}},
                "required": ["complexity_reasoning", "complexity_score"]}}}
    reply = _gemini(server, "generateContent", body, model="gemini-3.5-flash-lite").json()
    answer = json.loads(reply["candidates"][0]["content"]["parts"][0]["text"])
    assert set(answer) == {"complexity_reasoning", "complexity_score"}
    if reply["kvprobe"]["answer"] == "schema":  # the tiny model wrote no JSON: the schema's smallest instance
        assert answer == {"complexity_reasoning": "", "complexity_score": 1}


# -- Anthropic: what Claude Code sends --------------------------------------------------------------------

def test_mid_conversation_system_messages_follow_a_user_message(claude):
    ok = claude.messages.create(model=CLAUDE, max_tokens=4, system=LONG, messages=[
        {"role": "user", "content": "hi"}, {"role": "system", "content": [{"type": "text", "text": "Be terse."}],
                                            "clear_at": "next_user_message"}])
    assert ok.usage.output_tokens <= 4
    with pytest.raises(anthropic.BadRequestError, match="cannot be the first message"):
        claude.messages.create(model=CLAUDE, max_tokens=4, messages=[{"role": "system", "content": "x"},
                                                                     {"role": "user", "content": "hi"}])
    with pytest.raises(anthropic.BadRequestError, match="must follow a user message"):
        claude.messages.create(model=CLAUDE, max_tokens=4, messages=[
            {"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"},
            {"role": "system", "content": "x"}])
    with pytest.raises(anthropic.BadRequestError, match=r"messages\.1\.clear_at"):
        claude.messages.create(model=CLAUDE, max_tokens=4, messages=[
            {"role": "user", "content": "hi"}, {"role": "system", "content": "x", "clear_at": "later"}])


def claude_code_body(tool_bytes: int = 48_000) -> dict:
    """Shaped like Claude Code 2.1's first request (its fields, betas' fields, sizes), built here by hand."""
    tool = {"name": "Bash", "description": "Run a shell command. " * (tool_bytes // 21),
            "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}
    return {"model": CLAUDE, "max_tokens": 64000, "stream": True,
            "system": [{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332;"},
                       {"type": "text", "text": "You are a Claude agent.", "cache_control": {"type": "ephemeral"}}],
            "tools": [tool, {"name": "Later", "description": "d", "input_schema": {"type": "object"},
                             "defer_loading": True}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "<system-reminder>ctx</system-reminder>"},
                                                      {"type": "text", "text": "say hi",
                                                       "cache_control": {"type": "ephemeral"}}]},
                         {"role": "system", "content": [{"type": "text", "text": "# Environment\n - cwd: /w"}]}],
            "metadata": {"user_id": json.dumps({"device_id": "d", "session_id": "s"})},
            "thinking": {"type": "adaptive", "display": "omitted"},
            "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
            "output_config": {"effort": "medium"}}


def test_a_claude_code_sized_request_is_answered_with_provider_usage(server):
    body = claude_code_body()
    assert len(json.dumps(body)) > 45_000
    headers = {"anthropic-version": "2023-06-01", "x-api-key": "x", "x-claude-code-session-id": "cc-1",
               "user-agent": "claude-cli/2.1.332 (external, sdk-cli)",
               "anthropic-beta": "claude-code-20250219,mid-conversation-tool-changes-2026-07-01"}
    with httpx.stream("POST", server.base_url + "/v1/messages?beta=true", json=body, headers=headers,
                      timeout=120) as reply:
        assert reply.status_code == 200
        events = [line[7:] for line in reply.iter_lines() if line.startswith("event: ")]
    assert events[0] == "message_start" and events[-2:] == ["message_delta", "message_stop"]


def test_served_requests_are_recorded_for_report_with_provider_and_endpoint(server, trace, cli):
    by_endpoint = {}
    for record in _records(trace):
        by_endpoint.setdefault(record["endpoint"].split("?")[0], record)
    assert by_endpoint["/v1/responses"]["provider"] == "openai"
    gemini = next(r for e, r in by_endpoint.items() if e.endswith(":generateContent"))
    assert gemini["provider"] == "gemini" and "usageMetadata" in gemini["response"]
    claude_code = next(r for r in _records(trace) if r.get("session") == "cc-1")
    assert claude_code["agent"] == "claude-cli" and claude_code["provider"] == "anthropic"
    assert claude_code["response"]["kvprobe"]["max_tokens"] == {
        "requested": 64000, "served": 8, "cut_at_served_limit": claude_code["response"]["kvprobe"]["max_tokens"][
            "cut_at_served_limit"], "reason": "the local engine writes at most 8 tokens a reply (--max-output-tokens)"}
    result = cli("report", trace, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    ids = {r["id"] for r in report["requests"]}
    assert {r["id"] for r in _records(trace)} == ids  # every served request is read back, none failed
