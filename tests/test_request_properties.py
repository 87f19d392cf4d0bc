"""Properties of the request model that must hold for any conversation (hypothesis)."""
from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from kvprobe.diff import diff_requests
from kvprobe.request import render_request

text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=60)
part = st.one_of(
    text.map(lambda t: {"type": "text", "text": t}),
    st.tuples(text, text).map(lambda p: {"type": "tool_result", "tool_use_id": "t" + str(len(p[0])),
                                         "content": p[1]}),
)
messages = st.lists(st.lists(part, min_size=1, max_size=3), min_size=1, max_size=5).map(
    lambda turns: [{"role": "user" if i % 2 == 0 else "assistant", "content": parts} for i, parts in enumerate(turns)])


def body(msgs, system="You are careful.") -> dict:
    return {"model": "claude-sonnet-5", "max_tokens": 10, "system": [{"type": "text", "text": system}],
            "messages": copy.deepcopy(msgs)}


@settings(max_examples=60, deadline=None)
@given(messages, st.data())
def test_moving_markers_never_changes_identity(msgs, data):
    a = body(msgs)
    b = body(msgs)
    blocks = [p for m in b["messages"] for p in m["content"]]
    for p in data.draw(st.lists(st.sampled_from(blocks), max_size=3)):
        p["cache_control"] = {"type": "ephemeral", "ttl": data.draw(st.sampled_from(["5m", "1h"]))}
    ra, rb = render_request(a), render_request(b)
    assert [x.cache_key for x in ra.blocks] == [y.cache_key for y in rb.blocks]
    assert diff_requests(ra, rb).identical


@settings(max_examples=60, deadline=None)
@given(messages, messages)
def test_an_appended_turn_always_extends(msgs, more):
    a = body(msgs)
    b = body(msgs + more)
    result = diff_requests(render_request(a), render_request(b))
    assert result.extends and result.first_change is None and not result.breaks_reuse


@settings(max_examples=60, deadline=None)
@given(messages, text, text)
def test_a_changed_system_prompt_is_the_first_change(msgs, s1, s2):
    if s1 == s2:
        return
    result = diff_requests(render_request(body(msgs, s1)), render_request(body(msgs, s2)))
    fc = result.first_change
    assert fc.path == "system[0]" and fc.block_index == 0
    assert s1[:fc.char_offset] == s2[:fc.char_offset]
    assert fc.char_offset == len(s1) or fc.char_offset == len(s2) or s1[fc.char_offset] != s2[fc.char_offset]
