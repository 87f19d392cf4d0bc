"""A fleet whose sessions differ only by a name in the system text: the sharing is broken across sessions, and
no single session ever sees its own system text change.

Twelve sessions of one support product start 30 s apart. Each sends 6 tools (1,800 tokens) and a 1,400-token
system text that opens with the customer's name ("You are the support agent of Quill."), marked at its end,
then a 100-token question; 10 s later a second request adds a 50-token answer and a 100-token question.
Usage by hand from Anthropic's rules (entries at breakpoints, keyed by everything before them; 5-minute
lifetime; no entry is shared, the names differ):
  r1: write 3,200 (tools + system), fresh 100: 3,200 x 1.25 + 100 = 4,100 input equivalents
  r2: read 3,200, fresh 250 (nothing after the system is marked): 320 + 250 = 570
  one session 4,670, the fleet 56,040.
The fix moves the name out of the system text to the end of the last user message (after the last
breakpoint): every session then sends the same 3,200 - n tokens before the breakpoint (n: the name's
tokens, a few) and the n tokens fresh. Session 1's r1 writes them (4,100 - 0.25 n), the other 11 first
requests read what the one before kept alive (420 + 0.9 n each, 30 s apart), every r2 reads (570 + 0.9 n):
  saving = 0.25 n + 11 x (3,680 - 0.9 n) - 12 x 0.9 n = 40,480 - 20.45 n, about 40,440 for n = 2.
No other fix applies: the sessions start well within the 5-minute lifetime, so no 1h TTL is proposed.
"""
from __future__ import annotations

import copy
import json

import pytest

import kvprobe
from kvprobe.trace import TraceRecord, write_trace

EPH = {"type": "ephemeral"}
NAMES = ["Quill", "Birch", "Ferrox", "Lumen", "Otter", "Piston", "Cobalt", "Marrow", "Sable", "Tundra", "Vesper",
         "Wicket"]
VOCAB = ("reply politely check the order history before you answer and never promise a refund that the policy "
         "does not allow").split()
SESSION_GAP, OBSERVED, SAVING = 30, 12 * 4_670, 40_480


def words(n: int, tag: str) -> str:
    return " ".join([tag] + [VOCAB[(i * 5 + len(tag)) % len(VOCAB)] for i in range(n - 1)])


def session(k: int, gap: float = SESSION_GAP, tool_mark: bool = False, name: str | None = None,
            requests: int = 2) -> list[TraceRecord]:
    """Session k, started `gap` s after session k - 1; `tool_mark` marks the last tool too; `name`: the same
    customer in every session; `requests`: 1 for the first request only."""
    tools = [{"name": f"tool{j}", "description": words(290, f"tool{j}"), "input_schema": {"type": "object"}}
             for j in range(6)]
    if tool_mark:
        tools[-1]["cache_control"] = EPH
    head = f"You are the support agent of {name or NAMES[k]}."
    system = [{"type": "text", "text": head + " " + words(1_390, "policy"), "cache_control": EPH}]
    first = [{"role": "user", "content": words(100, f"question{k}")}]
    second = first + [{"role": "assistant", "content": words(50, f"answer{k}")},
                      {"role": "user", "content": words(100, f"again{k}")}]
    start = 1_790_000_000.0 + gap * k
    out = []
    for i, (messages, read, write, fresh) in enumerate([(first, 0, 3_200, 100), (second, 3_200, 0, 250)][:requests]):
        usage = {"input_tokens": fresh, "cache_read_input_tokens": read, "cache_creation_input_tokens": write,
                 "cache_creation": {"ephemeral_5m_input_tokens": write, "ephemeral_1h_input_tokens": 0},
                 "output_tokens": 20}
        body = {"model": "claude-sonnet-4-5", "max_tokens": 512, "tools": tools, "system": system,
                "messages": messages}
        out.append(TraceRecord(id=f"s{k:02d}-r{i + 1}", provider="anthropic", started_at=start + 10 * i,
                               request=body, response={"type": "message", "usage": usage}, session=f"s{k:02d}",
                               agent="main", endpoint="/v1/messages", first_token_at=start + 10 * i + 1.5))
    return out


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    path = tmp_path_factory.mktemp("fleet") / "names.jsonl"
    write_trace(path, [r for k in range(len(NAMES)) for r in session(k)])
    return kvprobe.analyse(path, fixes=True).to_json()


def test_the_log_is_what_the_hand_computation_says(fleet):
    assert fleet["totals"]["requests"] == 24
    assert fleet["totals"]["input_equivalent_tokens"] == OBSERVED


def test_the_name_is_found_as_what_breaks_the_fleets_shared_prefix(fleet):
    [found] = fleet["fleet"]
    assert found["sessions"] == 12 and found["breaks_at"] == "system[0]" and found["breaker"] == "volatile span"
    assert found["could_share_tokens"] == 3_200 and found["rewrote_sessions"] == 12  # every one wrote it
    assert found["median_gap_s"] == SESSION_GAP and found["lifetime_s"] == 300


def test_moving_the_name_out_is_one_policy_over_every_session_priced_by_hand(fleet):
    [fix] = fleet["fixes"]
    assert fix["kind"] == "stabilize_prefix" and fix["path"] == "system[0]"
    # 40,480 - 20.45 n for an n-token name (and its full stop), 1 to 5 tokens: 40,378 to 40,460, 72% of the bill
    assert SAVING - 20.45 * 5 <= fix["saving_input_equivalent_tokens"] <= SAVING - 20.45
    assert fix["reach"]["sessions"] == 12 and fix["edited_requests"] == 24
    assert fix["reach"]["text"] == "12 of 12 sessions, 24 requests edited"
    assert sorted(fix["requests"]) == [f"s{k:02d}-r1" for k in range(1, 12)]  # each read the one before's
    assert any(name in " ".join(fix["spans"]) for name in NAMES)  # what moves is the name, not the line
    after = fleet["with_all_fixes"]["input_equivalent_tokens"]
    assert OBSERVED - SAVING + 20.45 <= after <= OBSERVED - SAVING + 20.45 * 5


def test_the_fleets_longer_lifetime_is_written_on_the_shared_end_and_every_breakpoint_before_it(cli, tmp_path):
    """One customer (Quill) in every session, sessions 10 minutes apart (past the 5-minute lifetime), the last
    tool marked too: each session's r1 writes the shared 3,200 tokens again. With the 1h lifetime on the
    system text's breakpoint, session 1's r1 writes them at 2x (6,400 + 100 instead of 4,100: +2,400) and the
    other 11 first requests read them (320 + 100 instead of 4,100: -3,680 each); the r2s read either way:
    11 x 3,680 - 2,400 = 38,080 saved. The fixed trace marks the system text's end with ttl 1h, and the tool
    breakpoint before it takes 1h too (1h entries must come before 5m ones); the other tools stay unmarked."""
    trace, fixed = tmp_path / "apart.jsonl", tmp_path / "fixed.jsonl"
    write_trace(trace, [r for k in range(len(NAMES)) for r in session(k, gap=600, tool_mark=True, name="Quill")])
    summary = json.loads(cli("fix", trace, "-o", fixed, "--json").stdout)
    [fleet_ttl] = summary["fixes"]
    assert (fleet_ttl["kind"], fleet_ttl["scope"], fleet_ttl["path"]) == ("ttl_1h", "fleet", "system[0]")
    assert fleet_ttl["saving_input_equivalent_tokens"] == pytest.approx(38_080, abs=0.5)
    # what to set (providers/anthropic.toml's longer lifetime) and how much the sessions share
    assert (fleet_ttl["setting"], fleet_ttl["shared_tokens"]) == ('"ttl": "1h" on the cache_control breakpoints', 3_200)
    one_hour = {"type": "ephemeral", "ttl": "1h"}
    bodies = [json.loads(line)["request"] for line in fixed.read_text().splitlines()]
    assert len(bodies) == 24
    for body in bodies:
        assert body["system"][0]["cache_control"] == one_hour and body["tools"][5]["cache_control"] == one_hour
        assert all("cache_control" not in t for t in body["tools"][:5])
    original = [json.loads(line)["request"] for line in trace.read_text().splitlines()]
    assert all(b["tools"][5]["cache_control"] == EPH and "ttl" not in b["system"][0]["cache_control"]
               for b in original)  # the input trace is left as it was
    after = json.loads(cli("report", fixed, "--no-fixes", "--json").stdout)["totals"]["input_equivalent_tokens"]
    assert after == pytest.approx(12 * 4_670 - 38_080, abs=0.5)  # the fixed trace reproduces the saving


@pytest.mark.parametrize("gap, saving", [
    (299, None),  # each session's entry still lives when the next starts: nothing but a stable prefix needed
    (300, 38_080),  # gone at exactly its 5-minute lifetime: the 1h lifetime pays
    (301, 38_080),
    (3_599, 38_080),
    (3_600, None),  # a 1h entry is gone at exactly 3,600 s too: the longer lifetime cannot bridge the gap
    (3_601, None),
])
def test_the_fleets_longer_lifetime_is_offered_where_entries_are_gone_and_it_outlives_the_gap(tmp_path, gap, saving):
    """One request per session, one customer (Quill), sessions `gap` s apart: each first request writes the
    shared 3,200 tokens again once the entry before it is gone. With the 1h lifetime session 1 writes them at 2x
    (+2,400) and the other 11 read them (-3,680 each): 11 x 3,680 - 2,400 = 38,080 saved."""
    write_trace(tmp_path / "t.jsonl", [r for k in range(len(NAMES)) for r in session(k, gap, name="Quill", requests=1)])
    report = kvprobe.analyse(tmp_path / "t.jsonl", fixes=True).to_json()
    [found] = report["fleet"]
    assert (found["median_gap_s"], found["lifetime_s"]) == (gap, 300)
    if saving is None:
        assert report["fixes"] == [] and found["fixes"] == []
    else:
        [fix] = report["fixes"]
        assert (fix["kind"], fix["scope"], fix["path"], fix["edited_requests"]) == ("ttl_1h", "fleet", "system[0]", 12)
        assert fix["saving_input_equivalent_tokens"] == pytest.approx(saving, abs=0.5)
        assert found["fixes"] == ["ttl_1h (system[0])"]


def test_a_fleet_whose_names_break_the_prefix_is_offered_the_lifetime_where_the_name_ends_it(tmp_path):
    # the names break the shared prefix inside system[0] (the volatile span); the longer lifetime goes on the
    # breakpoint that ends the prefix once the name is moved out (system[0]), not on the last block every
    # session already shares as it is (tools[5])
    write_trace(tmp_path / "t.jsonl", [r for k in range(len(NAMES)) for r in session(k, gap=600, requests=1)])
    [found] = kvprobe.analyse(tmp_path / "t.jsonl", fixes=True).to_json()["fleet"]
    assert (found["breaks_at"], found["last_path"], found["breaker"]) == ("system[0]", "tools[5]", "volatile span")
    assert found["fixes"] == ["ttl_1h (system[0])"]


def test_the_fleets_fix_edits_copies_and_leaves_the_records_it_was_made_from_as_they_were():
    # copy on write (kvprobe/whatif/edits.py): the fixed records are copies; the caller's records keep their
    # bodies, the marked blocks the copies share with them included
    from kvprobe.pricing import PriceBook
    from kvprobe.whatif.evaluate import evaluate

    records = [r for k in range(len(NAMES)) for r in session(k, gap=600, tool_mark=True, name="Quill")]
    before = copy.deepcopy([r.request for r in records])
    written = evaluate(records, PriceBook()).written_records()
    assert [r.request for r in records] == before
    one_hour = {"type": "ephemeral", "ttl": "1h"}
    assert all(w.request["system"][0]["cache_control"] == one_hour == w.request["tools"][5]["cache_control"]
               for w in written)


# Levels within the system text, no tools: a 1,000-word base (marked), a 2,000-word policy (marked: where the
# sessions' shared prefix ends), a 200-word note of the session's own (marked), the question (100 words,
# marked): four breakpoints, the most a request may carry. One request per session, 10 minutes apart; the first
# session's log names no session (kvprobe calls it "-"); one more session of another product shares nothing.
def levels_session(k: int | None, gap: float = 600, end_marked: bool = True) -> TraceRecord:
    """`end_marked=False`: the policy is not marked and the question is two marked blocks (50 words each)."""
    own = "solo" if k is None else f"n{k}"
    system = [{"type": "text", "text": words(1_000, "base" if k is not None else "otherbase"), "cache_control": EPH},
              {"type": "text", "text": words(2_000, "policy" if k is not None else "otherpolicy"),
               "cache_control": EPH},
              {"type": "text", "text": words(200, f"note{own}"), "cache_control": EPH}]
    asks = [words(100, f"ask{own}")] if end_marked else [words(50, f"ask{own}"), words(50, f"more{own}")]
    question = [{"role": "user", "content": [{"type": "text", "text": t, "cache_control": EPH} for t in asks]}]
    if not end_marked:
        del system[1]["cache_control"]
    usage = {"input_tokens": 0, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 3_300,
             "cache_creation": {"ephemeral_5m_input_tokens": 3_300, "ephemeral_1h_input_tokens": 0},
             "output_tokens": 20}
    start = 1_790_000_000.0 + gap * (k if k is not None else 0.5)
    return TraceRecord(id=f"{own}-r1", provider="anthropic", started_at=start, request={
        "model": "claude-sonnet-4-5", "max_tokens": 512, "system": system, "messages": question},
        response={"type": "message", "usage": usage}, session=None if k == 0 else own, agent="main",
        endpoint="/v1/messages", first_token_at=start + 1.5)



def test_the_fleets_lifetime_goes_on_every_level_up_to_the_shared_end_and_no_further(tmp_path):
    """The shared prefix ends at system[1] (the policy): session "-" writes base and policy (3,000 of the 3,300
    each request writes) at 2x instead of 1.25x (+2,250); the other 11 fleet sessions read them (0.1x) instead
    of writing them again (-3,450 each); the note and the question are written either way: 11 x 3,450 - 2,250 =
    35,700 (within 0.5%: the 3,000 are kvprobe's split of the 3,300 written, 2,994 here). The fixed trace gives
    system[0] and system[1] the 1h lifetime, leaves the note's and the question's breakpoints (after the shared
    end) as they were, and leaves the other product's session alone."""
    from kvprobe.pricing import PriceBook
    from kvprobe.whatif.evaluate import evaluate

    records = [levels_session(k) for k in range(len(NAMES))] + [levels_session(None)]
    whatif = evaluate(records, PriceBook())
    [fix] = whatif.fixes
    assert (fix.kind, fix.extra["scope"], fix.extra["path"]) == ("ttl_1h", "fleet", "system[1]")
    assert fix.saving_input_equivalent_tokens == pytest.approx(35_700, rel=0.005)
    one_hour = {"type": "ephemeral", "ttl": "1h"}
    written = {w.id: w.request for w in whatif.written_records()}
    for k in range(len(NAMES)):
        body = written[f"n{k}-r1"]
        assert [b["cache_control"] for b in body["system"]] == [one_hour, one_hour, EPH]
        assert body["messages"][0]["content"][0]["cache_control"] == EPH
    assert written["solo-r1"] == records[-1].request


def test_the_fleets_lifetime_adds_no_fifth_breakpoint(tmp_path):
    # the same fleet with the policy's end unmarked and four breakpoints already (base, note, the question's two
    # blocks): the shared end cannot be marked within Anthropic's 4, so no lifetime is priced or written
    from kvprobe.pricing import PriceBook
    from kvprobe.whatif.evaluate import evaluate

    records = [levels_session(k, end_marked=False) for k in range(len(NAMES))]
    assert evaluate(records, PriceBook()).fixes == []
