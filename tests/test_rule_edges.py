"""Anthropic's cache rules at their edges, each written from the documented rule with the figures by hand.

Rules (docs/caching-rules.md, Anthropic rows):
- an entry lives 5 minutes (1 hour with `"ttl": "1h"`) from the start of the request that wrote it or last
  read it: every read refreshes it, a read found through the lookback from a later breakpoint included; at
  exactly the lifetime it is gone (the lifetime is the half-open [start, start + ttl));
- a breakpoint whose prefix is shorter than the model's minimum (1,024 tokens for Sonnet 4.5) writes no
  entry, wherever it stands in the request (not only at the last breakpoint);
- a 1h write is billed at 2x the input price, a 5m write at 1.25x, a read at 0.1x (Sonnet 4.5: $3 per
  million input tokens, so $6, $3.75 and $0.30; output $15).

Sizes are not kvprobe's estimate: every request's observed usage anchors its blocks exactly (read + write is
the prompt through the last breakpoint, fresh input the rest), and a block sized once keeps its size. The
usage each request reports is written here from the rules above, so the simulator's prediction must equal it.
"""
from __future__ import annotations

import copy
import json

import pytest

import kvprobe
from kvprobe.trace import TraceRecord, write_trace

EPH = {"type": "ephemeral"}
MODEL = "claude-sonnet-4-5"


def text(n: int, tag: str) -> str:
    """About n tokens of text of its own (sizes come from the usage below, not from this count)."""
    return " ".join(f"{tag}{i % 97}" for i in range(n))


def part(body: str, ttl: str | None = None, marked: bool = True) -> dict:
    out = {"type": "text", "text": body}
    if marked:
        out["cache_control"] = {**EPH, "ttl": ttl} if ttl else dict(EPH)
    return out


def request(system: list[dict] | str, messages: list[dict]) -> dict:
    return {"model": MODEL, "max_tokens": 64, "system": system, "messages": messages}


def usage(read: int = 0, w5m: int = 0, w1h: int = 0, fresh: int = 0, output: int = 10) -> dict:
    return {"input_tokens": fresh, "cache_read_input_tokens": read, "cache_creation_input_tokens": w5m + w1h,
            "cache_creation": {"ephemeral_5m_input_tokens": w5m, "ephemeral_1h_input_tokens": w1h},
            "output_tokens": output}


def rec(rid: str, start: float, body: dict, used: dict, session: str = "s") -> TraceRecord:
    return TraceRecord(id=rid, provider="anthropic", started_at=1_790_000_000.0 + start, request=copy.deepcopy(body),
                       response={"type": "message", "usage": used}, session=session, agent="main",
                       endpoint="/v1/messages", first_token_at=1_790_000_000.0 + start + 1)


def report(tmp_path, records: list[TraceRecord]) -> dict[str, dict]:
    path = tmp_path / "trace.jsonl"
    write_trace(path, records)
    data = kvprobe.analyse(path, fixes=False).to_json()
    return {r["id"]: r for r in data["requests"]} | {"": data["totals"]}


def predicted(row: dict) -> tuple[int, int]:
    return row["predicted"]["cache_read_tokens"], row["predicted"]["cache_write_tokens"]


def kinds(row: dict) -> list[str]:
    return [d["kind"] for d in row["diagnoses"]]


# --- the lifetime: every use refreshes it, a read through the lookback too ----------------------------------

SYSTEM = text(2_000, "sys")  # not marked: the only entries are at the messages' breakpoints
U1, A1, U2 = text(300, "ask"), text(40, "ans"), text(200, "more")


def first_turn() -> dict:
    return request(SYSTEM, [{"role": "user", "content": [part(U1)]}])


def second_turn() -> dict:
    """The first turn (its mark moved on) plus an answer and a question marked at the end: the breakpoint
    on the new question reaches the first turn's entry 3 positions back (question, answer, first turn)."""
    return request(SYSTEM, [{"role": "user", "content": [part(U1, marked=False)]},
                            {"role": "assistant", "content": [part(A1, marked=False)]},
                            {"role": "user", "content": [part(U2)]}])


@pytest.mark.parametrize("again_at, hit", [(400, True), (499, True), (500, False), (501, False)])
def test_a_read_through_the_lookback_refreshes_the_entry_it_read(tmp_path, again_at, hit):
    """a at 0 s writes 3,300 tokens (expires at 300 s); b at 200 s reads them through its lookback, which
    moves the expiry to 500 s; the first turn sent again at 400 or 499 s reads all 3,300, at 500 or 501 s
    the entry is gone (0 or 1 s past) and all 3,300 are written again."""
    again = usage(read=3_300) if hit else usage(w5m=3_300)
    rows = report(tmp_path, [rec("a", 0, first_turn(), usage(w5m=3_300)),
                             rec("b", 200, second_turn(), usage(read=3_300, w5m=250)),
                             rec("c", again_at, first_turn(), again)])
    assert predicted(rows["b"]) == (3_300, 250)
    assert predicted(rows["c"]) == ((3_300, 0) if hit else (0, 3_300))
    if hit:
        assert rows["c"]["diagnoses"] == []
    else:
        [d] = [d for d in rows["c"]["diagnoses"] if d["kind"] == "ttl_expired"]  # (and shorter than b)
        assert d["seconds_past"] == pytest.approx(again_at - 500) and d["missed_tokens"] == 3_300


# --- the lifetime's edge: at exactly 5 minutes (or 1 hour) the entry is gone -------------------------------

@pytest.mark.parametrize("ttl, lifetime", [(None, 300), ("1h", 3_600)])
@pytest.mark.parametrize("past", [-1, 0, 1])
def test_an_entry_lives_exactly_its_lifetime(tmp_path, ttl, lifetime, past):
    """The same 3,300-token request sent again 1 s before, exactly at, and 1 s after the lifetime."""
    body = request(SYSTEM, [{"role": "user", "content": [part(U1, ttl)]}])
    write = usage(w1h=3_300) if ttl else usage(w5m=3_300)
    hit = past < 0
    rows = report(tmp_path, [rec("a", 0, body, write), rec("b", lifetime + past, body,
                                                           usage(read=3_300) if hit else write)])
    assert predicted(rows["b"]) == ((3_300, 0) if hit else (0, 3_300))
    assert kinds(rows["b"]) == ([] if hit else ["ttl_expired"])
    if not hit:
        assert rows["b"]["diagnoses"][0]["seconds_past"] == pytest.approx(past)


def test_a_1h_entry_is_still_there_after_the_5_minute_lifetime(tmp_path):
    body = request(SYSTEM, [{"role": "user", "content": [part(U1, "1h")]}])
    rows = report(tmp_path, [rec("a", 0, body, usage(w1h=3_300)), rec("b", 300, body, usage(read=3_300)),
                             rec("c", 3_000 + 600, body, usage(read=3_300))])  # b's read: 3,900 s
    assert predicted(rows["b"]) == (3_300, 0) and predicted(rows["c"]) == (3_300, 0)
    assert rows["c"]["diagnoses"] == []


# --- the minimum length at a breakpoint that is not the last -------------------------------------------------

def calibration() -> TraceRecord:
    """Sizes the question Q exactly (50 tokens, the fresh input after a 2,000-token marked system) in a
    session of its own, so the system prompts below are sized exactly by what their requests write."""
    body = request([part(text(2_000, "other"))], [{"role": "user", "content": [part(QUESTION, marked=False)]}])
    return rec("cal", -3_600, body, usage(w5m=2_000, fresh=50), session="calibration")


QUESTION, FOLLOW_UP = text(50, "q"), text(60, "f")


@pytest.mark.parametrize("system_tokens, cached", [(1_023, False), (1_024, True), (1_025, True)])
def test_the_minimum_applies_at_every_breakpoint_not_only_the_last(tmp_path, system_tokens, cached):
    """Breakpoints on the system prompt and on the question. The question's breakpoint (system + 50 tokens)
    is above the 1,024 minimum in every case, so a writes everything; the system's own breakpoint writes an
    entry only from 1,024 tokens. b changes the question (60 tokens): it reads the system's entry where there
    is one, else nothing, and writes the rest."""
    system = [part(text(700, "rules"))]
    a = request(system, [{"role": "user", "content": [part(QUESTION)]}])
    b = request(system, [{"role": "user", "content": [part(FOLLOW_UP)]}])
    b_usage = usage(read=system_tokens, w5m=60) if cached else usage(w5m=system_tokens + 60)
    rows = report(tmp_path, [calibration(), rec("a", 0, a, usage(w5m=system_tokens + 50)), rec("b", 10, b, b_usage)])
    assert predicted(rows["a"]) == (0, system_tokens + 50)
    assert predicted(rows["b"]) == ((system_tokens, 60) if cached else (0, system_tokens + 60))
    assert "unexplained" not in kinds(rows["b"])


# --- 1h writes are billed at 2x input ------------------------------------------------------------------------

@pytest.mark.parametrize("w5m, w1h, read, fresh, output, usd", [
    # 10,000 x $6/M + 20 x $15/M
    (0, 10_000, 0, 0, 20, 0.0603),
    # 4,000 x $6/M + 1,000 x $3.75/M + 2,000 x $0.30/M + 500 x $3/M + 100 x $15/M
    (1_000, 4_000, 2_000, 500, 100, 0.024 + 0.00375 + 0.0006 + 0.0015 + 0.0015),
])
def test_a_1h_write_costs_twice_the_input_price(tmp_path, cli, w5m, w1h, read, fresh, output, usd):
    """The bill of one request, by hand from Anthropic's price list; the same in `report` and `usage`."""
    body = request(SYSTEM, [{"role": "user", "content": [part(U1, "1h")]}])
    rows = report(tmp_path, [rec("a", 0, body, usage(read, w5m, w1h, fresh, output))])
    assert rows["a"]["cost_usd"] == pytest.approx(usd, abs=1e-6)
    assert rows[""]["cost_usd"] == pytest.approx(usd, abs=1e-6)
    res = cli("usage", tmp_path / "trace.jsonl", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["totals"]["cost_usd"] == pytest.approx(usd, abs=1e-6)


def test_input_equivalents_weigh_a_1h_write_2x(tmp_path):
    """fresh 1, 5m write 1.25, 1h write 2, read 0.1: 500 + 1,250 + 8,000 + 200 = 9,950."""
    body = request(SYSTEM, [{"role": "user", "content": [part(U1, "1h")]}])
    rows = report(tmp_path, [rec("a", 0, body, usage(read=2_000, w5m=1_000, w1h=4_000, fresh=500))])
    assert rows["a"]["input_equivalent_tokens"] == pytest.approx(9_950, abs=0.1)


# --- what a request without marks, and what comes after the last mark, are -----------------------------------

def test_a_request_without_breakpoints_reads_and_writes_nothing(tmp_path):
    body = request(SYSTEM, [{"role": "user", "content": [part(U1, marked=False)]}])
    rows = report(tmp_path, [rec("a", 0, body, usage(fresh=3_300)), rec("b", 10, body, usage(fresh=3_300))])
    for rid in "ab":
        assert rows[rid]["predicted"] == {"cache_read_tokens": 0, "cache_write_tokens": 0, "fresh_input_tokens": 3_300}


def test_what_follows_the_last_breakpoint_is_fresh_input(tmp_path):
    """The system (3,000) is marked, the question (300) is not: a writes 3,000 and sends 300 fresh; b reads
    the 3,000 and sends the 300 fresh again."""
    body = request([part(text(2_000, "sys"))], [{"role": "user", "content": [part(U1, marked=False)]}])
    rows = report(tmp_path, [rec("a", 0, body, usage(w5m=3_000, fresh=300)),
                             rec("b", 10, body, usage(read=3_000, fresh=300))])
    assert rows["a"]["predicted"] == {"cache_read_tokens": 0, "cache_write_tokens": 3_000, "fresh_input_tokens": 300}
    assert rows["b"]["predicted"] == {"cache_read_tokens": 3_000, "cache_write_tokens": 0, "fresh_input_tokens": 300}


def test_a_breakpoint_reads_only_entries_at_or_before_it(tmp_path):
    """a marks the question: its entry holds system + question (3,300). b sends the same prompt with the mark
    moved back onto the system: the entry after its only breakpoint is out of its reach, so it writes the
    system's 3,000 and sends the question fresh. (The calibration request sizes the 300-token question.)"""
    cal = rec("cal", -3_600, request([part(text(2_000, "other"))], [{"role": "user", "content": [part(U1, marked=False)]}]),
              usage(w5m=2_000, fresh=300), session="calibration")
    a = request(SYSTEM, [{"role": "user", "content": [part(U1)]}])
    b = request([part(SYSTEM)], [{"role": "user", "content": [part(U1, marked=False)]}])
    rows = report(tmp_path, [cal, rec("a", 0, a, usage(w5m=3_300)), rec("b", 10, b, usage(w5m=3_000, fresh=300))])
    assert predicted(rows["b"]) == (0, 3_000)


# --- readable once the writing response has begun ------------------------------------------------------------

@pytest.mark.parametrize("after_first_token, hit", [(-0.1, False), (0.0, True), (0.1, True)])
def test_an_entry_is_readable_from_the_first_token_of_the_response_that_writes_it(tmp_path, after_first_token, hit):
    """a starts at 0 s and its response begins at 1 s; the same request at 0.9 s finds the entry still being
    written (and writes it too), at exactly 1 s or later reads it."""
    body = first_turn()
    b_at = 1 + after_first_token
    rows = report(tmp_path, [rec("a", 0, body, usage(w5m=3_300)),
                             rec("b", b_at, body, usage(read=3_300) if hit else usage(w5m=3_300))])
    assert predicted(rows["b"]) == ((3_300, 0) if hit else (0, 3_300))
    if not hit:
        [d] = rows["b"]["diagnoses"]
        assert d["kind"] == "not_yet_readable" and d["writer_id"] == "a" and d["path"] == "messages[0].content[0]"


def test_a_sibling_rewriting_an_entry_still_being_written_leaves_the_first_writer_named(tmp_path):
    """a at 0 s (response at 3 s), b at 0.5 s (response at 3.5 s) and c at 1 s all send the same prompt:
    b and c both find a's entry unreadable, and a is the writer they wait on."""
    body = first_turn()
    recs = [rec(rid, at, body, usage(w5m=3_300)) for rid, at in (("a", 0), ("b", 0.5), ("c", 1))]
    recs[0].first_token_at, recs[1].first_token_at = recs[0].started_at + 3, recs[1].started_at + 3
    rows = report(tmp_path, recs)
    for rid in "bc":
        [d] = rows[rid]["diagnoses"]
        assert d["kind"] == "not_yet_readable" and d["writer_id"] == "a", rid


# --- 1h writes at more than one breakpoint -----------------------------------------------------------------

def test_every_1h_breakpoints_span_is_a_1h_write(tmp_path):
    """Two system blocks each marked 1h, the question unmarked: all 3,000 tokens through the second mark are
    written at 1h (the spans of both marks), nothing at 5m."""
    body = request([part(text(1_200, "one"), "1h"), part(text(800, "two"), "1h")],
                   [{"role": "user", "content": [part(U1, marked=False)]}])
    path = tmp_path / "t.jsonl"
    write_trace(path, [rec("a", 0, body, usage(w1h=3_000, fresh=300))])
    [result] = kvprobe.analyse(path, fixes=False).results
    assert (result.predicted.cache_write_1h_tokens, result.predicted.cache_write_5m_tokens) == (3_000, 0)


def test_below_the_minimum_the_diagnosis_names_the_breakpoint_and_both_sizes(tmp_path):
    body = request(text(700, "short"), [{"role": "user", "content": [part(U1)]}])
    rows = report(tmp_path, [rec("a", 0, body, usage(fresh=1_023)), rec("b", 10, body, usage(fresh=1_023))])
    [d] = rows["b"]["diagnoses"]
    assert d["kind"] == "below_minimum" and d["path"] == "messages[0].content[0]"
    assert "1023 tokens" in d["detail"] and "1024" in d["detail"]


def test_a_live_entry_out_of_every_breakpoints_reach_is_named_with_how_far_back_it_is(tmp_path):
    """a marks its question (entry at block 1, 3,300 tokens). b adds 25 parts of 40 tokens to that question,
    marked only at the last (block 26): the entry is 26 positions back, past the 20-position window of b's
    only breakpoint, so b reads nothing, writes all 4,300, and says why."""
    parts = [part(text(30, f"p{i}"), marked=(i == 24)) for i in range(25)]
    b = request(SYSTEM, [{"role": "user", "content": [part(U1, marked=False), *parts]}])
    rows = report(tmp_path, [rec("a", 0, first_turn(), usage(w5m=3_300)), rec("b", 10, b, usage(w5m=4_300))])
    assert predicted(rows["b"]) == (0, 4_300)
    [d] = rows["b"]["diagnoses"]
    assert d["kind"] == "lookback_exceeded" and d["positions_back"] == 26 and d["path"] == "messages[0].content[0]"


def test_reading_a_later_entry_renews_the_earlier_entries_of_the_request(tmp_path):
    """Breakpoints on the system (3,000) and the question (300): a at 0 s writes both entries; b at 200 s, the
    same request, reads the question's entry and so uses, and renews, the system's too (to 500 s); c at 400 s
    asks something else and reads the system's 3,000 (expired at 300 s without the renewal)."""
    cal = rec("cal", -3_600, request([part(text(2_000, "other"))], [{"role": "user", "content": [part(U1, marked=False)]}]),
              usage(w5m=2_000, fresh=300), session="calibration")
    ask = request([part(SYSTEM)], [{"role": "user", "content": [part(U1)]}])
    other = request([part(SYSTEM)], [{"role": "user", "content": [part(U2)]}])
    rows = report(tmp_path, [cal, rec("a", 0, ask, usage(w5m=3_300)), rec("b", 200, ask, usage(read=3_300)),
                             rec("c", 400, other, usage(read=3_000, w5m=200))])
    assert predicted(rows["c"]) == (3_000, 200)


def test_a_read_through_the_lookback_renews_a_1h_entry_for_an_hour(tmp_path):
    """As above with 1h marks: a at 0 s writes 3,300 for an hour; b at 3,000 s reads them through its
    lookback (renewed to 6,600 s); the first turn again at 4,000 s still reads all 3,300."""
    first = request(SYSTEM, [{"role": "user", "content": [part(U1, "1h")]}])
    second = request(SYSTEM, [{"role": "user", "content": [part(U1, marked=False)]},
                              {"role": "assistant", "content": [part(A1, marked=False)]},
                              {"role": "user", "content": [part(U2, "1h")]}])
    rows = report(tmp_path, [rec("a", 0, first, usage(w1h=3_300)), rec("b", 3_000, second, usage(read=3_300, w1h=250)),
                             rec("c", 4_000, first, usage(read=3_300))])
    assert predicted(rows["b"]) == (3_300, 250) and predicted(rows["c"]) == (3_300, 0)


@pytest.mark.parametrize("past", [0, 1])
def test_a_pause_of_exactly_the_lifetime_is_bridged_by_one_ping(tmp_path, past):
    """At exactly 300 s the 3,300-token entry is gone, and one ping (at 270 s) would have kept it: 0.1 x 3,300 +
    5 = 335 input equivalents against a rebuild of (1.25 - 0.1) x 3,300 = 3,795 (pings pay for pauses under
    300 + floor(3,795 / 335) x 270 = 3,270 s); the 1h lifetime covers the pause too."""
    body = request(SYSTEM, [{"role": "user", "content": [part(U1)]}])
    rows = report(tmp_path, [rec("a", 0, body, usage(w5m=3_300)), rec("b", 300 + past, body, usage(w5m=3_300))])
    [d] = rows["b"]["diagnoses"]
    assert (d["kind"], d["advice"]) == ("ttl_expired", (
        "send 1 keep-alive request (the same prefix, max_tokens 1) every 4m30s through pauses like this one: 335 "
        "input-equivalents against 3,795 for the rebuild (pings pay for pauses up to 54m30s); or use \"ttl\": \"1h\" "
        "on the cache_control breakpoints: entries live 1h00m, long enough for this pause (writes at 2× input)"))
