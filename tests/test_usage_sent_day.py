"""What `usage` reads of a Claude Code transcript's long lines (tool results of several KB, written as Claude
Code writes them: compact JSON, `type` before the message, `uuid` and `timestamp` after it): the day a request
was sent (its parent line's timestamp), and every line decoded, so a line broken inside, or a response
joined onto a user line, is counted (a review found both lost when such lines were read by their head only;
that reading was taken out). Every figure is worked out by hand below."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

BIG = "y" * 5000  # a tool result of 5 KB


def _line(kind: str, uuid: str, parent: str | None, ts: str, message: dict, side: bool = False, **more) -> str:
    """One transcript line in Claude Code's own key order, compact."""
    obj = {"parentUuid": parent, "isSidechain": side, "userType": "external", "cwd": "/home/me/shop",
           "sessionId": "s1", "version": "2.1.40", "gitBranch": "main", "type": kind, "message": message,
           "uuid": uuid, "timestamp": ts, **more}
    return json.dumps(obj, separators=(",", ":"))


def _user(uuid: str, parent: str | None, ts: str, side: bool = False) -> str:
    content = [{"tool_use_id": f"toolu_{uuid}", "type": "tool_result", "content": BIG}]
    return _line("user", uuid, parent, ts, {"role": "user", "content": content}, side,
                 toolUseResult={"stdout": BIG, "stderr": ""})


def _assistant(uuid: str, parent: str, ts: str, request: str, fresh: int, read: int, side: bool = False) -> str:
    usage = {"input_tokens": fresh, "cache_creation_input_tokens": 0, "cache_read_input_tokens": read,
             "output_tokens": 10}
    return _line("assistant", uuid, parent, ts, {"model": "claude-sonnet-4-5", "id": f"msg_01{request}",
                                                 "type": "message", "role": "assistant", "content": [],
                                                 "usage": usage}, side, requestId=request)


def _bash_progress(uuid: str, parent: str, ts: str) -> str:
    obj = {"parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": "/home/me/shop",
           "sessionId": "s1", "version": "2.1.40", "gitBranch": "main", "type": "progress",
           "data": {"type": "bash_progress", "output": BIG, "fullOutput": BIG}, "toolUseID": "toolu_x",
           "parentToolUseID": "toolu_x", "uuid": uuid, "timestamp": ts}
    return json.dumps(obj, separators=(",", ":"))


def _run(cli, path: Path, *more: str) -> dict:
    res = cli("usage", path, "--json", "--workers", "1", "--no-cache", *more)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_a_request_sent_before_midnight_and_answered_after_it_counts_on_the_day_it_was_sent(cli, tmp_path):
    """The day of a request is when it was sent: its parent line's timestamp, whatever lines come between
    and however the parent's keys are ordered."""
    other_order = json.dumps({"parentUuid": "a2", "isSidechain": False, "type": "user",
                              "message": {"role": "user", "content": [{"type": "tool_result", "content": BIG}]},
                              "timestamp": "2026-09-11T23:59:58.000Z", "uuid": "u3"}, separators=(",", ":"))
    lines = [
        _user("u1", None, "2026-09-10T23:59:50.000Z"),
        *(_bash_progress(f"p{k}", "u1", "2026-09-10T23:59:55.000Z") for k in range(20)),  # tool output between
        _assistant("a1", "u1", "2026-09-11T00:00:04.000Z", "req_1", 100, 1000),  # sent on the 10th
        _user("u2", "a1", "2026-09-11T12:00:00.000Z"),
        _assistant("a2", "u2", "2026-09-11T12:00:03.000Z", "req_2", 200, 2000),  # the 11th
        other_order,
        _assistant("a3", "u3", "2026-09-12T00:00:02.000Z", "req_3", 300, 3000),  # sent on the 11th
    ]
    path = tmp_path / "s1.jsonl"
    path.write_text("\n".join(lines) + "\n")
    data = _run(cli, path)
    assert {r["day"]: r["requests"] for r in data["by_day"]} == {"2026-09-10": 1, "2026-09-11": 2}
    assert data["totals"]["fresh_input_tokens"] == 600 and data["totals"]["cache_read_tokens"] == 6000
    assert data["import"]["skipped"] == 0
    # 3 user lines and 20 progress lines are not requests; report agrees on the days
    assert data["import"]["sources"][0]["ignored"] == 23
    report = cli("report", path, "--json")
    assert report.exit_code == 0, report.output
    sent = sorted(r["started_at"][:10] for r in json.loads(report.stdout)["requests"])
    assert sent == ["2026-09-10", "2026-09-11", "2026-09-11"]


def test_a_user_line_cut_short_is_counted_as_malformed(cli, tmp_path):
    lines = [_user("u1", None, "2026-09-10T10:00:00.000Z"),
             _assistant("a1", "u1", "2026-09-10T10:00:03.000Z", "req_1", 100, 1000),
             _user("u2", "a1", "2026-09-10T10:01:00.000Z")[:3000]]  # the write stopped mid-line
    path = tmp_path / "s1.jsonl"
    path.write_text("\n".join(lines) + "\n")
    data = _run(cli, path)
    assert data["totals"]["requests"] == 1
    assert data["import"]["skipped"] == 1
    assert data["import"]["skipped_reasons"] == {"truncated JSON line": 1}


@pytest.mark.parametrize("side", [False, True], ids=["main thread", "inline subagent"])
def test_inline_subagent_lines_tell_the_subagent(cli, tmp_path, side):
    """An inline subagent's user line (isSidechain true) is its chain's first line: the subagent is named by it."""
    lines = [_user("u1", None, "2026-09-10T10:00:00.000Z", side),
             _assistant("a1", "u1", "2026-09-10T10:00:03.000Z", "req_1", 100, 1000, side)]
    path = tmp_path / "s1.jsonl"
    path.write_text("\n".join(lines) + "\n")
    data = _run(cli, path)
    agents = [r["agent"] for r in data["by_agent"]]
    assert agents == (["sidechain-u1"] if side else ["main"])


def test_a_long_user_line_broken_inside_is_counted_as_malformed(cli, tmp_path):
    broken = _user("u2", "a1", "2026-09-10T10:01:00.000Z").replace(BIG, BIG[:100] + "\\q" + BIG[100:], 1)
    lines = [_user("u1", None, "2026-09-10T10:00:00.000Z"),
             _assistant("a1", "u1", "2026-09-10T10:00:03.000Z", "req_1", 100, 1000),
             broken,  # an invalid escape inside the tool result
             _assistant("a2", "u2", "2026-09-10T10:01:03.000Z", "req_2", 200, 2000)]
    path = tmp_path / "s1.jsonl"
    path.write_text("\n".join(lines) + "\n")
    data = _run(cli, path)
    assert data["totals"]["requests"] == 2
    assert data["import"]["skipped_reasons"] == {"invalid JSON line": 1}


def test_a_response_joined_onto_a_long_user_line_is_counted(cli, tmp_path):
    """A user line cut short of its newline, the response appended after it: both read (joined_lines 1)."""
    lines = [_user("u1", None, "2026-09-10T10:00:00.000Z"),
             _assistant("a1", "u1", "2026-09-10T10:00:03.000Z", "req_1", 100, 1000),
             _user("u2", "a1", "2026-09-10T10:01:00.000Z")
             + _assistant("a2", "u2", "2026-09-10T10:01:03.000Z", "req_2", 200, 2000),
             _user("u3", "a2", "2026-09-10T10:02:00.000Z"),
             _assistant("a3", "u3", "2026-09-10T10:02:03.000Z", "req_3", 300, 3000)]
    path = tmp_path / "s1.jsonl"
    path.write_text("\n".join(lines) + "\n")
    data = _run(cli, path)
    assert data["totals"]["requests"] == 3 and data["totals"]["fresh_input_tokens"] == 600
    assert data["import"]["joined_lines"] == 1
