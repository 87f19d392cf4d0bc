"""What a fix does to a request body (kvprobe/whatif/edits.py): a breakpoint marked only within the
provider's limit of 4 (providers/anthropic.toml `max_breakpoints`), every TTL set at once, a block appended
after every breakpoint, the warm-up request cut at a shared prefix; and never a change to the record the fix
was made from (copy on write). Bodies are written here by hand; expected bodies are written out in full."""
from __future__ import annotations

import copy

import pytest

from kvprobe.trace import TraceRecord
from kvprobe.whatif.edits import (append_after_last_breakpoint, copy_record, mark_breakpoint, truncated_through,
                                    with_all_ttls)

EPH = {"type": "ephemeral"}


def body_with(marks: int) -> dict:
    """A request with `marks` breakpoints already set: on the tool, the system text, then message blocks."""
    body = {"model": "claude-sonnet-4-5", "max_tokens": 100,
            "tools": [{"name": "read", "input_schema": {"type": "object"}}],
            "system": [{"type": "text", "text": "You are terse."}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "one"},
                                                      {"type": "text", "text": "two"}]},
                         {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
                         {"role": "user", "content": [{"type": "text", "text": "three"}]}]}
    places = [body["tools"][0], body["system"][0], body["messages"][0]["content"][0], body["messages"][0]["content"][1]]
    for block in places[:marks]:
        block["cache_control"] = dict(EPH)
    return body


@pytest.mark.parametrize("marks, placed", [(2, True), (3, True), (4, False)])
def test_a_breakpoint_is_marked_only_under_the_limit_of_four(marks, placed):
    body = body_with(marks)
    before = copy.deepcopy(body)
    assert mark_breakpoint(body, "messages[2].content[0]", ttl="1h") is placed
    if placed:
        before["messages"][2]["content"][0]["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
    assert body == before


def test_a_marked_block_stays_marked_and_a_missing_block_is_no_mark():
    body = body_with(4)
    before = copy.deepcopy(body)
    assert mark_breakpoint(body, "tools[0]", ttl="1h") is True  # already marked: kept as it was, at the limit
    assert mark_breakpoint(body, "messages[7].content[0]") is False  # no such message
    assert mark_breakpoint(body, "system[3]") is False and mark_breakpoint(body, "notapath") is False
    assert body == before


def test_a_mark_without_a_ttl_is_the_default_lifetime_and_the_original_is_not_touched():
    original = body_with(0)
    before = copy.deepcopy(original)
    body = dict(original)  # what copy_record hands an edit: the top level only
    assert mark_breakpoint(body, "messages[0].content[1]") is True
    assert body["messages"][0]["content"][1] == {"type": "text", "text": "two", "cache_control": {"type": "ephemeral"}}
    assert original == before


@pytest.mark.parametrize("marks, extra, placed", [
    (3, {"cache_control": dict(EPH)}, False),  # automatic caching's top-level marker counts: 3 + 1 = 4
    (2, {"cache_control": dict(EPH)}, True),  # ... once: 2 + 1 = 3
    (4, {"system": "You are terse."}, True),  # a system string holds no marker: 4 - 1 = 3
    (1, {"system": None}, True),  # no system at all: the tool's marker only
    (3, {"system": [{"type": "text", "text": "You are terse.", "cache_control": dict(EPH)},
                    {"type": "text", "text": "Unmarked."}, "not a block"]}, True),  # unmarked parts count nothing
])
def test_every_marker_counts_toward_the_limit_wherever_it_sits(marks, extra, placed):
    body = {**body_with(marks), **extra}
    body["tools"].append("not a tool")  # a hand-written body may hold anything: it counts nothing
    body["messages"].insert(0, "not a message")
    assert mark_breakpoint(body, "messages[3].content[0]") is placed


def test_every_ttl_is_set_at_once_and_what_did_not_change_is_the_same_object():
    body = body_with(4)
    body["tools"][0]["cache_control"] = {"type": "ephemeral", "ttl": "1h"}  # already 1h
    before = copy.deepcopy(body)
    new, changed = with_all_ttls(body, "1h")
    assert changed is True and body == before
    expected = copy.deepcopy(before)
    for block in (expected["system"][0], *expected["messages"][0]["content"]):
        block["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
    assert new == expected
    assert new["tools"] is body["tools"] and new["messages"][1] is body["messages"][1]  # copied only where changed
    again, changed = with_all_ttls(new, "1h")
    assert again is new and changed is False
    unmarked = body_with(0)
    unmarked["system"][0]["cache_control"] = "ephemeral"  # not a marker object: nothing to set a ttl on
    assert with_all_ttls(unmarked, "1h") == (unmarked, False)


def test_a_block_appended_after_the_last_breakpoint_ends_the_last_user_turn():
    original = body_with(4)
    original["messages"][2]["content"] = "three"  # a user turn given as a string
    before = copy.deepcopy(original)
    body = dict(original)
    append_after_last_breakpoint(body, "Current time: 09:00")
    assert original == before
    assert body["messages"][2] == {"role": "user", "content": [{"type": "text", "text": "three"},
                                                               {"type": "text", "text": "Current time: 09:00"}]}
    assert body["messages"][:2] == before["messages"][:2]


def test_a_block_appended_after_an_assistant_turn_is_a_user_turn_of_its_own_and_no_messages_is_no_change():
    body = body_with(0)
    body["messages"] = body["messages"][:2]  # ends with the assistant's turn
    append_after_last_breakpoint(body, "now")
    assert body["messages"][2] == {"role": "user", "content": [{"type": "text", "text": "now"}]}
    assert len(body["messages"]) == 3
    empty = {"model": "claude-sonnet-4-5", "messages": []}
    append_after_last_breakpoint(empty, "now")
    assert empty == {"model": "claude-sonnet-4-5", "messages": []}


def test_the_warm_up_request_ends_at_the_shared_blocks_user_turn_marked_and_answers_one_token():
    original = body_with(2)  # tool and system marked
    before = copy.deepcopy(original)
    out = truncated_through(original, "messages[0].content[0]")
    assert original == before
    assert out == {**before, "max_tokens": 1,
                   "messages": [{"role": "user", "content": [{"type": "text", "text": "one", "cache_control": EPH}]}]}
    second = truncated_through(original, "messages[0].content[1]")  # both blocks kept, the second marked
    assert second["messages"] == [{"role": "user", "content": [{"type": "text", "text": "one"},
                                                               {"type": "text", "text": "two", "cache_control": EPH}]}]
    whole = truncated_through(original, "messages[2]")  # a turn's path: the whole turn, its first block marked
    assert whole["messages"] == [*before["messages"][:2],
                                 {"role": "user", "content": [{"type": "text", "text": "three", "cache_control": EPH}]}]


@pytest.mark.parametrize("marks, path", [
    (2, "messages[1].content[0]"),  # an assistant turn: no warm-up ends there
    (2, "messages[3].content[0]"),  # no such turn
    (2, "system[0]"),  # not a message
    (2, "messages"),  # no turn named
    (4, "messages[2].content[0]"),  # four marks already: the warm-up cannot mark its end
])
def test_no_warm_up_where_it_cannot_end_a_user_turn_marked(marks, path):
    original = body_with(marks)
    before = copy.deepcopy(original)
    assert truncated_through(original, path) is None and original == before


def test_a_copied_record_keeps_the_output_it_logged_and_drops_its_response():
    usage = {"input_tokens": 10, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0, "output_tokens": 321}
    rec = TraceRecord(id="r1", provider="anthropic", started_at=100.0, request=body_with(1),
                      response={"usage": usage}, extra={"task": "t"})
    new = copy_record(rec, id="r1+keepalive1", started_at=400.0)
    assert (new.id, new.started_at, new.response, new.extra) == ("r1+keepalive1", 400.0, None,
                                                                 {"task": "t", "output_tokens": 321})
    assert new.request == rec.request and new.request is not rec.request
    assert rec.extra == {"task": "t"} and rec.response == {"usage": usage}
    unlogged = copy_record(TraceRecord(id="r2", provider=None, started_at=0.0, request=None))
    assert (unlogged.request, unlogged.extra) == (None, {})
    # a record of no named provider is read by its usage's own shape; a copy of a copy keeps the first output
    unnamed = copy_record(TraceRecord(id="r3", provider=None, started_at=0.0, request=body_with(0),
                                      response={"usage": usage}))
    assert unnamed.extra == {"output_tokens": 321}
    unnamed = copy_record(TraceRecord(id="r5", provider=None, started_at=0.0, request={"contents": []},
                                      response={"usageMetadata": {"promptTokenCount": 900, "candidatesTokenCount": 77}}))
    assert unnamed.extra == {"output_tokens": 77}  # Gemini's: read as Anthropic's it was 0
    again = copy_record(TraceRecord(id="r4", provider="anthropic", started_at=0.0, request=body_with(0),
                                    response={"usage": {**usage, "output_tokens": 1}}, extra={"output_tokens": 321}))
    assert again.extra == {"output_tokens": 321}
    # Gemini logs usageMetadata: its output is candidatesTokenCount, read by the record's own provider
    gemini = copy_record(TraceRecord(id="g1", provider="gemini", started_at=0.0, request={"contents": []},
                                     response={"usageMetadata": {"promptTokenCount": 900, "candidatesTokenCount": 77,
                                                                 "totalTokenCount": 977}}))
    assert gemini.extra == {"output_tokens": 77}


def test_a_copied_record_reads_its_output_as_its_own_provider_counts_it():
    # Anthropic counts output in output_tokens (and caches nothing here: no cache counts). A proxy that adds an
    # OpenAI-style completion_tokens beside it (no prompt_tokens: still Anthropic's shape) does not change what
    # the answer cost: 200 output tokens, not the 150 an OpenAI reading of the same object takes
    usage = {"input_tokens": 900, "output_tokens": 200, "completion_tokens": 150}
    rec = TraceRecord(id="a1", provider="anthropic", started_at=0.0, request=body_with(0), response={"usage": usage})
    assert copy_record(rec).extra == {"output_tokens": 200}
