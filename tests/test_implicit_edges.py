"""Implicit prefix caches (Gemini, DeepSeek, Moonshot, OpenAI before GPT-5.6, ...) at the edges of their rules.

Rules (docs/caching-rules.md and providers/):
- a later request reads the longest stored prefix it shares, rounded down to the provider's step (DeepSeek's
  64-token units; Gemini and Moonshot's kimi-k3 count every token), and only from the model's minimum
  (Gemini 2.5 Flash 2,048; Moonshot 0); the last token of a request is always computed, never read;
- a stored prefix is kept for the retention after its last use (Gemini 1 hour, kvprobe's assumption for a best
  effort cache): at exactly the retention it is gone; every request that uses a prefix keeps it longer;
- a prefix is readable once the request storing it has finished (`readable_after = "finished"`): another request
  storing the same live prefix again does not push that time later;
- rules that name none of these (a rules folder of one's own, $KVPROBE_PROVIDERS_DIR): kept 10 minutes, no
  minimum, no step; a retention table (OpenAI's in_memory / 24h) is read at the retention the rules name, else
  at its shortest.

Block sizes are set by hand on the rendered requests (test_openai_breakpoints.sized): every figure below is
arithmetic on them. Each request is fed to the cache as analysis.simulate feeds it: its start, and the time
what it stores becomes readable (1 s later unless a case says otherwise).
"""
from __future__ import annotations

import pytest

from kvprobe.catalog import rules_for
from kvprobe.sim import PrefixCache
from kvprobe.sim.implicit import ttl_table
from test_openai_breakpoints import OneCache, chat, evidence, sized

FLASH = "/v1beta/models/gemini-2.5-flash:generateContent"
SYSTEM, QUESTION = "systemInstruction.parts[0]", "contents[0].parts[0]"


def gemini(question: str, system: int, asked: int = 10):
    """A Gemini 2.5 Flash request: a system instruction of `system` tokens, then a question of `asked`."""
    body = {"systemInstruction": {"parts": [{"text": "You review pull requests."}]},
            "contents": [{"role": "user", "parts": [{"text": question}]}]}
    return sized(body, [system, asked], endpoint=FLASH)


# --- the minimum and the step -------------------------------------------------------------------------------

@pytest.mark.parametrize("system, first_fresh, read, fresh", [(1, 11, 0, 13), (2_047, 2_057, 0, 2_059),
                                                              (2_048, 2_058, 2_048, 12), (2_049, 2_059, 2_049, 12)])
def test_a_shared_prefix_is_read_from_the_minimum_token_by_token(system, first_fresh, read, fresh):
    """Gemini 2.5 Flash: minimum 2,048, no rounding. The second request shares the system instruction only:
    below the minimum the evidence says how long it was."""
    cache = OneCache(PrefixCache())
    first = cache.send(gemini("Review PR 1.", system), 0, "g1")
    second = cache.send(gemini("Review PR 2.", system, asked=12), 60, "g2")
    assert (first.cache_read_tokens, first.fresh_input_tokens, first.evidence) == (0, first_fresh, [])
    assert (second.cache_read_tokens, second.fresh_input_tokens) == (read, fresh)
    if read:
        assert second.evidence == []
    else:
        [ev] = second.evidence
        assert (ev.kind, ev.block_index, ev.prefix_tokens, ev.minimum_tokens) == ("below_minimum", 0, system, 2_048)
        assert ev.detail == (f"the prefix through systemInstruction.parts[0] is {system} tokens; the minimum for this "
                             "model is 2048")


@pytest.mark.parametrize("req, read, fresh", [
    (gemini("Review PR 1.", 4_990), 4_999, 1),  # 5,000 tokens, step 1: all but the last
    (sized(chat("deepseek-v4-pro", "Q1"), [2_000, 48]), 1_984, 64),  # 2,048: 2,047 down to 64-token units
    (sized(chat("kimi-k3", "Hi"), [0, 1]), 0, 1),  # a one-token request: its only token is computed
    (sized(chat("kimi-k3", "Hi"), [700, 300]), 999, 1),
], ids=["gemini", "deepseek", "moonshot-one-token", "moonshot"])
def test_the_same_request_again_reads_all_but_its_last_token(req, read, fresh):
    cache = OneCache(PrefixCache())
    cache.send(req, 0, "r1")
    again = cache.send(req, 60, "r2")
    assert (again.cache_read_tokens, again.fresh_input_tokens) == (read, fresh)
    assert again.evidence == []  # the last token is no shortfall below a minimum


# --- the retention -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("at, read, past", [(3_599, 3_000, None), (3_600, 0, 0), (3_601, 0, 1)])
def test_a_prefix_is_kept_an_hour_after_its_last_use(at, read, past):
    cache = OneCache(PrefixCache())
    cache.send(gemini("Review PR 1.", 3_000), 0, "g1")
    late = cache.send(gemini("Review PR 2.", 3_000), at, "g2")
    assert (late.cache_read_tokens, late.fresh_input_tokens) == (read, 3_010 - read)
    if past is None:
        assert late.evidence == []
    else:
        assert evidence(late) == [("ttl_expired", 0, past, None)]
        assert late.evidence[0].detail == (f"the prefix through {SYSTEM} expired {past}s before this request "
                                           "started")


def test_a_prefix_another_request_used_outlives_the_longer_one_stored_with_it():
    """g1 at 0 s stores the system instruction and question 1 (kept until 3,600 s); g2 at 3,000 s asks another
    question: it reads the system instruction and keeps it until 6,600 s. g1's request again at 4,000 s: its
    question expired 400 s before, the 3,000-token system instruction is read."""
    cache = OneCache(PrefixCache())
    cache.send(gemini("Review PR 1.", 3_000), 0, "g1")
    assert cache.send(gemini("Review PR 2.", 3_000), 3_000, "g2").cache_read_tokens == 3_000
    again = cache.send(gemini("Review PR 1.", 3_000), 4_000, "g3")
    assert (again.cache_read_tokens, again.fresh_input_tokens) == (3_000, 10)
    assert evidence(again) == [("ttl_expired", 1, 400, None)]
    assert again.evidence[0].detail == f"the prefix through {QUESTION} expired 400s before this request started"


# --- readable once stored ----------------------------------------------------------------------------------

@pytest.mark.parametrize("at, read", [(29, 0), (30, 3_000), (31, 3_000)])
def test_a_prefix_is_readable_once_the_request_storing_it_has_finished(at, read):
    """g1 starts at 0 s and finishes at 30 s."""
    cache = OneCache(PrefixCache())
    cache.send(gemini("Review PR 1.", 3_000), 0, "g1", readable_at=30)
    second = cache.send(gemini("Review PR 2.", 3_000), at, "g2")
    assert second.cache_read_tokens == read
    if not read:
        assert evidence(second) == [("not_yet_readable", 0, None, "g1")]
        assert second.evidence[0].detail == f"the prefix through {SYSTEM} was still being processed by g1"


def test_storing_a_live_prefix_again_keeps_it_readable_from_the_first_store():
    """g1 (0 s, finished at 5 s) stores the system instruction and question 1; g2 at 10 s asks question 2 and
    runs until 60 s. g3 at 20 s sends g2's request: the system instruction is readable (since 5 s: g2 storing
    it again does not hide it), g2's question is not yet."""
    cache = OneCache(PrefixCache())
    cache.send(gemini("Review PR 1.", 3_000), 0, "g1", readable_at=5)
    cache.send(gemini("Review PR 2.", 3_000), 10, "g2", readable_at=60)
    third = cache.send(gemini("Review PR 2.", 3_000), 20, "g3")
    assert (third.cache_read_tokens, third.fresh_input_tokens) == (3_000, 10)
    assert evidence(third) == [("not_yet_readable", 1, None, "g2")]


def test_a_live_prefix_not_yet_readable_names_the_request_that_stored_it_last():
    """g1 (0 s, finishing at 30 s) and g2 (10 s, the same request, finishing at 40 s) both store the prefix;
    g3 at 20 s finds it still being processed, by g2 (the latest to store it; readable from 30 s)."""
    cache = OneCache(PrefixCache())
    cache.send(gemini("Review PR 1.", 3_000), 0, "g1", readable_at=30)
    cache.send(gemini("Review PR 1.", 3_000), 10, "g2", readable_at=40)
    third = cache.send(gemini("Review PR 1.", 3_000), 20, "g3")
    assert (third.cache_read_tokens, evidence(third)) == (0, [("not_yet_readable", 0, None, "g2")])
    assert cache.send(gemini("Review PR 1.", 3_000), 30, "g4").cache_read_tokens == 3_009  # all but its last token


def test_a_prefix_stored_again_after_it_expired_is_readable_only_from_the_new_store():
    """g1 at 0 s (finished at 5 s) keeps the prefix until 3,600 s. g2 at exactly 3,600 s finds it gone and
    stores it again, finishing at 3,650 s: g3 at 3,610 s can read nothing yet."""
    cache = OneCache(PrefixCache())
    cache.send(gemini("Review PR 1.", 3_000), 0, "g1", readable_at=5)
    assert cache.send(gemini("Review PR 1.", 3_000), 3_600, "g2", readable_at=3_650).cache_read_tokens == 0
    third = cache.send(gemini("Review PR 1.", 3_000), 3_610, "g3")
    assert third.cache_read_tokens == 0
    assert evidence(third) == [("not_yet_readable", 0, None, "g2")]


# --- rules that leave these out ------------------------------------------------------------------------------

def own_rules(tmp_path, monkeypatch, provider: str, prefix: str, **rules) -> None:
    """A rules folder of one's own ($KVPROBE_PROVIDERS_DIR) with one provider file naming only `rules`."""
    lines = [f'provider = "{provider}"', "endpoints = []", f'model_prefixes = ["{prefix}"]']
    for name, value in {"matching": "token_prefix", **rules}.items():
        shown = ("{ " + ", ".join(f'"{k}" = {v!r}' for k, v in value.items()) + " }" if isinstance(value, dict)
                 else f'"{value}"' if isinstance(value, str) else str(value))
        lines += [f"[rules.{name}]", f"value = {shown}", 'source = "a test"', 'checked = "2026-12-06"']
    (tmp_path / f"{provider}.toml").write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("KVPROBE_PROVIDERS_DIR", str(tmp_path))


@pytest.mark.parametrize("at, read", [(599, 1_001), (600, 0)])
def test_rules_naming_no_retention_minimum_or_step_keep_a_whole_prefix_10_minutes(tmp_path, monkeypatch, at, read):
    own_rules(tmp_path, monkeypatch, "xai", "grok")
    cache = OneCache(PrefixCache())
    cache.send(sized(chat("grok-4", "Q1"), [1_001, 5]), 0, "x1")
    assert cache.send(sized(chat("grok-4", "Q2"), [1_001, 6]), at, "x2").cache_read_tokens == read


@pytest.mark.parametrize("named, kept", [({"default_retention": "24h"}, 86_400),
                                         ({"default_retention": "in_memory"}, 600), ({}, 600),
                                         ({"default_retention": "extended"}, 600)],
                         ids=["24h", "in_memory", "none-named", "not-in-the-table"])
def test_a_retention_table_is_read_at_the_named_retention_else_its_shortest(tmp_path, monkeypatch, named, kept):
    own_rules(tmp_path, monkeypatch, "openai", "gpt-", retention_seconds={"in_memory": 600, "24h": 86_400},
              **named)
    for at, read in ((kept - 1, 2_000), (kept, 0)):
        cache = OneCache(PrefixCache())
        cache.send(sized(chat("gpt-4.1", "Q1"), [2_000, 5]), 0, "o1")
        assert cache.send(sized(chat("gpt-4.1", "Q2"), [2_000, 6]), at, "o2").cache_read_tokens == read


@pytest.mark.parametrize("table", [None, {}], ids=["absent", "empty"])
def test_rules_without_lifetimes_give_each_reader_its_own_fallback(tmp_path, monkeypatch, table):
    """The breakpoint caches fall back to 5 minutes and 1 hour; the lifetime readers (keep-alive, what-if
    domains) to the retention: one rules object serves both, whichever asks first."""
    own_rules(tmp_path, monkeypatch, "xai", "grok", **({} if table is None else {"ttl_seconds": table}))
    rules = rules_for("xai", "grok-4")
    fallback = {"5m": 300.0, "1h": 3_600.0}
    assert ttl_table(rules) == {}
    assert ttl_table(rules, fallback) == {"5m": 300.0, "1h": 3_600.0}
    assert ttl_table(rules) == {}
