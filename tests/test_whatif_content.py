"""The content fixes from their rules (whatif/propose_content.py), as `fix` writes them: a session's tool list
sent whole and in one order from its first request (the order of the last list it sent); and a changing
prompt text named for what changes, whole lines ("line") or a part of one ("span")."""
from __future__ import annotations

import json

import pytest

from test_simulator_rules import EPH, claude, words
from test_whatif import rec, reproduce
from kvprobe.pricing import PriceBook
from kvprobe.whatif.evaluate import evaluate
from whatif_oracle import records_priced

STAMPS = ("10:00:00", "10:01:00", "10:02:00", "10:03:00")


def _timed(place: str, stamp: str, turns: int) -> dict:
    body = claude(turns=turns)
    text = body["system"][0]["text"]
    body["system"][0]["text"] = {
        "first line": f"Current time: {stamp}\n{text}",
        "middle line": f"You are a careful agent.\nCurrent time: {stamp}\n{text}",
        "last line": f"{text}\nCurrent time: {stamp}",
        "inside a line": f"You are an agent; the time is {stamp} in UTC and {text}",
        "start of a sentence": f"{stamp} is when this session started, and every answer below is as of then.\n"
                               f"{text}",
    }[place]
    return body


@pytest.mark.parametrize("place, unit, span", [
    ("first line", "line", "Current time: 10:03:00"),
    ("middle line", "line", "Current time: 10:03:00"),
    ("last line", "line", "Current time: 10:03:00"),
    ("inside a line", "span", "10:03:00"),
    ("start of a sentence", "span", "10:03:00"),  # a line's start, then more than a label's worth of text
])
def test_a_changing_prompt_text_is_named_a_line_when_whole_lines_change(place, unit, span):
    """Four requests 30 s apart, each with its own time in the system prompt: one policy moves it out; it says
    "line(s)" where the time is a line of its own (at the start, in the middle, at the end of the text, beside
    at most a label) and "span(s)" where it sits in a sentence (inside it, or at its start)."""
    records = [rec(f"r{i}", 30 * i, _timed(place, stamp, 2 * i + 1)) for i, stamp in enumerate(STAMPS)]
    [fix] = [p for p in evaluate(records, PriceBook()).fixes if p.kind == "stabilize_prefix"]
    assert fix.extra["unit"] == unit and fix.extra["spans"] == [span] and fix.extra["versions"] == 4
    assert fix.detail.startswith(f"move the changing {unit}(s) of system[0] (e.g. \"{span}\")")


def _tool(name: str) -> dict:
    return {"name": name, "description": words(400, f"tool{name}"), "input_schema": {"type": "object"}}


def _with_tools(names: str, turns: int, mark: dict | None = EPH, changed: str = "") -> dict:
    body = claude(turns=turns)
    tools = [_tool(n) for n in names]
    for tool in tools:
        if tool["name"] in changed:
            tool["description"] += " (revised)"
    if mark is not None:
        tools[-1]["cache_control"] = dict(mark)
    body["tools"] = tools
    return body


def _written(tmp_path) -> dict[str, list[tuple[str, dict | None]]]:
    """Each fixed record's tools: (name, its cache mark)."""
    lines = (tmp_path / "fixed.jsonl").read_text().splitlines()
    return {r["id"]: [(t["name"], t.get("cache_control")) for t in r["request"]["tools"]]
            for r in map(json.loads, lines)}


@pytest.mark.parametrize("mark, session", [
    (EPH, "s"), (None, "s"), ({"type": "ephemeral", "ttl": "1h"}, "s"), (EPH, None),
], ids=["marked", "unmarked", "marked for an hour", "no session named"])
def test_fix_sends_the_sessions_whole_tool_list_from_its_first_request(cli, tmp_path, mark, session):
    """r0 sends tools A B, r1 and r2 insert X between them (Claude Code loading a tool mid-task): r1 cannot read
    r0's entry. The fix sends A X B (the order of the last list sent, so r1 and r2 stay as they are) from r0
    on, with the cache mark the session put on its tools (on the last one, with its lifetime; or none), and
    r1 then reads r0's entry: the saving `fix` states is the one the two reports show (`reproduce`). A log
    that names no session is one session."""
    records = [rec("r0", 0, _with_tools("AB", 1, mark), session=session),
               rec("r1", 30, _with_tools("AXB", 3, mark), session=session),
               rec("r2", 60, _with_tools("AXB", 5, mark), session=session)]
    fix = reproduce(cli, tmp_path, records, "stabilize_prefix")
    assert fix["requests"] == ["r1"] and fix["edited_requests"] == 1
    assert fix["detail"].startswith("send each session's full tool list (3 definitions), in one fixed order")
    want = [("A", None), ("X", None), ("B", mark)]
    assert _written(tmp_path) == {"r0": want, "r1": want, "r2": want}


def test_no_tool_list_is_proposed_when_a_definition_changed(cli, tmp_path):
    """r1 revises tool A's description and inserts X: no one list holds both versions of A, so no stable
    list is proposed (the change is a content change of tools[0], not an order)."""
    records = [rec("r0", 0, _with_tools("AB", 1)), rec("r1", 30, _with_tools("AXB", 3, changed="A")),
               rec("r2", 60, _with_tools("AXB", 5, changed="A"))]
    assert [p for p in evaluate(records, PriceBook()).fixes if p.extra.get("path") == "tools"] == []


def _openai_tool(name: str) -> dict:
    return {"type": "function", "function": {"name": name, "description": words(400, f"tool{name}"),
                                             "parameters": {"type": "object"}}}


def _openai(names: str, turns: int) -> dict:
    messages = [{"role": "system", "content": words(1500, "sys")}] + [
        {"role": "user" if i % 2 == 0 else "assistant", "content": words(300, f"t{i}")} for i in range(turns)]
    return {"model": "gpt-4o", "messages": messages, "tools": [_openai_tool(n) for n in names]}


def test_an_openai_tool_list_is_named_by_its_functions(cli, tmp_path):
    """OpenAI Chat tools name themselves in `function.name`: the same A, X inserted, B as above, on gpt-4o's
    implicit prefix cache; the fix sends A X B from the first request on, priced as the traces show."""
    records = [rec("r0", 0, _openai("AB", 1)), rec("r1", 30, _openai("AXB", 3)), rec("r2", 60, _openai("AXB", 5))]
    fix = reproduce(cli, tmp_path, records, "stabilize_prefix")
    assert fix["requests"] == ["r1"] and fix["edited_requests"] == 1
    lines = (tmp_path / "fixed.jsonl").read_text().splitlines()
    assert [[t["function"]["name"] for t in json.loads(line)["request"]["tools"]] for line in lines] == \
        [["A", "X", "B"]] * 3


def test_a_moved_cache_mark_is_no_change_of_definition(cli, tmp_path):
    """r0 sends A B (mark on B), r1 appends X and marks it instead, r2 sends A X B (mark on B): B is the same
    tool each time, only the mark moved, so one list serves the session: A X B with the mark on its last
    tool, from r0 on (r1 and r2 each broke the prefix)."""
    records = [rec("r0", 0, _with_tools("AB", 1)), rec("r1", 30, _with_tools("ABX", 3)),
               rec("r2", 60, _with_tools("AXB", 5))]
    fix = reproduce(cli, tmp_path, records, "stabilize_prefix")
    assert fix["requests"] == ["r1", "r2"] and fix["edited_requests"] == 2
    want = [("A", None), ("X", None), ("B", EPH)]
    assert _written(tmp_path) == {"r0": want, "r1": want, "r2": want}


def test_a_list_sent_again_before_the_change_still_leaves_the_later_lists_read(cli, tmp_path):
    """r0 and r1 send A B, r2 and r3 A X B: the list after the repeat is read too (the session's lists are
    every distinct one it sent), so the fix sends A X B from r0 on."""
    records = [rec("r0", 0, _with_tools("AB", 1)), rec("r1", 30, _with_tools("AB", 3)),
               rec("r2", 60, _with_tools("AXB", 5)), rec("r3", 90, _with_tools("AXB", 7))]
    fix = reproduce(cli, tmp_path, records, "stabilize_prefix")
    assert fix["requests"] == ["r2"] and fix["edited_requests"] == 2
    want = [("A", None), ("X", None), ("B", EPH)]
    assert _written(tmp_path) == {"r0": want, "r1": want, "r2": want, "r3": want}


def _dated_tool(stamp: str, turns: int) -> dict:
    body = _with_tools("AB", turns)
    tool = body["tools"][0]
    tool["description"] = f"Index refreshed at {stamp} for this repository. {tool['description']}"
    return body


def test_a_time_in_a_tool_description_is_moved_out_of_it(cli, tmp_path):
    """Tool A's description says when the index was refreshed, different in every request: the fix keeps A's
    description without it (the rest as it was) and moves the time after the last breakpoint; the saving it
    states is the one the traces show."""
    records = [rec(f"r{i}", 30 * i, _dated_tool(stamp, 2 * i + 1)) for i, stamp in enumerate(STAMPS)]
    fix = reproduce(cli, tmp_path, records, "stabilize_prefix")
    assert fix["requests"] == ["r1", "r2", "r3"] and fix["detail"].startswith("move the changing span(s) of tools[0]")
    plain = _tool("A")["description"]
    for line, stamp in zip((tmp_path / "fixed.jsonl").read_text().splitlines(), STAMPS):
        request = json.loads(line)["request"]
        assert request["tools"][0]["description"] == f"Index refreshed at  for this repository. {plain}"
        assert request["messages"][-1]["content"][-1]["text"] == stamp


def test_a_span_move_is_priced_as_the_records_it_writes_are(tmp_path):
    """The what-if prices a moved span on the parsed requests (skeletons); `fix` writes records. Simulated
    again from those records (each split block's two parts sized from the original block: the moved time
    keeps its share of the tokens), the log costs what the price says."""
    from kvprobe.whatif.evaluate import Pricer, prepare

    records = [rec(f"r{i}", 30 * i, _timed("first line", stamp, 2 * i + 1)) for i, stamp in enumerate(STAMPS)]
    [policy] = [p for p in evaluate(records, PriceBook()).fixes if p.kind == "stabilize_prefix"]
    pricer = Pricer(records, PriceBook(), prepare(records))
    before = sum(r.input_equivalent for r in pricer.baseline)
    after = sum(r.input_equivalent for r in records_priced(records, pricer.apply([policy])))
    assert before - after == pytest.approx(policy.saving_input_equivalent_tokens, abs=0.01)
    assert policy.saving_input_equivalent_tokens > 1000


def test_a_request_already_without_the_clock_shares_the_moved_clocks_prefix(cli, tmp_path):
    """r0-r3 carry their time as the system prompt's first line; r4 (120 s) sends the same prompt without
    it. Moved out, the four leave exactly r4's prompt in place: r1-r3 read the entry before theirs, and r4
    reads r3's whole prompt and history as well, which its changed first line had broken. The price is what
    the two traces show."""
    records = [rec(f"r{i}", 30 * i, _timed("first line", stamp, 2 * i + 1)) for i, stamp in enumerate(STAMPS)]
    records.append(rec("r4", 120, claude(turns=9)))
    fix = reproduce(cli, tmp_path, records, "stabilize_prefix")
    assert fix["requests"] == ["r1", "r2", "r3", "r4"]
    fixed = [json.loads(line)["request"] for line in (tmp_path / "fixed.jsonl").read_text().splitlines()]
    assert len({r["system"][0]["text"] for r in fixed}) == 1


def _both(tool_stamp: str, system_stamp: str, turns: int) -> dict:
    body = _dated_tool(tool_stamp, turns)
    body["system"][0]["text"] = f"Current time: {system_stamp}\n{body['system'][0]['text']}"
    return body


def test_two_moves_in_one_request_are_priced_as_the_records_they_write():
    """Each request carries two times, tool A's index refresh and the system prompt's clock, and they change
    in turn (r1 and r3 the tool's, r2 and r4 the clock): two span moves, each splitting a block of every
    request. Applied together to the records (each split block's parts sized from the original block, the
    second move's sizes beside the first's), the log simulated again costs what the what-if's price of the
    two together says."""
    from kvprobe.whatif.evaluate import Pricer, prepare

    records = [rec(f"r{i}", 30 * i, _both(STAMPS[(i + 1) // 2], STAMPS[i // 2], 2 * i + 1)) for i in range(5)]
    moves = [p for p in evaluate(records, PriceBook()).fixes if p.kind == "stabilize_prefix"]
    assert sorted(p.label for p in moves) == ["stabilize_prefix (system[0])", "stabilize_prefix (tools[0])"]
    pricer = Pricer(records, PriceBook(), prepare(records))
    before = sum(r.input_equivalent for r in pricer.baseline)
    after = sum(r.input_equivalent for r in records_priced(records, pricer.apply(moves)))
    assert before - after == pytest.approx(pricer.price(moves).saving_ie, abs=0.01)
    assert before - after > 10_000


def test_fix_leaves_a_request_without_the_moved_text_as_it_was(cli, tmp_path):
    """r4 sends no system prompt at all: the clock's move does not touch it (nothing to split there)."""
    records = [rec(f"r{i}", 30 * i, _timed("first line", stamp, 2 * i + 1)) for i, stamp in enumerate(STAMPS)]
    bare = claude(turns=9)
    del bare["system"]
    records.append(rec("r4", 120, bare))
    fix = reproduce(cli, tmp_path, records, "stabilize_prefix")
    assert fix["requests"][:3] == ["r1", "r2", "r3"]
    last = json.loads((tmp_path / "fixed.jsonl").read_text().splitlines()[-1])
    assert last["id"] == "r4" and last["request"] == bare


def _priced_as_written(records: list, kinds: tuple[str, ...] = ("stabilize_prefix",)) -> float:
    """The saving of the chosen fixes of these kinds, priced on the skeletons, checked against the records
    those fixes write simulated again; returns it."""
    from kvprobe.whatif.evaluate import Pricer, prepare

    chosen = [p for p in evaluate(records, PriceBook()).fixes if p.kind in kinds]
    pricer = Pricer(records, PriceBook(), prepare(records))
    before = sum(r.input_equivalent for r in pricer.baseline)
    after = sum(r.input_equivalent for r in records_priced(records, pricer.apply(chosen)))
    assert before - after == pytest.approx(pricer.price(chosen).saving_ie, abs=0.01)
    return before - after


def test_applying_a_move_leaves_the_records_read_as_they_were():
    """The records a fix is applied to are the log as read: moving the clock writes new records and changes
    none of the old ones (a second fix, or the report, reads them again)."""
    from kvprobe.whatif.evaluate import Pricer, prepare

    records = [rec(f"r{i}", 30 * i, _timed("first line", stamp, 2 * i + 1)) for i, stamp in enumerate(STAMPS)]
    texts = [r.request["system"][0]["text"] for r in records]
    [move] = [p for p in evaluate(records, PriceBook()).fixes if p.kind == "stabilize_prefix"]
    written = Pricer(records, PriceBook(), prepare(records)).apply([move])
    assert [r.request["system"][0]["text"] for r in records] == texts
    assert all(not r.request["system"][0]["text"].startswith("Current time") for r in written)


def test_a_move_after_the_tool_list_grew_is_priced_as_the_records_it_writes():
    """r1 inserts tool X and every request has its own clock: the whole tool list is sent from r0 on and the
    clock moved out, both at once; the system prompt then sits one tool further on than where the clock's
    move first found it (the move finds it again by its path)."""
    records = [rec(f"r{i}", 30 * i, _timed("first line", stamp, 2 * i + 1)) for i, stamp in enumerate(STAMPS)]
    for i, r in enumerate(records):
        r.request["tools"] = _with_tools("AB" if i == 0 else "AXB", 1)["tools"]
    assert _priced_as_written(records) > 10_000


def test_sessions_with_other_tools_share_no_moved_prefix():
    """Two sessions send the same system prompt with a clock and the same messages, but other tools (A B and
    A C), interleaved 15 s apart: moved out, each session's clock-free prompt is still its own prefix (the
    tools come first), so no request reads the other session's entries; priced as the records written."""
    records = []
    for i, stamp in enumerate(STAMPS):
        for session, tools, at in (("s", "AB", 30 * i), ("t", "AC", 30 * i + 15)):
            body = _timed("first line", stamp, 2 * i + 1)
            body["tools"] = _with_tools(tools, 1)["tools"]
            records.append(rec(f"{session}{i}", at, body, session=session))
    assert _priced_as_written(records) > 10_000


def test_two_prompts_each_with_its_clock_stay_two_prefixes():
    """Session s runs prompt P, session t prompt Q (other words), each with its clock: two moves, one per
    prompt; applied together, P's clock-free prompt and Q's are still different prefixes."""
    records = []
    for i, stamp in enumerate(STAMPS):
        for session, seed, at in (("s", "lorem", 30 * i), ("t", "ipsum", 30 * i + 15)):
            body = _timed("first line", stamp, 2 * i + 1)
            body["system"][0]["text"] = body["system"][0]["text"].replace("lorem", seed)
            records.append(rec(f"{session}{i}", at, body, session=session))
    assert _priced_as_written(records) > 10_000


def test_split_blocks_keep_the_sizes_the_log_gave_them():
    """The same two alternating times, in requests whose logged usage says they are a quarter larger than
    kvprobe's estimate (the log's sizes win): each split block's parts share the block's logged size, the
    second move's parts beside the first's, so the records written, simulated again, cost what the price
    says."""
    from test_simulator_rules import sizes

    records = [rec(f"r{i}", 30 * i, _both(STAMPS[(i + 1) // 2], STAMPS[i // 2], 2 * i + 1)) for i in range(5)]
    for r in records:
        logged = round(1.25 * sizes(r.request)[1])
        r.response = {"usage": {"input_tokens": logged, "output_tokens": 10}}
    assert _priced_as_written(records) > 10_000


# --- one policy at a time, on the parsed log: what it proposes, writes and prices -------------------------

def _proposed(records: list, propose) -> tuple[list, object]:
    """The policies `propose` makes of the records' diagnosed baseline, and the pricer that holds it."""
    from kvprobe.analysis.texts import TextSource
    from kvprobe.whatif.evaluate import Pricer, prepare
    from kvprobe.whatif.policies import Evidence

    pricer = Pricer(records, PriceBook(), prepare(records))
    return propose(Evidence(pricer.baseline, TextSource(records))), pricer


def _priced_is_written(records: list, policy, pricer) -> list:
    """The records of `policy` (a list: applied in its order), after checking that every request as the
    skeleton edits price it is its written record parsed and sized again: block cache keys and sizes,
    breakpoints, identity parameters, and the paths of tools and system blocks (where a later edit, a mark,
    looks one up; a message's path is as the stream first sent that content: a parse shares the blocks of the
    prefix a request repeats, and one message may be a string in one request and a list of parts in the next)."""
    def blocks(sk) -> list:
        return [(b.path if b.level != "messages" else "", b.cache_key, b.tokens) for b in sk.request.blocks]

    written, sks = records, pricer.base_sks
    for one in policy if isinstance(policy, list) else [policy]:
        written, sks = one.rewrite(written), one.reshape(sks)
    parsed_by_id = {r.sk.id: r.sk for r in records_priced(records, written)}  # sized as `fix`'s output is priced
    for priced in sks:
        parsed = parsed_by_id.pop(priced.id)
        if priced.request is None:  # usage only: nothing to edit
            assert parsed.request is None
            continue
        assert blocks(priced) == blocks(parsed), priced.id
        assert priced.request.params == parsed.request.params, priced.id
        assert priced.request.breakpoints == parsed.request.breakpoints, priced.id
    return written


def _gpt(turns: int) -> dict:
    body = _openai("", turns)
    del body["tools"]
    return body


ANY, AUTO = {"type": "any"}, {"type": "auto"}
ABSENT = "absent"


@pytest.mark.parametrize("sent, requests, shown, written", [
    # tool_choice per request (None: not sent; "gpt": an OpenAI request of the same agent, which has no such field)
    ((None, ANY, None), ["r1", "r2"], "unset", (ABSENT, ABSENT, ABSENT)),
    ((AUTO, ANY, AUTO), ["r1", "r2"], 'at {"type": "auto"}', (AUTO, AUTO, AUTO)),
    ((AUTO, ANY, "gpt", AUTO), ["r1", "r3"], 'at {"type": "auto"}', (AUTO, AUTO, ABSENT, AUTO)),
    (("gpt", ANY, None, ANY), ["r2", "r3"], 'at {"type": "any"}', (ABSENT, ANY, ANY, ANY)),
], ids=["first unset", "first set", "another provider later", "another provider first"])
def test_a_parameter_is_held_at_its_first_value(sent, requests, shown, written):
    """A Claude agent changes tool_choice mid-session (it invalidates the messages): the fix keeps the first
    value the agent sent (not sending it, where it sent none) on every request, priced as the records it
    writes. A request to another provider in the same stream (a fallback model) has no tool_choice to hold:
    it is written as it was, and the first value is the first Claude request's."""
    from kvprobe.whatif.propose_content import propose_params

    records = []
    for i, value in enumerate(sent):
        body = _gpt(2 * i + 1) if value == "gpt" else claude(turns=2 * i + 1)
        if value not in (None, "gpt"):
            body["tool_choice"] = value
        records.append(rec(f"r{i}", 30 * i, body))
    [policy], pricer = _proposed(records, propose_params)
    assert policy.requests == requests and policy.sessions == {"s"} and policy.cause_sessions == 1
    assert policy.detail == (f"keep tool_choice {shown} for the whole task (each agent's first value) instead of "
                             f"changing it mid-session (1 agent stream changed it)")
    out = _priced_is_written(records, policy, pricer)
    assert tuple(r.request.get("tool_choice", ABSENT) for r in out) == written
    assert [r.request for r in out if "gpt" in r.request["model"]] == \
        [r.request for r in records if "gpt" in r.request["model"]]


def test_no_content_fix_is_proposed_from_texts_that_cannot_be_read():
    """A clock in the system prompt, a tool inserted at r1 and tool_choice flipped at r2: each content proposal
    reads the request texts behind its diagnoses. Where they cannot be read again (a trace's lines gone), none
    is proposed (a fix kvprobe cannot write is not priced); with them, each proposes its one fix."""
    from kvprobe.analysis.texts import TextSource
    from kvprobe.whatif.policies import Evidence
    from kvprobe.whatif.propose_content import propose_params, propose_spans, propose_tools

    records = []
    for i, stamp in enumerate(STAMPS):
        body = _timed("first line", stamp, 2 * i + 1)
        body["tools"] = _with_tools("AB" if i == 0 else "AXB", 1)["tools"]
        if i == 2:
            body["tool_choice"] = ANY
        records.append(rec(f"r{i}", 30 * i, body))
    _, pricer = _proposed(records, lambda ev: [])
    for propose, key in ((propose_spans, "system[0]#"), (propose_tools, "tools"), (propose_params, "tool_choice")):
        assert propose(Evidence(pricer.baseline, TextSource())) == []
        [policy] = propose(Evidence(pricer.baseline, TextSource(records)))
        assert policy.key.startswith(key)


def test_each_session_gets_its_own_tool_list():
    """Sessions s and t start with the same request (tools A B, the system prompt marked right after them) and
    insert other tools (X; C and D); session u never changes its list (its system prompt carries a clock).
    The fix sends A X B in s and A C D B in t, each from its first request, and leaves u as it was; every
    request is priced as the record written (the system prompt's mark stays on it, the tools' mark moves to
    the list's end)."""
    from kvprobe.whatif.propose_content import propose_tools

    lists = {"s": ("AB", "AXB", "AXB"), "t": ("AB", "ACDB", "ACDB"), "u": ("AB", "AB", "AB")}
    records = []
    for i in range(3):
        for k, (session, names) in enumerate(lists.items()):
            body = _with_tools(names[i], 2 * i + 1)
            if session == "u":
                body["system"][0]["text"] = f"Current time: {STAMPS[i]}\n{body['system'][0]['text']}"
            records.append(rec(f"{session}{i}", 30 * i + k * 5, body, session=session))
    [policy], pricer = _proposed(records, propose_tools)
    assert policy.requests == ["s1", "t1"] and policy.sessions == {"s", "t"} and policy.cause_sessions == 2
    assert policy.key == "tools" and policy.extra == {"path": "tools"}
    out = {r.id: "".join(t["name"] for t in r.request["tools"]) for r in _priced_is_written(records, policy, pricer)}
    assert out == {"s0": "AXB", "t0": "ACDB", "u0": "AB", "s1": "AXB", "t1": "ACDB", "u1": "AB",
                   "s2": "AXB", "t2": "ACDB", "u2": "AB"}
    assert policy.detail == ("send each session's full tool list (3/4 definitions), in one fixed order, from its "
                             "first request in every agent (main): load tools through a stable list instead of "
                             "adding or reordering them mid-task (2 sessions changed it)")


def test_each_agent_stream_keeps_its_own_first_value():
    """Session a starts with tool_choice auto, session b without it; both send the same request with "any"
    next (b's reads a's entry), and b then drops it again (its messages are read from no entry); session c
    (a prompt of its own) sends one request. Each stream that changed it is held at its own first value: a
    at auto, b unset (b's "any" request, alike a's, written and priced without it); c is left as it was."""
    from kvprobe.whatif.propose_content import propose_params

    plan = (("c0", 0, "c", ANY, 1), ("a0", 0, "a", AUTO, 1), ("b0", 10, "b", None, 1), ("a1", 30, "a", ANY, 3),
            ("b1", 40, "b", ANY, 3), ("b2", 70, "b", None, 5))  # c: one request, nothing to hold
    records = [rec(rid, at, claude(2500 if session == "c" else 3000, turns=turns,
                                   **({"tool_choice": value} if value else {})), session=session)
               for rid, at, session, value, turns in plan]
    [policy], pricer = _proposed(records, propose_params)
    assert policy.requests == ["a1", "b2"] and policy.sessions == {"a", "b"} and policy.cause_sessions == 2
    assert policy.detail == ('keep tool_choice at unset / {"type": "auto"} for the whole task (each agent\'s first '
                             'value) instead of changing it mid-session (2 agent streams changed it)')
    out = _priced_is_written(records, policy, pricer)
    assert [r.request.get("tool_choice", ABSENT) for r in out] == [ANY, AUTO, ABSENT, AUTO, ABSENT, ABSENT]


def test_a_held_parameter_reaches_a_request_without_messages():
    """r2 sends "any" with no messages at all (a malformed call, logged as sent): tool_choice salts the
    messages, so holding it changes none of r2's blocks, and r2 is written without it and priced as written."""
    from kvprobe.whatif.propose_content import propose_params

    bare = claude(turns=1, tool_choice=ANY)
    bare["messages"] = []
    records = [rec("r0", 0, claude(turns=1)), rec("r1", 30, claude(turns=3, tool_choice=ANY)), rec("r2", 60, bare)]
    [policy], pricer = _proposed(records, propose_params)
    out = _priced_is_written(records, policy, pricer)
    assert policy.requests == ["r1"] and [r.request.get("tool_choice", ABSENT) for r in out] == [ABSENT] * 3



def _dated_message(stamp: str, turns: int) -> dict:
    """The first user message opens with the day's time, as a line of its own (an agent's context reminder)."""
    body = claude(turns=turns)
    first = body["messages"][0]
    parts = [{"type": "text", "text": first["content"]}] if isinstance(first["content"], str) else first["content"]
    first["content"] = [{**parts[0], "text": f"Today is {stamp}.\n{parts[0]['text']}"}, *parts[1:]]
    return body


@pytest.mark.parametrize("stamps, other, carriers, versions, span", [
    (STAMPS, None, 4, 4, "Today is 10:03:00."),  # each sent once: the newest version names the span
    (STAMPS, "09:00:00", 4, 4, "Today is 10:03:00."),
    (("10:00:00", "10:00:00", "10:00:00", "10:03:00"), None, 4, 2, "Today is 10:00:00."),  # the most sent
], ids=["one session", "another session with its own time", "one version sent most"])
def test_a_changing_message_line_is_moved_in_the_sessions_that_change_it(stamps, other, carriers, versions, span):
    """Session s's first user message opens with a time that changes (each request, or once after three
    requests); session t, where present, sends the same message once (between s's second and third request) with a
    time of its own. Messages are a
    session's own: the move reaches s's requests only (t's message changed nowhere), and names the span as
    the version most requests sent has it (the newest of equals)."""
    from kvprobe.whatif.propose_content import propose_spans

    records = [rec(f"s{i}", 30 * i, _dated_message(stamp, 2 * i + 1)) for i, stamp in enumerate(stamps)]
    if other:  # sent between s1 and s2
        records.insert(2, rec("t0", 45, _dated_message(other, 3), session="t"))
    [policy], pricer = _proposed(records, propose_spans)
    assert policy.sessions == {"s"} and policy.extra == {"path": "messages[0].content[0]", "unit": "line",
                                                         "spans": [span], "versions": versions}
    assert policy.detail == (f'move the changing line(s) of messages[0].content[0] (e.g. "{span}") out of the '
                             f"cached prefix, to after the last breakpoint (the end of the last user message), in "
                             f"all {carriers} requests that carry it ({versions} versions; agents: main)")
    written = _priced_is_written(records, policy, pricer)
    assert {r.id for r in written if r.request["messages"][0]["content"][0]["text"].startswith("Today")} == \
        ({"t0"} if other else set())


def test_thinking_switched_on_and_off_is_held_beside_tool_choice():
    """Extended thinking is on at r0 and off at r1 and r3, tool_choice "any" at r2 only (each invalidates the
    messages): two fixes, tool_choice's then thinking's, each holding its own first value on every request."""
    from kvprobe.whatif.propose_content import propose_params

    think = {"type": "enabled", "budget_tokens": 2000}
    sent = ((think, None), (None, None), (think, ANY), (None, None))
    records = [rec(f"r{i}", 30 * i, claude(turns=2 * i + 1, **({"thinking": t} if t else {}),
                                          **({"tool_choice": c} if c else {}))) for i, (t, c) in enumerate(sent)]
    policies, pricer = _proposed(records, propose_params)
    assert [(p.key, p.extra, p.requests) for p in policies] == [
        ("tool_choice", {"param": "tool_choice"}, ["r2", "r3"]),
        ("thinking", {"param": "thinking"}, ["r1", "r2", "r3"])]
    assert policies[1].detail.startswith('keep thinking at {"type": "enabled", "budget_tokens": 2000} for the whole')
    out = _priced_is_written(records, policies[1], pricer)
    assert [r.request.get("thinking") for r in out] == [think] * 4


def test_a_changing_system_line_is_moved_in_every_session_that_sends_the_prompt():
    """The same clock in the system prompt: session s changes it every request, session t sends the prompt
    once with a time of its own; session u sends none (between s's second and third request). A system
    prompt is what a fleet's sessions share: its versions are compared across sessions, so the move reaches
    t's request too (five versions, the newest naming the span)."""
    from kvprobe.whatif.propose_content import propose_spans

    records = [rec(f"s{i}", 30 * i, _timed("first line", stamp, 2 * i + 1)) for i, stamp in enumerate(STAMPS)]
    records.append(rec("t0", 100, _timed("first line", "09:00:00", 3), session="t"))
    bare = claude(turns=3)
    del bare["system"]
    records.insert(2, rec("u0", 45, bare, session="u"))
    [policy], pricer = _proposed(records, propose_spans)
    assert policy.sessions == {"s", "t"} and policy.cause_sessions == 1
    assert policy.extra == {"path": "system[0]", "unit": "line", "spans": ["Current time: 09:00:00"], "versions": 5}
    assert "in all 5 requests that carry it (5 versions; agents: main)" in policy.detail
    written = _priced_is_written(records, policy, pricer)
    assert not any(r.request["system"][0]["text"].startswith("Current time") for r in written if r.id != "u0")


def test_thinking_alone_is_held():
    """Extended thinking switched off at r1 and on again at r2, tool_choice never sent: one fix, thinking's."""
    from kvprobe.whatif.propose_content import propose_params

    think = {"type": "enabled", "budget_tokens": 2000}
    records = [rec(f"r{i}", 30 * i, claude(turns=2 * i + 1, **({"thinking": think} if i != 1 else {})))
               for i in range(3)]
    [policy], _ = _proposed(records, propose_params)
    assert (policy.key, policy.requests) == ("thinking", ["r1", "r2"])


def test_a_stream_whose_first_text_cannot_be_read_is_not_held():
    """Sessions a and b (prompts of their own) each flip tool_choice; the trace's texts can be read for b's
    requests only (the first three lines of the file; a's, later in the file, started first). Only b is
    held: a fix that cannot say a's first value is not proposed for it."""
    from kvprobe.analysis.texts import TextSource
    from kvprobe.whatif.policies import Evidence
    from kvprobe.whatif.propose_content import propose_params

    records = [rec(f"{s}{i}", at + 30 * i, claude(size, turns=2 * i + 1, **({"tool_choice": ANY} if i == 1 else {})),
                   session=s) for s, at, size in (("b", 10, 2500), ("a", 0, 3000)) for i in range(3)]
    _, pricer = _proposed(records, lambda ev: [])
    [policy] = propose_params(Evidence(pricer.baseline, TextSource(records[:3])))
    assert policy.requests == ["b1", "b2"] and policy.sessions == {"b"}


def test_a_clock_moved_after_the_tool_list_grew_is_found_by_its_path():
    """r1 inserts tool X and every request has its own clock in the system prompt: the tool list applied
    first puts the system prompt one block further on in r0 than where the clock's move found it; the move
    finds it again by its path, and every request is priced as the records the two write."""
    from kvprobe.whatif.propose_content import propose_spans, propose_tools

    records = [rec(f"r{i}", 30 * i, _timed("first line", stamp, 2 * i + 1)) for i, stamp in enumerate(STAMPS)]
    for i, r in enumerate(records):
        r.request["tools"] = _with_tools("AB" if i == 0 else "AXB", 1)["tools"]
    [tools], pricer = _proposed(records, propose_tools)
    [clock], _ = _proposed(records, propose_spans)
    written = _priced_is_written(records, [tools, clock], pricer)
    assert [(len(r.request["tools"]), r.request["system"][0]["text"].startswith("Current")) for r in written] == \
        [(3, False)] * 4


def _usage_only(rid: str, at: float) -> object:
    from kvprobe.trace import TraceRecord

    return TraceRecord(id=rid, provider="anthropic", started_at=at, request=None, session="s", agent="main",
                       response={"usage": {"input_tokens": 5000, "output_tokens": 10}})


def _builtin_first(names: str, turns: int) -> dict:
    body = _openai(names, turns)
    body["tools"].insert(0, {"type": "web_search"})  # a built-in tool: no name, no function
    return body


def _numbered(names: list, turns: int) -> dict:
    body = _with_tools("A" * len(names), turns)
    for tool, name in zip(body["tools"], names):
        tool["name"], tool["description"] = name, f"tool {name} " * 300
    return body


def _name(tool: dict):
    return tool.get("function", {}).get("name", tool.get("type")) if "name" not in tool else tool["name"]


@pytest.mark.parametrize("bodies, requests, written", [
    ([None, _with_tools("AB", 1), _with_tools("AXB", 3), _with_tools("AXB", 5)], ["r2"], list("AXB")),
    ([_with_tools("AB", 1), _with_tools("AXB", 3), _with_tools("AB", 5)], ["r1", "r2"], list("AXB")),
    ([_builtin_first("AB", 1), _builtin_first("AXB", 3), _builtin_first("AXB", 5)], ["r1"],
     ["web_search", "A", "X", "B"]),
    ([_numbered([1, 2], 1), _numbered([1, 3, 2], 3), _numbered([1, 3, 2], 5)], ["r1"], [1, 3, 2]),
], ids=["a usage-only record first", "an older list sent again", "a built-in tool with no name",
        "names that are not strings"])
def test_a_sessions_tool_list_is_its_newest_list_with_every_tool(bodies, requests, written):
    """The list a session is sent whole: its newest list (one sent again is read where it was first sent),
    every tool it sent, each known by its name: a record logged without its request (usage only) has none to
    read; OpenAI's built-in tools have no name (one such tool is one tool); a name that is not a string (a
    malformed log) is told apart by its JSON."""
    from kvprobe.whatif.propose_content import propose_tools

    records = [_usage_only(f"r{i}", 30 * i) if body is None else rec(f"r{i}", 30 * i, body)
               for i, body in enumerate(bodies)]
    [policy], pricer = _proposed(records, propose_tools)
    assert policy.requests == requests
    out = _priced_is_written(records, policy, pricer)
    assert [[_name(t) for t in r.request["tools"]] for r in out if r.request is not None] == \
        [written] * (len(bodies) - (bodies[0] is None))


def test_a_prompt_rewritten_in_two_places_does_not_hide_another_prompts_clock():
    """Session s sends a 20-line system prompt three times: as is, with lines 2-4 rewritten, with lines 11-13
    rewritten. Each is close to the first (15% changed), but together 30% of it changes: no span to move
    there. Session t's prompt (other words) carries a clock: its move is still proposed."""
    from kvprobe.whatif.propose_content import propose_spans

    lines = [words(30, f"l{k}x") for k in range(20)]

    def prompt(rewritten: tuple[int, ...], turns: int) -> dict:
        body = claude(turns=turns)
        body["system"][0]["text"] = "\n".join(words(30, f"n{k}y") if k in rewritten else line
                                              for k, line in enumerate(lines))
        return body

    records = [rec(f"s{i}", 30 * i, prompt(rewritten, 2 * i + 1), session="s")
               for i, rewritten in enumerate(((), (1, 2, 3), (10, 11, 12)))]
    records += [rec(f"t{i}", 100 + 30 * i, _timed("first line", stamp, 2 * i + 1), session="t")
                for i, stamp in enumerate(STAMPS)]
    [policy], _ = _proposed(records, propose_spans)
    assert policy.requests == ["t1", "t2", "t3"] and policy.extra["spans"] == ["Current time: 10:03:00"]


@pytest.mark.parametrize("tool", [0, 1], ids=["unmarked", "carrying the cache mark"])
def test_a_time_in_a_tool_description_is_priced_as_written(tool):
    """A tool's description carries the time of every request (A's, or B's, which carries the tools' cache
    mark): its stable part keeps the tool's name and schema beside it (the mark is no part of the tool's
    content), and each request is priced as the record the move writes."""
    from kvprobe.whatif.propose_content import propose_spans

    records = [rec(f"r{i}", 30 * i, _dated_tool(stamp, 2 * i + 1)) for i, stamp in enumerate(STAMPS)]
    for r in records:
        tools = r.request["tools"]
        tools[0]["description"], tools[tool]["description"] = tools[tool]["description"], tools[0]["description"]
    [policy], pricer = _proposed(records, propose_spans)
    _priced_is_written(records, policy, pricer)


def test_each_move_addresses_the_requests_that_changed_its_text():
    """Tool A's time changes at r1 and r3, the system prompt's clock at r2 and r4: each move addresses the
    requests whose prefix broke at its own block."""
    from kvprobe.whatif.propose_content import propose_spans

    records = [rec(f"r{i}", 30 * i, _both(STAMPS[(i + 1) // 2], STAMPS[i // 2], 2 * i + 1)) for i in range(5)]
    policies, _ = _proposed(records, propose_spans)
    assert sorted((p.extra["path"], p.requests) for p in policies) == [("system[0]", ["r2", "r4"]),
                                                                       ("tools[0]", ["r1", "r3"])]


def test_a_move_names_its_agents_and_at_most_eight_spans():
    """The main agent and a sub-agent send the same system prompt, nine of whose lines (a status board, each
    field above a line about it) change every request: the move names both agents and the first eight spans."""
    from kvprobe.whatif.propose_content import propose_spans

    def board(i: int) -> dict:
        body = claude(turns=2 * i + 1)
        lines = "\n".join(f"field {k}: {10 * i + k}\n{words(20, f'about{k}x')}" for k in range(9))
        body["system"][0]["text"] = f"{lines}\n{body['system'][0]['text']}"
        return body

    records = [rec(f"r{i}", 30 * i, board(i), agent=("main", "sub")[i % 2]) for i in range(4)]
    [policy], _ = _proposed(records, propose_spans)
    assert policy.extra["spans"] == [f"field {k}: {30 + k}" for k in range(8)]
    assert "(4 versions; agents: main, sub)" in policy.detail


_HEAD = words(700, "p") + " "  # 2,660 characters each side of what changes
_TAIL = " " + words(700, "s")
_FIFTH = (len(_HEAD) + len(_TAIL)) // 4  # 1,330: a fifth of a text of 6,650


@pytest.mark.parametrize("first, second, moved", [
    ("a" * 1330, "b" * 1330, True),  # 1,330 of 6,650 characters change: a fifth, a volatile span
    ("a" * 1331, "b" * 1331, False),  # 1,331 of 6,652: over a fifth, another text
    ("a" * 1330, "b", True),  # 1,330 of the longer 6,650 (the shorter, 5,321, sent first or second)
    ("b", "a" * 1330, True),
    ("a" * 1331, "b", False),  # 1,331 of 6,651
], ids=["a fifth", "over a fifth", "the longer first", "the shorter first", "the longer over a fifth"])
def test_a_span_is_at_most_a_fifth_of_the_longer_version(first, second, moved):
    """Two versions of a system prompt that differ in one run of characters between 2,660 unchanged ones on
    each side: a volatile span when what changes is at most a fifth of the longer version
    (MAX_VOLATILE_FRACTION), whichever is sent first; else two texts, and nothing to move."""
    from kvprobe.whatif.propose_content import propose_spans

    assert (len(_HEAD), len(_TAIL), _FIFTH) == (2660, 2660, 1330)
    records = [rec("r0", 0, claude(turns=1, system=[{"type": "text", "text": _HEAD + first + _TAIL}])),
               rec("r1", 30, claude(turns=3, system=[{"type": "text", "text": _HEAD + second + _TAIL}]))]
    policies, _ = _proposed(records, propose_spans)
    assert [p.extra["versions"] for p in policies] == ([2] if moved else [])


@pytest.mark.parametrize("others, moved", [(63, True), (64, False)])
def test_versions_are_compared_with_at_most_64_references(others, moved):
    """A path's versions are grouped by likeness to at most MAX_CLUSTERS (64) references: after 63 short system
    prompts unlike each other, a clocked prompt's first version is the 64th reference and its second joins
    it (a move); after 64, the clocked prompt is compared with none and nothing is moved."""
    from kvprobe.whatif.propose_content import propose_spans

    records = [rec(f"o{k}", k, claude(turns=1, system=[{"type": "text", "text": words(20, f"v{k}x")}]))
               for k in range(others)]
    records += [rec(f"r{i}", 100 + 30 * i, _timed("first line", stamp, 2 * i + 1))
                for i, stamp in enumerate(STAMPS[:2])]
    policies, _ = _proposed(records, propose_spans)
    assert [p.extra["spans"] for p in policies] == ([["Current time: 10:01:00"]] if moved else [])


def test_a_text_part_keeps_its_other_fields_beside_its_stable_text():
    """The clocked system text part also carries `citations` (a field of Anthropic's text blocks): its stable
    part keeps them, and each request is priced as the record written."""
    from kvprobe.whatif.propose_content import propose_spans

    records = [rec(f"r{i}", 30 * i, _timed("first line", stamp, 2 * i + 1)) for i, stamp in enumerate(STAMPS)]
    for r in records:
        r.request["system"][0]["citations"] = []
    [policy], pricer = _proposed(records, propose_spans)
    assert all(r.request["system"][0]["citations"] == [] for r in _priced_is_written(records, policy, pricer))


def test_a_fleets_shared_prompt_and_a_clock_after_it_are_two_moves_with_their_own_requests():
    """Four sessions, 400 s apart, share tools A B and a system prompt that names each session's user (the
    fleet's volatile span at system[0]); a second system part carries a clock that changes within each
    session. The name's move addresses each later session's first request (it could have read the one
    before's entry); the clock's, the requests whose clock broke their own session's prefix."""
    from kvprobe.analysis.fleet import find_shared_prefixes
    from kvprobe.analysis.texts import TextSource
    from kvprobe.whatif.evaluate import Pricer, prepare
    from kvprobe.whatif.policies import Evidence
    from kvprobe.whatif.propose_content import propose_spans

    records = []
    for k, name in enumerate(("Ada", "Grace", "Linus", "Barbara")):
        for i in range(2):
            body = _with_tools("AB", 2 * i + 1)
            body["system"] = [{"type": "text", "text": f"You are helping {name} today. " + words(1500)},
                              {"type": "text", "text": f"Current time: {STAMPS[i]}\n" + words(1500, "ipsum"),
                               "cache_control": EPH}]
            records.append(rec(f"s{k}-r{i}", 400 * k + 30 * i, body, session=f"s{k}"))
    prepared, texts = prepare(records), TextSource(records)
    fleet = find_shared_prefixes(prepared.results, texts, PriceBook())
    assert [(f.breaks_at, f.breaker) for f in fleet] == [("system[0]", "volatile span")]
    policies = propose_spans(Evidence(Pricer(records, PriceBook(), prepared).baseline, texts, fleet))
    assert [(p.extra["path"], p.requests) for p in policies] == [
        ("system[0]", ["s1-r0", "s2-r0", "s3-r0"]), ("system[1]", ["s0-r1", "s1-r1", "s2-r1", "s3-r1"])]


def test_no_move_where_the_fleet_found_other_prompts_and_no_session_changed_its_own():
    """Three sessions share tools A B; two of them send a system prompt that differs only in the user's name,
    the third a prompt of its own words. What breaks the fleet's sharing is per-session content (no span
    of one text), and no session changes its prompt: nothing is moved."""
    from kvprobe.analysis.fleet import find_shared_prefixes
    from kvprobe.analysis.texts import TextSource
    from kvprobe.whatif.evaluate import Pricer, prepare
    from kvprobe.whatif.policies import Evidence
    from kvprobe.whatif.propose_content import propose_spans

    # short prompts after the shared tools: comparing long texts with nothing in common takes find_template
    # seconds (analysis.spans._holes)
    prompts = ("You are helping Ada today. " + words(60), "You are helping Grace today. " + words(60),
               words(70, "other"))
    records = []
    for k, prompt in enumerate(prompts):
        for i in range(2):
            body = _with_tools("AB", 2 * i + 1)
            body["system"][0]["text"] = prompt
            records.append(rec(f"s{k}-r{i}", 400 * k + 30 * i, body, session=f"s{k}"))
    prepared, texts = prepare(records), TextSource(records)
    fleet = find_shared_prefixes(prepared.results, texts, PriceBook())
    assert [(f.breaks_at, f.breaker) for f in fleet] == [("system[0]", "per-session content")]
    assert propose_spans(Evidence(Pricer(records, PriceBook(), prepared).baseline, texts, fleet)) == []
