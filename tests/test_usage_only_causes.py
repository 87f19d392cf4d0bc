"""Usage-only causes word for word: each cause a usage-only log can carry (the events before a miss, the level
a read falls to, a pause against the lifetime in force, a model switch, a cut prompt), at the edges of the
rules that choose between them, with every field a user reads (`report --json`'s diagnosis) written out.

The traces are kvprobe's own format with `request` absent (docs/contracts.md §1: what an importer writes for a
usage-only log), so each test sets exactly the usage, the events and the times it needs. Claude Sonnet 4.5 on
the first-party API: 5-minute entries (300 s), 1h entries on request, no routing rule; the estimate noise is
1% of the prompt (rounded), so a read within it of the ideal is no miss. Figures are worked out by hand in
the comments: a request's input is fresh + read + written; what it leaves cached is read + written.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvprobe.report import build_report

SONNET, HAIKU = "claude-sonnet-4-5", "claude-haiku-4-5-20251001"
T0 = 1_770_000_000.0
# The advice of analysis/usage_only.py, as a user reads it in a diagnosis
TOOLS_ADVICE = ("connect tool (MCP) servers before the session starts: a reconnect or a new server mid-session "
                "changes the tool list, the first thing every cached prefix holds")
SETTINGS_ADVICE = ("keep reasoning effort and instructions fixed within a session: a change starts the "
                   "conversation's cache again")
LEVEL_ADVICE = ("the log cannot show what changed: compare two requests' bodies (capture them with `kvprobe "
                "capture`) or the provider's cache diagnostics")
NOTHING_SAYS_WHY = ("within the entry's lifetime, and nothing in the log says why: the prefix changed in a way the "
                    "log does not show, or the entry was evicted or served elsewhere")


def rec(rid: str, t: float, read: int, write: int, fresh: int = 3, *, model: str = SONNET, session: str = "s",
        w1h: int = 0, events: list[Any] | None = None, **extra: Any) -> dict[str, Any]:
    """A usage-only record: `write` tokens written (of them `w1h` as 1h entries), sent at T0 + t."""
    usage = {"input_tokens": fresh, "cache_read_input_tokens": read, "cache_creation_input_tokens": write,
             "cache_creation": {"ephemeral_5m_input_tokens": write - w1h, "ephemeral_1h_input_tokens": w1h},
             "output_tokens": 50}
    out = {"id": rid, "session": session, "provider": "anthropic", "started_at": T0 + t,
           "response": {"model": model, "usage": usage}, **extra}
    if events is not None:
        out["events"] = events
    return out


def report(tmp_path: Path, *records: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each request of the trace as `report --json` lists it (id -> row)."""
    path = tmp_path / "usage.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return {row["id"]: row for row in build_report([str(path)], fixes=False).to_json()["requests"]}


def the_cause(row: dict[str, Any]) -> dict[str, Any]:
    [d] = row["diagnoses"]
    return d


# a at 0 s writes 10,000; b at 10 s reads them and writes 2,000 more: b leaves 12,000 cached
OPENING = (rec("a", 0, read=0, write=10_000), rec("b", 10, read=10_000, write=2_000))


def test_every_event_before_a_miss_is_named_strongest_first_and_the_first_gives_path_and_advice(tmp_path):
    # c at 20 s reads 4,000 of the 12,000 b left (input 3 + 4,000 + 8,500 = 12,503; noise 125): a miss of 8,000.
    # The log's events, in the order the importer saw them, with lines a hand-written trace may hold besides
    events = [{"kind": "interrupt"}, {"kind": "task_notification"}, {"kind": "command", "name": "/mcp"},
              {"kind": "command"}, {"kind": "settings_changed", "settings": ["effort", "model"]},
              {"kind": "tool_first_used", "name": "mcp__db__query"}, {"kind": "tools_changed"},
              {"kind": "interrupt"}, "a line", {"detail": "no kind"}, {"kind": 7}, {"kind": "compaction_x"}]
    rows = report(tmp_path, *OPENING, rec("c", 20, read=4_000, write=8_500, events=events))
    assert the_cause(rows["c"]) == {
        "kind": "prefix_changed", "inferred": True, "path": "tools", "token_position": 4_000, "missed_tokens": 8_000,
        "detail": "the read fell from 12,000 to 4,000 tokens: the prefix broke after 4,000 tokens (10s after b); "
                  "likely trigger (inferred from the log): the tool list changed (a tool server reconnected) and "
                  "a tool not used before in this session appeared (mcp__db__query): the tool list may have "
                  "changed and settings changed (effort, model) and the /mcp command ran and a command ran and "
                  "a background task's notification arrived and the user interrupted the turn",
        "triggers": ["tools_changed", "tool_first_used", "settings_changed", "command", "task_notification",
                     "interrupt"],
        "advice": TOOLS_ADVICE, "evidence": "log_events"}
