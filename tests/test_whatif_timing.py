"""Timing policies (kvprobe/whatif/propose_timing.py), each from its rule with the figures by hand: what is
proposed, its detail and JSON keys as docs/contracts.md lists them, and what it adds or moves in the log.

Rules (providers/anthropic.toml, providers/openai.toml; docs/pricing.md, economics/keep_alive.py):
- a Claude entry lives 300 s (default_ttl 5m); writes 1.25x input, reads 0.1x; a gpt-5 prefix lives 600 s
  (in_memory retention), reads 0.1x, its rebuild is the prefix sent fresh (1x);
- a keep-alive ping goes out 30 s before the entry would expire (every lifetime - 30 s after the request
  before the pause), reads the cached prefix and sends the tail after the last breakpoint fresh, plus one
  output token (5 input equivalents); it pays while the pings of a pause cost less than the rebuild;
- Claude's longer lifetime is `"ttl": "1h"` (3,600 s, writes 2x); gpt-5's has no breakpoint ttl;
- a default breakpoint is written with the default ttl (5m); a request may carry at most 4 breakpoints;
- concurrent siblings: a stagger starts each later sibling 0.01 s after the first one's response began; a
  warm-up request (the shared prefix, marked, one output token) starts when the first did, and every sibling
  then starts 0.01 s after the warm-up's response would begin (the first sibling's time to first token).

Sizes come from each request's logged usage (read + write through the last breakpoint, fresh the rest), never
from kvprobe's estimate: a block sized once keeps its size.
"""
from __future__ import annotations

import copy

import pytest

from kvprobe.analysis.texts import TextSource
from kvprobe.pricing import PriceBook
from kvprobe.trace import TraceRecord
from kvprobe.whatif import propose_timing as timing
from kvprobe.whatif.evaluate import Pricer, prepare
from kvprobe.whatif.policies import Evidence

T0 = 1_790_000_000.0
EPH = {"type": "ephemeral"}
MODEL = "claude-sonnet-4-5"


def text(n: int, tag: str) -> str:
    """Text of its own, within the range the usage given can anchor (its estimate is about 1.2 n tokens; sizes
    come from that usage, not from this count)."""
    return " ".join(f"{tag}{i % 97}" for i in range(max(n // 2, 1)))


def usage(read: int = 0, w5m: int = 0, w1h: int = 0, fresh: int = 0) -> dict:
    return {"input_tokens": fresh, "cache_read_input_tokens": read, "cache_creation_input_tokens": w5m + w1h,
            "cache_creation": {"ephemeral_5m_input_tokens": w5m, "ephemeral_1h_input_tokens": w1h},
            "output_tokens": 10}


def rec(rid: str, start: float, body: dict, used: dict | None, session: str = "s", agent: str = "main",
        first_token: float = 1.0, provider: str = "anthropic") -> TraceRecord:
    return TraceRecord(id=rid, provider=provider, started_at=T0 + start, request=copy.deepcopy(body),
                       response={"usage": used} if used else None, session=session, agent=agent,
                       endpoint="/v1/messages" if provider == "anthropic" else "/v1/chat/completions",
                       first_token_at=T0 + start + first_token)


def part(body: str, marked: bool = False, ttl: str | None = None) -> dict:
    out: dict = {"type": "text", "text": body}
    if marked:
        out["cache_control"] = {**EPH, "ttl": ttl} if ttl else dict(EPH)
    return out


def claude(system: list[dict], content: list[dict]) -> dict:
    return {"model": MODEL, "max_tokens": 64, "system": system, "messages": [{"role": "user", "content": content}]}


def evidence(records: list[TraceRecord]) -> tuple[Pricer, Evidence]:
    records = sorted(records, key=lambda r: r.started_at)
    pricer = Pricer(records, PriceBook(), prepare(records))
    return pricer, Evidence(pricer.baseline, TextSource(records))


def starts(items, attrs=("started_at", "readable_at", "finished_at")) -> list:
    """Times relative to T0, rounded to the millisecond."""
    return [tuple(None if getattr(x, a) is None else round(getattr(x, a) - T0, 3) for a in attrs) for x in items]


# --- keep-alive pings ----------------------------------------------------------------------------------------

def pause(session: str, gap: float, cached: int, tail: int = 100) -> list[TraceRecord]:
    """Two requests of one session `gap` seconds apart: a marked system prompt of `cached` tokens and a fresh
    question of `tail`; the second writes everything again (the entry expired at 300 s)."""
    body = claude([part(text(cached, session), marked=True)], [part(text(tail, "q" + session))])
    return [rec(f"{session}0", 0, body, usage(w5m=cached, fresh=tail), session=session),
            rec(f"{session}1", gap, body, usage(w5m=cached, fresh=tail), session=session)]


def gpt_pause(gap: float, tokens: int = 2_000) -> list[TraceRecord]:
    body = {"model": "gpt-5", "messages": [{"role": "system", "content": text(tokens, "o")},
                                           {"role": "user", "content": "hi"}]}
    used = {"prompt_tokens": tokens, "completion_tokens": 10, "prompt_tokens_details": {"cached_tokens": 0}}
    return [rec("o0", 0, body, used, session="o", provider="openai"),
            rec("o1", gap, body, used, session="o", provider="openai")]


def mistral_pause(gap: float, tokens: int) -> list[TraceRecord]:
    body = {"model": "mistral-large-latest", "messages": [{"role": "system", "content": text(tokens, "m")},
                                                          {"role": "user", "content": "hi"}]}
    used = {"prompt_tokens": tokens, "completion_tokens": 10, "prompt_tokens_details": {"cached_tokens": 0}}
    return [rec("m0", 0, body, used, session="m", provider="mistral"),
            rec("m1", gap, body, used, session="m", provider="mistral")]


FOUR_PAUSES = [*pause("a", 900, 4_000), *pause("b", 2_500, 2_000), *pause("c", 420, 2_000), *gpt_pause(700)]


def test_keep_alive_pings_every_pause_they_pay_for_and_names_the_ones_past_break_even():
    """By hand, pings every lifetime - 30 s after the request before the pause:
    a: 4,000 cached, 100 tail, 900 s: ceil((900 - 300) / 270) = 3 pings (270, 540, 810 s) of 0.1 x 4,000 + 100
       + 5 = 505 each, 1,515 < the rebuild (1.25 - 0.1) x 4,000 = 4,600: pays; 9 pings pay (4,600 / 505 = 9.1):
       break-even 300 + 9 x 270 = 2,730 s;
    b: 2,000 cached, 2,500 s: ceil(2,200 / 270) = 9 pings of 305 = 2,745 > 2,300: past its break-even
       (2,300 / 305 = 7.5: 300 + 7 x 270 = 2,190 s);
    c: 2,000 cached, 420 s: 1 ping at 270 s, 305 < 2,300: pays; break-even 2,190 s;
    o: gpt-5, 2,000-token prompt, 600 s lifetime, 700 s: 1 ping at 570 s of 0.1 x 2,000 + 0 + 5 = 205 < 1,800
       (0.9 x 2,000): pays; break-even 600 + 8 x 570 = 5,160 s.
    The policy names the shortest interval (270 s), the longest paying pause (900 s), the smallest break-even
    (2,190 s), 5 pings in all, and b as the one longer pause it leaves."""
    pricer, ev = evidence(FOUR_PAUSES)
    [policy] = timing.propose_keep_alive(ev)
    assert (policy.kind, policy.key, policy.requests, policy.sessions, policy.cause_sessions) == (
        "keep_alive", "pauses", ["a1", "c1", "o1"], {"a", "c", "o"}, 4)
    assert policy.extra == {"pings": 5, "break_even_pause_s": 2_190.0, "pauses_past_break_even": 1}
    assert policy.detail == (
        "during pauses, send a keep-alive (the last request's prefix with max_tokens 1) every 270s: 3 pauses of up "
        "to 900s, 5 pings in all; pings pay for pauses up to about 2,190s (past that they cost more than the "
        "rebuild); not proposed for 1 longer pause")
    base = pricer.base_sks
    added = policy.reshape(base)[len(base):]
    assert [(sk.id, sk.session) for sk in added] == [
        ("a0+keepalive1", "a"), ("a0+keepalive2", "a"), ("a0+keepalive3", "a"), ("c0+keepalive1", "c"),
        ("o0+keepalive1", "o")]
    # numbered after the log's own 8 requests (the tie-break among equal starts), in the order of the pauses,
    # and the same when a part of the log holding only c0 is edited (an edited log streamed in parts)
    orders = [sk.order for sk in added]
    assert orders == sorted(orders) and len(set(orders)) == 5 and orders[0] > max(sk.order for sk in base) == 7
    [c_ping] = policy.reshape([s for s in base if s.id == "c0"])[1:]
    assert (c_ping.id, c_ping.order) == ("c0+keepalive1", orders[3])
    assert starts(added) == [(270.0, 270.5, 271.0), (540.0, 540.5, 541.0), (810.0, 810.5, 811.0),
                             (270.0, 270.5, 271.0), (570.0, 570.5, 571.0)]
    for sk in added:  # the source's request as it is, simulated with one output token and no logged usage
        source = next(s for s in base if s.id == sk.id.split("+")[0])
        assert sk.request is source.request and sk.observed is None
        assert (sk.extra["keep_alive"], sk.extra["output_tokens"]) == (True, 1)


def test_keep_alive_json_gives_the_break_even_pause_to_a_tenth_of_a_second():
    import json

    _, ev = evidence(FOUR_PAUSES)
    [policy] = timing.propose_keep_alive(ev)
    text_out = json.dumps({k: policy.to_json()[k] for k in ("pings", "break_even_pause_s", "pauses_past_break_even")})
    assert text_out == '{"pings": 5, "break_even_pause_s": 2190.0, "pauses_past_break_even": 1}'


def test_keep_alive_pings_written_are_the_source_request_answering_one_token():
    records = sorted(FOUR_PAUSES, key=lambda r: r.started_at)
    _, ev = evidence(records)
    [policy] = timing.propose_keep_alive(ev)
    out = policy.rewrite(records)
    assert out[:len(records)] == records
    pings = out[len(records):]
    assert [p.id for p in pings] == ["a0+keepalive1", "a0+keepalive2", "a0+keepalive3", "c0+keepalive1",
                                     "o0+keepalive1"]
    assert starts(pings, ("started_at", "first_token_at", "finished_at")) == [
        (270.0, 270.5, 271.0), (540.0, 540.5, 541.0), (810.0, 810.5, 811.0), (270.0, 270.5, 271.0),
        (570.0, 570.5, 571.0)]
    for ping in pings:
        source = next(r for r in records if r.id == ping.id.split("+")[0])
        assert ping.request == {**source.request, "max_tokens": 1} and ping.response is None
        assert (ping.extra["keep_alive"], ping.extra["output_tokens"]) == (True, 1)
        assert (ping.session, ping.agent) == (source.session, source.agent)
    assert "max_tokens" not in records[records.index(next(r for r in records if r.id == "o0"))].request


def test_keep_alive_not_proposed_where_no_pause_pays_or_none_expired():
    _, ev = evidence(pause("b", 2_500, 2_000))  # past its break-even of 2,190 s
    assert timing.propose_keep_alive(ev) == []
    _, ev = evidence(pause("d", 299, 2_000))  # inside the lifetime: no expiry, no pause
    assert timing.pauses(ev) == [] and timing.propose_keep_alive(ev) == []


@pytest.mark.parametrize("records, detail", [
    # a alone: 3 pings, break-even 2,730 s (the tail's 100 tokens count: without them 4,600 / 405 = 11.4 pings
    # would pay, 3,270 s)
    (pause("a", 900, 4_000), "every 270s: 1 pause of up to 900s, 3 pings in all; pings pay for pauses up to "
                             "about 2,730s (past that they cost more than the rebuild)"),
    # gpt-5 alone: the whole prompt is cached, no tail: 1 ping, 600 + 8 x 570 = 5,160 s
    (gpt_pause(700), "every 570s: 1 pause of up to 700s, 1 ping in all; pings pay for pauses up to about 5,160s "
                     "(past that they cost more than the rebuild)"),
    # Mistral (prefix cache, 600 s, reads 0.1x), a 450-token prompt, all of it cached, nothing resent fresh:
    # a ping costs 45 + 5 = 50, the rebuild 0.9 x 450 = 405: 8 pings pay (8.1; one fresh token more per ping
    # would leave 7.9), 600 + 8 x 570 = 5,160 s
    (mistral_pause(700, 450), "every 570s: 1 pause of up to 700s, 1 ping in all; pings pay for pauses up to "
                              "about 5,160s (past that they cost more than the rebuild)"),
])
def test_keep_alive_detail_of_one_pause(records, detail):
    _, ev = evidence(records)
    [policy] = timing.propose_keep_alive(ev)
    assert policy.detail == "during pauses, send a keep-alive (the last request's prefix with max_tokens 1) " + detail


# --- the provider's longer lifetime ------------------------------------------------------------------------

SETTING = '"ttl": "1h" on the cache_control breakpoints'  # providers/anthropic.toml, longer_lifetime


def ttls(sk) -> list[str]:
    return [t for _, t in sk.request.breakpoints]


def test_ttl_1h_for_the_breakpoint_streams_whose_pauses_an_hour_outlasts():
    """a (900 s), b (2,500 s), c (420 s) are Claude streams with 5m entries: 1h entries (3,600 s) outlast each
    pause. gpt-5's pause (o) has no breakpoint to give a ttl: not counted, not edited by this policy (its own
    is the retention, below)."""
    pricer, ev = evidence(FOUR_PAUSES)
    [policy] = [p for p in timing.propose_longer_lifetime(ev) if p.key == "lifetime"]
    assert (policy.kind, policy.key, policy.requests, policy.sessions, policy.cause_sessions, policy.extra) == (
        "ttl_1h", "lifetime", ["a1", "b1", "c1"], {"a", "b", "c"}, 3, {"setting": SETTING})
    assert policy.detail == (f"use {SETTING} for 3 agent streams with pauses of up to 2,500s (entries then live "
                             "3,600s; writes cost 2.0x input)")
    base = pricer.base_sks
    out = policy.reshape(base)
    assert sorted((sk.id, ttls(sk)) for sk in out if sk.session != "o") == [
        (f"{s}{k}", ["1h"]) for s in "abc" for k in (0, 1)]
    assert all(a is b for a, b in zip(out, base) if a.session == "o") and len(out) == len(base)
    records = sorted(FOUR_PAUSES, key=lambda r: r.started_at)
    written = policy.rewrite(records)
    for before, after in zip(records, written):
        if before.session == "o":
            assert after is before
        else:
            assert after.request["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
            assert before.request["system"][0]["cache_control"] == {"type": "ephemeral"}  # the input untouched


@pytest.mark.parametrize("gap, proposed", [(3_599, True), (3_600, False), (3_601, False)])
def test_ttl_1h_covers_pauses_shorter_than_an_hour(gap, proposed):
    """A 1h entry is gone at exactly 3,600 s after its last use (docs/caching-rules.md; kvprobe.sim)."""
    _, ev = evidence(pause("e", gap, 2_000))
    found = timing.propose_longer_lifetime(ev)
    if not proposed:
        assert found == []
        return
    [policy] = found
    assert policy.requests == ["e1"] and f"pauses of up to {gap:,}s" in policy.detail


def test_ttl_1h_edits_only_the_streams_it_covers_and_requests_not_yet_at_1h():
    """e pauses 600 s (covered), f 4,000 s (not: cause counted, stream left alone); e's last request already
    writes 1h entries: left as it is."""
    system = [part(text(2_000, "e"), marked=True)]
    hour = [part(text(2_000, "e"), marked=True, ttl="1h")]
    q = [part(text(100, "qe"))]
    records = [rec("e0", 0, claude(system, q), usage(w5m=2_000, fresh=100), session="e"),
               rec("e1", 600, claude(system, q), usage(w5m=2_000, fresh=100), session="e"),
               rec("e2", 700, claude(hour, q), usage(w1h=2_000, fresh=100), session="e"),
               *pause("f", 4_000, 2_000)]
    pricer, ev = evidence(records)
    [policy] = timing.propose_longer_lifetime(ev)
    assert (policy.requests, policy.sessions, policy.cause_sessions) == (["e1"], {"e"}, 2)
    assert "1 agent stream with pauses of up to 600s" in policy.detail
    base = pricer.base_sks
    out = policy.reshape(base)
    assert {sk.id: (ttls(sk), sk is b) for sk, b in zip(out, base)} == {
        "e0": (["1h"], False), "e1": (["1h"], False), "e2": (["1h"], True), "f0": (["5m"], True),
        "f1": (["5m"], True)}


RETENTION = '"prompt_cache_retention": "24h" (extended prompt cache retention)'  # providers/openai.toml


def test_a_prefix_cache_is_given_the_retention_its_provider_offers():
    """gpt-5's pause (o, 700 s) outlasts in-memory retention (600 s) and not a day's: every request of the
    stream asks for 24h (in the skeletons the simulation prices, and in the records `fix` writes); the Claude
    streams are another policy's."""
    pricer, ev = evidence(FOUR_PAUSES)
    [policy] = [p for p in timing.propose_longer_lifetime(ev) if p.key == "retention"]
    assert (policy.kind, policy.requests, policy.sessions, policy.cause_sessions, policy.extra) == (
        "ttl_1h", ["o1"], {"o"}, 1, {"setting": RETENTION})
    assert policy.detail == (f"use {RETENTION} for 1 agent stream with pauses of up to 700s (entries then live "
                             "86,400s; writes cost 1.0x input)")
    out = policy.reshape(pricer.base_sks)
    assert sorted(sk.id for sk in out if sk.request.retention == "24h") == ["o0", "o1"]
    assert all(a is b for a, b in zip(out, pricer.base_sks) if a.session != "o")
    written = policy.rewrite(sorted(FOUR_PAUSES, key=lambda r: r.started_at))
    assert sorted(r.id for r in written if (r.request or {}).get("prompt_cache_retention") == "24h") == ["o0", "o1"]
    assert all("prompt_cache_retention" not in r.request for r in FOUR_PAUSES)  # the input untouched


def test_a_claude_pause_past_an_hour_does_not_hide_the_openai_stream_s_retention():
    """Claude's pause (4,000 s) outlasts even 1h entries: no ttl for it; gpt-5's (700 s) still gets a day."""
    _, ev = evidence([*pause("e", 4_000, 2_000), *gpt_pause(700)])
    assert [(p.key, p.requests) for p in timing.propose_longer_lifetime(ev)] == [("retention", ["o1"])]


@pytest.mark.parametrize("records", [gpt_pause(86_400), mistral_pause(700, 2_000)])
def test_no_longer_retention_past_a_day_nor_where_the_provider_has_none(records):
    """A pause of exactly a day outlasts 24h retention (gone at its lifetime); Mistral offers no setting."""
    _, ev = evidence(records)
    assert timing.propose_longer_lifetime(ev) == []


# --- a breakpoint the lookback can reach -----------------------------------------------------------------

QUESTION = text(300, "q")


def lookback_pair(marked_extra: tuple[int, ...] = ()) -> list[TraceRecord]:
    """a marks the system prompt and its question (messages[0].content[0]); b sends the same question and 24
    parts after it, marked at the last (and at `marked_extra`): the entry a wrote at content[0] lies 25 blocks
    back from b's last breakpoint, beyond the lookback window of 20. (No figure here rests on a size.)"""
    system = [part(text(2_000, "sys"), marked=True)]
    extra = [part(text(40, f"p{j}"), marked=j == 23 or j in marked_extra) for j in range(24)]
    return [rec("a", 0, claude(system, [part(QUESTION, marked=True)]), usage(w5m=2_300)),
            rec("b", 10, claude(system, [part(QUESTION)] + extra), usage(read=2_000, w5m=1_260))]


def test_lookback_breakpoint_marks_where_the_previous_entry_ends():
    records = lookback_pair()
    pricer, ev = evidence(records)
    [policy] = timing.propose_lookback(ev)
    assert (policy.kind, policy.key, policy.requests, policy.sessions, policy.cause_sessions) == (
        "lookback_breakpoint", "lookback", ["b"], {"s"}, 1)
    assert policy.detail == ("add a cache_control breakpoint where the previous request's entry ends, in 1 request "
                             "whose last entry lies beyond the lookback window (e.g. messages[0].content[0] in b)")
    base = pricer.base_sks
    a, b = policy.reshape(base)
    # blocks: system[0] (0), content[0] (1), the 24 parts (2-25): a default (5m) breakpoint joins at 1
    assert a is base[0] and b.request.breakpoints == [(0, "5m"), (1, "5m"), (25, "5m")]
    assert base[1].request.breakpoints == [(0, "5m"), (25, "5m")]  # the baseline untouched
    wa, wb = policy.rewrite(records)
    assert wa is records[0]
    assert [i for i, p in enumerate(wb.request["messages"][0]["content"]) if "cache_control" in p] == [0, 24]
    assert wb.request["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in records[1].request["messages"][0]["content"][0]


@pytest.mark.parametrize("marked_extra, added", [((21,), True), ((20, 21), False)])
def test_lookback_breakpoint_only_while_the_request_has_fewer_than_4(marked_extra, added):
    """b with 3 breakpoints (system, content[22], content[24]) takes a fourth; with 4 it is left as it is."""
    pricer, ev = evidence(lookback_pair(marked_extra))
    [policy] = timing.propose_lookback(ev)
    b = policy.reshape(pricer.base_sks)[1]
    assert (b is pricer.base_sks[1]) is not added
    assert [i for i, _ in b.request.breakpoints] == ([0, 1] if added else [0]) + [j + 2 for j in marked_extra] + [25]


def test_lookback_breakpoint_not_proposed_within_the_window():
    system = [part(text(2_000, "sys"), marked=True)]
    extra = [part(text(40, f"p{j}"), marked=j == 18) for j in range(19)]  # 19 back from content[19]: readable
    records = [rec("a", 0, claude(system, [part(QUESTION, marked=True)]), usage(w5m=2_300)),
               rec("b", 10, claude(system, [part(QUESTION)] + extra), usage(read=2_300, w5m=760))]
    _, ev = evidence(records)
    assert timing.propose_lookback(ev) == []


# --- concurrent siblings ------------------------------------------------------------------------------------

TASK = text(50, "task")


def siblings(session: str, system_tokens: int, ttft: float, at: float = 0.0, marked: bool = False,
             shared_task: bool = True) -> list[TraceRecord]:
    """Three subagents of `session` (agents sub0-2) start 0.1 s apart at `at`, each `ttft` s before its response
    begins and finished 5 s after its start: a marked system prompt of `system_tokens`, the same 50-token task
    (messages[0].content[0], marked when `marked`; each its own task when not `shared_task`) and a marked part
    of their own (50 tokens). Every one writes everything (none can read the first's entries yet). A
    calibration request an hour before, in a session of its own, writes the shared prefix alone: the shared
    size is exactly system_tokens + 50."""
    system = [part(text(system_tokens, "sys"), marked=True)]
    cal = claude(system, [part(TASK, marked=True)])
    out = [rec(f"cal{session}", at - 3_600, cal, usage(w5m=system_tokens + 50), session=f"cal{session}")]
    for i in range(3):
        task = part(TASK if shared_task else text(50, f"task{i}"), marked=marked)
        body = claude(system, [task, part(text(50, f"own{session}{i}"), marked=True)])
        r = rec(f"{session}{i}", at + 0.1 * i, body, usage(w5m=system_tokens + 100), session=session,
                agent=f"sub{i}", first_token=ttft)
        r.finished_at = r.started_at + 5
        out.append(r)
    return out


def shared_breakpoint(records: list[TraceRecord]):
    pricer, ev = evidence(records)
    logged = {r.id: r.response["usage"]["cache_creation_input_tokens"] for r in records}
    for r in pricer.baseline:  # the sizes are the logged ones
        assert r.predicted.cache_write_5m_tokens == logged[r.sk.id], r.sk.id
    return pricer, timing.propose_siblings(ev)


def moved(sks, ids) -> list:
    by_id = {sk.id: sk for sk in sks}
    return starts([by_id[i] for i in ids])


TWO_GROUPS = [*siblings("s", 2_000, ttft=3.0), *siblings("t", 3_000, ttft=2.0, at=100.0)]


def test_siblings_are_staggered_after_the_first_response_begins_or_a_warm_up_is_sent_first():
    """Group s: sub0 starts at 0, its response begins at 3.0 s; group t at 100 s, 2.0 s. Shared: 2,050 and
    3,050 tokens through messages[0].content[0], unmarked.
    Stagger: s1 and s2 start at 3.0 + 0.01 = 3.01 s (moved 2.91 and 2.81 s), t1 and t2 at 102.01 s (1.91,
    1.81 s): up to 2.91 s added. Warm-up: a warm-up starts with each group's first (0 s, 100 s), its response
    begins a time-to-first-token later (3.0, 2.0 s) and it ends 0.01 s after; every sibling starts at 3.01 s
    (102.01 s): up to 3.01 s added (s0)."""
    pricer, (stagger, warm) = shared_breakpoint(TWO_GROUPS)
    ids = ["s0", "s1", "s2", "t0", "t1", "t2"]
    assert (stagger.kind, stagger.key, stagger.requests, stagger.sessions, stagger.cause_sessions,
            stagger.exclusive) == ("shared_breakpoint", "siblings", ids, {"s", "t"}, 2, "siblings")
    assert stagger.extra == {"variant": "stagger", "added_latency_s": 2.91, "path": "messages[0].content[0]",
                             "shared_tokens": 2_050, "groups": 2}
    assert stagger.detail == (
        "mark the end of the prefix they share (2,050-3,050 tokens, e.g. messages[0].content[0]) with "
        "cache_control and start the later siblings of 2 groups (e.g. s0, s1, s2) once the first one's response "
        "has begun, so they read the prefix it wrote (adds up to 2.9 s before they start)")
    assert (warm.kind, warm.key, warm.requests, warm.sessions, warm.cause_sessions, warm.exclusive) == (
        "shared_breakpoint", "siblings-warm-up", ids, {"s", "t"}, 2, "siblings")
    assert warm.extra == {"variant": "warm_up", "added_latency_s": 3.01, "path": "messages[0].content[0]",
                          "shared_tokens": 2_050, "groups": 2}
    assert warm.detail == (
        "send a warm-up request (the shared 2,050-3,050-token prefix, marked, max_tokens 1) before each of 2 "
        "groups of siblings and start them once its response has begun (adds about 3.0 s to each)")

    base = pricer.base_sks
    staggered = stagger.reshape(base)
    assert len(staggered) == len(base)
    assert moved(staggered, ids) == [(0.0, 3.0, 5.0), (3.01, 6.01, 8.01), (3.01, 6.01, 8.01),
                                     (100.0, 102.0, 105.0), (102.01, 104.01, 107.01), (102.01, 104.01, 107.01)]
    # blocks: system[0] (0), the task (1), its own part (2): the shared end joins the marks
    assert {sk.id: sk.request.breakpoints for sk in staggered if sk.id in ids} == {
        i: [(0, "5m"), (1, "5m"), (2, "5m")] for i in ids}
    assert [sk.observed for sk in staggered if sk.id in ids] == [None] * 6
    assert [sk for sk in staggered if sk.session.startswith("cal")] == [sk for sk in base if sk.session.startswith("cal")]

    warmed = warm.reshape(base)
    assert moved(warmed, ids) == [(3.01, 6.01, 8.01)] * 3 + [(102.01, 104.01, 107.01)] * 3
    added = warmed[len(base):]
    assert [(sk.id, sk.order, sk.session, sk.agent) for sk in added] == [
        ("s0+warmup", 8, "s", "sub0"), ("t0+warmup", 9, "t", "sub0")]
    assert starts(added) == [(0.0, 3.0, 3.01), (100.0, 102.0, 102.01)]
    for sk in added:  # the shared prefix alone, marked at its end, answering one token, predicted
        assert [b.path for b in sk.request.blocks] == ["system[0]", "messages[0].content[0]"]
        assert sk.request.breakpoints == [(0, "5m"), (1, "5m")]
        assert sk.extra["output_tokens"] == 1 and sk.observed is None


def test_siblings_written_are_marked_and_moved_and_the_warm_up_is_the_shared_prefix():
    records = sorted(TWO_GROUPS, key=lambda r: r.started_at)
    _, (stagger, warm) = shared_breakpoint(records)
    ids = ["s0", "s1", "s2", "t0", "t1", "t2"]
    for policy, times in ((stagger, [(0.0, 3.0, 5.0), (3.01, 6.01, 8.01), (3.01, 6.01, 8.01),
                                     (100.0, 102.0, 105.0), (102.01, 104.01, 107.01), (102.01, 104.01, 107.01)]),
                          (warm, [(3.01, 6.01, 8.01)] * 3 + [(102.01, 104.01, 107.01)] * 3)):
        out = policy.rewrite(records)
        by_id = {r.id: r for r in out}
        assert starts([by_id[i] for i in ids], ("started_at", "first_token_at", "finished_at")) == times
        for i in ids:
            content = by_id[i].request["messages"][0]["content"]
            assert [p.get("cache_control") for p in content] == [{"type": "ephemeral"}] * 2
        assert [r for r in out if r.session.startswith("cal")] == [r for r in records if r.session.startswith("cal")]
        assert all("cache_control" not in r.request["messages"][0]["content"][0] for r in records if r.id in ids)
    added = warm.rewrite(records)[len(records):]
    assert [(r.id, r.session, r.agent) for r in added] == [("s0+warmup", "s", "sub0"), ("t0+warmup", "t", "sub0")]
    assert starts(added, ("started_at", "first_token_at", "finished_at")) == [(0.0, 3.0, 3.01),
                                                                              (100.0, 102.0, 102.01)]
    for r in added:
        assert r.request["max_tokens"] == 1 and r.extra["output_tokens"] == 1 and r.response is None
        assert r.request["messages"] == [{"role": "user", "content": [{**part(TASK), "cache_control": EPH}]}]
        assert r.request["system"] == [part(text(2_000 if r.session == "s" else 3_000, "sys"), marked=True)]
    assert len(stagger.rewrite(records)) == len(records)


def test_a_later_request_of_a_staggered_stream_moves_with_it_and_an_earlier_one_does_not():
    """sub1 of s also sent a request 100 s before the group and sends one 60 s after: the later one moves with
    it (2.91 s), the earlier one stays; sub0's, never moved, stay."""
    records = siblings("s", 2_000, ttft=3.0)
    body = claude([part(text(500, "early"))], [part(text(500, "early q"))])
    records += [rec("before", -100, body, usage(fresh=600), session="s", agent="sub1"),
                rec("after", 60, body, usage(fresh=600), session="s", agent="sub1"),
                rec("lead-after", 60, body, usage(fresh=600), session="s", agent="sub0")]
    for r in records[-3:]:
        r.finished_at = r.started_at + 2
    pricer, (stagger, _) = shared_breakpoint(records)
    assert moved(stagger.reshape(pricer.base_sks), ["before", "after", "lead-after"]) == [
        (-100.0, -99.0, -98.0), (62.91, 63.91, 64.91), (60.0, 61.0, 62.0)]
    by_id = {r.id: r for r in stagger.rewrite(sorted(records, key=lambda r: r.started_at))}
    assert starts([by_id[i] for i in ("before", "after", "lead-after")],
                  ("started_at", "first_token_at", "finished_at")) == [
        (-100.0, -99.0, -98.0), (62.91, 63.91, 64.91), (60.0, 61.0, 62.0)]


def test_siblings_already_marked_at_the_shared_end_are_only_staggered_and_timed():
    """The task is marked already: no marking is proposed (the detail starts with the stagger) and the
    members' marks stay as they were."""
    pricer, (stagger, warm) = shared_breakpoint(siblings("s", 2_000, ttft=3.0, marked=True))
    assert stagger.detail.startswith("start the later siblings of 1 group (e.g. s0, s1, s2) once the first") \
        and stagger.detail.endswith("(adds up to 2.9 s before they start)")
    assert "(the shared 2,050-token prefix, marked, max_tokens 1) before each of 1 group of" in warm.detail
    assert [sk.request.breakpoints for sk in stagger.reshape(pricer.base_sks)[1:]] == [
        [(0, "5m"), (1, "5m"), (2, "5m")]] * 3


def test_siblings_sharing_only_the_system_prompt_get_no_warm_up():
    """Each sibling has its own task: the shared prefix ends at system[0] (marked), not at a user turn's
    content, so no warm-up request can be cut from it; the stagger alone is proposed."""
    pricer, found = shared_breakpoint(siblings("s", 2_000, ttft=3.0, shared_task=False))
    assert [p.key for p in found] == ["siblings"] and found[0].extra["path"] == "system[0]"
    assert found[0].detail.startswith("start the later siblings")


def test_siblings_that_start_after_the_first_response_began_are_not_a_group():
    _, ev = evidence(siblings("s", 2_000, ttft=0.05))  # sub0 readable at 0.05 s, before sub1 starts at 0.1 s
    assert timing.propose_siblings(ev) == []


def test_ttl_1h_reaches_records_that_name_no_session_or_agent():
    """A log without session or agent names is one stream (session "-", agent "main"): its records get 1h."""
    records = pause("a", 900, 4_000)
    for r in records:
        r.session, r.agent = None, None
    _, ev = evidence(records)
    [policy] = timing.propose_longer_lifetime(ev)
    written = policy.rewrite(records)
    assert [r.request["system"][0]["cache_control"] for r in written] == [{"type": "ephemeral", "ttl": "1h"}] * 2


def test_ttl_1h_not_proposed_where_the_breakpoint_cache_has_no_longer_lifetime():
    """Qwen's explicit cache (cache_control markers: 5-minute entries, providers/qwen.toml) names no longer
    lifetime: a 7-minute pause gets keep-alive pings but no ttl_1h."""
    system = {"role": "system", "content": [{"type": "text", "text": text(3_000, "qw"), "cache_control": EPH}]}
    body = {"model": "qwen3-coder-plus", "messages": [system, {"role": "user", "content": "Review the lexer."}]}
    records = [rec("q0", 0, body, None, provider="qwen"), rec("q1", 420, body, None, provider="qwen")]
    _, ev = evidence(records)
    assert [r.sk.request.cache_mode for r in ev.results] == ["breakpoints"] * 2
    assert [k.pings for _, _, k in timing.pauses(ev)] == [1]
    assert timing.propose_longer_lifetime(ev) == []


def test_lookback_breakpoint_edits_only_the_sessions_whose_requests_it_marks():
    records = lookback_pair()
    for r in records:
        r.session = "x"
    records += pause("y", 60, 2_000)  # read within the lifetime: nothing to mark
    _, ev = evidence(records)
    [policy] = timing.propose_lookback(ev)
    assert (policy.requests, policy.sessions, policy.cause_sessions) == (["b"], {"x"}, 1)


def test_siblings_whose_first_answers_within_a_second_add_that_little():
    """sub0's response begins 0.5 s after it starts: s1 and s2 start at 0.51 s (moved 0.41 and 0.31 s)."""
    pricer, (stagger, warm) = shared_breakpoint(siblings("s", 2_000, ttft=0.5))
    assert stagger.extra["added_latency_s"] == 0.41 and stagger.detail.endswith("(adds up to 0.4 s before they start)")
    assert warm.extra["added_latency_s"] == 0.51 and warm.detail.endswith("(adds about 0.5 s to each)")


def test_two_siblings_are_a_group_and_three_sizes_show_as_a_range():
    """Groups of two (sub0, sub1) in sessions of 1,050, 2,050 and 3,050 shared tokens: the detail gives the
    smallest and the largest."""
    records = []
    for session, tokens, at in (("u", 1_000, 0.0), ("v", 2_000, 200.0), ("w", 3_000, 400.0)):
        records += [r for r in siblings(session, tokens, ttft=3.0, at=at) if not r.id.endswith("2")]
    pricer, (stagger, warm) = shared_breakpoint(records)
    assert stagger.requests == ["u0", "u1", "v0", "v1", "w0", "w1"] and stagger.extra["groups"] == 3
    assert "(1,050-3,050 tokens, e.g. messages[0].content[0])" in stagger.detail
    assert "(the shared 1,050-3,050-token prefix, marked, max_tokens 1) before each of 3 groups" in warm.detail


def test_a_log_with_usage_only_records_and_unnamed_streams_is_staggered_and_warmed_up():
    """The group's session and its first agent are unnamed ("-", "main"); a usage-only record of that stream
    (no body) follows at 50 s; sub2 logged no response times. Every member still moves, and the warm-up is
    written."""
    records = siblings("s", 2_000, ttft=3.0)
    for r in records[1:]:
        r.session = None
    records[1].agent = None
    records[3].first_token_at = records[3].finished_at = None
    records.append(TraceRecord(id="u", provider="anthropic", started_at=T0 + 50, session=None,
                               response={"usage": {"input_tokens": 500, "output_tokens": 5}}))
    records.sort(key=lambda r: r.started_at)
    pricer, ev = evidence(records)
    stagger, warm = timing.propose_siblings(ev)
    assert moved(stagger.reshape(pricer.base_sks), ["s0", "s1", "s2", "u"]) == [
        (0.0, 3.0, 5.0), (3.01, 6.01, 8.01), (3.01, 3.011, None), (50.0, 50.001, None)]
    # with the warm-up the first agent's stream moves too, and u is a later request of it (3.01 s later)
    assert moved(warm.reshape(pricer.base_sks), ["s0", "u"]) == [(3.01, 6.01, 8.01), (53.01, 53.011, None)]
    by_id = {r.id: r for r in warm.rewrite(records)}
    assert starts([by_id[i] for i in ("s0", "s1", "s2", "u", "s0+warmup")],
                  ("started_at", "first_token_at", "finished_at")) == [
        (3.01, 6.01, 8.01), (3.01, 6.01, 8.01), (3.01, None, None), (53.01, None, None), (0.0, 3.0, 3.01)]


def test_a_first_sibling_without_a_first_token_time_is_readable_when_it_finished():
    """sub0 logged only when it finished (3 s after its start): the warm-up's response begins 3 s after the
    warm-up starts, written and priced alike."""
    records = siblings("s", 2_000, ttft=3.0)
    records[1].first_token_at, records[1].finished_at = None, T0 + 3.0
    pricer, (_, warm) = shared_breakpoint(records)
    assert starts(warm.reshape(pricer.base_sks)[-1:]) == [(0.0, 3.0, 3.01)]
    added = warm.rewrite(sorted(records, key=lambda r: r.started_at))[-1]
    assert starts([added], ("started_at", "first_token_at", "finished_at")) == [(0.0, 3.0, 3.01)]


def test_no_warm_up_without_the_first_siblings_text():
    """A report without the records (texts re-read from the trace's lines) that cannot read the first
    sibling's body again proposes the stagger alone."""
    pricer, ev = evidence(siblings("s", 2_000, ttft=3.0))
    ev.texts = TextSource(None)  # the skeletons name no line to re-read
    assert [p.key for p in timing.propose_siblings(ev)] == ["siblings"]


def test_the_warm_up_priced_is_the_warm_up_written_when_the_shared_end_is_marked_1h():
    """The siblings already mark the system prompt and the shared task with 1h entries: the warm-up keeps
    that mark (`mark_breakpoint` leaves a marked block as it is), so its skeleton and its written record
    write the same 1h entries (writes 2x, not a 5m entry at 1.25x)."""
    from kvprobe.request import render_request

    system = [part(text(2_000, "sys"), marked=True, ttl="1h")]
    records = []
    for i in range(3):
        body = claude(system, [part(TASK, marked=True, ttl="1h"), part(text(50, f"own{i}"), marked=True)])
        records.append(rec(f"s{i}", 0.1 * i, body, usage(w1h=2_050, w5m=50), agent=f"sub{i}", first_token=3.0))
    pricer, ev = evidence(records)
    _, warm = timing.propose_siblings(ev)
    priced = warm.reshape(pricer.base_sks)[-1]
    written = warm.rewrite(records)[-1]
    assert priced.request.breakpoints == render_request(written.request).breakpoints == [(0, "1h"), (1, "1h")]


def test_a_request_at_time_zero_before_its_sibling_stays_where_it_was():
    """A trace of relative times: sub1 sent a request at exactly 0 s (answered by 0.4 s), then its group's
    at 0.6 s (the group: sub0 at 0.5 s, response from 3.5 s). Only the later one moves (2.91 s)."""
    records = siblings("s", 2_000, ttft=3.0, at=0.5 - T0)
    early = claude([part(text(500, "early"))], [part(text(500, "early q"))])
    records.append(rec("zero", -T0, early, usage(fresh=600), session="s", agent="sub1", first_token=0.4))
    records[-1].finished_at = 0.5
    pricer, (stagger, _) = shared_breakpoint(records)
    by_id = {r.id: r for r in stagger.rewrite(sorted(records, key=lambda r: r.started_at))}
    assert [round(by_id[i].started_at, 3) for i in ("zero", "s1")] == [0.0, 3.51]


def test_the_added_latency_is_given_to_the_millisecond():
    """sub0's response begins 3.0004 s after its start: s1 moves 3.0004 + 0.01 - 0.1 = 2.9104 s (2.91 to the
    millisecond), the warm-up adds 3.0104 s (3.01)."""
    _, (stagger, warm) = shared_breakpoint(siblings("s", 2_000, ttft=3.0004))
    assert (stagger.extra["added_latency_s"], warm.extra["added_latency_s"]) == (2.91, 3.01)
