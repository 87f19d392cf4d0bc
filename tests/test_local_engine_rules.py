"""Traces of kvprobe's own engine (provider "local"): providers/ has no rules for it, so the breakpoint cache
runs on kvprobe's defaults (kvprobe/sim/anthropic.py Settings): a 5-minute lifetime, or 1 hour for a "1h"
marker, and 5 minutes for a lifetime class it does not know; no lookback window; no minimum length.

Block sizes are kvprobe's estimate here: the figures asserted are a block's own size or relations.
"""
from __future__ import annotations

import pytest

from kvprobe.report import build_report
from kvprobe.trace import TraceRecord
from test_simulator_rules import by_id, words


def local(rid: str, start: float, body: dict) -> TraceRecord:
    return TraceRecord(id=rid, provider="local", started_at=start, request=body, endpoint="/v1/messages")


def system(ttl: str | None = None, marked: bool = True) -> list[dict]:
    part = {"type": "text", "text": words(1500)}
    if marked:
        part["cache_control"] = {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}
    return [part]


def body(sys: list[dict], messages: list[dict]) -> dict:
    return {"model": "smollm2-135m", "max_tokens": 10, "system": sys, "messages": messages}


QUESTION = [{"role": "user", "content": "Summarise the notes."}]


@pytest.mark.parametrize("ttl, life", [(None, 300), ("1h", 3_600), ("10m", 300)], ids=["default", "1h", "unknown"])
@pytest.mark.parametrize("late", [-1, 0])
def test_an_entry_of_the_local_engine_lives_5_minutes_or_its_hour(ttl, life, late):
    first = body(system(ttl), QUESTION)
    report = build_report([], records=[local("a", 0, first), local("b", life + late, first)], top=0)
    a, b = by_id(report)["a"], by_id(report)["b"]
    written = a.sk.request.blocks[0].tokens
    assert a.predicted.cache_write_tokens == written > 0
    assert b.predicted.cache_read_tokens == (written if late < 0 else 0)


def test_the_local_engine_reads_an_entry_however_far_back_it_lies():
    """The second request marks only its last block, 31 positions after the system prompt the first wrote:
    no window stops the lookback (Anthropic's own would: 20)."""
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"Step {i}."} for i in range(31)]
    report = build_report([], records=[
        local("a", 0, body(system(), QUESTION)),
        local("b", 10, body(system(marked=False), [*turns[:-1], {"role": "user", "content": [
            {"type": "text", "text": "Step 30.", "cache_control": {"type": "ephemeral"}}]}]))], top=0)
    a, b = by_id(report)["a"], by_id(report)["b"]
    assert b.predicted.cache_read_tokens == a.sk.request.blocks[0].tokens > 0
