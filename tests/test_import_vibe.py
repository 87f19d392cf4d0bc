"""Mistral Vibe sessions (kvprobe.importers.vibe): a unified session folder written here in Vibe 3.0.2's shape
(journal/<generation>.jsonl recovery records: core_input with its time, action_intent, action_result with a
completion's usage; meta.json with the model and working directory; chunks/ and generations/ state beside).
Vibe's input_tokens is the whole prompt (checked against the usage a local server returned: 8,556 with
8,256 cached). Every expected figure is worked out by hand."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvprobe.importers import ImportReport, detect_format, load_any

T0_MS = 1_796_631_278_548  # 2026-12-07 08:14:38.548 UTC
SID = "83e2306a-d633-349f-7503-d0a2b7e55622"


def _record(seq: int, kind: str, payload: dict) -> dict:
    return {"payload": payload, "previous_record_sha256": f"{seq - 1:064x}", "record_sha256": f"{seq:064x}",
            "recovery_journal_record_version": 1, "sequence": seq, "type": kind}


def _input(seq: int, at_ms: int, command: dict | None = None) -> dict:
    return _record(seq, "core_input", {"input": {"command": command or {}, "determinism": {
        "random_seed": 7, "time_unix_ms": T0_MS + at_ms}, "input_id": seq, "protocol_version": 1}})


def _completion(seq: int, action: str, total: int, cached: int, out: int) -> dict:
    return _record(seq, "action_result", {"action_id": action, "state": "succeeded", "result": {
        "action_id": action, "type": "completion_succeeded", "result": {
            "finish_reason": "tool_call", "parts": [{"type": "text", "text": "ok"}],
            "usage": {"cached_input_tokens": cached, "input_tokens": total, "output_tokens": out,
                      "total_tokens": total + out}}}})


def _tool(seq: int, action: str) -> dict:
    return _record(seq, "action_result", {"action_id": action, "state": "succeeded",
                                          "result": {"action_id": action, "type": "tool_succeeded"}})


@pytest.fixture
def unified(tmp_path: Path) -> Path:
    folder = tmp_path / "logs" / "session" / "unified" / SID
    (folder / "journal").mkdir(parents=True)
    (folder / "chunks").mkdir()
    (folder / "generations" / "0000000000000001").mkdir(parents=True)
    lines = [
        _record(1, "command_reserved", {"method": "turn/start", "params": {"sessionId": SID}}),
        _input(2, 0),
        _record(3, "action_intent", {"action_id": "c1", "kind": "completion"}),
        _completion(4, "c1", total=8_287, cached=0, out=20),
        _input(5, 7_962),  # takes c1's result
        _record(6, "action_intent", {"action_id": "t1", "kind": "runtime_builtin_tool_call"}),
        _tool(7, "t1"),
        _input(8, 7_986),
        _record(9, "action_intent", {"action_id": "c2", "kind": "completion"}),
        _completion(10, "c2", total=8_556, cached=8_256, out=20),
        _input(11, 15_686),
        _record(12, "receipt_succeeded", {}),
    ]
    (folder / "journal" / "0000000000000001.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (folder / "journal" / "0000000000000013.jsonl").write_text("")  # the next generation, not yet written
    (folder / "meta.json").write_text(json.dumps({
        "session_id": SID, "start_time": "2026-12-07T08:14:38.408000+00:00",
        "environment": {"working_directory": "/home/dev/app"},
        "config": {"active_model": "devstral", "model_name": "devstral-medium-2507"}}))
    (folder / "chunks" / "7994f87f.json").write_text(json.dumps({"messages": []}))
    (folder / "generations" / "0000000000000001" / "manifest.json").write_text(json.dumps({"generation": 1}))
    return tmp_path / "logs" / "session" / "unified"


def test_each_completion_is_one_request_timed_by_the_core_inputs(unified):
    report = ImportReport()
    records = list(load_any(unified, report=report))
    assert [r.id for r in records] == ["c1", "c2"]
    first, second = records
    assert first.provider == "mistral" and first.response["model"] == "devstral-medium-2507"
    # sent at the core input before its intent, answered at the one that took its result
    assert (first.started_at, first.finished_at) == (T0_MS / 1000, (T0_MS + 7_962) / 1000)
    assert (second.started_at, second.finished_at) == ((T0_MS + 7_986) / 1000, (T0_MS + 15_686) / 1000)
    usage = second.response["usage"]
    assert (usage["input_tokens"], usage["input_tokens_details"]["cached_tokens"]) == (8_556, 8_256)
    assert second.session == SID and second.extra["cwd"] == "/home/dev/app"
    # the state files and the empty next generation are the session's own: nothing skipped
    assert report.skipped == 0 and {s.format for s in report.sources} == {"vibe"}
    assert detect_format(next(unified.rglob("0000000000000001.jsonl"))) == "vibe"


def test_usage_adds_up_the_session(cli, unified):
    data = json.loads(cli("usage", unified, "--json").stdout)
    assert data["totals"]["requests"] == 2
    assert data["totals"]["input_tokens"] == 8_287 + 8_556
    assert data["totals"]["cache_read_tokens"] == 8_256
    assert data["totals"]["output_tokens"] == 40
