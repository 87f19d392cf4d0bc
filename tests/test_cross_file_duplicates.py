"""A duplicate is the same request logged twice (the provider's id, or a local id with the same content),
never merely the same local id in another file.

Two traces of different tasks on different days both number their requests req_1…req_6; two HAR exports
both named session.har number their entries session#0, session#1; two Codex rollouts of one resumed session
number their turns sess#1, sess#2. Every command must count all of them, and still read a file that is
really a copy once.
"""
from __future__ import annotations

import json
import shutil

from kvprobe.watch.follow import Follower


def _usage_trace(path, session: str, day: str, base: int):
    """Six usage-only requests req_1..req_6; request i reads base*i tokens from the cache."""
    lines = [{"kvprobe": 1, "id": f"req_{i}", "session": session, "provider": "anthropic",
              "started_at": f"{day}T10:0{i}:00.000Z",
              "response": {"model": "claude-sonnet-4-5", "usage": {
                  "input_tokens": 10, "cache_read_input_tokens": base * i, "cache_creation_input_tokens": 0,
                  "output_tokens": 5}}} for i in range(1, 7)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_same_local_ids_in_two_traces_are_twelve_requests_everywhere(cli, tmp_path):
    a = _usage_trace(tmp_path / "a.jsonl", "task-a", "2026-09-10", 100)
    b = _usage_trace(tmp_path / "b.jsonl", "task-b", "2026-09-11", 1000)
    report = json.loads(cli("report", a, b, "--json").stdout)
    assert report["totals"]["requests"] == 12
    usage = cli("usage", a, b, "--json")
    data = json.loads(usage.stdout)
    assert data["totals"]["requests"] == 12 and data["import"]["duplicates"] == 0
    # cache reads: 100 * (1+...+6) = 2,100 on the 10th, 21,000 on the 11th
    assert [(d["day"], d["requests"], d["cache_read_tokens"]) for d in data["by_day"]] == \
        [("2026-09-10", 6, 2100), ("2026-09-11", 6, 21000)]
    assert cli("import", a, b, "-o", tmp_path / "both.jsonl").exit_code == 0
    written = [json.loads(line) for line in (tmp_path / "both.jsonl").read_text().splitlines()]
    assert len(written) == 12 and len({r["id"] for r in written}) == 12  # the import reads back strictly
    assert {r["id"] for r in written if r["session"] == "task-b"} == {f"b:req_{i}" for i in range(1, 7)}
    assert cli("report", tmp_path / "both.jsonl", "--json").exit_code == 0


def test_a_copy_of_a_trace_is_read_once(cli, tmp_path):
    a = _usage_trace(tmp_path / "a.jsonl", "task-a", "2026-09-10", 100)
    copy = tmp_path / "backup" / "a.jsonl"
    copy.parent.mkdir()
    shutil.copy(a, copy)
    data = json.loads(cli("usage", a, copy, "--json").stdout)
    assert data["totals"]["requests"] == 6 and data["import"]["duplicates"] == 6
    assert data["totals"]["cache_read_tokens"] == 2100
    res = cli("import", a, copy, "-o", tmp_path / "once.jsonl")
    assert res.exit_code == 0 and len((tmp_path / "once.jsonl").read_text().splitlines()) == 6


def _har(path, started: str, question: str):
    """Two Anthropic calls without a request-id header (entries are known by their number only)."""
    def entry(i: int) -> dict:
        body = {"model": "claude-sonnet-4-5", "max_tokens": 64,
                "messages": [{"role": "user", "content": f"{question} (turn {i})"}]}
        reply = {"id": f"msg_{i}", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                 "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                 "usage": {"input_tokens": 20, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0,
                           "output_tokens": 3}}
        return {"startedDateTime": f"{started}:0{i}.000Z", "time": 900,
                "request": {"method": "POST", "url": "https://api.anthropic.com/v1/messages", "headers": [],
                            "postData": {"mimeType": "application/json", "text": json.dumps(body)}},
                "response": {"status": 200, "headers": [], "content": {"mimeType": "application/json",
                                                                        "text": json.dumps(reply)}},
                "timings": {"send": 1, "wait": 800, "receive": 99}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"log": {"version": "1.2", "entries": [entry(0), entry(1)]}}))
    return path


def test_two_har_exports_named_alike_are_four_requests(cli, tmp_path):
    first = _har(tmp_path / "monday" / "session.har", "2026-09-07T09:00", "Fix the login bug")
    second = _har(tmp_path / "tuesday" / "session.har", "2026-09-08T09:00", "Add a logout button")
    data = json.loads(cli("usage", first, second, "--json").stdout)
    assert data["totals"]["requests"] == 4 and data["import"]["duplicates"] == 0
    assert cli("import", tmp_path, "-o", tmp_path / "t.jsonl").exit_code == 0
    written = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert len({r["id"] for r in written}) == 4
    shutil.copy(first, tmp_path / "session-copy.har")  # the same export twice: the same two requests
    data = json.loads(cli("usage", first, tmp_path / "session-copy.har", "--json").stdout)
    assert data["totals"]["requests"] == 2 and data["import"]["duplicates"] == 2


def _rollout(path, session: str, turns: list[tuple[str, int]]):
    """A Codex rollout: (finish time, input tokens) per turn; totals are the running sums."""
    lines = [{"timestamp": turns[0][0], "type": "session_meta", "payload": {"id": session, "cwd": "/home/me/app"}},
             {"timestamp": turns[0][0], "type": "turn_context", "payload": {"model": "gpt-5-codex"}}]
    total = 0
    for stamp, tokens in turns:
        total += tokens
        last = {"input_tokens": tokens, "cached_input_tokens": 0, "output_tokens": 10, "total_tokens": tokens + 10}
        lines.append({"timestamp": stamp, "type": "event_msg", "payload": {"type": "token_count", "info": {
            "last_token_usage": last, "total_token_usage": {"input_tokens": total}}}})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_two_codex_rollouts_of_one_session_id_keep_every_turn(cli, tmp_path):
    one = _rollout(tmp_path / "10" / "rollout-2026-09-10T10-00-00-s1.jsonl", "s1",
                   [("2026-09-10T10:00:05.000Z", 1000), ("2026-09-10T10:00:09.000Z", 2000)])
    # resumed the next day: a new rollout file, the same session id, new turns numbered from 1 again
    two = _rollout(tmp_path / "11" / "rollout-2026-09-11T10-00-00-s1.jsonl", "s1",
                   [("2026-09-11T10:00:05.000Z", 3000), ("2026-09-11T10:00:09.000Z", 4000),
                    ("2026-09-11T10:00:15.000Z", 5000)])
    data = json.loads(cli("usage", one, two, "--json").stdout)
    assert data["totals"]["requests"] == 5 and data["import"]["duplicates"] == 0
    assert data["totals"]["input_tokens"] == 15000
    shutil.copy(one, tmp_path / "rollout-copy.jsonl")  # the same turns again: duplicates
    data = json.loads(cli("usage", one, tmp_path / "rollout-copy.jsonl", "--json").stdout)
    assert data["totals"]["requests"] == 2 and data["import"]["duplicates"] == 2


def test_watch_keeps_same_ids_from_two_traces(tmp_path):
    a = _usage_trace(tmp_path / "a.jsonl", "task-a", "2026-09-10", 100)
    _usage_trace(tmp_path / "b.jsonl", "task-b", "2026-09-11", 1000)
    shutil.copy(a, tmp_path / "a-copy.jsonl")
    follower = Follower([tmp_path])
    batch = follower.poll(final=True)
    follower.close()
    assert len(batch.records) == 12 and batch.duplicates == 6
