"""Cache domains (kvprobe/whatif/domains.py): how long a request's entries stay readable after it starts (the
lifetime in force: its breakpoints' TTLs, a provider's retention, a named cache's own), and which sessions a
change can reach (sessions whose spans overlap under a common first block, chained). Spans are written by hand
here; lifetimes are the rules' (providers/anthropic.toml `ttl_seconds`: 5m = 300 s, 1h = 3,600 s;
providers/openai.toml's retention: 600 s)."""
from __future__ import annotations

import math

import pytest

from kvprobe.analysis.skeleton import BlockStore, skeletons
from kvprobe.catalog import rules_for
from kvprobe.trace import TraceRecord
from kvprobe.whatif.domains import add_spans, domains_of, life_in_force


def claude(*ttls: str | None) -> dict:
    """A Claude request whose system text and user turn carry the breakpoints given (None: no marker there;
    "": a marker without a ttl)."""
    blocks = [{"type": "text", "text": "You are terse. " * 300}, {"type": "text", "text": "do it " * 300}]
    for block, ttl in zip(blocks, ttls):
        if ttl is not None:
            block["cache_control"] = {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}
    return {"model": "claude-sonnet-4-5", "max_tokens": 10, "system": [blocks[0]],
            "messages": [{"role": "user", "content": [blocks[1]]}]}


@pytest.mark.parametrize("record, seconds", [
    (TraceRecord(id="a", provider="anthropic", started_at=0.0, request=claude(None, "")), 300.0),  # 5m default
    (TraceRecord(id="b", provider="anthropic", started_at=0.0, request=claude("", "1h")), 3_600.0),  # the longest
    (TraceRecord(id="c", provider="anthropic", started_at=0.0, request=claude(None, "2h")), 300.0),  # no such TTL
    (TraceRecord(id="d", provider="anthropic", started_at=0.0, request=claude(None, None)), 3_600.0),  # none: at most
    (TraceRecord(id="e", provider="openai", started_at=0.0,
                 request={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi " * 3000}]}), 600.0),
    (TraceRecord(id="f", provider="gemini", started_at=0.0, endpoint="/v1beta/models/gemini-2.5-pro:generateContent",
                 request={"cachedContent": "cachedContents/abc", "contents": [{"role": "user", "parts": [
                     {"text": "hi"}]}]}), math.inf),  # a named cache lives until its own TTL
    (TraceRecord(id="h", provider="openai", started_at=0.0, endpoint="/v1/responses", request={
        "model": "gpt-5.6-sol", "prompt_cache_key": "repo-42", "input": [
            {"role": "developer", "content": [{"type": "input_text", "text": "You are a coding agent. " * 400,
                                               "prompt_cache_breakpoint": {"mode": "explicit"}}]},
            {"role": "user", "content": [{"type": "input_text", "text": "go"}]}]}),
     1_800.0),  # GPT-5.6's managed breakpoint has no TTL of its own: the default, 30 minutes
    (TraceRecord(id="g", provider="anthropic", started_at=0.0,
                 response={"usage": {"input_tokens": 5, "output_tokens": 1}}), 0.0),  # no body: nothing simulated
])
def test_a_requests_entries_live_the_lifetime_in_force(record, seconds):
    [sk] = skeletons([record], BlockStore())
    assert life_in_force(sk, rules_for(*sk.rules_key)) == seconds


def test_sessions_are_one_domain_while_their_spans_touch_under_one_first_block():
    spans = {("a", "k1"): [0.0, 300.0], ("b", "k1"): [300.0, 600.0],  # b starts as a's last entry's life ends
             ("c", "k1"): [600.5, 900.0],  # after b's: its own
             ("d", "k2"): [100.0, 200.0],  # overlaps a, but another first block
             ("e", "k1"): [1_000.0, 5_000.0], ("f", "k1"): [1_100.0, 1_200.0],  # f inside e's span
             ("g", "k1"): [2_000.0, 2_100.0],  # after f's end, within e's: still e's domain
             ("c", "k3"): [0.0, 10.0], ("h", "k3"): [5.0, 6.0]}  # c reaches h through another first block
    assert domains_of({"a"}, spans) == {"a", "b"}
    assert domains_of({"c"}, spans) == {"c", "h"}
    assert domains_of({"d"}, spans) == {"d"}
    assert domains_of({"g"}, spans) == {"e", "f", "g"}
    assert domains_of({"a", "d"}, spans) == {"a", "b", "d"}
    assert domains_of({"new"}, spans) == {"new"}  # a session the log did not have (a fix added it)


def test_span_order_does_not_matter():
    spans = {("late", "k"): [500.0, 800.0], ("early", "k"): [0.0, 600.0], ("alone", "k"): [900.0, 950.0]}
    assert domains_of({"late"}, spans) == {"early", "late"}
    assert domains_of({"alone"}, spans) == {"alone"}


def test_a_sessions_span_runs_from_its_first_start_to_its_last_start_plus_the_lifetime_per_first_block():
    records = [TraceRecord(id="u", provider="anthropic", started_at=0.0, session="s",
                           response={"usage": {"input_tokens": 5, "output_tokens": 1}}),  # no body: no span
               TraceRecord(id="a", provider="anthropic", started_at=100.0, session="s", request=claude(None, "")),
               TraceRecord(id="b", provider="anthropic", started_at=250.0, session="s", request=claude(None, "")),
               TraceRecord(id="c", provider="anthropic", started_at=200.0, session="t", request=claude("", "1h"))]
    records[3].request["messages"][0]["content"][0]["text"] = "another task " * 300
    sks = list(skeletons(records, BlockStore()))
    for given in (sks, sks[::-1]):  # in start order or not
        spans = add_spans(given, {})
        assert sorted((session, span) for (session, _), span in spans.items()) == [
            ("s", [100.0, 550.0]),  # a at 100 s to b at 250 s + 300 s
            ("t", [200.0, 3_800.0])]  # 1h entries
        assert len({key for _, key in spans}) == 1  # one first block (the same system text), whatever follows it
