"""`diff`: earliest change, parameter changes, and predicted reuse."""
from __future__ import annotations

from conftest import anthropic_body, openai_chat_body
from kvprobe.diff import diff_requests
from kvprobe.request import render_request
from kvprobe.tokens import count_text


def diff(a, b):
    return diff_requests(render_request(a), render_request(b))


def test_identical_requests_reuse_everything():
    r = diff(anthropic_body(), anthropic_body())
    assert r.identical and r.first_change is None and not r.breaks_reuse
    assert r.predicted.cache_read_tokens == r.b_tokens  # all of B up to its last breakpoint
    assert r.predicted.cache_write_tokens == 0


def test_moving_a_breakpoint_is_not_a_change():
    b = anthropic_body()
    b["system"][0].pop("cache_control")
    b["tools"][1]["cache_control"] = {"type": "ephemeral"}
    r = diff(anthropic_body(), b)
    assert r.identical and r.first_change is None


def test_appended_turn_extends_and_reads_the_old_prefix():
    a = anthropic_body()
    b = anthropic_body()
    b["messages"][2]["content"][0].pop("cache_control")
    b["messages"] += [{"role": "assistant", "content": "The bug is on line 3."},
                      {"role": "user", "content": [{"type": "text", "text": "Fix it.",
                                                    "cache_control": {"type": "ephemeral"}}]}]
    r = diff(a, b)
    assert r.extends and not r.identical and r.first_change is None and not r.breaks_reuse
    assert r.predicted.cache_read_tokens == r.a_tokens
    assert r.predicted.cache_write_tokens == r.b_tokens - r.a_tokens


def test_reordering_tools_is_a_change_at_tools_0():
    b = anthropic_body()
    b["tools"].reverse()
    r = diff(anthropic_body(), b)
    assert r.first_change.path == "tools[0]"
    assert "reordered" in r.first_change.detail
    assert r.predicted.cache_read_tokens == 0  # tools come first: nothing survives


def test_timestamp_in_system_prompt_is_found_and_named():
    a = anthropic_body()
    b = anthropic_body()
    a["system"][0]["text"] = "Current time: 2026-09-10T10:07:55Z. " + a["system"][0]["text"]
    b["system"][0]["text"] = "Current time: 2026-09-10T10:08:40Z. " + b["system"][0]["text"]
    r = diff(a, b)
    fc = r.first_change
    assert fc.path == "system[0]" and fc.char_offset == len("Current time: 2026-09-10T10:0")
    assert "timestamp" in fc.detail
    assert "10:07:55" in fc.a_snippet and "10:08:40" in fc.b_snippet
    assert fc.token_position > sum(b.tokens for b in render_request(a).blocks[:0])
    assert r.predicted.cache_read_tokens == 0 and r.breaks_reuse


def test_change_in_the_middle_of_a_50k_token_block_openai_exact():
    words = [f"line {i}: the quick brown fox jumps over the lazy dog\n" for i in range(4200)]
    text = "".join(words)
    a = openai_chat_body(messages=[{"role": "system", "content": "You help."},
                                   {"role": "user", "content": text}])
    middle = len(text) // 2
    changed = text[:middle] + "CHANGED" + text[middle:]
    b = openai_chat_body(messages=[{"role": "system", "content": "You help."},
                                   {"role": "user", "content": changed}])
    ra = render_request(a)
    assert sum(count_text(x.text) for x in ra.blocks) > 50_000
    r = diff_requests(ra, render_request(b))
    fc = r.first_change
    assert fc.path == "messages[1]" and fc.char_offset == middle
    exact = sum(count_text(x.text) for x in ra.blocks[:2]) + 3 * 2 + count_text(text[:middle])
    assert abs(fc.token_position - exact) <= 0.02 * exact
    assert fc.token_position_exact
    # implicit caching reads the unchanged part of the block, in 128-token steps
    assert r.predicted.cache_read_tokens % 128 == 0
    assert abs(r.predicted.cache_read_tokens - fc.token_position) < 128 + 2


def test_tool_choice_change_invalidates_messages_only():
    r = diff(anthropic_body(), anthropic_body(tool_choice={"type": "any"}))
    assert r.params_changed == [{"name": "tool_choice", "a": None, "b": {"type": "any"},
                                 "invalidates": "messages"}]
    assert r.first_change is None and r.breaks_reuse
    system_bp = r.breakpoints[0]
    assert system_bp.path == "system[0]" and system_bp.reusable  # tools + system survive
    assert not r.breakpoints[1].reusable
    assert r.predicted.cache_read_tokens == system_bp.prefix_tokens


def test_model_change_invalidates_all():
    r = diff(anthropic_body(), anthropic_body(model="claude-opus-4-1"))
    assert [p["invalidates"] for p in r.params_changed] == ["all"]
    assert r.predicted.cache_read_tokens == 0
    assert not any(bp.reusable for bp in r.breakpoints)


def test_below_minimum_prefix_caches_nothing():
    small = anthropic_body(system=[{"type": "text", "text": "Short.", "cache_control": {"type": "ephemeral"}}])
    for m in small["messages"]:
        if isinstance(m["content"], list):
            for p in m["content"]:
                p.pop("cache_control", None)
    r = diff(small, small)
    assert r.predicted.cache_read_tokens == 0 and r.predicted.cache_write_tokens == 0
    assert r.predicted.evidence and r.predicted.evidence[0].kind == "below_minimum"
