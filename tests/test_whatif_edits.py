"""What a fix does to a request body (kvprobe/whatif/edits.py): a breakpoint marked only within the
provider's limit of 4 (providers/anthropic.toml `max_breakpoints`), every TTL set at once, a block appended
after every breakpoint, the warm-up request cut at a shared prefix; and never a change to the record the fix
was made from (copy on write). Bodies are written here by hand; expected bodies are written out in full."""
from __future__ import annotations

import copy

import pytest

from kvprobe.whatif.edits import mark_breakpoint

EPH = {"type": "ephemeral"}


def body_with(marks: int) -> dict:
    """A request with `marks` breakpoints already set: on the tool, the system text, then message blocks."""
    body = {"model": "claude-sonnet-4-5", "max_tokens": 100,
            "tools": [{"name": "read", "input_schema": {"type": "object"}}],
            "system": [{"type": "text", "text": "You are terse."}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]},
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
