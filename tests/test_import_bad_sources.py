"""Sources that cannot be read, beside good logs: each is a counted skip that says why, the rest is read
(#39: a corrupt, locked, truncated or other-schema opencode.db; Gemini CLI `$set` updates of every shape; an
OpenCode cache count that is none; a truncated OpenCode message; symbolic link loops)."""
from __future__ import annotations

import json
import os
import sqlite3
import threading
import time

import pytest

from agent_logs import ClaudeTranscript
from kvprobe.importers import ImportReport, load_any


def _good(tmp_path):
    s = ClaudeTranscript("g1")
    s.turn(0, "r1", read=0, write=5_000)
    s.turn(10, "r2", read=5_000, write=100)
    return s.write(tmp_path / "good" / "g1.jsonl")


def _load(path):
    report = ImportReport()
    return list(load_any(path, report=report)), report


def _opencode_db(path, schema="message"):
    db = sqlite3.connect(path)
    db.execute(f"CREATE TABLE {schema} (id TEXT PRIMARY KEY, session_id TEXT, time_created INTEGER, data TEXT)")
    db.execute(f"INSERT INTO {schema} VALUES ('msg_1', 'ses_1', 1770800000000, ?)", (json.dumps(
        {"role": "assistant", "providerID": "anthropic", "modelID": "claude-sonnet-4-5",
         "time": {"created": 1770800000000, "completed": 1770800003000},
         "tokens": {"input": 10, "output": 20, "reasoning": 0, "cache": {"read": 100, "write": 0}}}),))
    db.commit()
    db.close()


@pytest.mark.parametrize("damage, why", [
    ("corrupt", "file is not a database"),
    ("truncated", "malformed"),
    ("schema", "not OpenCode's schema"),
])
def test_an_unreadable_opencode_db_beside_good_logs_is_a_counted_skip(cli, tmp_path, damage, why):
    _good(tmp_path)
    db = tmp_path / "opencode" / "opencode.db"
    db.parent.mkdir()
    if damage == "corrupt":
        db.write_bytes(b"this is not sqlite at all " * 100)
    else:
        _opencode_db(db, "message" if damage == "truncated" else "messages")
        if damage == "truncated":
            with db.open("r+b") as fh:  # the header says more pages than the file holds
                fh.truncate(4096 + 100)
    records, report = _load(tmp_path)
    assert len(records) == 2
    [source] = [s for s in report.sources if s.path == str(db)]
    assert source.skipped == {"OpenCode database cannot be read": 1}
    assert why in source.examples[0]
    result = cli("usage", tmp_path)
    assert result.exit_code == 0 and "skipped 1: OpenCode database cannot be read" in result.output


def test_a_locked_opencode_db_is_waited_for_then_read(tmp_path):
    db = tmp_path / "opencode.db"
    _opencode_db(db)
    holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")  # OpenCode writing
    threading.Timer(1.0, holder.execute, ("COMMIT",)).start()
    started = time.monotonic()
    records, report = _load(db)
    assert [r.id for r in records] == ["msg_1"] and 1.0 <= time.monotonic() - started < 5.0
    holder.close()


def test_a_db_locked_past_the_wait_is_a_counted_skip(tmp_path, monkeypatch):
    from kvprobe.importers import opencode

    monkeypatch.setattr(opencode, "LOCK_WAIT_S", 0.3)  # (5 s in use)
    _good(tmp_path)
    db = tmp_path / "opencode.db"
    _opencode_db(db)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    records, report = _load(tmp_path)
    holder.close()
    assert len(records) == 2
    [source] = [s for s in report.sources if s.path == str(db)]
    assert "locked by another process for over 0.3 s" in source.examples[0]


def test_gemini_set_updates_of_every_shape_are_counted(cli, tmp_path):
    lines = [
        {"sessionId": "s-1", "projectHash": "h1", "startTime": "2026-02-11T09:00:00.000Z", "kind": "main"},
        {"$set": {"messages": 5}},
        {"$set": 7},
        {"$set": {"lastUpdated": "2026-02-11T09:00:05.000Z"}},
        {"id": "g1", "timestamp": "2026-02-11T09:00:04.000Z", "type": "gemini", "model": "gemini-2.5-flash",
         "tokens": {"input": 20000, "output": 100, "cached": 0, "thoughts": 0, "tool": 0, "total": 20100}},
    ]
    path = tmp_path / "chats" / "session-2026-02-11T09-00-s1.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    records, report = _load(path)
    assert [r.id for r in records] == ["s-1:g1"]
    [source] = report.sources
    assert source.skipped == {"metadata update ($set) whose messages is not a list": 1,
                              "metadata update ($set) is not an object": 1}
    assert source.ignored == 2  # the metadata line and the lastUpdated update
    for command in ("usage", "import"):
        result = cli(command, path, *(("-o", tmp_path / "t.jsonl") if command == "import" else ()))
        assert result.exit_code == 0 and "Traceback" not in result.output


def _opencode_file(folder, ident, tokens):
    folder.mkdir(parents=True, exist_ok=True)
    message = {"id": ident, "sessionID": "ses_A", "role": "assistant", "providerID": "anthropic",
               "modelID": "claude-sonnet-4-5", "time": {"created": 1770800001000, "completed": 1770800002000},
               "tokens": tokens}
    path = folder / f"{ident}.json"
    path.write_text(json.dumps(message, indent=2))
    return path


def test_opencode_cache_that_is_no_count_is_an_invalid_usage_skip(tmp_path):
    folder = tmp_path / "storage" / "message" / "ses_A"
    _opencode_file(folder, "msg_001", {"input": 10, "output": 5, "reasoning": 0, "cache": "x"})
    _opencode_file(folder, "msg_002", {"input": 10, "output": 5, "reasoning": 0, "cache": {"read": 7, "write": 0}})
    records, report = _load(tmp_path)
    assert [r.id for r in records] == ["msg_002"]
    assert report.reasons() == {"invalid usage": 1}


def test_a_truncated_opencode_message_is_labelled_truncated(tmp_path):
    folder = tmp_path / "storage" / "message" / "ses_A"
    path = _opencode_file(folder, "msg_001", {"input": 10, "output": 5, "reasoning": 0, "cache": {"read": 0}})
    path.write_text(path.read_text()[:-30])  # OpenCode killed while writing it
    _opencode_file(folder, "msg_002", {"input": 10, "output": 5, "reasoning": 0, "cache": {"read": 7, "write": 0}})
    records, report = _load(tmp_path)
    assert [r.id for r in records] == ["msg_002"]
    assert report.reasons() == {"truncated JSON file": 1}


def test_symbolic_link_loops_are_named_as_loops(cli, tmp_path):
    _good(tmp_path)
    os.symlink("loop.jsonl", tmp_path / "good" / "loop.jsonl")
    os.symlink("sub", tmp_path / "good" / "sub")  # a folder link that loops
    records, report = _load(tmp_path)
    assert len(records) == 2
    loops = {s.path: s.skipped_total for s in report.sources if any("symbolic link loop" in r for r in s.skipped)}
    assert loops == {str(tmp_path / "good" / "loop.jsonl"): 1, str(tmp_path / "good" / "sub"): 1}
    named = cli("usage", tmp_path / "good" / "loop.jsonl")
    assert named.exit_code == 2 and "symbolic link loop" in named.output and "does not exist" not in named.output
