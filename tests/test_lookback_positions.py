"""`kvprobe lint` counts lookback positions as the simulator does (kvprobe.sim.positions).

Rule (docs/caching-rules.md, Anthropic lookback; providers/anthropic.toml): a breakpoint looks back at most
20 positions, its own block counting as 1; a run of consecutive tool_use blocks is one position, and so is a
run of tool_result blocks (`lookback_counting = "grouped_tool_runs"`). A lone request whose last breakpoint
has 20 or more positions after it gets KV109: the next request's breakpoint at its end will not reach back.
"""
from __future__ import annotations

import pytest

from test_lint import EPH, FILLER, lint_json, write, write_trace

SYSTEM = [{"type": "text", "text": "You are Ada." + FILLER, "cache_control": EPH}]


def tool_turns(pairs: int) -> list[dict]:
    """A question, then `pairs` turns of two tool calls and their two results: 1 + 2 x pairs positions."""
    out = [{"role": "user", "content": [{"type": "text", "text": "Start."}]}]
    for i in range(pairs):
        out.append({"role": "assistant", "content": [
            {"type": "tool_use", "id": f"toolu_{i}a", "name": "grep", "input": {"pattern": "login"}},
            {"type": "tool_use", "id": f"toolu_{i}b", "name": "read_file", "input": {"path": "app.py"}}]})
        out.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{i}a", "content": "app.py:3"},
            {"type": "tool_result", "tool_use_id": f"toolu_{i}b", "content": "def login(): ..."}]})
    return out


@pytest.mark.parametrize("tail, after", [([], 19), ([{"role": "assistant", "content": "Done."}], 20)])
def test_tool_runs_count_one_position_each_after_the_last_breakpoint(cli, tmp_path, tail, after):
    """9 turns of 36 tool blocks after the marked system prompt: 1 + 18 = 19 positions (a finding only if
    each block counted: 37); an answer after them makes 20, the window's edge."""
    body = {"model": "claude-sonnet-4-5", "max_tokens": 100, "system": SYSTEM, "messages": tool_turns(9) + tail}
    _, data = lint_json(cli, write(tmp_path, "request.json", body))
    lookback = [f["message"] for f in data["findings"] if f["rule"] == "KV109"]
    if after < 20:
        assert lookback == []
    else:
        assert lookback == ["20 block positions follow the last breakpoint (system[0]): a breakpoint at the end of "
                            "the next request looks back at most 20 positions and will not find the entry written "
                            "here"]


def test_an_entry_at_the_first_block_is_one_position_from_the_same_breakpoint(cli, tmp_path):
    """Two requests of one session marking only their first block (the system prompt, no tools): the second's
    breakpoint is 1 position from the entry the first wrote there: within the window."""
    def body(question: str) -> dict:
        return {"model": "claude-sonnet-4-5", "max_tokens": 100, "system": SYSTEM,
                "messages": [{"role": "user", "content": question}]}
    _, data = lint_json(cli, write_trace(tmp_path, [body("Fix the login bug."), body("Add a test.")]))
    assert [f for f in data["findings"] if f["rule"] == "KV109"] == []
