"""A coding agent with three concurrent subagents, written independently of kvprobe's sample and estimator.

Token counts come from this file's own scheme, not kvprobe's: every text block is as many tokens as it has
words, and each tool definition is the size given in TOOLS. The usage of each request was worked out by
hand from Anthropic's documented rules (5-minute entries refreshed on read, 20-position lookback, tool_choice
invalidating messages, entries readable once the response begins) and is written below as data. So are the
savings each fix must show, computed by hand in input-token equivalents (fresh 1, 5m write 1.25, read 0.1)
and, for claude-sonnet-4-5, in USD ($3/M input, so 3e-6 per equivalent; $15/M output for the one-token
requests a fix adds).

Timeline (seconds; first token 2 s after the start unless noted):
  m1 0      tools A B C D, system S, u1                              write 8,240
  m2 20     + a1 u2                                                  read 8,240 (m1)   write 1,060
  m3 40     tool X inserted mid-list: A B X C D                      write 10,660      (prefix changed)
  s1 60.00  old tools, main's history + a3 + repo map R + own task   read 9,300 (m2)   write 31,320  (ft 63.0)
  s2 60.05  same prefix through R, own task                         read 9,300        write 31,320  (ft 63.2)
  s3 60.10  same                                                    read 9,300        write 31,320  (ft 63.4)
  m4 100    + a3 u4                                                  read 10,660 (m3)  write 1,560
  m5 520    420 s later: every entry expired at 400                  write 12,780      (TTL expired)
  m6 540    tool_choice any: only the system entry is readable       read 8,500        write 4,740
  m7 560    tool_choice back: reads m5's entry                       read 12,780       write 820
  m8 580    22 new text blocks: m7's entry is 23 positions back      read 8,500        write 6,260   (lookback)
Sizes: A 600, B 500, C 700, D 400, X 300, S 6,000; u1 40, every assistant turn 60, u2 1,000, u3 1,000,
u4 1,500, u5 500, u6 400, u7 300, u8 22 x 50; R 30,000, each task 200.
"""
from __future__ import annotations

import json

import pytest

from kvprobe.pricing import PriceBook
from kvprobe.report import build_report
from kvprobe.trace import TraceRecord, write_trace
from kvprobe.whatif.evaluate import evaluate
from whatif_oracle import records_priced

EPH = {"type": "ephemeral"}
MODEL = "claude-sonnet-4-5"
T0 = 1_790_000_000.0
TOOLS = {"A": 600, "B": 500, "C": 700, "D": 400, "X": 300}

# id: (cache read, cache write) by hand; every request sends nothing after its last breakpoint (fresh 0)
# and answers with 100 output tokens.
USAGE = {"m1": (0, 8_240), "m2": (8_240, 1_060), "m3": (0, 10_660),
         "s1": (9_300, 31_320), "s2": (9_300, 31_320), "s3": (9_300, 31_320),
         "m4": (10_660, 1_560), "m5": (0, 12_780), "m6": (8_500, 4_740), "m7": (12_780, 820),
         "m8": (8_500, 6_260)}
OUTPUT = 100

# Observed input-equivalents: m1 10,300; m2 824 + 1,325; m3 13,325; each sibling 930 + 39,150 = 40,080;
# m4 1,066 + 1,950; m5 15,975; m6 850 + 5,925; m7 1,278 + 1,025; m8 850 + 7,825.
OBSERVED_IE = 182_758

# Each fix alone (input-equivalents saved), by hand:
SAVINGS = {
    # every request of the session sends A B C D X (subagents too): m1 writes 300 more (-375), m2 reads 300
    # more (-30), m3 reads m2's 9,600 and writes 1,060 (13,325 -> 2,285: +11,040), each sibling reads m3's
    # 10,660 and writes 30,260 (40,080 -> 38,891: +1,189 x 3)
    "stabilize_prefix": 14_202,
    # R marked in all three; s2 and s3 start at 63.01, after s1's first token, and read s1's 40,420-token
    # entry, writing only their task: 40,080 -> 4,042 + 250 = 4,292, twice
    "shared_breakpoint": 71_576,
    # one ping at 370 (copy of m4, reads 12,220: 1,222); m5 then reads 12,220 and writes 560
    # (15,975 -> 1,922)
    "keep_alive": 12_831,
    # m6 keeps tool_choice unset: reads m5's 12,780, writes 460 (6,775 -> 1,853); m7 reads m6's 13,240,
    # writes 360 (2,303 -> 1,774)
    "stable_params": 5_451,
    # m8 marks u7 (messages[12].content[0]): reads m7's 13,600, writes 1,160 (8,675 -> 2,810)
    "lookback_breakpoint": 5_865,
}
ONE_TOKEN_REQUESTS = {"keep_alive": 1}  # output the fix adds, in USD only
# The warm-up variant of the siblings fix: a request through R (reads m2's 9,300, writes 31,120: 39,830)
# before all three, which then read 40,420 and write 200 each (3 x 4,292): 120,240 -> 52,706.
WARM_UP_SAVING = 67_534
# All five together, one simulation: m1 10,675; m2 854 + 1,325; m3 960 + 1,325; s1 reads 10,660 and writes
# 30,260 (38,891); s2, s3 read 40,720 and write 200 (4,322 each); m4 3,016; ping 1,222; m5 1,922;
# m6 1,853; m7 1,774; m8 1,360 + 1,450.
ALL_FIXES_IE = 75_271
USD_PER_IE, USD_PER_OUTPUT = 3e-6, 15e-6


VOCAB = ("the agent reads a file then edits one function and runs every test again before it writes "
         "its answer to the user who asked for a small change in how errors are logged").split()


def _text(n: int, tag: str) -> str:
    """n words, so n tokens in this file's scheme; the tag makes each block's content its own."""
    return " ".join([tag] + [VOCAB[(i * 7 + len(tag)) % len(VOCAB)] for i in range(n - 1)])


def _tool(name: str) -> dict:
    return {"name": name, "description": _text(TOOLS[name] - 8, f"tool{name}"),
            "input_schema": {"type": "object", "properties": {"arg": {"type": "string"}}}}


def _msg(role: str, *texts: str) -> dict:
    return {"role": role, "content": [{"type": "text", "text": t} for t in texts]}


U = {"u1": 40, "u2": 1_000, "u3": 1_000, "u4": 1_500, "u5": 500, "u6": 400, "u7": 300}


def _history(upto: int) -> list[dict]:
    """Main's messages u1 a1 u2 ... u{upto} (assistant turns of 60 words)."""
    msgs = []
    for k in range(1, upto + 1):
        if k > 1:
            msgs.append(_msg("assistant", _text(60, f"a{k - 1}")))
        msgs.append(_msg("user", _text(U[f"u{k}"], f"u{k}")))
    return msgs


def _body(tools: str, messages: list[dict], **extra) -> dict:
    messages[-1]["content"][-1]["cache_control"] = EPH
    return {"model": MODEL, "max_tokens": 4096, "tools": [_tool(t) for t in tools],
            "system": [{"type": "text", "text": _text(6_000, "sys"), "cache_control": EPH}],
            "messages": messages, **extra}


def _record(rid: str, start: float, body: dict, agent: str = "main", first_token: float = 2.0) -> TraceRecord:
    read, write = USAGE[rid]
    usage = {"input_tokens": 0, "cache_read_input_tokens": read, "cache_creation_input_tokens": write,
             "output_tokens": OUTPUT}
    return TraceRecord(id=rid, provider="anthropic", started_at=T0 + start, request=body,
                       response={"type": "message", "usage": usage}, session="task-42", agent=agent,
                       endpoint="/v1/messages", first_token_at=T0 + start + first_token,
                       finished_at=T0 + start + first_token + 5)


def session() -> list[TraceRecord]:
    recs = [_record("m1", 0, _body("ABCD", _history(1))),
            _record("m2", 20, _body("ABCD", _history(2))),
            _record("m3", 40, _body("ABXCD", _history(3)))]
    for k, (start, ft) in enumerate(((60.0, 3.0), (60.05, 3.15), (60.10, 3.3)), start=1):
        msgs = _history(3) + [_msg("assistant", _text(60, "a3")),
                              _msg("user", _text(30_000, "repo"), _text(200, f"task{k}"))]
        recs.append(_record(f"s{k}", start, _body("ABCD", msgs), agent=f"sub{k}", first_token=ft))

    def main(upto: int, tail: list[dict] | None = None) -> list[dict]:
        msgs = _history(3) + [_msg("assistant", _text(60, "a3")), _msg("user", _text(1_500, "u4"))]
        for k in range(5, upto + 1):
            msgs += [_msg("assistant", _text(60, f"a{k - 1}")), _msg("user", _text(U[f"u{k}"], f"u{k}"))]
        return msgs + (tail or [])
    recs += [_record("m4", 100, _body("ABXCD", main(4))),
             _record("m5", 520, _body("ABXCD", main(5))),
             _record("m6", 540, _body("ABXCD", main(6), tool_choice={"type": "any"})),
             _record("m7", 560, _body("ABXCD", main(7))),
             _record("m8", 580, _body("ABXCD", main(7, [_msg("assistant", _text(60, "a7")),
                                                        _msg("user", *[_text(50, f"u8p{j}") for j in range(22)])])))]
    return recs


@pytest.fixture(scope="module")
def report():
    return build_report([], records=session(), fixes=True)


def test_every_cause_is_named_on_the_request_that_paid_for_it(report):
    kinds = {r.sk.id: [d.kind for d in r.diagnoses] for r in report.results}
    assert kinds["m3"][0] == "prefix_changed" and report.results[2].diagnoses[0].path == "tools[2]"
    assert kinds["m5"][0] == "ttl_expired"
    assert kinds["m6"][0] == "params_changed" and kinds["m7"][0] == "params_changed"
    assert kinds["m8"][0] == "lookback_exceeded"
    assert not kinds["m1"] and not kinds["m2"] and not kinds["m4"] and not kinds["s1"]
    for rid in ("s2", "s3"):
        [d] = [d for d in next(r for r in report.results if r.sk.id == rid).diagnoses]
        assert d.kind == "not_yet_readable" and d.siblings == ["s1", "s2", "s3"]
        assert d.path == "messages[6].content[0]" and d.started_within_ms == 100
        assert d.shared_tokens == pytest.approx(40_420, rel=0.01)
        assert d.wrote == {"s1": 31_320, "s2": 31_320, "s3": 31_320}
        assert "within 100 ms" in d.detail and "no breakpoint ends there" in d.detail
    assert all(d.kind != "unexplained" for r in report.results for d in r.diagnoses)


def test_the_what_if_baseline_is_the_observed_session(report):
    assert report.totals["input_equivalent_tokens"] == OBSERVED_IE
    base = report.with_all_fixes["baseline_predicted"]
    assert base["input_equivalent_tokens"] == pytest.approx(OBSERVED_IE, rel=0.001)
    assert base["cost_usd"] == pytest.approx(report.totals["cost_usd"], rel=0.001)


def test_five_fixes_each_saving_what_the_hand_computation_says(report):
    fixes = {f["kind"]: f for f in report.fixes}
    assert set(fixes) == set(SAVINGS)
    for kind, saving in SAVINGS.items():
        usd = saving * USD_PER_IE - ONE_TOKEN_REQUESTS.get(kind, 0) * USD_PER_OUTPUT
        assert fixes[kind]["saving_input_equivalent_tokens"] == pytest.approx(saving, rel=0.01), kind
        assert fixes[kind]["saving_usd"] == pytest.approx(usd, rel=0.01), kind
    tools = fixes["stabilize_prefix"]
    # m1, m2 and the three subagents get the list m3 onward sends (A B X C D); m3-m8 stay as they are
    assert tools["edited_requests"] == 5 and "main, sub1, sub2, sub3" in tools["detail"]


def test_siblings_fix_offers_the_cheaper_variant_with_its_latency(report):
    shared = next(f for f in report.fixes if f["kind"] == "shared_breakpoint")
    assert shared["variant"] == "stagger" and shared["requests"] == ["s1", "s2", "s3"]
    assert shared["added_latency_s"] == pytest.approx(63.01 - 60.05, abs=0.01)
    assert "e.g. messages[6].content[0]) with cache_control" in shared["detail"]
    [warm] = [a for a in report.alternatives if a["kind"] == "shared_breakpoint"]
    assert warm["variant"] == "warm_up" and warm["instead_of"] == ["shared_breakpoint (stagger)"]
    assert warm["saving_input_equivalent_tokens"] == pytest.approx(WARM_UP_SAVING, rel=0.01)
    assert warm["saving_usd"] == pytest.approx(WARM_UP_SAVING * USD_PER_IE - USD_PER_OUTPUT, rel=0.01)
    assert warm["added_latency_s"] == pytest.approx(3.01, abs=0.01)


def test_all_fixes_together_is_one_simulation_of_what_fix_writes(report):
    w = report.with_all_fixes
    assert w["input_equivalent_tokens"] == pytest.approx(ALL_FIXES_IE, rel=0.01)
    assert w["requests"] == len(USAGE) + 1  # the keep-alive ping


def test_each_written_fix_reproduces_its_saving_through_report(cli, tmp_path):
    """What a user would run: fix (one kind, then all), report the written trace, compare with the log."""
    original = tmp_path / "session.jsonl"
    write_trace(original, session())
    before = json.loads(cli("report", original, "--no-fixes", "--json").stdout)["totals"]
    assert before["input_equivalent_tokens"] == OBSERVED_IE
    for kind, saving in [*SAVINGS.items(), ("all", OBSERVED_IE - ALL_FIXES_IE)]:
        fixed = tmp_path / f"fixed-{kind}.jsonl"
        args = ["fix", original, "-o", fixed, "--json"] + ([] if kind == "all" else ["--kind", kind])
        summary = json.loads(cli(*args).stdout)
        after = json.loads(cli("report", fixed, "--no-fixes", "--json").stdout)
        assert after["totals"]["input_equivalent_tokens"] == pytest.approx(
            summary["input_equivalent_tokens"]["after"], abs=0.2), kind
        assert after["totals"]["cost_usd"] == pytest.approx(summary["cost_usd"]["after"], abs=2e-6), kind
        assert before["input_equivalent_tokens"] - after["totals"]["input_equivalent_tokens"] == pytest.approx(
            saving, rel=0.01), kind
        assert not [m for m in after["misses"] if "unexplained" in m["kinds"]], kind
    compared = json.loads(cli("compare", original, tmp_path / "fixed-all.jsonl", "--json").stdout)["totals"]
    assert compared["input_equivalent_tokens"]["base"] == OBSERVED_IE
    assert compared["input_equivalent_tokens"]["candidate"] == pytest.approx(ALL_FIXES_IE, rel=0.01)


def test_component_pricing_equals_whole_trace_re_simulation():
    """Each fix's saving, priced on the segments it touches, equals re-simulating the whole session."""
    from kvprobe.whatif.evaluate import Pricer, prepare

    records = session()
    result = evaluate(records, PriceBook())
    pricer = Pricer(records, PriceBook(), prepare(records))
    base = sum(r.input_equivalent for r in pricer.baseline)
    for cand in [*result.fixes, *result.alternatives]:
        whole = records_priced(records, pricer.apply([cand]))
        assert base - sum(r.input_equivalent for r in whole) == pytest.approx(
            cand.saving_input_equivalent_tokens, abs=0.01), cand.kind


def test_every_block_once_first_sent_where_it_was_and_summing_to_the_input_cost(cli, tmp_path):
    trace = tmp_path / "session.jsonl"
    write_trace(trace, session())
    data = json.loads(cli("report", trace, "--no-fixes", "--json").stdout)
    blocks = data["blocks"]
    # by hand: 5 tools + system + 7 user turns + 22 parts of u8 + 7 assistant turns + repo map + 3 tasks
    assert len(blocks) == 5 + 1 + 7 + 22 + 7 + 1 + 3
    assert len({b["hash"] for b in blocks}) == len(blocks)
    assert [b["total_usd"] for b in blocks] == sorted((b["total_usd"] for b in blocks), reverse=True)
    # input cost by hand: every observed input-equivalent at $3/M; each row is rounded to 1e-6 in the JSON
    assert sum(b["total_usd"] for b in blocks) == pytest.approx(OBSERVED_IE * USD_PER_IE, abs=len(blocks) * 5e-7)
    system = next(b for b in blocks if b["kind"] == "system text")
    assert system["first_request"] == "m1" and system["requests"] == 11  # though m3 re-chained it
    repo = blocks[0]
    assert repo["path"] == "messages[6].content[0]" and repo["first_request"] == "s1" and repo["requests"] == 3
    assert repo["write_usd"] == pytest.approx(3 * repo["tokens"] * 3.75e-6, rel=1e-6)  # written three times
    db = tmp_path / "k.duckdb"
    assert cli("db", "load", trace, "--db", db).exit_code == 0
    import duckdb
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("SELECT count(*), sum(cost_usd), max(cost_usd) FROM block_costs").fetchone()
        first = con.execute("SELECT first_request FROM block_costs WHERE kind = 'system text'").fetchone()
    assert rows[0] == len(blocks) and rows[1] == pytest.approx(OBSERVED_IE * USD_PER_IE, rel=1e-9)  # unrounded
    assert rows[2] == pytest.approx(repo["total_usd"], rel=1e-6) and first == ("m1",)


def test_diff_of_trace_records_uses_the_sizes_report_uses(cli, tmp_path):
    trace = tmp_path / "session.jsonl"
    write_trace(trace, session())
    data = json.loads(cli("diff", f"{trace}#m2", f"{trace}#m3", "--json").stdout)
    # m2's and m3's logged totals (read + write), not kvprobe's estimate of their text
    assert data["tokens"] == {"a": 9_300, "b": 10_660, "exact": False, "source": "anchored"}
    assert data["first_change"]["path"] == "tools[2]"
    assert data["first_change"]["token_position"] == pytest.approx(TOOLS["A"] + TOOLS["B"], rel=0.05)
    assert data["predicted"]["cache_write_tokens"] == 10_660


def test_report_and_fixed_trace_validate_against_the_shipped_schemas(cli, tmp_path):
    from jsonschema import Draft202012Validator

    from kvprobe.schemas import load_schema

    trace, fixed = tmp_path / "session.jsonl", tmp_path / "fixed.jsonl"
    write_trace(trace, session())
    data = json.loads(cli("report", trace, "--json").stdout)
    assert data["alternatives"] and any(d.get("siblings") for r in data["requests"] for d in r["diagnoses"])
    assert not list(Draft202012Validator(load_schema("report")).iter_errors(data))
    assert cli("fix", trace, "-o", fixed).exit_code == 0
    lines = [json.loads(line) for line in fixed.read_text().splitlines()]
    assert all("response" not in line and line["block_tokens"] for line in lines)
    validator = Draft202012Validator(load_schema("trace"))
    assert not [e for line in lines for e in validator.iter_errors(line)]


def test_database_holds_the_fixes_then_their_alternatives(cli, tmp_path):
    import duckdb

    original = tmp_path / "session.jsonl"
    write_trace(original, session())
    db = tmp_path / "kv.duckdb"
    loaded = cli("db", "load", original, "--db", db, "--json")
    assert loaded.exit_code == 0, loaded.output
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("SELECT fix_index, kind, chosen, saving_input_equivalent_tokens FROM fixes "
                           "ORDER BY fix_index").fetchall()
    chosen = [r for r in rows if r[2]]
    assert {r[1] for r in chosen} == set(SAVINGS) and [r[0] for r in chosen] == list(range(len(SAVINGS)))
    assert [r[3] for r in chosen] == sorted((r[3] for r in chosen), reverse=True)
    alternatives = [r for r in rows if not r[2]]
    assert [r[1] for r in alternatives] == ["shared_breakpoint"] and alternatives[0][0] == len(SAVINGS)


def test_html_page_lists_the_alternatives_and_says_the_cost_is_logged(cli, tmp_path):
    original = tmp_path / "session.jsonl"
    write_trace(original, session())
    page_path = tmp_path / "page.html"
    assert cli("html", original, "-o", page_path).exit_code == 0
    page = page_path.read_text()
    fixes = page[page.index('id="kv-fixes"'):page.index("</section>", page.index('id="kv-fixes"'))]
    assert fixes.count('<tr data-kind=') == len(SAVINGS)
    assert fixes.count('<tr class="alt" data-kind="shared_breakpoint">') == 1
    assert "instead of shared_breakpoint (stagger)" in fixes
    assert "Cost (logged usage)" in page
