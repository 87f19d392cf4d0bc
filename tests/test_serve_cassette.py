"""`serve --responses-from TRACE`: recorded answers (tool calls included) come back in each API's shape, matched
by conversation within (API, model) lanes; usage is the request's own; divergence is said and counted. The
cassette is written here by hand, as `capture` records real providers' answers."""
from __future__ import annotations

import json

import anthropic
import httpx
import openai
import pytest

from kvprobe.serve import start_server

CLAUDE = "claude-opus-5-5"
TOOLS = [{"name": "ls", "description": "List files", "input_schema": {"type": "object"}}]
USER = {"role": "user", "content": "List the files."}
TURN1 = [{"type": "text", "text": "I'll look."},
         {"type": "tool_use", "id": "toolu_01", "name": "ls", "input": {"path": "."}}]


def _record(rid, endpoint, provider, request, response, **extra):
    return {"kvprobe": 1, "id": rid, "provider": provider, "endpoint": endpoint,
            "started_at": "2026-12-01T10:00:00Z", "request": request, "response": response, **extra}


def _anthropic(rid, messages, content, stop, output_tokens):
    request = {"model": CLAUDE, "max_tokens": 1024, "tools": TOOLS, "messages": messages}
    return _record(rid, "/v1/messages", "anthropic", request, {
        "id": f"msg_{rid}", "type": "message", "role": "assistant", "model": CLAUDE, "content": content,
        "stop_reason": stop, "stop_sequence": None,
        "usage": {"input_tokens": 900, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0,
                  "output_tokens": output_tokens}})


def _turn2(result: str) -> list[dict]:
    return [USER, {"role": "assistant", "content": TURN1},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": result}]}]


CASSETTE = [
    _anthropic("r1", [USER], TURN1, "tool_use", 17),
    _anthropic("r2", _turn2("a.txt"), [{"type": "text", "text": "There is a.txt."}], "end_turn", 6),
    _record("r3", "/v1/responses", "openai", {"model": "gpt-5", "input": "hi"}, {
        "id": "resp_r3", "object": "response", "status": "completed", "model": "gpt-5",
        "error": None, "incomplete_details": None,  # as the Responses API sends them (Codex's cassette was refused)
        "output": [{"id": "fc_1", "type": "function_call", "status": "completed", "call_id": "call_1",
                    "name": "ls", "arguments": "{\"path\":\".\"}"}],
        "usage": {"input_tokens": 10, "output_tokens": 12, "output_tokens_details": {"reasoning_tokens": 4}}}),
    _record("r4", "/v1beta/models/gemini-3.1-pro-preview:streamGenerateContent?alt=sse", "gemini",
            {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
            {"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {"name": "ls", "args": {}}}]},
                             "finishReason": "STOP"}],
             "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 5, "thoughtsTokenCount": 2}}),
    _record("r5", "/v1/messages", "anthropic", {"model": CLAUDE, "max_tokens": 5, "messages": [USER]}, None,
            error="overloaded_error: Overloaded"),
]


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cassette")
    cassette = folder / "recorded.jsonl"
    cassette.write_text("".join(json.dumps(r) + "\n" for r in CASSETTE))
    return cassette, folder / "served.jsonl"


@pytest.fixture(scope="module")
def server(paths):
    cassette, served = paths
    with start_server(model="tiny-random", cache="engine", device="cpu", num_blocks=1024, max_output_tokens=8,
                      responses_from=cassette, trace=served) as handle:
        yield handle


@pytest.fixture(scope="module")
def claude(server):
    return anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0)


def test_a_recorded_tool_call_comes_back_streamed_with_this_requests_usage(claude):
    changed_tools = [{**TOOLS[0], "description": "List the files of a folder"}]  # what a CI change does
    with claude.messages.stream(model=CLAUDE, max_tokens=1024, tools=changed_tools, messages=[USER]) as stream:
        reply = stream.get_final_message()
    assert [b.type for b in reply.content] == ["text", "tool_use"]
    assert reply.content[1].id == "toolu_01" and reply.content[1].input == {"path": "."}
    assert reply.stop_reason == "tool_use" and reply.usage.output_tokens == 17  # the recorded answer's bill
    assert reply.usage.input_tokens != 900  # ... but this request's own prompt, counted by the engine


def test_a_diverged_turn_gets_its_recorded_answer_and_says_where(claude):
    reply = claude.messages.create(model=CLAUDE, max_tokens=1024, tools=TOOLS, messages=_turn2("b.txt"))
    assert reply.content[0].text == "There is a.txt."
    said = reply.model_extra["kvprobe"]["cassette"]
    assert (said["match"], said["record"], said["diverged_at"]) == ("diverged", "r2", "messages[2].content[0]")


def test_past_the_recording_the_engine_answers(claude):
    reply = claude.messages.create(model=CLAUDE, max_tokens=4, tools=TOOLS,
                                   messages=[*_turn2("b.txt"), {"role": "assistant", "content": "ok"},
                                             {"role": "user", "content": "and now?"}])
    assert reply.model_extra["kvprobe"]["cassette"]["match"] == "unmatched"
    assert reply.model_extra["kvprobe"]["answer"] == "model" and reply.usage.output_tokens <= 4


def test_responses_and_gemini_function_calls_replay_in_their_shapes(server):
    gpt = openai.OpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0)
    with gpt.responses.stream(model="gpt-5", input="hi") as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_response()
    call = final.output[0]
    assert (call.type, call.name, call.call_id, call.arguments) == ("function_call", "ls", "call_1", '{"path":"."}')
    assert "response.function_call_arguments.delta" in kinds and kinds[-1] == "response.completed"
    assert final.usage.output_tokens == 12 and final.usage.output_tokens_details.reasoning_tokens == 4
    raw = httpx.post(server.base_url + "/v1beta/models/gemini-3.1-pro-preview:streamGenerateContent?alt=sse",
                     json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}, timeout=60).text
    last = json.loads([line for line in raw.split("\r\n\r\n") if line.startswith("data: ")][-1][6:])
    assert last["candidates"][0]["content"]["parts"] == [{"functionCall": {"name": "ls", "args": {}}}]
    assert last["usageMetadata"]["candidatesTokenCount"] == 5 and last["usageMetadata"]["thoughtsTokenCount"] == 2


def test_matches_are_counted_and_kept_in_the_served_trace(server, paths):
    health = httpx.get(server.base_url + "/health", timeout=10).json()["cassette"]
    assert (health["records"], health["skipped"]) == (4, 1)  # r5 failed: never served
    assert (health["exact"], health["diverged"], health["unmatched"]) == (3, 1, 1)
    served = [json.loads(line) for line in paths[1].read_text().splitlines()]
    assert [r["response"]["kvprobe"]["cassette"]["match"] for r in served] == [
        "exact", "diverged", "unmatched", "exact", "exact"]
    assert served[0]["response"]["kvprobe"]["cassette"] == {"match": "exact", "lane": f"anthropic {CLAUDE}",
                                                            "record": "r1", "turn": 0}
    assert served[0]["response"]["kvprobe"]["answer"] == "cassette"


def test_a_cassette_with_nothing_to_serve_is_refused(tmp_path):
    empty = tmp_path / "failed.jsonl"
    empty.write_text(json.dumps(CASSETTE[-1]) + "\n")
    with pytest.raises(Exception, match="holds no answered request"):
        start_server(model="tiny-random", device="cpu", num_blocks=64, responses_from=empty)



def _session(base_url: str, description: str, results: dict[int, str] | None = None) -> list[dict]:
    """A 20-turn agent loop: each turn sends the history, its last answer and a tool result appended."""
    client = anthropic.Anthropic(base_url=base_url, api_key="x", max_retries=0)
    tools = [{"name": "ls", "description": description, "input_schema": {"type": "object"}}]
    messages: list[dict] = [{"role": "user", "content": "Work through the twenty steps."}]
    replies = []
    for turn in range(20):
        reply = client.messages.create(model=CLAUDE, max_tokens=2, tools=tools, messages=messages)
        replies.append(reply.model_extra["kvprobe"])
        said = [b.model_dump(exclude_none=True) for b in reply.content]
        said = [b for b in said if b.get("text", "x")] or "(nothing)"  # the API refuses empty text blocks
        messages += [{"role": "assistant", "content": said},
                     {"role": "user", "content": (results or {}).get(turn, f"step {turn} done")}]
    return replies


def test_a_twenty_turn_session_rerun_with_a_changed_tool_description_finds_every_turn(tmp_path):
    recorded = tmp_path / "recorded.jsonl"
    with start_server(model="tiny-random", device="cpu", num_blocks=1024, trace=recorded) as first:
        _session(first.base_url, "List files")
    with start_server(model="tiny-random", device="cpu", num_blocks=1024, responses_from=recorded) as again:
        rerun = _session(again.base_url, "List the files of a folder, sorted")
    assert [r["cassette"]["match"] for r in rerun] == ["exact"] * 20  # 20 of 20: tools are not compared
    assert [r["cassette"]["turn"] for r in rerun] == list(range(20))
    with start_server(model="tiny-random", device="cpu", num_blocks=1024, responses_from=recorded) as again:
        changed = _session(again.base_url, "List files", results={9: "step 9 FAILED"})
    # turn 9's tool result differs; it is messages[20] (1 + 2 x 9 + 1) of turns 10 to 19, which still get
    # their own recorded answers, in turn order
    assert [r["cassette"]["match"] for r in changed] == ["exact"] * 10 + ["diverged"] * 10
    assert [r["cassette"]["turn"] for r in changed] == list(range(20))
    assert {r["cassette"]["diverged_at"] for r in changed[10:]} == {"messages[20]"}


def test_a_captured_gemini_streams_text_comes_back_as_the_client_held_it():
    """A captured Gemini stream is the parts of every chunk in a row, the last text part empty; served back in
    one response that empty part made Gemini CLI 0.61 drop the answer as invalid and ask again. Plain text
    runs are joined (thoughts apart), empty ones left out; calls and signed parts stay as they were."""
    from kvprobe.serve.replies import gemini_parts

    recorded = {"candidates": [{"content": {"role": "model", "parts": [
        {"text": "thinking ", "thought": True}, {"text": "more", "thought": True},
        {"text": "Hel"}, {"text": "lo"}, {"text": ""},
        {"functionCall": {"name": "read_file", "args": {"path": "a"}}, "thoughtSignature": "c2ln"},
        {"text": "done", "thoughtSignature": "c2ln"}, {"text": ""}]}}]}
    assert gemini_parts(recorded) == [
        {"text": "thinking more", "thought": True}, {"text": "Hello"},
        {"functionCall": {"name": "read_file", "args": {"path": "a"}}, "thoughtSignature": "c2ln"},
        {"text": "done", "thoughtSignature": "c2ln"}]
