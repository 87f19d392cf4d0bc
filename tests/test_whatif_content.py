"""The content fixes from their rules (whatif/propose_content.py), as `fix` writes them: a session's tool list
sent whole and in one order from its first request (the order of the last list it sent); and a changing
prompt text named for what changes, whole lines ("line") or a part of one ("span")."""
from __future__ import annotations

import json

import pytest

from test_simulator_rules import EPH, claude, words
from test_whatif import rec, reproduce
from kvprobe.pricing import PriceBook
from kvprobe.whatif.evaluate import evaluate

STAMPS = ("10:00:00", "10:01:00", "10:02:00", "10:03:00")


def _timed(place: str, stamp: str, turns: int) -> dict:
    body = claude(turns=turns)
    text = body["system"][0]["text"]
    body["system"][0]["text"] = {
        "first line": f"Current time: {stamp}\n{text}",
        "middle line": f"You are a careful agent.\nCurrent time: {stamp}\n{text}",
        "last line": f"{text}\nCurrent time: {stamp}",
        "inside a line": f"You are an agent; the time is {stamp} in UTC and {text}",
    }[place]
    return body


@pytest.mark.parametrize("place, unit, span", [
    ("first line", "line", "Current time: 10:03:00"),
    ("middle line", "line", "Current time: 10:03:00"),
    ("last line", "line", "Current time: 10:03:00"),
    ("inside a line", "span", "10:03:00"),
])
def test_a_changing_prompt_text_is_named_a_line_when_whole_lines_change(place, unit, span):
    """Four requests 30 s apart, each with its own time in the system prompt: one policy moves it out; it says
    "line(s)" where the time is a line of its own (at the start, in the middle, at the end of the text) and
    "span(s)" where it sits inside a sentence."""
    records = [rec(f"r{i}", 30 * i, _timed(place, stamp, 2 * i + 1)) for i, stamp in enumerate(STAMPS)]
    [fix] = [p for p in evaluate(records, PriceBook()).fixes if p.kind == "stabilize_prefix"]
    assert fix.extra["unit"] == unit and fix.extra["spans"] == [span] and fix.extra["versions"] == 4
    assert fix.detail.startswith(f"move the changing {unit}(s) of system[0] (e.g. \"{span}\")")


def _tool(name: str) -> dict:
    return {"name": name, "description": words(400, f"tool{name}"), "input_schema": {"type": "object"}}


def _with_tools(names: str, turns: int, marked: bool = True, changed: str = "") -> dict:
    body = claude(turns=turns)
    tools = [_tool(n) for n in names]
    for tool in tools:
        if tool["name"] in changed:
            tool["description"] += " (revised)"
    if marked:
        tools[-1]["cache_control"] = EPH
    body["tools"] = tools
    return body


def _written(tmp_path) -> dict[str, list[tuple[str, bool]]]:
    """Each fixed record's tools: (name, marked)."""
    lines = (tmp_path / "fixed.jsonl").read_text().splitlines()
    return {r["id"]: [(t["name"], "cache_control" in t) for t in r["request"]["tools"]]
            for r in map(json.loads, lines)}


@pytest.mark.parametrize("marked", [True, False], ids=["marked", "unmarked"])
def test_fix_sends_the_sessions_whole_tool_list_from_its_first_request(cli, tmp_path, marked):
    """r0 sends tools A B, r1 and r2 insert X between them (Claude Code loading a tool mid-task): r1 cannot read
    r0's entry. The fix sends A X B (the order of the last list sent, so r1 and r2 stay as they are) from r0
    on, the cache mark where the session put it (on the last tool, or nowhere), and r1 then reads r0's
    entry: the saving `fix` states is the one the two reports show (`reproduce`)."""
    records = [rec("r0", 0, _with_tools("AB", 1, marked)), rec("r1", 30, _with_tools("AXB", 3, marked)),
               rec("r2", 60, _with_tools("AXB", 5, marked))]
    fix = reproduce(cli, tmp_path, records, "stabilize_prefix")
    assert fix["requests"] == ["r1"] and fix["edited_requests"] == 1
    assert fix["detail"].startswith("send each session's full tool list (3 definitions), in one fixed order")
    want = [("A", False), ("X", False), ("B", marked)]
    assert _written(tmp_path) == {"r0": want, "r1": want, "r2": want}


def test_no_tool_list_is_proposed_when_a_definition_changed(cli, tmp_path):
    """r1 revises tool A's description and inserts X: no one list holds both versions of A, so no stable
    list is proposed (the change is a content change of tools[0], not an order)."""
    records = [rec("r0", 0, _with_tools("AB", 1)), rec("r1", 30, _with_tools("AXB", 3, changed="A")),
               rec("r2", 60, _with_tools("AXB", 5, changed="A"))]
    assert [p for p in evaluate(records, PriceBook()).fixes if p.extra.get("path") == "tools"] == []
