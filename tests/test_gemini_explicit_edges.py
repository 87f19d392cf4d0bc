"""Gemini explicit context caches (`cachedContents`) at the edges of their rules.

Rules (gemini api docs, context caching; providers/gemini.toml):
- a creation names a TTL as a duration string ("600s", "1.5s"); without one (or with one the API would not
  take) the cache lives the default hour (`explicit_default_ttl_seconds` = 3,600);
- a request naming a live cache reads all of it; at exactly the TTL after the creation started it is gone;
- storage is billed for the TTL: tokens x hours x the price per million token-hours (2.5 Pro: $4.50).

Sizes: the cache holds what the creation's usage says (8,000 tokens: `totalTokenCount`), the same text as
test_simulator_rules' creation, which that test shows is sized from the count.
"""
from __future__ import annotations

import pytest

from kvprobe.trace import TraceRecord
from test_implicit_edges import own_rules
from test_simulator_rules import by_id, run, words

CREATED = 100.0  # the creation starts here: every time below is counted from it
ASKED = "/v1beta/models/gemini-2.5-pro:generateContent"


def create(ttl: object = None, tokens: int = 8_000) -> TraceRecord:
    body = {"model": "models/gemini-2.5-pro", "systemInstruction": {"parts": [{"text": words(3000)}]},
            "contents": [{"role": "user", "parts": [{"text": words(1000, "doc")}]}]}
    if ttl is not None:
        body["ttl"] = ttl
    return TraceRecord(id="c1", provider=None, started_at=CREATED, request=body, endpoint="/v1beta/cachedContents",
                       response={"name": "cachedContents/abc", "usageMetadata": {"totalTokenCount": tokens}})


def ask(rid: str, after: float, read: int, name: str = "cachedContents/abc") -> TraceRecord:
    body = {"cachedContent": name, "contents": [{"role": "user", "parts": [{"text": "Q?"}]}]}
    return TraceRecord(id=rid, provider=None, started_at=CREATED + after, request=body, endpoint=ASKED,
                       response={"usageMetadata": {"promptTokenCount": read + 4, "cachedContentTokenCount": read,
                                                   "candidatesTokenCount": 5}})


@pytest.mark.parametrize("after, read, past", [(599, 8_000, None), (600, 0, 0), (601, 0, 1)])
def test_a_named_cache_lives_exactly_its_ttl_from_the_creation(after, read, past):
    report = run([create("600s"), ask("q1", after, read)])
    q1 = by_id(report)["q1"]
    assert q1.predicted.cache_read_tokens == read
    if past is None:
        assert q1.diagnoses == []
    else:
        [d] = q1.diagnoses
        assert (d.kind, d.seconds_past) == ("ttl_expired", past)
        assert d.detail == f"cachedContents/abc (created by c1) expired {past}s before this request started"


@pytest.mark.parametrize("ttl, life", [(None, 3_600), ("10m", 3_600), (600, 3_600), ("1.5s", 1.5), ("600s", 600)],
                         ids=["absent", "minutes", "a-number", "fraction", "seconds"])
def test_a_creation_without_a_duration_in_seconds_lives_the_default_hour(ttl, life):
    """Only "<seconds>s" is a Gemini duration; anything else is left to the default."""
    report = run([create(ttl), ask("q1", life - 0.5, 8_000), ask("q2", life, 0)])
    q1, q2 = by_id(report)["q1"], by_id(report)["q2"]
    assert (q1.predicted.cache_read_tokens, q2.predicted.cache_read_tokens) == (8_000, 0)


@pytest.mark.parametrize("ttl, usd", [("600s", 0.006), (None, 0.036)])
def test_storage_is_billed_for_the_ttl_whenever_the_creation_started(ttl, usd):
    """8,000 tokens for 10 minutes at $4.50 per million token-hours: 8,000 x 1/6 x 4.5 / 1e6 = $0.006; for the
    default hour $0.036. The creation starts 100 s into the trace, which changes nothing."""
    c1 = by_id(run([create(ttl)]))["c1"]
    assert c1.sk.extra["storage_usd"] == pytest.approx(usd, rel=1e-9)


def test_rules_of_ones_own_name_the_default_ttl_or_leave_it_at_an_hour_and_storage_unknown(tmp_path, monkeypatch):
    """A rules folder whose gemini.toml names a 10-minute default: a cache created without a TTL is gone at
    600 s. One that names none: an hour. Neither names a storage price: storage and cost are unknown."""
    own_rules(tmp_path, monkeypatch, "gemini", "gemini", explicit_default_ttl_seconds=600)
    report = run([create(), ask("q1", 599, 8_000), ask("q2", 600, 0)])
    reads = [by_id(report)[rid].predicted.cache_read_tokens for rid in ("q1", "q2")]
    assert reads == [8_000, 0]
    c1 = by_id(report)["c1"]
    assert (c1.sk.extra["storage_usd"], c1.cost_usd) == (None, None)
    assert report.to_json()["requests"][0]["storage_usd"] is None
    bare = tmp_path / "bare"
    bare.mkdir()
    own_rules(bare, monkeypatch, "gemini", "gemini")
    report = run([create(), ask("q1", 3_599, 8_000), ask("q2", 3_600, 0)])
    assert [by_id(report)[rid].predicted.cache_read_tokens for rid in ("q1", "q2")] == [8_000, 0]


def test_a_request_naming_a_cache_the_trace_never_created_is_told_so():
    report = run([create("600s"), ask("q1", 60, 0, name="cachedContents/zzz")])
    q1 = by_id(report)["q1"]
    assert q1.predicted.cache_read_tokens == 0
    assert [(d.kind, d.detail) for d in q1.diagnoses] == [
        ("unexplained", "cachedContents/zzz was not created in this trace")]
