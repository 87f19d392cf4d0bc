"""The agent-log readers beyond Claude Code and Codex, on files written here in each tool's real format:
Gemini CLI (both formats), Qwen Code, OpenCode (storage files and opencode.db); Bedrock-served Claude.

The ccusage figures below were measured with ccusage 20.0.24 (`ccusage gemini|opencode daily --offline
--json`) on these same files; the others are worked out by hand."""
from __future__ import annotations

import json
import sqlite3

import pytest

from agent_logs import ClaudeTranscript
from kvprobe.importers import ImportReport, detect_format, load_any
from kvprobe.importers.summary import summarize
from kvprobe.usage import normalize_usage

GEMINI_LEGACY = {
    "sessionId": "11111111-aaaa-bbbb-cccc-000000000001", "projectHash": "abc123",
    "startTime": "2026-02-10T10:00:00.000Z", "lastUpdated": "2026-02-10T10:05:00.000Z",
    "messages": [
        {"id": "m1", "timestamp": "2026-02-10T10:00:00.000Z", "type": "user", "content": "hi"},
        {"id": "m2", "timestamp": "2026-02-10T10:00:05.000Z", "type": "gemini", "content": "hello",
         "model": "gemini-2.5-pro", "thoughts": [],
         "tokens": {"input": 10000, "output": 200, "cached": 0, "thoughts": 300, "tool": 50, "total": 10550}},
        {"id": "m3", "timestamp": "2026-02-10T10:01:00.000Z", "type": "gemini", "content": "more",
         "model": "gemini-2.5-pro",
         "tokens": {"input": 12000, "output": 100, "cached": 9000, "thoughts": 0, "tool": 0, "total": 12100}},
        {"id": "m4", "timestamp": "2026-02-10T10:02:00.000Z", "type": "info", "content": "note"}]}

_TOOL_CALL = {"id": "t1", "name": "ls", "args": {}, "status": "success", "timestamp": "2026-02-11T09:00:06.000Z"}
GEMINI_JSONL = [
    {"sessionId": "22222222-aaaa-bbbb-cccc-000000000002", "projectHash": "abc123",
     "startTime": "2026-02-11T09:00:00.000Z", "lastUpdated": "2026-02-11T09:00:00.000Z", "kind": "main"},
    {"id": "u1", "timestamp": "2026-02-11T09:00:00.000Z", "type": "user", "content": [{"text": "do"}]},
    {"id": "g1", "timestamp": "2026-02-11T09:00:04.000Z", "type": "gemini", "content": "", "thoughts": [],
     "toolCalls": [_TOOL_CALL], "model": "gemini-2.5-flash"},
    {"id": "g1", "timestamp": "2026-02-11T09:00:04.000Z", "type": "gemini", "content": "", "thoughts": [],
     "toolCalls": [_TOOL_CALL], "model": "gemini-2.5-flash",
     "tokens": {"input": 20000, "output": 100, "cached": 0, "thoughts": 50, "tool": 0, "total": 20150}},
    {"$set": {"lastUpdated": "2026-02-11T09:00:05.000Z"}},
    {"id": "g2", "timestamp": "2026-02-11T09:00:09.000Z", "type": "gemini", "content": "done", "thoughts": [],
     "model": "gemini-2.5-flash",
     "tokens": {"input": 21000, "output": 80, "cached": 19000, "thoughts": 0, "tool": 0, "total": 21080}},
]


@pytest.fixture
def gemini_dir(tmp_path):
    chats = tmp_path / "tmp" / "abc123" / "chats"
    chats.mkdir(parents=True)
    (chats / "session-2026-02-10T10-00-11111111.json").write_text(json.dumps(GEMINI_LEGACY, indent=2))
    (chats / "session-2026-02-11T09-00-22222222.jsonl").write_text("".join(json.dumps(x) + "\n" for x in GEMINI_JSONL))
    return tmp_path / "tmp"


def _load(path):
    report = ImportReport()
    return list(load_any(path, report=report)), report


def test_gemini_cli_both_formats_equal_ccusage(gemini_dir):
    records, report = _load(gemini_dir)
    assert {s.format for s in report.sources} == {"gemini_cli"}
    assert [r.id.split(":")[1] for r in records] == ["m2", "m3", "g1", "g2"]  # g1 once: its last version
    assert report.duplicates == 1
    by_day = {day: t for day, t in summarize(records).rows("day")}
    # ccusage: 2026-02-10 input 13,050 (10,000 + 3,000 uncached + 50 tool prompt), read 9,000, $0.0234375;
    # 2026-02-11 input 22,000, read 19,000, $0.007745; it leaves thoughts out of its output column but prices them
    assert (by_day["2026-02-10"].usage.fresh_input_tokens, by_day["2026-02-10"].cache_read_tokens) == (13_050, 9_000)
    assert (by_day["2026-02-11"].usage.fresh_input_tokens, by_day["2026-02-11"].cache_read_tokens) == (22_000, 19_000)
    assert by_day["2026-02-10"].cost_usd == pytest.approx(0.0234375, abs=1e-6)
    assert by_day["2026-02-11"].cost_usd == pytest.approx(0.007745, abs=1e-6)
    assert by_day["2026-02-10"].output_tokens == 200 + 300 + 100  # thoughts are output
    assert by_day["2026-02-10"].reasoning_output_tokens == 300


def test_gemini_cli_requests_start_when_the_previous_message_ended(gemini_dir):
    records, _ = _load(gemini_dir)
    g1, g2 = records[2], records[3]
    assert g1.finished_at - g1.started_at == pytest.approx(4.0)  # the user's message at 09:00:00
    assert g2.finished_at - g2.started_at == pytest.approx(3.0)  # g1's tool call ended at 09:00:06


def test_gemini_cli_projects_are_the_directories_their_hashes_name(tmp_path):
    """Gemini CLI logs no working directory, only its SHA-256 (`projectHash`, also the folder's name). One
    session's tool call reports the file it wrote under /home/me/app (whose SHA-256 is its hash): that is its
    project. The other names no path: its project is its hash folder, as `ls ~/.gemini/tmp` shows it."""
    import hashlib

    app = hashlib.sha256(b"/home/me/app").hexdigest()
    other = hashlib.sha256(b"/home/me/other").hexdigest()
    wrote = {"id": "w1", "name": "write_file", "args": {"file_path": "docs/a.md", "content": "# A"},
             "status": "success", "timestamp": "2026-02-10T10:00:04.000Z",
             "result": [{"functionResponse": {"id": "w1", "name": "write_file", "response": {
                 "output": "Successfully created and wrote to new file: /home/me/app/docs/a.md."}}}]}
    for digest, calls in ((app, [wrote]), (other, [])):
        session = {**GEMINI_LEGACY, "projectHash": digest, "sessionId": f"s-{digest[:4]}"}
        session["messages"] = [dict(m, toolCalls=calls) if m["id"] == "m2" else m for m in session["messages"]]
        chats = tmp_path / "tmp" / digest / "chats"
        chats.mkdir(parents=True)
        (chats / "session-2026-02-10T10-00-11111111.json").write_text(json.dumps(session))
    records, _ = _load(tmp_path / "tmp")
    projects = {row_key: t.requests for row_key, t in summarize(records).rows("project")}
    assert projects == {"/home/me/app": 2, f"(project {other[:12]}…)": 2}


def test_qwen_code_reads_prompt_counts_with_the_cached_tokens_inside(tmp_path):
    base = {"sessionId": "q-sess", "cwd": "/home/me/app", "version": "0.5.0", "gitBranch": "main"}
    lines = [
        {**base, "uuid": "q1", "parentUuid": None, "timestamp": "2026-02-12T08:00:00.000Z", "type": "user",
         "message": {"role": "user", "parts": [{"text": "fix"}]}},
        {**base, "uuid": "q2", "parentUuid": "q1", "timestamp": "2026-02-12T08:00:06.000Z", "type": "assistant",
         "model": "qwen3-coder-plus", "message": {"role": "model", "parts": [{"text": "ok"}]},
         "usageMetadata": {"promptTokenCount": 15000, "candidatesTokenCount": 300, "cachedContentTokenCount": 0,
                           "thoughtsTokenCount": 40, "totalTokenCount": 15340}},
        {**base, "uuid": "q3", "parentUuid": "q2", "timestamp": "2026-02-12T08:00:07.000Z", "type": "system",
         "subtype": "chat_compression",
         "systemPayload": {"info": {"originalTokenCount": 15340, "newTokenCount": 3000}, "compressedHistory": []}},
        {**base, "uuid": "q4", "parentUuid": "q3", "timestamp": "2026-02-12T08:00:12.000Z", "type": "assistant",
         "model": "qwen3-coder-plus", "message": {"role": "model", "parts": [{"text": "done"}]},
         "usageMetadata": {"promptTokenCount": 16000, "candidatesTokenCount": 100, "cachedContentTokenCount": 14000,
                           "totalTokenCount": 16100}},
    ]
    path = tmp_path / "projects" / "-home-me-app" / "chats" / "q-sess.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert detect_format(path) == "qwen_code"
    records, _ = _load(tmp_path / "projects")
    u = [normalize_usage(r.provider, r.usage) for r in records]
    # ccusage 20.0.24 reports 31,000 uncached input beside 14,000 cache reads: it counts the cached tokens twice
    assert [(x.input_tokens, x.cache_read_tokens, x.fresh_input_tokens, x.output_tokens) for x in u] == \
        [(15_000, 0, 15_000, 340), (16_000, 14_000, 2_000, 100)]
    assert records[1].extra["events"] == [{"kind": "compaction", "at": "2026-02-12T08:00:07.000Z",
                                           "pre_tokens": 15_340}]
    assert records[1].started_at == pytest.approx(records[1].finished_at - 5)


def _opencode_messages():
    def assistant(i, created, completed, provider, model, tokens, agent="build"):
        return {"id": f"msg_{i}", "sessionID": "ses_A", "role": "assistant", "parentID": "msg_001",
                "time": {"created": created, "completed": completed}, "providerID": provider, "modelID": model,
                "mode": agent, "agent": agent, "path": {"cwd": "/home/me/app", "root": "/home/me/app"}, "cost": 0,
                "tokens": tokens, "finish": "stop"}
    return [
        {"id": "msg_001", "sessionID": "ses_A", "role": "user", "time": {"created": 1770800000000}},
        assistant("002", 1770800001000, 1770800008000, "anthropic", "claude-sonnet-4-5",
                  {"input": 12, "output": 300, "reasoning": 40, "cache": {"read": 0, "write": 15000}}),
        assistant("003", 1770800009000, 1770800012000, "openai", "gpt-5",
                  {"input": 2000, "output": 100, "reasoning": 60, "cache": {"read": 14000, "write": 0}}),
    ]


def test_opencode_message_files_equal_ccusage(tmp_path):
    folder = tmp_path / "storage" / "message" / "ses_A"
    folder.mkdir(parents=True)
    for m in _opencode_messages():
        (folder / f"{m['id']}.json").write_text(json.dumps(m, indent=2))
    (tmp_path / "storage" / "session" / "p1").mkdir(parents=True)
    (tmp_path / "storage" / "session" / "p1" / "ses_A.json").write_text(json.dumps(
        {"id": "ses_A", "projectID": "p1", "directory": "/home/me/app", "time": {"created": 1770800000000}}))
    records, report = _load(tmp_path)
    assert report.skipped == 0 and [r.id for r in records] == ["msg_002", "msg_003"]
    totals = summarize(records).totals
    # ccusage: input 2,012, cache writes 15,000, reads 14,000, $0.067236 (reasoning priced as output)
    assert (totals.usage.fresh_input_tokens, totals.cache_write_5m_tokens, totals.cache_read_tokens) == \
        (2_012, 15_000, 14_000)
    assert totals.output_tokens == 300 + 40 + 100 + 60
    assert totals.cost_usd == pytest.approx(0.067236, abs=1e-6)
    assert records[0].finished_at - records[0].started_at == pytest.approx(7.0)


def _opencode_db(path, messages):
    """OpenCode's store (its `message` table, each message's JSON in `data`), as OpenCode 1.2 and Kilo's CLI
    write it."""
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE message (id TEXT PRIMARY KEY, session_id TEXT, time_created INTEGER, "
               "time_updated INTEGER, data TEXT)")
    for m in messages:
        data = {k: v for k, v in m.items() if k not in ("id", "sessionID")}
        db.execute("INSERT INTO message VALUES (?, ?, ?, ?, ?)", (m["id"], m["sessionID"], m["time"]["created"],
                                                                 m["time"]["created"], json.dumps(data)))
    db.commit()
    db.close()


def test_opencode_database_and_its_compaction_agent(tmp_path):
    messages = _opencode_messages()
    messages.insert(2, {**messages[1], "id": "msg_0025", "agent": "compaction", "mode": "compaction",
                        "time": {"created": 1770800008500, "completed": 1770800008900}})
    _opencode_db(tmp_path / "opencode.db", messages)
    records, report = _load(tmp_path)
    assert [s.format for s in report.sources] == ["opencode"]
    assert [(r.id, r.agent) for r in records] == [("msg_002", "build"), ("msg_0025", "compaction"),
                                                  ("msg_003", "build")]
    assert [e["kind"] for e in records[2].extra["events"]] == ["compaction"]


def test_bedrock_served_claude_code_lines_are_labelled(tmp_path):
    s = ClaudeTranscript("b1", id_prefix="msg_bdrk_01")
    s.turn(0, "r1", read=0, write=5_000)
    s.turn(10, "r2", read=5_000, write=200)
    records, report = _load(s.write(tmp_path / "b1.jsonl"))
    assert [r.extra.get("platform") for r in records] == ["bedrock", "bedrock"]
    # providers/bedrock.toml has Bedrock's own rules (#32): the summary says they applied
    assert any("2 requests served through Amazon Bedrock: ruled by providers/bedrock.toml" in line
               for line in report.summary())


def _span(span_id, response_id, attrs, conversation="conv-1"):
    values = {"gen_ai.provider.name": "anthropic", "gen_ai.request.model": "claude-sonnet-4-5",
              "gen_ai.response.id": response_id, **attrs}
    if conversation:
        values["gen_ai.conversation.id"] = conversation
    return {"traceId": f"trace-{span_id}", "spanId": span_id, "name": "chat claude-sonnet-4-5",
            "startTimeUnixNano": "1770800000000000000", "endTimeUnixNano": "1770800002000000000",
            "attributes": [{"key": k, "value": {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v}}
                           for k, v in values.items()]}


def test_otel_spans_of_one_call_from_two_instrumentations_count_once(tmp_path):
    with_cache = {"gen_ai.usage.input_tokens": 12000, "gen_ai.usage.cache_read.input_tokens": 10000,
                  "gen_ai.usage.output_tokens": 80}
    plain = {"gen_ai.usage.input_tokens": 12000, "gen_ai.usage.output_tokens": 80}
    doc = {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [
        {"scope": {"name": "anthropic-sdk"}, "spans": [_span("s1", "msg_01A", plain)]},
        {"scope": {"name": "opentelemetry.instrumentation.anthropic"}, "spans": [_span("s2", "msg_01A", with_cache)]},
        {"scope": {"name": "anthropic-sdk"}, "spans": [_span("s3", "msg_01B", plain, conversation=None)]}]}]}
    path = tmp_path / "spans.json"
    path.write_text(json.dumps(doc))
    records, report = _load(path)
    assert [r.id for r in records] == ["response:msg_01A", "response:msg_01B"] and report.duplicates == 1
    u = normalize_usage(records[0].provider, records[0].usage)
    assert (u.input_tokens, u.cache_read_tokens) == (12_000, 10_000)  # the span that reports the cache
    assert any("no gen_ai.conversation.id" in line and "cannot be compared" in line for line in report.summary())


def test_lint_and_diff_on_a_usage_only_log_say_so_plainly(cli, tmp_path):
    s = ClaudeTranscript("u1")
    s.turn(0, "r1", read=0, write=5_000)
    path = s.write(tmp_path / "u1.jsonl")
    for command in (("lint", path), ("diff", path, path)):
        res = cli(*command)
        assert res.exit_code == 2
        said = " ".join(res.output.split())
        assert "a Claude Code transcript logs usage, not request bodies" in said and "malformed" not in said


def test_lint_reads_the_request_bodies_a_har_recording_holds(cli):
    from pathlib import Path
    har = Path(__file__).parent / "fixtures" / "importers" / "har" / "session.har"
    res = cli("lint", har, "--json")
    assert res.exit_code in (0, 1), res.output
    assert json.loads(res.stdout)["inputs"][0]["requests"] >= 1


def test_kilo_codes_cli_database_is_opencodes_store_advised_in_kilos_knobs(tmp_path, cli):
    """Kilo Code's CLI 7 (built on OpenCode) keeps OpenCode's store as ~/.local/share/kilo/kilo.db, with a
    storage/ folder beside it: read as OpenCode's, nothing skipped, its requests Kilo's."""
    kilo = tmp_path / "kilo"
    (kilo / "storage" / "session_diff").mkdir(parents=True)
    (kilo / "storage" / "session_diff" / "ses_1.json").write_text("[]")
    _opencode_db(kilo / "kilo.db", _opencode_messages())
    records, report = _load(kilo)
    assert records and {r.extra.get("writer") for r in records} == {"Kilo Code"}
    assert report.skipped == 0 and {s.format for s in report.sources} == {"opencode"}
    from kvprobe.agents import profile_for
    assert profile_for(records[0].extra).name == "Kilo Code CLI"
    assert "kvprobe capture -- kilo" in cli("report", kilo).stdout


def test_qwen_codes_managed_subagent_calls_are_read_from_their_telemetry(tmp_path):
    """Qwen Code 0.24's auto-memory extractor writes no assistant record: its call is only the `ui_telemetry`
    `qwen-code.api_response` event naming a subagent_id (the main call's own event, beside its assistant
    record, is not read again). Shapes as Qwen Code 0.24.4 wrote them against `kvprobe serve`; the project
    folder's meta.json and extract-cursor.json are its own files."""
    def telemetry(uid, at, rid, prompt, cached, out, **sub):
        return {"uuid": uid, "parentUuid": None, "sessionId": "s1", "timestamp": at, "type": "system",
                "cwd": "/w", "version": "0.24.4", "subtype": "ui_telemetry",
                "systemPayload": {"uiEvent": {"event.name": "qwen-code.api_response", "event.timestamp": at,
                                              "response_id": rid, "model": "qwen3-coder-plus", "duration_ms": 7751,
                                              "input_token_count": prompt, "output_token_count": out,
                                              "cached_content_token_count": cached, "thoughts_token_count": 0,
                                              **sub}}}
    lines = [
        {"uuid": "u1", "parentUuid": None, "sessionId": "s1", "timestamp": "2026-12-07T08:43:28.000Z",
         "type": "user", "message": {"role": "user", "parts": [{"text": "read README.md"}]}},
        telemetry("t1", "2026-12-07T08:43:29.906Z", "chatcmpl_1", 14_589, 0, 24),
        {"uuid": "a1", "parentUuid": "t1", "sessionId": "s1", "timestamp": "2026-12-07T08:43:29.908Z",
         "type": "assistant", "model": "qwen3-coder-plus", "message": {"role": "model", "parts": [{"text": "ok"}]},
         "usageMetadata": {"promptTokenCount": 14_589, "candidatesTokenCount": 24, "totalTokenCount": 14_613}},
        telemetry("t2", "2026-12-07T08:43:43.432Z", "chatcmpl_4", 11_077, 0, 7,
                  subagent_name="managed-auto-memory-extractor", subagent_id="managed-auto-memory-extractor-48"),
    ]
    project = tmp_path / "projects" / "-w"
    (project / "chats").mkdir(parents=True)
    (project / "chats" / "s1.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (project / "meta.json").write_text(json.dumps({"version": 1, "createdAt": "2026-12-07T08:43:35.617Z"}, indent=2))
    (project / "extract-cursor.json").write_text(json.dumps({"sessionId": "s1", "processedOffset": 0}, indent=2))
    records, report = _load(tmp_path / "projects")
    assert [(r.id, r.agent) for r in records] == [("a1", "main"),
                                                  ("chatcmpl_4", "subagent-managed-auto-memory-extractor-48")]
    side = records[1]
    assert side.response["usageMetadata"]["promptTokenCount"] == 11_077
    assert round(side.finished_at - side.started_at, 3) == 7.751
    assert report.skipped == 0
