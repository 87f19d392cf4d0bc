"""The what-if's choosing stage (kvprobe/whatif/evaluate.py), from its rules with figures by hand:
- a fix is proposed only when it saves more than token-estimate rounding: at least 16 input-equivalent
  tokens and 0.1% of the cost of the sessions it edits, and money where it is priced (MIN_SAVING_TOKENS,
  MIN_SAVING_FRACTION);
- policies for the same misses (a request they both address, directly or through a third) are alternatives,
  grouped; at most one variant of a fix (`exclusive`) goes into a set;
- an alternative names the chosen policies that address its requests, else every chosen one;
- the fixed trace `fix` writes has no logged usage on any record, each record carrying the block sizes it was
  priced on and its output tokens (a keep-alive ping: 1).
"""
from __future__ import annotations

import pytest

from kvprobe.pricing import PriceBook
from kvprobe.whatif.evaluate import _clusters, _compatible, _instead_of, _pays, _sum_usd, evaluate
from kvprobe.whatif.parallel import Summary
from kvprobe.whatif.policies import Policy

from test_whatif_timing import MODEL, T0, part, pause, rec, text, usage


def summary(saving_ie: float, saving_usd: float | None = None, base_ie: float = 0.0) -> Summary:
    return Summary(saving_ie, saving_usd, base_ie, {}, [])


@pytest.mark.parametrize("saving, usd, base, pays", [
    (15.9, None, 0.0, False), (16.0, None, 0.0, True), (16.1, None, 0.0, True),  # 16 tokens at least
    # 0.1% of the edited sessions' cost when that is more: 0.001 x 25,000 = 25
    (24.9, None, 25_000.0, False), (25.0, None, 25_000.0, True), (25.1, None, 25_000.0, True),
    (16.0, None, 15_000.0, True),  # 0.1% of 15,000 = 15: the 16 tokens rule
    # priced: it must save money too
    (500.0, 0.0, 0.0, False), (500.0, -0.000001, 0.0, False), (500.0, 0.000001, 0.0, True),
])
def test_a_fix_pays_from_16_tokens_and_a_thousandth_of_what_it_edits(saving, usd, base, pays):
    assert _pays(summary(saving, usd, base)) is pays


def policy(kind: str, requests: list[str], exclusive: str | None = None, **extra) -> Policy:
    return Policy(kind, kind, "", requests, set(), lambda s: s, lambda r: r, exclusive=exclusive, extra=extra)


def test_policies_for_the_same_misses_are_grouped_through_any_request_they_share():
    """a and c share nothing but b shares r2 with a and r3 with c: one group; d stands alone; e joins a's
    group through r1 after d was seen."""
    a, b, c, d, e = (policy("keep_alive", ["r1", "r2"]), policy("ttl_1h", ["r2", "r3"]),
                     policy("lookback_breakpoint", ["r3"]), policy("stable_params", ["r9"]),
                     policy("stabilize_prefix", ["r1"]))
    s = summary(100.0)
    groups = _clusters([(a, s), (b, s), (c, s), (d, s), (e, s)])
    assert sorted([[p.kind for p, _ in g] for g in groups]) == [
        ["keep_alive", "ttl_1h", "lookback_breakpoint", "stabilize_prefix"], ["stable_params"]]
    # the chain built from the last policy back to the first (c, then b, then a) groups the same way
    groups = _clusters([(c, s), (d, s), (e, s), (b, s), (a, s)])
    assert sorted(sorted(p.kind for p, _ in g) for g in groups) == [
        ["keep_alive", "lookback_breakpoint", "stabilize_prefix", "ttl_1h"], ["stable_params"]]


def test_a_long_chain_of_shared_requests_is_one_group():
    """Twelve policies, each sharing one request with the next, given in an order that builds deep trees."""
    chain = [policy(f"p{i}", [f"r{i}", f"r{i + 1}"]) for i in range(12)]
    order = chain[::2] + chain[1::2][::-1]
    groups = _clusters([(p, summary(1.0)) for p in order])
    assert len(groups) == 1 and len(groups[0]) == 12


def test_at_most_one_variant_of_a_fix_in_a_set():
    stagger = policy("shared_breakpoint", ["s1"], exclusive="siblings")
    warm = policy("shared_breakpoint", ["s1"], exclusive="siblings")
    other = policy("shared_breakpoint", ["t1"], exclusive="other siblings")
    keep = policy("keep_alive", ["r1"])
    assert _compatible([stagger, keep, other]) and _compatible([keep]) and _compatible([])
    assert not _compatible([stagger, warm]) and not _compatible([keep, warm, other, stagger])


def test_an_alternative_names_the_chosen_fixes_for_its_requests_or_all_of_them():
    keep = policy("keep_alive", ["r1", "r2"], variant=None)
    lookback = policy("lookback_breakpoint", ["r5"], path="messages[0].content[0]")
    ttl = policy("ttl_1h", ["r2"])
    assert _instead_of(ttl, [keep, lookback]) == ["keep_alive"]
    assert _instead_of(policy("ttl_1h", ["r7"]), [keep, lookback]) == [
        "keep_alive", "lookback_breakpoint (messages[0].content[0])"]


def test_a_sum_of_prices_is_unknown_when_one_is():
    assert _sum_usd([0.25, 0.5, 0.125]) == 0.875
    assert _sum_usd([]) == 0.0
    assert _sum_usd([0.25, None, 0.5]) is None


def test_the_fixed_trace_carries_the_sizes_it_was_priced_on_and_no_logged_usage():
    """A 7-minute pause (4,000 cached tokens, a 100-token question, logged output 10): keep_alive is chosen and
    writes one ping; every written record carries its blocks' sizes (4,000 and 100, as the usage gave them)
    and its output tokens (10 for the logged requests, 1 for the ping), and no response."""
    records = pause("a", 420, 4_000)
    result = evaluate(records, PriceBook())
    assert [f.kind for f in result.fixes] == ["keep_alive"]
    written = result.written_records()
    assert [(r.id, round(r.started_at - T0, 3)) for r in written] == [("a0", 0.0), ("a1", 420.0),
                                                                        ("a0+keepalive1", 270.0)]
    assert [(r.extra["block_tokens"], r.extra["output_tokens"], r.response) for r in written] == [
        ([4_000, 100], 10, None), ([4_000, 100], 10, None), ([4_000, 100], 1, None)]
    assert [r.extra.get("keep_alive") for r in written] == [None, None, True]
    assert records[0].response is not None and "block_tokens" not in records[0].extra  # the input untouched


def test_each_fix_is_priced_on_the_sessions_it_reaches_and_the_better_one_chosen():
    """Session a pauses 7 minutes (4,000 cached, 100 fresh, 10 output tokens a request); session z reads its
    entry 30 s later and is left alone. Sonnet 4.5: $3 per million input, $15 output; writes 1.25x (5m) or
    2x (1h), reads 0.1x.
    Before, a0 and a1 each write 4,000 (5,000) and send 100 fresh: 5,100 input equivalents, $0.01545 with
    output. keep_alive: one ping at 270 s reads 4,000 (400) + 100 fresh = 500 ($0.0015 + 1 output token
    $0.000015), then a1 reads: 500 ($0.00165); saving 5,100 - 1,000 = 4,100 ($0.012285).
    ttl_1h: a0 writes at 2x (8,100: 3,000 more), a1 reads (500: 4,600 less): saving 1,600 ($0.0048), less than
    keep_alive's for the same pause: offered instead of it."""
    records = pause("a", 420, 4_000) + pause("z", 30, 3_000)
    records[3].response["usage"] = usage(read=3_000, fresh=100)
    result = evaluate(sorted(records, key=lambda r: r.started_at), PriceBook())
    [keep] = result.fixes
    [ttl] = result.alternatives
    assert (keep.kind, keep.saving_input_equivalent_tokens, keep.edited_requests) == ("keep_alive", 4_100.0, 1)
    assert keep.saving_usd == pytest.approx(0.012285, abs=1e-9)
    assert [(i.session, i.requests, i.saving_ie) for i in keep.instances] == [("a", 1, 4_100.0)]
    assert (ttl.kind, ttl.saving_input_equivalent_tokens, ttl.edited_requests, ttl.extra["instead_of"]) == (
        "ttl_1h", 1_600.0, 2, ["keep_alive"])
    assert ttl.saving_usd == pytest.approx(0.0048, abs=1e-9)
    assert [(i.session, i.requests, i.saving_ie) for i in ttl.instances] == [("a", 2, 1_600.0)]
    fixed = {r.sk.id: (r.input_equivalent, round(r.cost_usd, 9)) for r in result.fixed}
    assert fixed == {"a0": (5_100.0, 0.01545), "a0+keepalive1": (500.0, 0.001515), "a1": (500.0, 0.00165),
                     "z0": (3_850.0, 0.0117), "z1": (400.0, 0.00135)}


def test_a_fix_asked_for_by_kind_is_priced_alone():
    """`fix --kind ttl_1h` on the same pause: only ttl_1h is proposed, so it is the fix (1,600), with no
    alternative."""
    records = pause("a", 420, 4_000)
    result = evaluate(records, PriceBook(), kinds={"ttl_1h"})
    assert [(f.kind, f.saving_input_equivalent_tokens) for f in result.fixes] == [("ttl_1h", 1_600.0)]
    assert result.alternatives == [] and "instead_of" not in result.fixes[0].extra
    assert evaluate(records, PriceBook(), kinds={"stable_params"}).fixes == []


def test_the_fixed_log_of_a_log_with_nothing_to_fix_is_the_baseline():
    """Two requests 30 s apart, the second reading the first's 3,000 tokens: no fix; the fixed log's results
    (as the report's totals read them) are the baseline's, 3,850 and 400 input equivalents."""
    records = pause("z", 30, 3_000)
    records[1].response["usage"] = usage(read=3_000, fresh=100)
    result = evaluate(records, PriceBook())
    assert result.fixes == [] and result.alternatives == []
    assert [(r.sk.id, r.input_equivalent) for r in result.fixed_results()] == [("z0", 3_850.0), ("z1", 400.0)]
    assert [r.id for r in result.fixed_records] == ["z0", "z1"]


def test_the_fixed_log_read_as_it_is_simulated_has_the_hand_figures():
    """The 7-minute pause with its ping, read once as the report's totals read it, then kept: the same
    figures either way (5,100, 500, 500)."""
    result = evaluate(pause("a", 420, 4_000), PriceBook())
    streamed = [(r.sk.id, r.input_equivalent) for r in result.fixed_results()]
    assert streamed == [("a0", 5_100.0), ("a0+keepalive1", 500.0), ("a1", 500.0)]
    assert [(r.sk.id, r.input_equivalent) for r in result.fixed] == streamed
    assert [(r.sk.id, r.input_equivalent) for r in result.fixed_results()] == streamed


def test_two_fixes_for_the_same_misses_are_chosen_together_when_together_they_save_more():
    """r0 at 0 s, r1 at 420 s with tool_choice "any" (entry expired, messages invalidated), r2 at 450 s with it
    unset again. Sizes: tools + system 2,000 (marked), the history 2,400 (marked), from a calibration request
    an hour before. Sonnet 4.5: writes 1.25x (1h: 2x), reads 0.1x.
    Before: r0 writes 4,400 (5,500); r1 writes 4,400 (5,500); r2 reads 2,000 (200) and writes 2,400 (3,000):
    14,200.
    keep_alive (a ping at 270 s reading 4,400: 440): r1 reads 2,000 and writes 2,400 (3,200), r2 reads 4,400
    (440): 9,580, saving 4,620. stable_params (r1 keeps tool_choice unset): r1 writes 4,400 (5,500), r2 reads
    4,400 (440): 11,440, saving 2,760. Both: r1 and r2 read 4,400 (440 each) after the ping: 6,820, saving
    7,380, more than keep_alive alone: both are chosen. ttl_1h would lose 40 (r0 writes at 2x: 8,800, +3,300;
    r1 reads 2,000 and writes 2,400 at 2x: 5,000, -500; r2 reads 4,400: 440, -2,760): not proposed."""
    tools = [{"name": "read_file", "description": text(400, "tool"), "input_schema": {"type": "object"}}]

    def body(marked_history: bool = True, **params) -> dict:
        return {"model": MODEL, "max_tokens": 64, "tools": tools, "system": [part(text(1_600, "sys"), marked=True)],
                "messages": [{"role": "user", "content": [part(text(2_400, "hist"), marked=marked_history)]}],
                **params}
    records = [rec("cal", -3_600, body(marked_history=False), usage(w5m=2_000, fresh=2_400), session="cal"),
               rec("r0", 0, body(), usage(w5m=4_400)),
               rec("r1", 420, body(tool_choice={"type": "any"}), usage(w5m=4_400)),
               rec("r2", 450, body(), usage(read=2_000, w5m=2_400))]
    result = evaluate(records, PriceBook())
    assert [(f.kind, f.saving_input_equivalent_tokens) for f in result.fixes] == [
        ("keep_alive", 4_620.0), ("stable_params", 2_760.0)]
    assert result.alternatives == []
    fixed = {r.sk.id: r.input_equivalent for r in result.fixed if r.sk.session == "s"}
    assert fixed == {"r0": 5_500.0, "r0+keepalive1": 440.0, "r1": 440.0, "r2": 440.0}  # 6,820


def marginal_setup(model: str | None = None):
    """A 10-minute pause of session a (4,000 cached, 100 fresh: pings at 270 and 540 s) beside session z, which
    reads its entry 30 s later and which no policy touches."""
    from kvprobe.analysis.texts import TextSource
    from kvprobe.whatif.evaluate import Pricer, prepare
    from kvprobe.whatif.policies import Evidence
    from kvprobe.whatif.propose_timing import propose_keep_alive, propose_longer_lifetime

    records = pause("a", 600, 4_000) + pause("z", 30, 3_000)
    records[3].response["usage"] = usage(read=3_000, fresh=100)
    records.sort(key=lambda r: r.started_at)
    for r in records:
        r.request["model"] = model or r.request["model"]
    pricer = Pricer(records, PriceBook(), prepare(records))
    ev = Evidence(pricer.baseline, TextSource(records))
    [keep], [ttl] = propose_keep_alive(ev), propose_longer_lifetime(ev)
    return pricer, keep, ttl


def test_a_fix_priced_on_top_of_another_saves_what_it_adds_to_it():
    """ttl_1h on top of keep_alive: with both, a0 writes at 2x (8,100), the two pings read (500 each), a1 reads
    (500): 9,600 against 10,200, a saving of 600; keep_alive alone (a1 reads after the pings: 5,100 + 1,000 +
    500) saves 3,600, so ttl_1h adds -3,000 (-$0.009 at $3 per million). It edits a0 and a1 (their ttl) and the
    pings (copies of the edited a0): 4 requests of a; z's are the same skeletons under both."""
    from kvprobe.whatif.policies import Instance

    pricer, keep, ttl = marginal_setup()
    ttl.requires = [keep]
    for kept in (False, True):  # priced afresh, or from keep_alive's own pricing kept for it
        if kept:
            pricer.kept[(id(keep),)] = pricer.price([keep])
        p = pricer.marginal(ttl)
        assert (p.saving_ie, p.edited) == (-3_000.0, {"a": 4}) and p.saving_usd == pytest.approx(-0.009, abs=1e-9)
        assert p.base_ie == 10_200.0  # the sessions it edits, before
        [inst] = pricer.instances(p)
        assert (inst.session, inst.requests, inst.saving_ie) == ("a", 4, -3_000.0)
        assert inst.saving_usd == pytest.approx(-0.009, abs=1e-9)


def test_a_fix_that_adds_requests_on_top_of_another_counts_them_as_its_edits():
    """keep_alive on top of ttl_1h (the 1h entries already bridge the pause, as evaluate starts a set from the
    one it extends): its two pings (500 and 1 output token each) are all it adds: -1,000 input equivalents,
    -$0.00303, two requests of a added."""
    pricer, keep, ttl = marginal_setup()
    keep.requires = [ttl]
    pricer.keep_reshaped = {(id(ttl),)}
    p = pricer.marginal(keep)
    assert (p.saving_ie, p.edited) == (-1_000.0, {"a": 2}) and p.saving_usd == pytest.approx(-0.00303, abs=1e-9)
    [inst] = pricer.instances(p)
    assert (inst.session, inst.requests, inst.saving_ie) == ("a", 2, -1_000.0)


def test_a_fix_on_top_of_another_for_a_model_without_a_price_saves_no_known_money():
    pricer, keep, ttl = marginal_setup(model="claude-unlisted-9")
    ttl.requires = [keep]
    p = pricer.marginal(ttl)
    assert (p.saving_ie, p.saving_usd) == (-3_000.0, None)


def test_a_pricer_sent_to_a_clusters_workers_leaves_the_baseline_and_records_behind():
    """What a worker prices with (parallel: the pricer is pickled once per worker): the skeletons and the
    sessions' costs, not the diagnosed baseline nor the records (only proposals and `fix` read those)."""
    import pickle

    pricer, keep, _ = marginal_setup()
    sent = pickle.loads(pickle.dumps(pricer))
    assert (sent.baseline, sent.records) == ([], None)
    assert len(sent.base_sks) == 4 and sent.base_sessions == pricer.base_sessions
    assert len(pricer.baseline) == 4 and len(pricer.records) == 4  # the pricer here keeps both


def test_a_fixs_instances_come_largest_saving_first():
    """Two sessions pause 7 minutes: a (2,000 cached) saves 2,000 with one ping (2,600 -> 300 + 300), b
    (4,000 cached) 4,100: b is listed first though a comes first in the log."""
    records = pause("a", 420, 2_000) + pause("b", 420, 4_000)
    [keep] = evaluate(sorted(records, key=lambda r: r.started_at), PriceBook()).fixes
    assert [(i.session, i.saving_ie) for i in keep.instances] == [("b", 4_100.0), ("a", 2_000.0)]


def test_requests_the_required_fix_makes_again_are_not_the_edits_of_the_fix_on_top():
    """A fix on top of keep_alive that starts z1 5 s later (a stagger's kind: applied before the pings), priced
    with no set kept: the required pings are made afresh for each pricing (new objects, the same request and
    start), so they are not its edits; z1, the same request at another start, is its one edit. z1 still reads
    z0's entry (35 s old, within 300 s): it saves nothing."""
    from dataclasses import replace

    pricer, keep, _ = marginal_setup()

    def later(sks):
        return [replace(sk, started_at=sk.started_at + 5, readable_at=sk.readable_at + 5) if sk.id == "z1" else sk
                for sk in sks]
    moved = Policy("shared_breakpoint", "z", "", ["z1"], {"z"}, later, lambda r: r, requires=[keep])
    p = pricer.marginal(moved)
    assert (p.saving_ie, p.edited) == (0.0, {"z": 1})


def test_the_fixed_trace_replaces_a_records_size_hints_with_the_sizes_it_was_priced_on():
    """A record carrying the size hints a span move leaves (the parts of a split block) is written with the
    sizes it was priced on instead: the hints would name blocks of the body before the fix. Its extra is then
    exactly the block sizes and output tokens."""
    records = pause("a", 30, 4_000)
    records[1].response["usage"] = usage(read=4_000, fresh=100)
    records[0].extra["size_hints"] = {"system[0]": 3_000, "messages[0].content[1]": 1_000}
    written = evaluate(records, PriceBook()).written_records()
    assert [r.extra for r in written] == [{"block_tokens": [4_000, 100], "output_tokens": 10}] * 2


def test_the_fixed_trace_of_a_record_naming_no_provider_keeps_its_output_tokens():
    """A Gemini request logged without a provider (its usageMetadata: 900 prompt, 77 candidate tokens): the
    written record says 77 output tokens, read from the usage's own shape (read as Anthropic's usage: 0)."""
    from kvprobe.trace import TraceRecord

    body = {"model": "gemini-2.5-flash", "contents": [{"role": "user", "parts": [{"text": text(900, "g")}]}]}
    logged = TraceRecord(id="g0", provider=None, started_at=T0, request=body,
                         endpoint="/v1beta/models/gemini-2.5-flash:generateContent",
                         response={"usageMetadata": {"promptTokenCount": 900, "candidatesTokenCount": 77,
                                                     "totalTokenCount": 977}})
    [written] = evaluate([logged], PriceBook()).written_records()
    assert (written.provider, written.extra) == (None, {"block_tokens": [900], "output_tokens": 77})


def test_a_fix_on_top_that_reaches_a_session_without_a_price_saves_no_known_money():
    """keep_alive is priced for session a (Sonnet 4.5: known money); the fix on top starts session u's second
    request 5 s later, and u runs a model with no price: what the two save together is unknown in money, so
    what the fix on top adds is unknown too (not the difference with a known figure), and it saves no tokens
    (u1 reads u0's entry 35 s old)."""
    from dataclasses import replace

    from kvprobe.analysis.texts import TextSource
    from kvprobe.whatif.evaluate import Pricer, prepare
    from kvprobe.whatif.policies import Evidence
    from kvprobe.whatif.propose_timing import propose_keep_alive

    unpriced = pause("u", 30, 3_000)
    unpriced[1].response["usage"] = usage(read=3_000, fresh=100)
    for r in unpriced:
        r.request["model"] = "claude-unlisted-9"
    records = sorted(pause("a", 600, 4_000) + unpriced, key=lambda r: r.started_at)
    pricer = Pricer(records, PriceBook(), prepare(records))
    [keep] = propose_keep_alive(Evidence(pricer.baseline, TextSource(records)))
    assert pricer.price([keep]).saving_usd == pytest.approx(0.01077, abs=1e-9)  # 3,600 ie at $3/M less 2 output

    def later(sks):
        return [replace(sk, started_at=sk.started_at + 5, readable_at=sk.readable_at + 5) if sk.id == "u1" else sk
                for sk in sks]
    moved = Policy("shared_breakpoint", "u", "", ["u1"], {"u"}, later, lambda r: r, requires=[keep])
    p = pricer.marginal(moved)
    assert (p.saving_ie, p.saving_usd, p.edited) == (0.0, None, {"u": 1})


# --- choosing among overlapping fixes: every subset up to four policies, greedily beyond -----------------------
TAILS = {"a": 1_000, "b": 2_000, "c": 1_500, "d": 17, "e": 16, "f": 2_200}


def trim_setup(model: str = MODEL):
    """One request per session, each its own 2,000-token marked system text (written: 2,500 input equivalents)
    and a question sent fresh (TAILS). A test policy that drops the question of some sessions saves exactly
    their TAILS; two such policies together save the TAILS of the union of their sessions."""
    from kvprobe.whatif.evaluate import Pricer, prepare

    records = [rec(f"{s}0", 0, {"model": model, "max_tokens": 64, "system": [part(text(2_000, s), marked=True)],
                                "messages": [{"role": "user", "content": [part(text(n, "q" + s))]}]},
                   usage(w5m=2_000, fresh=n), session=s) for s, n in TAILS.items()]
    return Pricer(records, PriceBook(), prepare(records))


def trim(sessions: str, exclusive: str | None = None) -> tuple[Policy, Summary]:
    from kvprobe.whatif.reshape import with_blocks, with_request

    def reshape(sks):
        return [with_request(sk, with_blocks(sk.request, sk.request.blocks[:1])) if sk.session in sessions else sk
                for sk in sks]
    found = Policy("stable_params", sessions, "", [f"{s}0" for s in sessions], set(sessions), reshape,
                   lambda r: r, exclusive=exclusive, extra={"variant": sessions})
    return found, summary(float(sum(TAILS[s] for s in sessions)))


def chosen(pricer, group) -> list[str]:
    from kvprobe.whatif.evaluate import _choose

    return [p.key for p in _choose(pricer, group)]


def test_up_to_four_overlapping_fixes_every_subset_is_priced_and_beyond_them_the_best_is_kept_and_added_to():
    """X drops the questions of a and c (2,500), Y those of b (2,000), Z and W those of c (1,500 each); X and Y
    are variants of one fix (at most one in a set). Every subset of the four: Y + Z saves 3,500, more than X's
    2,500 by more than 16: chosen. A fifth (V, c again: 1,500) and the set is chosen greedily: X first, Y
    cannot join it, and Z, W, V add nothing to it: X alone."""
    pricer = trim_setup()
    x, y = trim("ac", exclusive="one fix"), trim("b", exclusive="one fix")
    four = [x, y, trim("c"), trim("c")]
    assert chosen(pricer, four) == ["b", "c"]
    assert chosen(pricer, [*four, trim("c")]) == ["ac"]


@pytest.mark.parametrize("model", [MODEL, "claude-unlisted-9"])
def test_a_subset_of_overlapping_fixes_is_chosen_when_it_adds_more_than_16_tokens(model):
    """Every subset of two: X (a and c: 2,500) with d's question adds 17 tokens, more than 16: both chosen;
    with e's it adds exactly 16: X alone. The same for a model without a price (no money to compare)."""
    pricer = trim_setup(model)
    assert chosen(pricer, [trim("ac"), trim("d")]) == ["ac", "d"]
    assert chosen(pricer, [trim("ac"), trim("e")]) == ["ac"]


def test_greedily_a_fix_is_added_when_it_adds_more_than_16_tokens():
    """Five overlapping fixes, so chosen greedily from the largest single saving: X (a and c: 2,500), then f's
    question (2,200) adds to it: kept; Y (b: 2,000) is a variant of X: skipped; d's question adds 17 tokens,
    more than 16: kept; e's adds exactly 16: left out."""
    pricer = trim_setup()
    group = [trim("e"), trim("d"), trim("ac", exclusive="one fix"), trim("f"), trim("b", exclusive="one fix")]
    assert chosen(pricer, group) == ["ac", "f", "d"]
    assert chosen(pricer, [trim("a")]) == ["a"]  # a single fix is its own choice


def test_a_set_that_fails_to_price_is_named_by_its_policies_labels():
    """An internal error while a set is priced reaches the caller with a note naming the set: its index among
    the sets and its policies' labels joined by " + "."""
    from kvprobe.whatif.parallel import price_sets

    def broken(sks):
        raise ValueError("no skeletons today")
    failing = Policy("keep_alive", "pauses", "", [], set(), broken, lambda r: r)
    with pytest.raises(ValueError, match="no skeletons today") as caught:
        price_sets(trim_setup(), [[trim("a")[0]], [trim("b")[0], failing]])
    assert "in unit 1 of 2 ((1, 'stable_params (b) + keep_alive'))" in caught.value.__notes__


def test_a_session_a_fix_does_not_edit_is_an_instance_where_its_cost_changes_and_an_edited_one_always():
    """Session z reads a0's 4,000 cached tokens 30 s after a0 (z0: 500 input equivalents). A fix that starts
    a0 60 s later (editing one request of a) makes z0 the writer (5,100: 4,600 more) and a0 the reader (500
    instead of 5,100: 4,600 less); a1, 420 s after the start, still finds the entry expired. Both sessions are
    instances: a with its one edited request, z with none. Moving z0 by a second instead changes no cost: z is
    still an instance (one request edited, nothing saved), a is not (neither edited nor changed)."""
    from dataclasses import replace

    from kvprobe.whatif.evaluate import Pricer, prepare

    records = pause("a", 420, 4_000)
    records.append(rec("z0", 30, records[0].request, usage(read=4_000, fresh=100), session="z"))
    records.sort(key=lambda r: r.started_at)
    pricer = Pricer(records, PriceBook(), prepare(records))

    def moved(rid: str, seconds: float) -> Policy:
        def reshape(sks):
            return [replace(sk, started_at=sk.started_at + seconds, readable_at=sk.readable_at + seconds)
                    if sk.id == rid else sk for sk in sks]
        return Policy("shared_breakpoint", rid, "", [rid], {rid[0]}, reshape, lambda r: r)
    found = pricer.instances(pricer.price([moved("a0", 60)]))
    assert [(i.session, i.requests, i.saving_ie) for i in found] == [("a", 1, 4_600.0), ("z", 0, -4_600.0)]
    assert [round(i.saving_usd, 9) for i in found] == [0.0138, -0.0138]  # $3 per million input tokens
    found = pricer.instances(pricer.price([moved("z0", 1)]))
    assert [(i.session, i.requests, i.saving_ie, i.saving_usd) for i in found] == [("z", 1, 0.0, 0.0)]


def test_fixes_and_alternatives_are_listed_largest_saving_first():
    """Two groups of fixes for different misses, each with an alternative. Session a pauses 7 minutes (4,000
    cached): keep_alive 4,100, ttl_1h 1,600 (as above). Three subagents of session s start 0.1 s apart, each
    with a 3,000-token marked system text, the same 50-token task and 50 tokens of their own, each writing
    3,100 (3,875: 11,625 in all); their first answer begins after 2 s. A stagger (the later two start once it
    has): the first writes as before, the two read 3,050 (305) and write 50 (62.5): 4,610, saving 7,015. A
    warm-up of the shared 3,050 (3,812.5; its output token is no input) before all three, which then read
    and write as the staggered two: 4,915, saving 6,710; a variant of the stagger, so its alternative. The
    pause's fixes are proposed first, yet the lists come largest first."""
    from test_whatif_timing import siblings

    records = sorted(siblings("s", 3_000, ttft=2.0, at=10_000) + pause("a", 420, 4_000), key=lambda r: r.started_at)
    result = evaluate(records, PriceBook())
    assert [(f.label, f.saving_input_equivalent_tokens) for f in result.fixes] == [
        ("shared_breakpoint (stagger)", 7_015.0), ("keep_alive", 4_100.0)]
    assert [(f.label, f.saving_input_equivalent_tokens, f.extra["instead_of"]) for f in result.alternatives] == [
        ("shared_breakpoint (warm_up)", 6_710.0, ["shared_breakpoint (stagger)"]), ("ttl_1h", 1_600.0, ["keep_alive"])]


def test_a_fix_on_top_starts_from_the_kept_log_of_the_one_it_requires_without_editing_it_again():
    """Three subagents staggered (each later one moved to start once the first answer began); a fix on top of
    the stagger that changes nothing, priced from the stagger's kept edited log: it adds no edit and saves
    nothing (applying the stagger again would move the subagents a second time)."""
    from test_whatif_timing import shared_breakpoint, siblings

    pricer, (stagger, _) = shared_breakpoint(siblings("s", 2_000, ttft=0.5))
    nothing = Policy("keep_alive", "nothing", "", [], set(), lambda sks: sks, lambda r: r, requires=[stagger])
    pricer.keep_reshaped = {(id(stagger),)}
    p = pricer.marginal(nothing)
    assert (p.saving_ie, p.saving_usd, p.edited) == (0.0, 0.0, {})
