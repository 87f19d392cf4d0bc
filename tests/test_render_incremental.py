"""Rendering a trace incrementally (reusing each session's previous request) gives exactly what rendering
every request whole gives: same blocks, hashes, breakpoints, identity parameters and warnings."""
from __future__ import annotations

import copy
import random

import pytest

from kvprobe.analysis.skeleton import BlockStore, skeletons
from kvprobe.request import render_request
from kvprobe.request.incremental import StreamRenderer
from kvprobe.trace import TraceRecord

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _session(rng: random.Random, turns: int) -> list[dict]:
    """One agent session's request bodies, with the changes agents really make between turns."""
    tools = [{"name": f"t{i}", "description": _text(rng, 8), "input_schema": {"type": "object"}} for i in range(3)]
    system = [{"type": "text", "text": _text(rng, 30), "cache_control": {"type": "ephemeral"}}]
    messages: list[dict] = [{"role": "user", "content": _text(rng, 10)}]
    bodies = []
    for turn in range(turns):
        body = {"model": rng.choice(["claude-sonnet-4-5", "claude-sonnet-4-5", "claude-haiku-4-5"]) if turn % 5 == 4
                else "claude-sonnet-4-5", "max_tokens": 100, "tools": copy.deepcopy(tools),
                "system": copy.deepcopy(system), "messages": copy.deepcopy(messages)}
        roll = rng.random()
        if roll < 0.1:
            body["tool_choice"] = {"type": "any"}
        elif roll < 0.15:
            body["cache_control"] = {"type": "ephemeral"}  # automatic breakpoint
        elif roll < 0.2:
            body["thinking"] = {"type": "enabled", "budget_tokens": 1024}
        last = body["messages"][-1]
        if isinstance(last["content"], list) and rng.random() < 0.8:
            last["content"][-1]["cache_control"] = {"type": "ephemeral", **({"ttl": "1h"} if rng.random() < 0.2 else {})}
        bodies.append(body)
        if rng.random() < 0.1:
            system[0]["text"] += f" turn {turn}"  # a changed system prompt breaks everything after it
        if rng.random() < 0.1:
            tools.insert(1, {"name": f"new{turn}", "description": "x", "input_schema": {"type": "object"}})
        call = f"toolu_{turn}"
        parts = [{"type": "text", "text": _text(rng, 5)},
                 {"type": "tool_use", "id": call, "name": "t0", "input": {"q": turn}}]
        result: list = [{"type": "tool_result", "tool_use_id": call, "content": _text(rng, rng.randint(1, 40))}]
        if rng.random() < 0.15:
            result.append({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO" * 80}})
        if rng.random() < 0.1:
            result = []  # an empty content list: a message with no blocks
        messages = messages + [{"role": "assistant", "content": parts}, {"role": "user", "content": result or "ok"}]
        if rng.random() < 0.08:
            messages = messages[:-4] + messages[-2:]  # history edited (compaction): the prefix breaks
    return bodies


def _shape(req) -> tuple:
    blocks = tuple((b.path, b.level, b.kind, b.role, b.message_index, b.first_in_message, b.content_hash, b.cache_key,
                    b.body_hash) for b in req.blocks)
    return (req.provider, req.api, req.model, blocks, tuple(req.breakpoints), req.params, tuple(req.warnings),
            req.automatic_breakpoint, req.cache_mode)


@pytest.mark.parametrize("seed", range(12))
def test_incremental_equals_whole_rendering(seed):
    rng = random.Random(seed)
    sessions = {f"s{i}": _session(rng, rng.randint(3, 14)) for i in range(3)}
    order = [(s, i) for s, bodies in sessions.items() for i in range(len(bodies))]
    rng.shuffle(order)
    order.sort(key=lambda si: si[1])  # sessions interleave, each in its own order
    renderer = StreamRenderer(share=True)
    reused = 0
    for session, i in order:
        body = sessions[session][i]
        expected = _shape(render_request(copy.deepcopy(body), "anthropic"))
        prev = renderer._previous.get((session, "main"))
        got = renderer.render(body, "anthropic", stream=(session, "main"))
        assert _shape(got) == expected, (session, i)
        reused += prev is not None and got.blocks[0] is prev.request.blocks[0]
    assert reused >= len(order) // 6  # the cheap path was taken (the changes above often rule it out)


def test_shared_history_is_one_object_and_skeletons_agree():
    bodies = _session(random.Random(3), 10)
    records = [TraceRecord(id=f"r{i}", provider="anthropic", started_at=1.0 + i, request=copy.deepcopy(b),
                           session="s", agent="main") for i, b in enumerate(bodies)]
    fresh = [TraceRecord(id=f"r{i}", provider="anthropic", started_at=1.0 + i, request=copy.deepcopy(b),
                         session=f"only{i}", agent="main") for i, b in enumerate(bodies)]  # no reuse possible
    a = [[b.cache_key for b in sk.request.blocks] for sk in skeletons(records, BlockStore())]
    b = [[b.cache_key for b in sk.request.blocks] for sk in skeletons(fresh, BlockStore())]
    assert a == b
    first, later = records[2].request["messages"], records[3].request["messages"]
    if first[0] == later[0]:
        assert first[0] is later[0]


def test_memory_is_bounded_by_recent_streams():
    rng = random.Random(11)
    sessions = {f"s{i}": _session(rng, 4) for i in range(8)}
    renderer = StreamRenderer(share=True, streams=3)
    for turn in range(4):
        for name, bodies in sessions.items():  # eight sessions interleaved, only three remembered
            expected = _shape(render_request(copy.deepcopy(bodies[turn]), "anthropic"))
            assert _shape(renderer.render(bodies[turn], "anthropic", stream=name)) == expected
            assert len(renderer._previous) <= 3
