"""What Anthropic's simulated cache says about an entry it could not read, and the entry a second writer leaves.

Rules (docs/caching-rules.md, Anthropic): a breakpoint looks back for the longest live, readable entry, so an
expired or still-being-written entry at a later block does not stop it reading an earlier one; an entry is
readable once the response writing it has begun, and a second request writing the same entry while it is not
yet readable neither makes it readable later nor becomes its writer; an entry written again after it expired
is readable only once that new write's response has begun; a breakpoint below the minimum (Sonnet 4.5: 1,024)
writes nothing, and the diagnosis names it.

Block sizes are set by hand on the rendered requests (test_openai_breakpoints.sized): a 2,000-token system
prompt and a 50-token question, each with or without a breakpoint.
"""
from __future__ import annotations

import pytest

from kvprobe.sim import AnthropicCache
from test_openai_breakpoints import OneCache, evidence, sized

EPH = {"type": "ephemeral"}
QUESTION = "messages[0].content[0]"


def claude(question: str, system_marked: bool = True, system: int = 2_000):
    part = {"type": "text", "text": "You are a careful reviewer."}
    if system_marked:
        part["cache_control"] = EPH
    body = {"model": "claude-sonnet-4-5", "max_tokens": 100, "system": [part],
            "messages": [{"role": "user", "content": [{"type": "text", "text": question, "cache_control": EPH}]}]}
    return sized(body, [system, 50])


def test_an_expired_entry_is_named_and_a_live_earlier_one_is_still_read():
    """r1 at 0 s writes the system prompt and question 1 (both expire at 300 s); r2 at 200 s asks question 2 and
    reads the system prompt (now until 500 s). r3 at 400 s, marking only question 1: its entry expired 100 s
    before, the system prompt's is read through the lookback."""
    cache = OneCache(AnthropicCache())
    cache.send(claude("Review PR 1."), 0, "r1")
    assert cache.send(claude("Review PR 2."), 200, "r2").cache_read_tokens == 2_000
    third = cache.send(claude("Review PR 1.", system_marked=False), 400, "r3")
    assert (third.cache_read_tokens, third.cache_write_tokens) == (2_000, 50)
    assert evidence(third) == [("ttl_expired", 1, 100, None)]
    assert third.evidence[0].detail == f"the entry at {QUESTION} expired 100s before this request started"


def test_an_entry_still_being_written_is_named_and_a_readable_earlier_one_is_still_read():
    """r1 at 0 s (readable at 1 s); r2 at 10 s asks question 2, its response beginning at 100 s. r3 at 20 s,
    marking only question 2: that entry is still being written by r2; the system prompt's is read."""
    cache = OneCache(AnthropicCache())
    cache.send(claude("Review PR 1."), 0, "r1")
    cache.send(claude("Review PR 2."), 10, "r2", readable_at=100)
    third = cache.send(claude("Review PR 2.", system_marked=False), 20, "r3")
    assert (third.cache_read_tokens, third.cache_write_tokens) == (2_000, 50)
    assert evidence(third) == [("not_yet_readable", 1, None, "r2")]
    assert third.evidence[0].detail == f"the entry at {QUESTION} was still being written by r2"


def test_a_second_writer_of_an_entry_not_yet_readable_leaves_it_to_the_first():
    """r1 at 0 s, its response beginning at 30 s; r2 at 10 s and r3 at 20 s send it again (nothing readable:
    each writes all 2,050 tokens again, their responses beginning at 40 and 50 s). The entries stay r1's,
    readable from 30 s."""
    cache = OneCache(AnthropicCache())
    cache.send(claude("Review PR 1."), 0, "r1", readable_at=30)
    assert cache.send(claude("Review PR 1."), 10, "r2", readable_at=40).cache_write_tokens == 2_050
    early = cache.send(claude("Review PR 1."), 20, "r3", readable_at=50)  # a third writer, as long
    assert (early.cache_read_tokens, {e[3] for e in evidence(early)}) == (0, {"r1"})
    assert cache.send(claude("Review PR 1."), 30, "r4").cache_read_tokens == 2_050


def test_an_entry_written_again_after_it_expired_is_readable_only_from_the_new_write():
    """r1 at 0 s (expires at 300 s); r2 at exactly 300 s finds it gone and writes it again, its response
    beginning at 350 s: r3 at 310 s reads nothing and names r2."""
    cache = OneCache(AnthropicCache())
    cache.send(claude("Review PR 1."), 0, "r1")
    assert cache.send(claude("Review PR 1."), 300, "r2", readable_at=350).cache_write_tokens == 2_050
    third = cache.send(claude("Review PR 1."), 310, "r3")
    assert (third.cache_read_tokens, {e[3] for e in evidence(third)}) == (0, {"r2"})


def test_a_last_breakpoint_below_the_minimum_is_named_with_its_path():
    """A 500-token system prompt and a 50-token question: 550 tokens through the last breakpoint, under 1,024."""
    pred = OneCache(AnthropicCache()).send(claude("Review PR 1.", system=500), 0, "r1")
    assert (pred.cache_write_tokens, pred.fresh_input_tokens) == (0, 550)
    [ev] = pred.evidence
    assert (ev.kind, ev.block_index, ev.prefix_tokens, ev.minimum_tokens) == ("below_minimum", 1, 550, 1_024)
    assert ev.detail == f"the prefix through {QUESTION} is 550 tokens; the minimum for this model is 1024"


def long_turn(system_marked: bool = False):
    """The system prompt, then 25 short messages, the last one marked: 26 positions from the system prompt."""
    part = {"type": "text", "text": "You are a careful reviewer."}
    if system_marked:
        part["cache_control"] = EPH
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"Step {i}."} for i in range(24)]
    messages.append({"role": "user", "content": [{"type": "text", "text": "Step 24.", "cache_control": EPH}]})
    body = {"model": "claude-sonnet-4-5", "max_tokens": 100, "system": [part], "messages": messages}
    return sized(body, [2_000] + [10] * 25)


@pytest.mark.parametrize("at, readable_at, named", [(299, 1, True), (300, 1, False), (10, 10, True),
                                                    (10, 11, False)])
def test_a_live_readable_entry_beyond_the_window_is_named_until_it_expires(at, readable_at, named):
    """r1 at 0 s writes the system prompt (expires at 300 s, readable from `readable_at`); r2 marks only its
    last message, 26 positions on: the window (20) does not reach the entry. While it is live and readable
    the diagnosis names it; expired (at exactly 300 s) or not yet readable, it does not."""
    cache = OneCache(AnthropicCache())
    cache.send(claude("Review PR 1."), 0, "r1", readable_at=readable_at)
    pred = cache.send(long_turn(), at, "r2")
    assert pred.cache_read_tokens == 0
    lookback = [(e.block_index, e.positions_back, e.detail) for e in pred.evidence if e.kind == "lookback_exceeded"]
    assert lookback == ([(0, 26, "a live entry at system[0] is 26 positions back from the last breakpoint; the "
                          "window is 20")] if named else [])


def test_a_breakpoint_before_the_one_read_writes_its_entry_at_no_charge():
    """r1 marks only the question; r2 marks the system prompt too and reads all 2,050 tokens at the question:
    the system prompt's entry is written with nothing charged, and r3's new question reads it."""
    cache = OneCache(AnthropicCache())
    cache.send(claude("Review PR 1.", system_marked=False), 0, "r1")
    second = cache.send(claude("Review PR 1."), 10, "r2")
    assert (second.cache_read_tokens, second.cache_write_tokens) == (2_050, 0)
    assert cache.send(claude("Review PR 2."), 20, "r3").cache_read_tokens == 2_000


@pytest.mark.parametrize("at, read", [(3_600, 2_000), (3_601, 0)])
def test_a_1h_entry_read_by_a_request_marking_5_minutes_keeps_its_hour(at, read):
    """r1 at 0 s writes the system prompt for 1 hour; r2 at 1 s, the moment r1's response begins, marks it with
    the default 5 minutes and reads it: the entry is refreshed for its own hour, until 3,601 s."""
    def marked(ttl: str | None, question: str):
        body = {"model": "claude-sonnet-4-5", "max_tokens": 100,
                "system": [{"type": "text", "text": "You are a careful reviewer.",
                            "cache_control": {**EPH, **({"ttl": ttl} if ttl else {})}}],
                "messages": [{"role": "user", "content": question}]}
        return sized(body, [2_000, 50])
    cache = OneCache(AnthropicCache())
    cache.send(marked("1h", "Review PR 1."), 0, "r1")
    assert cache.send(marked(None, "Review PR 2."), 1, "r2").cache_read_tokens == 2_000
    assert cache.send(marked(None, "Review PR 3."), at, "r3").cache_read_tokens == read


def test_a_live_entry_after_the_last_breakpoint_is_not_named_as_beyond_the_window():
    """r1 marks its question and writes 2,050 tokens; r2 sends the same text marking only the system prompt:
    it reads nothing (reads happen only at or before a breakpoint) and writes the 2,000; r1's entry lies
    after its breakpoint, not beyond a window."""
    cache = OneCache(AnthropicCache())
    cache.send(claude("Review PR 1.", system_marked=False), 0, "r1")
    body = {"model": "claude-sonnet-4-5", "max_tokens": 100,
            "system": [{"type": "text", "text": "You are a careful reviewer.", "cache_control": EPH}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Review PR 1."}]}]}
    second = cache.send(sized(body, [2_000, 50]), 10, "r2")
    assert (second.cache_read_tokens, second.cache_write_tokens, second.evidence) == (0, 2_000, [])
