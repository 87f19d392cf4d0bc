"""Kimi Code CLI sessions (kvprobe.importers.kimi_cli): wire.jsonl written here in the CLI's own shape (a
metadata line, then {timestamp, message: {type, payload}} records: StepBegin, StatusUpdate with token_usage,
SubagentEvent, CompactionBegin), beside the session folder's context.jsonl and state.json. Every figure below
is the sum of the usage the test writes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvprobe.importers import ImportReport, detect_format, load_any

T0 = 1_770_800_000.0  # 2026-02-11 08:53:20 UTC
SESSION = "5d0f3f0e-1111-2222-3333-444455556666"


def _msg(t: float, kind: str, payload: dict) -> dict:
    return {"timestamp": T0 + t, "message": {"type": kind, "payload": payload}}


def _usage(t: float, mid: str, other: int, read: int, output: int, create: int = 0) -> dict:
    return _msg(t, "StatusUpdate", {"context_usage": 0.1, "context_tokens": other + read,
                                    "max_context_tokens": 262_144, "message_id": mid, "plan_mode": False,
                                    "mcp_status": None,
                                    "token_usage": {"input_other": other, "output": output,
                                                    "input_cache_read": read, "input_cache_creation": create}})


def _sub(event: dict) -> dict:
    return {"timestamp": event["timestamp"], "message": {"type": "SubagentEvent", "payload": {
        "parent_tool_call_id": "tool_9", "agent_id": "a1b2c3d4e", "subagent_type": "coder",
        "event": event["message"]}}}


@pytest.fixture
def kimi_share(tmp_path: Path) -> Path:
    folder = tmp_path / "sessions" / "0cc175b9c0f1b6a831c399e269772661" / SESSION
    folder.mkdir(parents=True)
    lines = [
        {"type": "metadata", "protocol_version": "1.3"},
        _msg(0, "TurnBegin", {"user_input": "fix the login bug"}),
        _msg(0, "StepBegin", {"n": 1}),
        _usage(3, "chatcmpl-1", other=20_000, read=0, output=300),
        _msg(3.5, "ToolCall", {"type": "function", "id": "tool_1", "function": {"name": "Shell", "arguments": "{}"}}),
        _msg(5, "StepBegin", {"n": 2}),
        _msg(6, "StatusUpdate", {"context_usage": 0.2, "mcp_status": None}),  # no token_usage: not a request
        _usage(8, "chatcmpl-2", other=1_500, read=20_000, output=200),
        _sub(_msg(9, "StepBegin", {"n": 1})),
        _sub(_usage(12, "chatcmpl-s1", other=5_000, read=0, output=50)),
        _msg(20, "CompactionBegin", {}),
        _msg(25, "CompactionEnd", {}),
        _msg(30, "StepBegin", {"n": 3}),
        _usage(33, "chatcmpl-3", other=3_000, read=1_000, output=100),
        _msg(34, "TurnEnd", {}),
    ]
    (folder / "wire.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (folder / "context.jsonl").write_text('{"role": "_checkpoint", "id": 0}\n{"role": "user", "content": "fix"}\n')
    (folder / "state.json").write_text(json.dumps({"version": 1, "custom_title": "fix login", "wire_mtime": T0},
                                                  indent=2))
    return tmp_path / "sessions"


def test_each_step_with_token_usage_is_one_request(kimi_share):
    report = ImportReport()
    records = {r.id: r for r in load_any(kimi_share, report=report)}
    assert list(records) == ["chatcmpl-1", "chatcmpl-2", "chatcmpl-s1", "chatcmpl-3"]
    assert {r.session for r in records.values()} == {SESSION}
    assert [r.agent for r in records.values()] == ["main", "main", "subagent-a1b2c3d4e", "main"]
    second = records["chatcmpl-2"]
    assert (second.started_at, second.finished_at) == (T0 + 5, T0 + 8)  # sent at its StepBegin
    assert second.provider == "moonshot" and second.response["model"] is None
    assert records["chatcmpl-s1"].started_at == T0 + 9  # the subagent's own step
    assert [e["kind"] for e in records["chatcmpl-3"].extra["events"]] == ["compaction"]
    # context.jsonl and state.json are read as the session's files: nothing skipped
    assert report.skipped == 0 and {s.format for s in report.sources} == {"kimi_cli"}


def test_usage_adds_up_the_steps(cli, kimi_share):
    data = json.loads(cli("usage", kimi_share, "--json").stdout)
    t = data["totals"]
    # input: 20,000 + (1,500 + 20,000) + 5,000 + (3,000 + 1,000); read: 20,000 + 1,000; output 300+200+50+100
    assert (t["requests"], t["input_tokens"], t["cache_read_tokens"], t["output_tokens"]) == (4, 50_500, 21_000, 650)
    assert t["unpriced_requests"] == 4  # the wire names no model: nothing is priced by guess
    # the folder names the project by the MD5 of its directory: its start, as `ls ~/.kimi/sessions` shows it
    assert [row["project"] for row in data["by_project"]] == ["(project 0cc175b9c0f1…)"]


def test_steps_without_a_message_id_are_told_apart_across_sessions(tmp_path):
    for session in ("s-a", "s-b"):  # the same line number in two sessions: two requests, not a duplicate
        folder = tmp_path / "sessions" / "h" / session
        folder.mkdir(parents=True)
        usage = _usage(3, "", other=100, read=0, output=1)
        usage["message"]["payload"].pop("message_id")
        (folder / "wire.jsonl").write_text(json.dumps(_msg(0, "StepBegin", {"n": 1})) + "\n" + json.dumps(usage) + "\n")
    report = ImportReport()
    records = list(load_any(tmp_path / "sessions", report=report))
    assert sorted(r.id for r in records) == ["s-a:main:2", "s-b:main:2"] and report.duplicates == 0


def test_the_side_files_alone_are_known_as_kimi_files(kimi_share):
    folder = next(kimi_share.glob("*/*"))
    assert detect_format(folder / "context.jsonl") == "kimi_cli" and detect_format(folder / "wire.jsonl") == "kimi_cli"
