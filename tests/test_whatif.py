"""What-if fixes: each kind proposed where it pays, with its saving reproduced by re-reporting the fixed
trace, and not proposed where it would not pay."""
from __future__ import annotations

import copy
import json

import pytest

from test_simulator_rules import EPH, claude, sizes, words
from kvprobe.pricing import PriceBook
from kvprobe.request.detect import infer_provider
from kvprobe.trace import TraceRecord, write_trace
from kvprobe.whatif.evaluate import evaluate
from whatif_oracle import records_priced


def rec(rid, start, body, first_token=None, session="s", agent="main"):
    r = TraceRecord(id=rid, provider=None, started_at=start, request=copy.deepcopy(body),
                    first_token_at=start + 1 if first_token is None else first_token, session=session, agent=agent)
    r.provider = infer_provider(r.request)
    return r


def fixes_of(records, kind):
    return [f for f in evaluate(records, PriceBook()).fixes if f.kind == kind]


def reproduce(cli, tmp_path, records, kind):
    """The saving of `kind`, checked the way a user would: fix the trace, report both, subtract."""
    original = tmp_path / "trace.jsonl"
    write_trace(original, records)
    fixed = tmp_path / "fixed.jsonl"
    summary = json.loads(cli("fix", original, "-o", fixed, "--kind", kind, "--json").stdout)
    [fix] = [f for f in summary["fixes"] if f["kind"] == kind]
    before = json.loads(cli("report", original, "--predicted", "--no-fixes", "--json").stdout)["totals"]
    after = json.loads(cli("report", fixed, "--no-fixes", "--json").stdout)["totals"]
    assert before["input_equivalent_tokens"] - after["input_equivalent_tokens"] == pytest.approx(
        fix["saving_input_equivalent_tokens"], abs=0.2)
    assert before["cost_usd"] - after["cost_usd"] == pytest.approx(fix["saving_usd"], abs=2e-6)
    return fix


def with_timestamp(stamp: str, turns: int = 1) -> dict:
    body = claude(turns=turns)
    body["system"][0]["text"] = f"Current time: {stamp}\n" + body["system"][0]["text"]
    return body


def test_stabilize_prefix_moves_the_timestamp_and_saves_exactly(cli, tmp_path):
    records = [rec(f"r{i}", 30 * i, with_timestamp(f"10:0{i}:00", turns=2 * i + 1)) for i in range(4)]
    fix = reproduce(cli, tmp_path, records, "stabilize_prefix")
    assert fix["requests"] == ["r1", "r2", "r3"] and "Current time: 10:03:00" in fix["detail"]
    fixed = [json.loads(line) for line in (tmp_path / "fixed.jsonl").read_text().splitlines()]
    assert not fixed[0]["request"]["system"][0]["text"].startswith("Current time")
    assert fixed[3]["request"]["messages"][-1]["content"][-1]["text"] == "Current time: 10:03:00"  # moved, kept
    # the moved line keeps its size: every request is as long as before, only cached differently
    sizes_of = [[r["input_tokens"] for r in json.loads(cli("report", f, "--no-fixes", "--json").stdout)["requests"]]
                for f in (tmp_path / "trace.jsonl", tmp_path / "fixed.jsonl")]
    assert sizes_of[0] == sizes_of[1]


def test_stabilize_prefix_not_proposed_below_the_minimum():
    records = []
    for i in range(3):
        body = claude(system_tokens=50)
        body["system"][0]["text"] = f"Now: {i}\nShort prompt."
        body["messages"][0]["content"][0]["text"] = "hi"
        records.append(rec(f"r{i}", 30 * i, body))
    assert fixes_of(records, "stabilize_prefix") == []


def test_stable_params_saves_exactly(cli, tmp_path):
    records = [rec("r0", 0, claude(turns=1)), rec("r1", 30, claude(turns=3, tool_choice={"type": "any"})),
               rec("r2", 60, claude(turns=5))]
    fix = reproduce(cli, tmp_path, records, "stable_params")
    # r1 flips tool_choice, r2 flips it back: both misses are what the policy removes
    assert fix["requests"] == ["r1", "r2"] and "tool_choice" in fix["detail"] and fix["edited_requests"] == 1


def test_stable_params_not_proposed_when_nothing_is_cacheable():
    small = claude(system_tokens=20)
    small["messages"][0]["content"][0]["text"] = "hi"
    records = [rec("r0", 0, small), rec("r1", 30, {**small, "tool_choice": {"type": "any"}})]
    assert fixes_of(records, "stable_params") == []


def test_keep_alive_pays_for_a_seven_minute_pause(cli, tmp_path):
    body = claude()
    records = [rec("r0", 0, body), rec("r1", 420, body)]
    fix = reproduce(cli, tmp_path, records, "keep_alive")
    system, total = sizes(body)
    # before: r1 rewrites everything (1.25 x); after: one ping reads it (0.1 x) and r1 reads it (0.1 x)
    assert fix["saving_input_equivalent_tokens"] == pytest.approx(total * 1.25 - total * 0.1 - total * 0.1, abs=0.2)
    assert fix["pings"] == 1


def test_keep_alive_not_proposed_when_pings_cost_more_than_the_rebuild():
    body = claude()
    records = [rec("r0", 0, body), rec("r1", 55 * 60, body)]  # 12 pings at 0.1x > one 1.25x rewrite
    assert fixes_of(records, "keep_alive") == []
    assert fixes_of([rec("r0", 0, body), rec("r1", 2 * 3600, body)], "keep_alive") == []  # > 1 h: never


def test_ttl_1h_pays_for_pauses_between_5_minutes_and_an_hour(cli, tmp_path):
    records = [rec(f"r{i}", 900 * i, claude(turns=2 * i + 1)) for i in range(4)]  # 15-minute pauses
    fix = reproduce(cli, tmp_path, records, "ttl_1h")
    assert fix["requests"] == ["r1", "r2", "r3"]


def test_ttl_1h_not_proposed_when_gaps_are_under_5_minutes():
    records = [rec(f"r{i}", 240 * i, claude(turns=2 * i + 1)) for i in range(4)]
    assert fixes_of(records, "ttl_1h") == [] and fixes_of(records, "keep_alive") == []


def test_lookback_breakpoint_reaches_the_previous_entry(cli, tmp_path):
    a, b = claude(), claude(extra_parts=24)
    fix = reproduce(cli, tmp_path, [rec("a", 0, a), rec("b", 10, b)], "lookback_breakpoint")
    assert fix["requests"] == ["b"] and "messages[0].content[0]" in fix["detail"]


def test_lookback_breakpoint_not_proposed_when_the_limit_of_4_is_used():
    a, b = claude(), claude(extra_parts=24)
    for i in (3, 8, 14):
        b["messages"][0]["content"][i]["cache_control"] = EPH  # with system and the last: 5 would be too many
    b["messages"][0]["content"][3].pop("cache_control")
    assert fixes_of([rec("a", 0, a), rec("b", 10, b)], "lookback_breakpoint") == []


def siblings(task_words: int) -> list[TraceRecord]:
    shared = claude(system_tokens=task_words)
    shared["messages"][0]["content"][0]["text"] = "Review one module each."
    out = []
    for i in range(3):
        body = copy.deepcopy(shared)
        body["messages"][0]["content"].append({"type": "text", "text": words(50, f"sub{i}"),
                                               "cache_control": EPH})
        out.append(rec(f"sub{i}", 0.1 * i, body, first_token=3 + 0.1 * i, agent=f"sub{i}"))
    return out


def test_shared_breakpoint_marks_the_common_prefix_and_staggers_siblings(cli, tmp_path):
    fix = reproduce(cli, tmp_path, siblings(3000), "shared_breakpoint")
    assert fix["requests"] == ["sub0", "sub1", "sub2"] and "(e.g. sub0, sub1, sub2) once the first" in fix["detail"]
    fixed = [json.loads(line) for line in (tmp_path / "fixed.jsonl").read_text().splitlines()]
    assert fixed[1]["started_at"] > fixed[0]["first_token_at"]


def test_shared_breakpoint_not_proposed_below_the_minimum():
    assert fixes_of(siblings(200), "shared_breakpoint") == []


def test_report_json_lists_fixes_and_with_all_fixes(cli):
    from conftest import ROOT
    data = json.loads(cli("report", ROOT / "traces" / "sample_session.jsonl", "--json").stdout)
    kinds = [f["kind"] for f in data["fixes"]]
    assert {"keep_alive", "stabilize_prefix", "stable_params"} <= set(kinds)
    for f in data["fixes"]:
        assert f["saving_input_equivalent_tokens"] > 0 and f["saving_usd"] > 0 and f["detail"]
    w = data["with_all_fixes"]
    assert w["token_hit_ratio"] > w["baseline_predicted"]["token_hit_ratio"]
    # one simulation with everything applied, not a sum of savings
    total_saving = w["baseline_predicted"]["input_equivalent_tokens"] - w["input_equivalent_tokens"]
    assert total_saving != pytest.approx(sum(f["saving_input_equivalent_tokens"] for f in data["fixes"]), abs=1)


def test_alternatives_for_one_pause_are_not_stacked(cli, tmp_path):
    """keep_alive and ttl_1h each pay for the same 7-minute pause; together they cost more than keep_alive
    alone, so only keep_alive is written and ttl_1h is offered as the alternative, with its price."""
    body = claude()
    records = [rec("r0", 0, body), rec("r1", 420, body)]
    _, total = sizes(body)
    trace = tmp_path / "pause.jsonl"
    write_trace(trace, records)
    data = json.loads(cli("report", trace, "--json").stdout)
    assert [f["kind"] for f in data["fixes"]] == ["keep_alive"]
    [alt] = data["alternatives"]
    # ttl_1h alone: r0 writes at 2x instead of 1.25x, r1 reads (0.1x) instead of rewriting (1.25x)
    assert alt["kind"] == "ttl_1h" and alt["instead_of"] == ["keep_alive"]
    assert alt["saving_input_equivalent_tokens"] == pytest.approx(total * (1.25 - 2.0 + 1.25 - 0.1), abs=0.2)
    keep = data["fixes"][0]["saving_input_equivalent_tokens"]
    assert keep > alt["saving_input_equivalent_tokens"]
    w = data["with_all_fixes"]
    assert w["baseline_predicted"]["input_equivalent_tokens"] - w["input_equivalent_tokens"] == pytest.approx(keep, abs=0.2)
    fixed = tmp_path / "fixed.jsonl"
    summary = json.loads(cli("fix", trace, "-o", fixed, "--json").stdout)
    assert [f["kind"] for f in summary["fixes"]] == ["keep_alive"] and summary["alternatives"][0]["kind"] == "ttl_1h"
    after = json.loads(cli("report", fixed, "--no-fixes", "--json").stdout)["totals"]
    assert after["input_equivalent_tokens"] == pytest.approx(w["input_equivalent_tokens"], abs=0.2)
    assert all("ttl" not in str(line.get("request", {}).get("system")) for line in
               (json.loads(x) for x in fixed.read_text().splitlines()))  # no 1h TTL was written


def test_policy_pricing_on_skeletons_equals_rendering_the_fixed_records_again():
    """Three sessions, two sharing a prompt: each policy is priced once on edited skeletons; rendering the
    records it writes and simulating them again gives the same saving, and its instances name the sessions
    whose cost it changed."""
    from kvprobe.whatif.evaluate import Pricer, prepare

    records = [rec("a0", 0, claude(turns=1), session="a"),
               rec("a1", 30, claude(turns=3, tool_choice={"type": "any"}), session="a"),
               rec("a2", 60, claude(turns=5), session="a"),
               rec("b0", 15, claude(turns=1), session="b"), rec("b1", 45, claude(turns=3), session="b")]
    own = claude(system_tokens=2500)
    records += [rec("c0", 0, own, session="c"), rec("c1", 420, own, session="c"),
                rec("c2", 450, claude(system_tokens=2500, turns=3), session="c")]
    result = evaluate(records, PriceBook())
    policies = result.fixes + result.alternatives
    assert sorted(p.kind for p in policies) == ["keep_alive", "stable_params", "ttl_1h"]
    pricer = Pricer(records, PriceBook(), prepare(records))
    base = sum(r.input_equivalent for r in pricer.baseline)
    for policy in policies:
        whole = base - sum(r.input_equivalent for r in records_priced(records, pricer.apply([policy])))
        assert policy.saving_input_equivalent_tokens == pytest.approx(whole, abs=0.01), policy.kind
        sessions = {i.session for i in policy.instances}
        # a and b share their prompt at the same time: holding a's tool_choice changes what b reads too
        assert sessions == ({"a", "b"} if policy.kind == "stable_params" else {"c"}), policy.kind
        assert sum(i.saving_ie for i in policy.instances) == pytest.approx(policy.saving_input_equivalent_tokens)


def test_a_tool_name_that_is_not_a_string_is_still_priced(cli, tmp_path):
    """A malformed log (a tool `name` that is a list) is reported, fixes included, not a crash."""
    from conftest import ROOT

    lines = (ROOT / "traces" / "sample_session.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["request"]["tools"][0]["name"] = ["read_file"]
    trace = tmp_path / "t.jsonl"
    trace.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    result = cli("report", trace, "--json", "--what-if")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["totals"]["requests"] == len(lines)


def test_fix_on_a_log_without_request_bodies_exits_2_and_writes_nothing(cli, tmp_path):
    from conftest import ROOT

    transcript = next((ROOT / "tests" / "fixtures" / "importers").rglob("*.jsonl"))
    out = tmp_path / "fixed.jsonl"
    res = cli("fix", transcript, "-o", out)
    assert res.exit_code == 2 and "none has a request body" in res.output and not out.exists()


def test_cache_domains_follow_the_lifetimes_in_force():
    """Two sessions of one prompt 10 minutes apart: with 5-minute entries nothing one writes is alive when the
    other starts (two domains); with 1h entries they are one domain. A third prompt is always its own."""
    from kvprobe.analysis.skeleton import BlockStore, skeletons
    from kvprobe.whatif.domains import add_spans, domains_of

    def spans(ttl: str | None):
        body = claude(turns=1)
        if ttl:
            for part in body["system"]:
                part["cache_control"] = {"type": "ephemeral", "ttl": ttl}
            body["messages"][-1]["content"][-1]["cache_control"] = {"type": "ephemeral", "ttl": ttl}
        records = [rec("a0", 0, body, session="a"), rec("a1", 30, body, session="a"),
                   rec("b0", 630, body, session="b"), rec("c0", 0, claude(system_tokens=2500), session="c")]
        return add_spans(list(skeletons(records, BlockStore())), {})
    assert domains_of({"a"}, spans(None)) == {"a"}  # a's last use at 30 s: its entries gone by 330 s
    assert domains_of({"a"}, spans("1h")) == {"a", "b"}  # alive until 3,630 s: b reads them at 630 s
    assert domains_of({"c"}, spans("1h")) == {"c"}


def test_a_claude_prefix_no_breakpoint_ends_is_marked_with_cache_control_in_every_request_that_carries_it():
    """b resends a's whole prompt (a 2,000-token system text and a 300-token question, sized by a's usage: 2,300
    fresh) and adds 240 tokens; neither marks anything. Marking the question's block (where the prefix they
    share ends): a writes 2,300 at 1.25 (+575) and b reads them at 0.1 instead of sending them fresh (-2,070):
    1,495 saved. The fixed bodies carry Anthropic's cache_control there, not OpenAI's prompt_cache_breakpoint,
    and the records the fix was made from are left as they were."""
    from test_rule_edges import A1, SYSTEM, U1, U2, part, request, usage
    from test_rule_edges import rec as logged

    ask = {"role": "user", "content": [part(U1, marked=False)]}
    records = [logged("a", 0, request(SYSTEM, [ask]), usage(fresh=2_300)),
               logged("b", 10, request(SYSTEM, [ask, {"role": "assistant", "content": [part(A1, marked=False)]},
                                                {"role": "user", "content": [part(U2, marked=False)]}]),
                      usage(fresh=2_540))]
    before = copy.deepcopy([r.request for r in records])
    whatif = evaluate(records, PriceBook())
    [fix] = whatif.fixes
    assert (fix.kind, fix.extra["path"]) == ("mark_breakpoint", "messages[0].content[0]")
    assert fix.saving_input_equivalent_tokens == pytest.approx(1_495, abs=0.5)
    assert (fix.key, fix.requests, fix.sessions, fix.cause_sessions) == ("shared-end", ["b"], {"s"}, 1)
    assert fix.detail == ("mark the end of the prefix the requests share but no breakpoint ends (e.g. "
                          "messages[0].content[0]) with cache_control, in 2 requests that carry it: the first writes "
                          "it, the later ones read it")
    for written in whatif.written_records():
        block = written.request["messages"][0]["content"][0]
        assert block["cache_control"] == {"type": "ephemeral"} and "prompt_cache_breakpoint" not in block
    assert [r.request for r in records] == before
