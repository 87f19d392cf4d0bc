"""Edits of sized skeletons (kvprobe/whatif/reshape.py) hold to the rule the parse chains by
(`request.model.chain_hashes`): a block's key is its parent's key, then the identity salt of each level first
reached at it, then its own content; so an edited request and a request rendered with that content have the
same keys, and an untouched one keeps its own. The reference keys are the parse's own, of bodies written
here; nothing below is hashed by hand. The edit helpers (with_blocks, with_request, index_of, clone) copy
and never change what they were given."""
from __future__ import annotations

import copy

import pytest

from kvprobe.analysis.skeleton import BlockStore, skeletons
from kvprobe.request import render_request
from kvprobe.trace import TraceRecord
from kvprobe.whatif.reshape import Chainer, body_hash_of, clone, index_of, salt_at, with_blocks, with_request

TOOL = {"name": "read_file", "description": "Read a file from the repository.", "input_schema": {"type": "object"}}


def body(system: str | None = "You are a careful reviewer.", turns: tuple[str, ...] = ("Review the parser.",),
         tools: bool = True, **params) -> dict:
    out: dict = {"model": "claude-sonnet-4-5", "max_tokens": 64, **params,
                 "messages": [{"role": "user" if k % 2 == 0 else "assistant",
                               "content": [{"type": "text", "text": t}]} for k, t in enumerate(turns)]}
    if tools:
        out["tools"] = [TOOL]
    if system is not None:
        out["system"] = [{"type": "text", "text": system}]
    return out


def keys(req) -> list[tuple[int, int]]:
    return [(b.cache_key, b.content_hash) for b in req.blocks]


TURNS = ("Review the parser.", "The parser is fine.", "Now the lexer.")
OPENAI = {"model": "gpt-5", "tools": [{"type": "function", "function": {"name": "read_file", "parameters": {}}}],
          "messages": [{"role": "system", "content": "You are a careful reviewer."},
                       {"role": "user", "content": "Review the parser."}]}


@pytest.mark.parametrize("shape", [
    dict(), dict(tool_choice={"type": "any"}), dict(thinking={"type": "enabled", "budget_tokens": 2048}),
    dict(system=None), dict(tools=False), dict(tools=False, system=None, tool_choice={"type": "auto"}),
    OPENAI,
    # a lone surrogate, as a log's JSON can carry one ("\ud83d" cut from its pair): hashed as the parse does
    body(turns=("Review the parser \ud83d.",)),
])
def test_each_block_chains_on_its_parent_the_salt_first_reached_there_and_its_content(shape):
    """Every block of a rendered request, chained again on its parent with `salt_at` and its own body hash
    (`body_hash_of` its kind, role, meta and text), gets the key the parse gave it: the salt of each level
    (tools; system; messages) goes in at the first block at or after that level, whichever levels the request
    has, and a level no parameter invalidates adds nothing (OpenAI: only the model, at the first block)."""
    req = render_request(shape if "messages" in shape else body(turns=TURNS, **shape))
    for i, block in enumerate(req.blocks):
        assert body_hash_of(block.text, block.kind, block.role, block.meta) == block.body_hash, block.path
        new = Chainer().chain(block, req.blocks[i - 1] if i else None, salt_at(req, i), "again")
        assert (new.cache_key, new.content_hash) == (block.cache_key, block.content_hash), block.path


def test_a_block_given_new_content_and_the_blocks_after_it_get_the_keys_of_that_content():
    """The system prompt replaced in place (as a moved span leaves it): the edited request's keys are those of
    the request rendered with the new system prompt; the block takes its new size and the original request is
    left as it was."""
    old = render_request(body(turns=TURNS))
    want = render_request(body(system="You are a careful reviewer. Be brief.", turns=TURNS))
    before = keys(old)
    i = index_of(old, "system[0]")
    assert i == 1
    src = want.blocks[i]
    ch = Chainer()
    new = ch.chain(old.blocks[i], old.blocks[i - 1], salt_at(old, i), "stable",
                   body_hash=body_hash_of(src.text, src.kind, src.role, src.meta), tokens=17, path="system[0]")
    blocks = ch.rechain(old.blocks[:i] + [new] + old.blocks[i + 1:], i + 1, old.params, "stable")
    assert [(b.cache_key, b.content_hash) for b in blocks] == keys(want)
    assert [b.path for b in blocks] == [b.path for b in want.blocks]
    assert blocks[0] is old.blocks[0] and (new.tokens, old.blocks[i].tokens) == (17, 0)
    assert keys(old) == before and blocks[i] is new


@pytest.mark.parametrize("change, level", [
    (dict(tool_choice={"type": "any"}), "messages"),  # tool_choice invalidates the messages
    (dict(model="claude-opus-4-5"), "tools"),  # the model invalidates everything
    (dict(thinking={"type": "enabled", "budget_tokens": 2048}), "messages"),
])
def test_a_parameter_changed_rechains_from_the_level_it_invalidates(change, level):
    """Rechained with the parameters of the changed request from the first block of the level the parameter
    invalidates, every block has the key of the request rendered with that parameter; the blocks before are
    kept as they were (the same objects)."""
    old = render_request(body(turns=TURNS))
    want = render_request({**body(turns=TURNS), **change})
    start = next(i for i, b in enumerate(old.blocks) if b.level == level)
    blocks = Chainer().rechain(old.blocks, start, want.params, ("param", str(change)))
    assert [(b.cache_key, b.content_hash) for b in blocks] == keys(want)
    assert all(a is b for a, b in zip(blocks[:start], old.blocks))
    if level == "messages":
        assert keys(want)[:start] == keys(old)[:start] and keys(want)[start:] != keys(old)[start:]


def test_rechaining_a_request_that_repeats_an_edited_prefix_reuses_its_blocks_and_chains_the_rest():
    """Two requests of one stream, the second the first plus a turn, both given the changed tool_choice: the
    second's prefix comes from the memo (the same blocks) and its new blocks are chained after them, with the
    keys the parse gives the changed requests."""
    short, long = render_request(body(turns=TURNS[:1])), render_request(body(turns=TURNS))
    want_short = render_request(body(turns=TURNS[:1], tool_choice={"type": "any"}))
    want_long = render_request(body(turns=TURNS, tool_choice={"type": "any"}))
    ch = Chainer()
    first = ch.rechain(short.blocks, 2, want_short.params, "any")
    second = ch.rechain(long.blocks, 2, want_long.params, "any")
    assert [(b.cache_key, b.content_hash) for b in first] == keys(want_short)
    assert [(b.cache_key, b.content_hash) for b in second] == keys(want_long)
    assert second[2] is first[2]
    again = ch.rechain(short.blocks, 2, want_short.params, "any")  # everything from the memo
    assert all(a is b for a, b in zip(again, first)) and len(again) == len(first)


def test_a_fresh_block_after_a_prefix_has_the_keys_of_that_content_there():
    """A moved line appended as a user text part: the same keys as the request rendered with it; the same
    line after another prefix gets that prefix's keys (not the first one's), and it carries no breakpoint."""
    moved = "Current time: 10:03:00"
    for turns in (TURNS, TURNS[:1]):
        old = render_request(body(turns=turns))
        with_line = body(turns=turns)
        with_line["messages"][-1]["content"].append({"type": "text", "text": moved})
        want = render_request(with_line)
        template = copy.copy(old.blocks[-1])
        template.breakpoint, template.breakpoint_source = "5m", "explicit"
        ch = Chainer()
        path = f"messages[{len(turns) - 1}].content[1]"
        new = ch.fresh(template, old.blocks[-1], body_hash_of(moved, "text", "user"), 9, path, "moved")
        assert (new.cache_key, new.content_hash) == keys(want)[-1]
        assert (new.path, new.tokens, new.breakpoint, new.breakpoint_source) == (path, 9, None, None)
        assert template.breakpoint == "5m"
    # two different lines after the same prefix, through one chainer, each their own
    old = render_request(body(turns=TURNS))
    ch = Chainer()
    a = ch.fresh(old.blocks[-1], old.blocks[-1], body_hash_of("line a", "text", "user"), 3, "x", "moved")
    b = ch.fresh(old.blocks[-1], old.blocks[-1], body_hash_of("line b", "text", "user"), 3, "x", "moved")
    assert a.cache_key != b.cache_key


def test_a_fresh_first_block_takes_the_salt_of_its_level():
    """A tool list rebuilt from the first block (as a stable tool list is): a fresh tools[0] with the salt
    `salt_at(req, 0)` has the parse's key for that tool at the start of the request."""
    req = render_request(body(turns=TURNS))
    tool = req.blocks[0]
    new = Chainer().fresh(tool, None, tool.body_hash, tool.tokens, "tools[0]", "tools", salt=salt_at(req, 0))
    assert (new.cache_key, new.content_hash) == keys(req)[0]
    unsalted = Chainer().fresh(tool, None, tool.body_hash, tool.tokens, "tools[0]", "tools")
    assert unsalted.cache_key != tool.cache_key and unsalted.content_hash == tool.content_hash


def test_a_chainer_holds_no_block_after_an_edit_it_scoped():
    req = render_request(body(turns=TURNS))
    ch = Chainer()
    out = ch.scoped(lambda: ch.rechain(req.blocks, 0, req.params, "v"))
    assert [(b.cache_key, b.content_hash) for b in out] == keys(req) and ch.memo == {}
    with pytest.raises(ZeroDivisionError):
        ch.scoped(lambda: (ch.rechain(req.blocks, 0, req.params, "w"), 1 / 0))
    assert ch.memo == {}  # emptied even when the edit failed


def test_with_blocks_copies_the_request_and_replaces_only_what_it_is_given():
    req = render_request(body(turns=TURNS))
    req.warnings.append("a warning of the parse")
    req.shared_prefix = 2
    marks = [(0, "5m"), (3, "1h")]
    new = with_blocks(req, req.blocks[:2], marks)
    assert new is not req and new.blocks == req.blocks[:2] and new.breakpoints == marks
    assert new.breakpoints is not marks
    assert (new.shared_prefix, new.warnings) == (0, [])  # the simulator walks an edited request whole
    assert new.params is req.params and (req.shared_prefix, req.warnings) == (2, ["a warning of the parse"])
    params = {"model": req.params["model"]}
    other = with_blocks(req, req.blocks, params=params)
    assert other.params == params and other.params is not params and other.breakpoints is req.breakpoints
    assert (new.model, new.provider, new.cache_mode) == (req.model, req.provider, req.cache_mode)


def test_with_request_carries_the_new_request_and_no_logged_usage():
    rec = TraceRecord(id="r1", provider="anthropic", started_at=100.0, request=body(turns=TURNS), session="s",
                      response={"usage": {"input_tokens": 40, "output_tokens": 3}})
    [sk] = skeletons([rec], BlockStore())
    assert sk.observed is not None
    req = with_blocks(sk.request, sk.request.blocks)
    new = with_request(sk, req, started_at=160.0, readable_at=161.0)
    assert (new.request, new.observed, new.started_at, new.readable_at) == (req, None, 160.0, 161.0)
    assert (new.id, new.session, new.order) == ("r1", "s", sk.order)
    assert sk.observed is not None and sk.started_at == 100.0 and sk.request is not req


def test_index_of_finds_the_first_block_at_a_path_or_none():
    req = render_request(body(turns=TURNS))
    assert [index_of(req, p) for p in ("tools[0]", "system[0]", "messages[2].content[0]", "messages[3]")] == [
        0, 1, 4, None]


def test_clone_is_a_shallow_copy_with_every_field():
    block = render_request(body(turns=TURNS)).blocks[1]
    copied = clone(block)
    assert copied is not block and copied == block
    copied.tokens = block.tokens + 5
    assert copied != block


@pytest.mark.parametrize("old_body, new_body", [
    # no system prompt: the first message reaches two levels at once
    (body(turns=TURNS, system=None), body(turns=TURNS, system=None, tool_choice={"type": "any"})),
    # messages alone: the first block reaches all three
    (body(turns=TURNS, system=None, tools=False), body(turns=TURNS, system=None, tools=False,
                                                       model="claude-opus-4-5")),
    # OpenAI: levels without parameters, no salt of their own
    (OPENAI, {**OPENAI, "model": "gpt-5-mini"}),
])
def test_rechained_from_the_start_every_level_salt_goes_in_once(old_body, new_body):
    old, want = render_request(old_body), render_request(new_body)
    blocks = Chainer().rechain(old.blocks, 0, want.params, "all")
    assert [(b.cache_key, b.content_hash) for b in blocks] == keys(want)
    assert keys(want) != keys(old)


def test_one_chainer_keeps_each_variant_apart():
    """Two edits through one chainer (tool_choice any, then auto) of the same request: each gets the keys of
    its own parameters, not the blocks the other made."""
    old = render_request(body(turns=TURNS))
    ch = Chainer()
    for choice in ({"type": "any"}, {"type": "auto"}):
        want = render_request(body(turns=TURNS, tool_choice=choice))
        blocks = ch.rechain(old.blocks, 2, want.params, ("tool_choice", choice["type"]))
        assert [(b.cache_key, b.content_hash) for b in blocks] == keys(want), choice


def test_fresh_first_blocks_through_one_chainer_each_get_their_own_keys():
    """One chainer (as a stable tool list makes per session): a first block of another tool, and the same tool
    in a request of another model (whose salt differs), each get the parse's keys for that request; the same
    moved line after two different prefixes gets each prefix's."""
    other_tool = {"name": "grep", "description": "Search the repository.", "input_schema": {"type": "object"}}
    first = render_request(body(turns=TURNS))
    second = render_request({**body(turns=TURNS), "tools": [other_tool]})
    haiku = render_request(body(turns=TURNS, model="claude-haiku-4-5"))
    ch = Chainer()
    for req in (first, second, haiku):
        tool = req.blocks[0]
        new = ch.fresh(tool, None, tool.body_hash, tool.tokens, "tools[0]", ("tools", "s"), salt=salt_at(req, 0))
        assert (new.cache_key, new.content_hash) == keys(req)[0], req.model
    moved = body_hash_of("Current time: 10:03:00", "text", "user")
    for turns in (TURNS, TURNS[:1]):
        with_line = body(turns=turns)
        with_line["messages"][-1]["content"].append({"type": "text", "text": "Current time: 10:03:00"})
        old = render_request(body(turns=turns))
        new = ch.fresh(old.blocks[-1], old.blocks[-1], moved, 9, "x", "moved")
        assert (new.cache_key, new.content_hash) == keys(render_request(with_line))[-1]
