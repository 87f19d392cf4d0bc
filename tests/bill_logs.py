"""A small Claude Code folder whose bill is worked out by hand (tests/test_bill.py holds the figures).

Two projects, two sessions, two models, a subagent, 1h and 5m cache writes, and a pause past the 5-minute
lifetime. Claude Sonnet 4.5 at $3 / $15 per million input / output tokens, Claude Haiku 4.5 at $1 / $5;
cache reads at 0.1x input, 5m writes at 1.25x, 1h writes at 2x (Anthropic's list prices).
"""
from __future__ import annotations

from pathlib import Path

from agent_logs import ClaudeTranscript

SONNET, HAIKU = "claude-sonnet-4-5", "claude-haiku-4-5-20251001"


def bill_folder(root: Path) -> Path:
    """~/.claude/projects with session sA in /home/me/app (renamed "fix the login bug", a subagent) and sB in
    /home/me/api (its first prompt is its title)."""
    a = ClaudeTranscript("sA", cwd="/home/me/app")
    a.user(0, "Please look at the login form")
    a.assistant(2, "rA1", read=0, write=10_000, fresh=1_000, output=1_000, model=SONNET)
    a.tool_result(10)
    a.assistant(12, "rA2", read=10_000, write=2_000, fresh=0, output=2_000, ttl="1h", model=SONNET)
    a.lines.append({"type": "custom-title", "customTitle": "fix the login bug", "sessionId": "sA"})
    a.write(root / "-home-me-app" / "sA.jsonl")
    sub = ClaudeTranscript("sA", cwd="/home/me/app")
    sub.user(20, "find the form's handler")
    sub.assistant(22, "rA3", read=0, write=0, fresh=2_000, output=100, model=HAIKU)
    sub.write(root / "-home-me-app" / "sA" / "subagents" / "agent-a1.jsonl")
    b = ClaudeTranscript("sB", cwd="/home/me/api")
    b.user(3600, "add rate limits to the API")
    b.assistant(3602, "rB1", read=0, write=20_000, fresh=0, output=500, model=HAIKU)
    b.tool_result(3600 + 1200)  # 20 minutes later: the 5-minute entry has expired
    b.assistant(3602 + 1200, "rB2", read=0, write=20_000, fresh=0, output=500, model=HAIKU)
    b.write(root / "-home-me-api" / "sB.jsonl")
    return root
