"""GPT-5.6+ breakpoint caching at the edges of its published rules (OpenAI's prompt-caching guide, 2026-09):
an entry lives 30 minutes from its last write or use, every read renews it, it is readable once the response
writing it has begun, and a breakpoint writes from 1,024 tokens. Block sizes are set by hand on the rendered
requests (test_openai_breakpoints.sized): each figure below is arithmetic on them.
"""
from __future__ import annotations

import pytest

from kvprobe.catalog import rules_for
from kvprobe.sim import cache_for
from test_openai_breakpoints import Sim, responses, sized

LIFE = 1_800  # 30 minutes


def ask(sim: Sim, at: float, rid: str, dev: int = 2_000, user: int = 10):
    return sim.send(sized(responses(f"question {rid}", dev_marker=True), [dev, user]), at, rid)


@pytest.mark.parametrize("past, hit", [(-1, True), (0, False), (1, False)])
def test_an_entry_lives_exactly_30_minutes(past, hit):
    sim = Sim()
    ask(sim, 0, "r1")
    late = ask(sim, LIFE + past, "r2")
    assert late.cache_read_tokens == (2_000 if hit else 0)
    assert ("ttl_expired" in [e.kind for e in late.evidence]) is not hit


@pytest.mark.parametrize("third_at, hit", [(2_799, True), (2_800, False)])
def test_a_read_renews_the_entry_for_another_30_minutes(third_at, hit):
    """r1 at 0 s writes the 2,000-token prefix (expires at 1,800 s); r2 at 1,000 s reads it (now 2,800 s)."""
    sim = Sim()
    ask(sim, 0, "r1")
    assert ask(sim, 1_000, "r2").cache_read_tokens == 2_000
    assert ask(sim, third_at, "r3").cache_read_tokens == (2_000 if hit else 0)


@pytest.mark.parametrize("at, hit", [(0.9, False), (1.0, True), (1.1, True)])
def test_an_entry_is_readable_once_the_response_writing_it_has_begun(at, hit):
    """r1 at 0 s; its response begins at 1 s (Sim gives every request a first token 1 s after it starts)."""
    sim = Sim()
    ask(sim, 0, "r1")
    second = ask(sim, at, "r2")
    assert second.cache_read_tokens == (2_000 if hit else 0)
    if not hit:
        assert [(e.kind, e.writer_id) for e in second.evidence][:1] == [("not_yet_readable", "r1")]


@pytest.mark.parametrize("dev, written", [(1_023, 0), (1_024, 1_024), (1_025, 1_025)])
def test_a_marked_prefix_is_written_from_1024_tokens(dev, written):
    """The developer block marked; the question (10 tokens) is the managed breakpoint's, always above 1,024
    here: it writes its own span on top of whatever the marked prefix wrote."""
    first = ask(Sim(), 0, "r1", dev=dev)
    assert first.cache_write_tokens == dev + 10  # both spans, or the managed one from 0 when the mark is short
    sim = Sim()
    ask(sim, 0, "r1", dev=dev)
    reread = sim.send(sized(responses("another question", dev_marker=True), [dev, 12]), 60, "r2")
    assert reread.cache_read_tokens == written  # only an entry at the mark is read by a new question


def test_a_read_renews_the_entry_it_read_even_where_the_request_marks_nothing():
    """r1 at 0 s: the managed breakpoint after its question writes 9,040. r2 at 1,000 s is the next turn:
    its own managed breakpoint is at its new last message, and it reads r1's entry (renewed to 2,800 s).
    r1's request sent again at 2,500 s reads that entry: without the renewal it expired at 1,800 s."""
    sim = Sim()
    first = responses("Fix the login bug.")
    sim.send(sized(first, [9_000, 40]), 0, "r1")
    answer = {"role": "assistant", "content": [{"type": "output_text", "text": "Done: see the diff."}]}
    turn2 = responses("Add a test.", history=[first["input"][1], answer])
    assert sim.send(sized(turn2, [9_000, 40, 300, 20]), 1_000, "r2").cache_read_tokens == 9_040
    assert sim.send(sized(first, [9_000, 40]), 2_500, "r3").cache_read_tokens == 9_040


def test_reading_a_later_entry_renews_the_earlier_ones_the_request_marks():
    """r1 at 0 s writes the marked 2,000-token prefix and the managed 2,010; r2 at 1,000 s, the same request,
    reads the 2,010 and renews both its entries (2,800 s); a new question at 2,500 s reads the 2,000."""
    sim = Sim()
    ask(sim, 0, "r1")
    body = responses("question r1", dev_marker=True)
    assert sim.send(sized(body, [2_000, 10]), 1_000, "r2").cache_read_tokens == 2_010
    assert ask(sim, 2_500, "r3").cache_read_tokens == 2_000


# --- which breakpoints a request writes, and how far back a read looks ---------------------------------------

def marked_developer(parts: list[str], question: str, mode: str | None = None) -> dict:
    """A developer message of several parts, each with a breakpoint, then a question."""
    body = {"model": "gpt-5.6-sol", "input": [
        {"role": "developer", "content": [{"type": "input_text", "text": text, "prompt_cache_breakpoint": {}}
                                          for text in parts]},
        {"role": "user", "content": [{"type": "input_text", "text": question}]}]}
    if mode:
        body["prompt_cache_options"] = {"mode": mode}
    return body


PARTS = ["rules", "style", "repo map", "api notes", "examples"]  # 1,100 tokens each: 1,100 ... 5,500 through them


@pytest.mark.parametrize("mode, shared, read", [
    (None, 1, 0), (None, 2, 0), (None, 3, 3_300), (None, 5, 5_500),  # managed + the latest 3 markers (3, 4, 5)
    ("explicit", 1, 0), ("explicit", 2, 2_200), ("explicit", 5, 5_500)])  # the latest 4 markers (2 to 5)
def test_a_request_writes_the_managed_breakpoint_and_the_latest_three_markers_or_the_latest_four(mode, shared, read):
    """r1 marks five developer parts; r2, a minute later, asks another question and shares r1's first `shared`
    parts (the rest changed)."""
    sim = Sim()
    first = sim.send(sized(marked_developer(PARTS, "Fix the bug.", mode), [1_100] * 5 + [10]), 0, "r1")
    assert first.cache_write_tokens == (5_510 if mode is None else 5_500)  # the managed one ends the question
    assert first.fresh_input_tokens == (0 if mode is None else 10)
    changed = PARTS[:shared] + [f"{p} (edited)" for p in PARTS[shared:]]
    second = sim.send(sized(marked_developer(changed, "Add a test.", mode), [1_100] * 5 + [10]), 60, "r2")
    assert second.cache_read_tokens == read


def conversation(turns: int) -> dict:
    """The developer prompt and `turns` questions with an answer between each two."""
    items = [{"role": "developer", "content": [{"type": "input_text", "text": "You are a coding agent."}]}]
    for i in range(1, turns + 1):
        if i > 1:
            items.append({"role": "assistant", "content": [{"type": "output_text", "text": f"Done {i - 1}."}]})
        items.append({"role": "user", "content": [{"type": "input_text", "text": f"Task {i}."}]})
    return {"model": "gpt-5.6-sol", "input": items}


def turn(n: int):
    """Turn n: 2,000 developer tokens, then 20 for each message (n questions, n - 1 answers)."""
    return sized(conversation(n), [2_000] + [20] * (2 * n - 1))


@pytest.mark.parametrize("renewed, read", [(2, 2_060), (1, 0)])
def test_a_read_looks_back_over_the_latest_80_entries_only(renewed, read):
    """Turns 1 to 81, a second apart, each write the managed entry at their question (and renew the one before);
    all have expired by 2,500 s but the one turn `renewed` resent at 1,000 s renews. Turn 82 at 2,500 s looks
    back from its end: entries of turns 81 down to 2 are the latest 80; turn 2's, renewed, is the 80th and is
    read (2,000 + 3 x 20 tokens); turn 1's is the 81st and is not looked at."""
    sim = Sim()
    for n in range(1, 82):
        sim.send(turn(n), n, f"t{n}")
    assert sim.send(turn(renewed), 1_000, "again").cache_read_tokens == 2_000 + 20 * (2 * renewed - 1)
    assert sim.send(turn(82), 2_500, "t82").cache_read_tokens == read


def test_the_evidence_names_the_entry_that_expired_or_is_still_being_written():
    """r1 at 0 s writes the marked 2,000-token developer prompt (readable at 1 s); r2 at 0.5 s finds it still
    being written and writes it again (it now expires at 1,800.5 s); r3 at 1,900.5 s finds it expired."""
    sim = Sim()
    ask(sim, 0, "r1")
    busy = sim.send(sized(responses("question r2", dev_marker=True), [2_000, 10]), 0.5, "r2")
    assert evidence(busy)[:1] == [("not_yet_readable", 0, None, "r1")]
    assert busy.evidence[0].detail == "the entry at input[0].content[0] was still being written by r1"
    late = sim.send(sized(responses("question r3", dev_marker=True), [2_000, 10]), 1_900.5, "r3")
    assert evidence(late) == [("ttl_expired", 0, 100, None)]
    assert late.evidence[0].detail == "the entry at input[0].content[0] expired 100s before this request started"


def evidence(pred) -> list[tuple]:
    return [(e.kind, e.block_index, e.seconds_past, e.writer_id) for e in pred.evidence]


def test_a_last_written_breakpoint_below_1024_tokens_is_named():
    """Explicit mode, one marker after a 500-token developer prompt: nothing is written."""
    pred = Sim().send(sized(responses("Fix the bug.", dev_marker=True, mode="explicit"), [500, 10]), 0, "r1")
    assert (pred.cache_write_tokens, pred.fresh_input_tokens) == (0, 510)
    [ev] = pred.evidence
    assert (ev.kind, ev.block_index, ev.prefix_tokens, ev.minimum_tokens) == ("below_minimum", 0, 500, 1_024)
    assert ev.detail == "the prefix through input[0].content[0] is 500 tokens; the minimum for this model is 1024"


@pytest.mark.parametrize("developer, named", [(1_023, False), (1_024, True)])
def test_a_shared_prefix_from_1024_tokens_with_no_breakpoint_at_its_end_is_named(developer, named):
    """Managed mode, nothing marked: r2 asks another question after the same developer prompt and reads
    nothing (the managed entry ends r1's question); the shared prefix is named from the minimum on."""
    sim = Sim()
    sim.send(sized(responses("Fix the bug."), [developer, 10]), 0, "r1")
    second = sim.send(sized(responses("Add a test."), [developer, 12]), 60, "r2")
    assert second.cache_read_tokens == 0
    missing = [(e.block_index, e.prefix_tokens, e.writer_id, e.detail) for e in second.evidence
               if e.kind == "missing_breakpoint"]
    assert missing == ([(0, 1_024, "r1", "the first 1,024 tokens (through input[0].content[0]) match what r1 sent, "
                         "but no breakpoint was ever written there: GPT-5.6+ reads only at breakpoints and the "
                         "managed one sits at input[1].content[0]")] if named else [])


def test_a_request_sent_again_in_explicit_mode_without_markers_is_named_in_full():
    sim = Sim()
    sim.send(sized(responses("Fix the bug.", mode="explicit"), [2_000, 10]), 0, "r1")
    again = sim.send(sized(responses("Fix the bug.", mode="explicit"), [2_000, 10]), 60, "r2")
    assert (again.cache_read_tokens, again.cache_write_tokens) == (0, 0)
    assert [(e.kind, e.block_index, e.detail) for e in again.evidence] == [
        ("missing_breakpoint", 1, "the first 2,010 tokens (through input[1].content[0]) match what r1 sent, but no "
         "breakpoint was ever written there: GPT-5.6+ reads only at breakpoints")]


def test_a_second_writer_of_an_entry_not_yet_readable_leaves_it_to_the_first():
    """r1 at 0 s, its response beginning at 30 s; r2 at 10 s and r3 at 20 s send it again and write the 2,010
    tokens again (their responses at 40 and 50 s): the entries stay r1's, readable from 30 s."""
    body = responses("Fix the bug.", dev_marker=True)
    rules = rules_for("openai", "gpt-5.6-sol", None, "managed")
    cache = cache_for("managed")
    cache.process(sized(body, [2_000, 10]), rules, "r1", 0, 30)
    assert cache.process(sized(body, [2_000, 10]), rules, "r2", 10, 40).cache_write_tokens == 2_010
    early = cache.process(sized(body, [2_000, 10]), rules, "r3", 20, 50)  # a third writer, as long
    assert (early.cache_read_tokens, {e.writer_id for e in early.evidence if e.writer_id}) == (0, {"r1"})
    assert cache.process(sized(body, [2_000, 10]), rules, "r4", 30, 31).cache_read_tokens == 2_010


def test_an_entry_written_again_after_it_expired_is_readable_only_from_the_new_write():
    """r1 at 0 s (expires at 1,800 s); r2 at exactly 1,800 s writes it again, its response at 1,850 s."""
    body = responses("Fix the bug.", dev_marker=True)
    rules = rules_for("openai", "gpt-5.6-sol", None, "managed")
    cache = cache_for("managed")
    cache.process(sized(body, [2_000, 10]), rules, "r1", 0, 1)
    assert cache.process(sized(body, [2_000, 10]), rules, "r2", 1_800, 1_850).cache_write_tokens == 2_010
    third = cache.process(sized(body, [2_000, 10]), rules, "r3", 1_810, 1_811)
    assert (third.cache_read_tokens, {e.writer_id for e in third.evidence if e.writer_id}) == (0, {"r2"})


def test_a_request_sent_again_after_its_entries_expired_names_each_once():
    """r1 at 0 s writes the marked developer prompt (2,000) and the managed entry (2,010); the same request at
    1,900 s finds both expired 100 s before: one expiry each, the latest first."""
    sim, body = Sim(), responses("Fix the bug.", dev_marker=True)
    sim.send(sized(body, [2_000, 10]), 0, "r1")
    again = sim.send(sized(body, [2_000, 10]), 1_900, "r2")
    assert again.cache_read_tokens == 0
    assert evidence(again) == [("ttl_expired", 1, 100, None), ("ttl_expired", 0, 100, None)]
