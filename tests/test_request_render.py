"""Rendering provider bodies into the ordered cacheable blocks the provider sees."""
from __future__ import annotations

import pytest

from conftest import anthropic_body, openai_chat_body, responses_body
from kvprobe.errors import InputError
from kvprobe.request import render_request


def kinds(req):
    return [(b.path, b.kind) for b in req.blocks]


def test_anthropic_order_is_tools_system_messages_with_every_block_kind():
    body = anthropic_body()
    body["messages"][0]["content"] = [
        {"type": "text", "text": "Fix the login bug."},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "B" * 1000}},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "spec text"}},
    ]
    req = render_request(body)
    assert req.provider == "anthropic"
    assert kinds(req) == [
        ("tools[0]", "tool_definition"), ("tools[1]", "tool_definition"), ("system[0]", "text"),
        ("messages[0].content[0]", "text"), ("messages[0].content[1]", "image"),
        ("messages[0].content[2]", "document"),
        ("messages[1].content[0]", "thinking"), ("messages[1].content[1]", "text"),
        ("messages[1].content[2]", "tool_use"), ("messages[2].content[0]", "tool_result")]
    assert [b.level for b in req.blocks][:3] == ["tools", "tools", "system"]
    # the image payload is identified by a digest, never carried as megabytes of text
    assert "B" * 300 not in req.blocks[4].text and "xxh3:" in req.blocks[4].text
    assert req.blocks[5].text == "spec text"
    assert req.params["images"].value == 1


def test_string_system_and_string_content_are_single_blocks():
    req = render_request(anthropic_body(system="plain system", messages=[{"role": "user", "content": "hi"}]))
    assert kinds(req)[2:] == [("system", "text"), ("messages[0]", "text")]


def test_breakpoints_explicit_and_automatic():
    body = anthropic_body(cache_control={"type": "ephemeral", "ttl": "1h"})
    body["messages"][2]["content"][0].pop("cache_control")
    req = render_request(body)
    marked = [(req.blocks[i].path, req.blocks[i].breakpoint, req.blocks[i].breakpoint_source)
              for i in req.breakpoint_indices]
    assert marked == [("system[0]", "5m", "explicit"), ("messages[2].content[0]", "1h", "automatic")]
    assert req.automatic_breakpoint
    assert any("1h" in w for w in req.warnings)  # a 1h entry after a 5m one is flagged


def test_more_than_four_breakpoints_is_flagged():
    body = anthropic_body()
    for tool in body["tools"]:
        tool["cache_control"] = {"type": "ephemeral"}
    body["messages"][0]["content"] = [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]
    body["messages"][1]["content"][1]["cache_control"] = {"type": "ephemeral"}
    req = render_request(body)
    assert len(req.breakpoint_indices) == 6
    assert any("at most 4" in w for w in req.warnings)


def test_openai_chat_parts_tool_calls_and_tool_messages():
    req = render_request(openai_chat_body())
    assert req.provider == "openai" and req.api == "openai_chat"
    assert kinds(req) == [("tools[0]", "tool_definition"), ("messages[0]", "text"),
                          ("messages[1].content[0]", "text"), ("messages[1].content[1]", "image_url"),
                          ("messages[2].tool_calls[0]", "tool_use"), ("messages[3]", "tool_result")]


def test_openai_responses_input_items():
    req = render_request(responses_body())
    assert req.api == "openai_responses"
    assert kinds(req) == [("tools[0]", "tool_definition"), ("instructions", "text"),
                          ("input[0].content[0]", "text"), ("input[0].content[1]", "image"),
                          ("input[1]", "thinking"), ("input[2]", "tool_use"), ("input[3]", "tool_result")]
    assert req.blocks[-1].text == "contents"


def test_deepseek_is_recognised_from_the_model():
    req = render_request(openai_chat_body(model="deepseek-chat"))
    assert req.provider == "deepseek" and req.api == "openai_chat"


def test_chained_hash_depends_on_everything_before():
    a = render_request(anthropic_body())
    body = anthropic_body()
    body["tools"][0]["description"] = "Read a file (changed)"
    b = render_request(body)
    assert all(x.content_hash != y.content_hash for x, y in zip(a.blocks, b.blocks))
    # but the unchanged blocks alone still hash the same: a session dedupes them
    assert [x.body_hash for x in a.blocks[1:]] == [y.body_hash for y in b.blocks[1:]]


def test_marker_is_not_content():
    a = render_request(anthropic_body())
    body = anthropic_body()
    body["system"][0].pop("cache_control")
    body["messages"][0] = {"role": "user", "content": [{"type": "text", "text": "Fix the login bug.",
                                                       "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}
    b = render_request(body)
    assert [x.cache_key for x in a.blocks] == [y.cache_key for y in b.blocks]


@pytest.mark.parametrize("body, field", [
    ({"model": "claude-sonnet-4-5", "system": "x"}, "messages"),
    ({"model": "claude-sonnet-4-5", "messages": "nope"}, "messages"),
    ({"model": "claude-sonnet-4-5", "messages": [{"content": "no role"}]}, "messages[0]"),
])
def test_malformed_bodies_name_the_field(body, field):
    with pytest.raises(InputError) as err:
        render_request(body)
    assert err.value.field == field


def test_identity_parameters_are_shared_per_distinct_value_and_keep_their_own_copy():
    """Requests repeat the same model and settings: equal values give one shared parameter (the split parse
    then pickles it once), values that only compare equal across types stay apart, and a parameter holding
    an object (tool_choice) does not change when the request body it came from is edited later."""
    from kvprobe.request.model import IdentityParam

    model = "claude-sonnet-4-5"
    assert IdentityParam.of("model", model, "all") is IdentityParam.of("model", model, "all")
    assert IdentityParam.of("images", 1, "messages") is not IdentityParam.of("images", True, "messages")
    assert IdentityParam.of("model", "a", "all") is not IdentityParam.of("model", "a", "tools")
    body = {"tool_choice": {"type": "tool", "name": "search"}}
    first = IdentityParam.of("tool_choice", body["tool_choice"], "messages")
    assert IdentityParam.of("tool_choice", {"type": "tool", "name": "search"}, "messages") is first
    body["tool_choice"]["name"] = "fetch"
    assert first.value == {"type": "tool", "name": "search"}
    assert IdentityParam.of("tool_choice", body["tool_choice"], "messages").value["name"] == "fetch"
