"""Task economics: block attribution, compaction, cost per accepted task, compare."""
from __future__ import annotations

import copy
import json
import math

import pytest

from test_simulator_rules import EPH, ant_usage, claude, rec, sizes, words
from kvprobe.economics.attribution import attribute
from kvprobe.economics.tasks import Outcome
from kvprobe.pricing import PriceBook
from kvprobe.report import build_report
from kvprobe.request.detect import infer_provider
from kvprobe.trace import write_trace


def run(records, **kw):
    for r in records:
        r.provider = infer_provider(r.request, None, r.response)
    return build_report([], records=records, top=0, fixes=False, **kw)


def growing_session(n: int, session: str = "s", start: float = 0.0, big_result: int = 0):
    """An agent session whose history grows by a tool round trip per request (observed = rule usage)."""
    records, prev_total = [], 0
    body = claude(turns=1)
    for i in range(n):
        if i:
            body = copy.deepcopy(body)
            body["messages"][-1]["content"][-1].pop("cache_control")
            size = big_result if (i == 1 and big_result) else 200
            body["messages"] += [
                {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "grep", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}",
                                              "content": words(size, f"r{i}"), "cache_control": EPH}]}]
        total = sizes(body)[1]
        usage = ant_usage(read=prev_total, write=total - prev_total)
        records.append(rec(f"{session}-{i}", start + 20 * i, body, usage, session=session))
        prev_total = total
    return records


def test_block_attribution_sums_to_the_input_cost_exactly():
    report = run(growing_session(6, big_result=3000))
    prices = PriceBook()
    costs = attribute(report.results, prices)
    attributed = sum(b.total_usd for b in costs.values())
    input_cost = 0.0
    for r in report.results:
        units = prices.unit_prices(r.sk.provider, r.sk.model, r.sk.started_at, r.usage.input_tokens)
        input_cost += r.cost_usd - r.usage.output_tokens * units["output"]
    assert attributed == pytest.approx(input_cost, rel=1e-9)
    big = next(b for b in costs.values() if b.kind == "tool result" and b.tokens > 2000)
    assert big.requests == 5 and big.first_request == "s-1"
    assert big.write_usd > 0 and big.read_usd > 0
    data = report.to_json()
    assert any(b["note"] and "carried through 4 later requests" in b["note"] for b in data["blocks"])


def test_compaction_is_found_and_its_break_even_computed():
    records = growing_session(8, big_result=6000)
    last = records[-1].request
    summary_request = copy.deepcopy(last)
    summary_request["messages"][-1]["content"][-1].pop("cache_control")
    summary_request["messages"].append({"role": "user", "content": [{"type": "text", "text": "Summarise the work so far.",
                                                                     "cache_control": EPH}]})
    s_total = sizes(summary_request)[1]
    prev_total = sizes(last)[1]
    records.append(rec("s-8", 200, summary_request, ant_usage(read=prev_total, write=s_total - prev_total)))
    compacted = claude(turns=1)
    compacted["messages"][0]["content"][0]["text"] = "Summary: " + words(150, "sum")
    c_total = c_total_first = sizes(compacted)[1]
    system = sizes(compacted)[0]
    records.append(rec("s-9", 220, compacted, ant_usage(read=system, write=c_total - system)))
    for k in range(3):
        more = copy.deepcopy(compacted)
        more["messages"][-1]["content"][-1].pop("cache_control")
        more["messages"] += [{"role": "assistant", "content": f"step {k}"},
                             {"role": "user", "content": [{"type": "text", "text": f"go {k}", "cache_control": EPH}]}]
        compacted = more
        total = sizes(more)[1]
        records.append(rec(f"s-{10 + k}", 240 + 20 * k, more, ant_usage(read=c_total, write=total - c_total)))
        c_total = total
    report = run(records)
    [comp] = report.compactions
    j = comp.to_json()
    assert (j["summary_request"], j["rebuild_request"]) == ("s-8", "s-9")
    assert j["tokens_before"] == s_total and j["later_requests"] == 3
    assert j["tokens_after"] == c_total_first
    # By hand, at Sonnet 4.5's list prices (USD per million: fresh 3, 5m write 3.75, read 0.30, output 15):
    # each later turn reads the compacted prompt instead of the whole history; the summary request costs its
    # read, its write and its 10 output tokens; the rebuild pays its write over a plain read of its input.
    per_turn = (s_total - c_total_first) * 0.30 / 1e6
    summary = (prev_total * 0.30 + (s_total - prev_total) * 3.75 + 10 * 15) / 1e6
    rebuild_premium = (c_total_first - system) * (3.75 - 0.30) / 1e6
    assert j["per_turn_saving_usd"] == pytest.approx(per_turn, abs=1e-6)
    assert j["overhead_usd"] == pytest.approx(summary + rebuild_premium, abs=1e-6)
    assert j["break_even_turns"] == math.ceil((summary + rebuild_premium) / per_turn)


def test_cost_per_accepted_task_counts_failed_tasks_in_the_numerator(tmp_path):
    records = growing_session(3, "t1") + growing_session(3, "t2", 100) + growing_session(2, "t3", 200)
    outcomes = {"t1": Outcome(True), "t2": Outcome(False), "t3": Outcome(True)}
    data = run(records, outcomes=outcomes).to_json()
    totals = data["task_totals"]
    costs = {t["task"]: t["cost_usd"] for t in data["tasks"]}
    assert totals["pass_rate"] == pytest.approx(2 / 3, abs=1e-4)
    assert totals["cost_per_accepted_task_usd"] == pytest.approx(sum(costs.values()) / 2, abs=1e-5)
    assert totals["median_duration_s"] is not None


def test_outcomes_file_and_bad_lines(cli, tmp_path):
    trace = tmp_path / "t.jsonl"
    write_trace(trace, growing_session(2, "t1") + growing_session(2, "t2", 100))
    outcomes = tmp_path / "o.jsonl"
    outcomes.write_text('{"task": "t1", "passed": true}\n{"task": "t2", "passed": false, "duration_s": 30}\n')
    data = json.loads(cli("report", trace, "--json", "--outcomes", outcomes).stdout)
    assert data["task_totals"]["passed"] == 1
    assert {t["task"]: t["duration_s"] for t in data["tasks"]}["t2"] == 30
    outcomes.write_text('{"task": "t1", "passed": "yes"}\n')
    res = cli("report", trace, "--outcomes", outcomes)
    assert res.exit_code == 2 and "o.jsonl:1" in res.output and "passed" in res.output


def test_compare_reports_a_cheaper_task_and_a_regressed_one(cli, tmp_path):
    base = growing_session(4, "cheaper") + growing_session(4, "worse", 100)
    cand_cheaper = growing_session(2, "cheaper")
    cand_worse = growing_session(4, "worse", 100)
    for r in cand_worse[1:]:  # the cache now misses every time: a timestamp crept into the system prompt
        r.request["system"][0]["text"] = f"Now {r.id}\n" + r.request["system"][0]["text"]
        total = sizes(r.request)[1]
        r.response = {"usage": ant_usage(write=total)}
    a, b = tmp_path / "base.jsonl", tmp_path / "cand.jsonl"
    write_trace(a, base)
    write_trace(b, cand_cheaper + cand_worse)
    data = json.loads(cli("compare", a, b, "--json").stdout)
    assert data["improved"] == ["cheaper"] and data["regressed"] == ["worse"]
    worse = next(t for t in data["tasks"] if t["task"] == "worse")
    assert "cost_usd" in worse["regressed"] and "prefix_changed" in worse["new_diagnoses"]
    md = cli("compare", a, b, "--markdown").output
    assert "**Regressed tasks**" in md and "| worse |" in md


def test_a_side_call_on_another_model_is_no_compaction():
    """aider's commit-message call (a small model, its own short prompt) after the main model's calls, as an
    OpenAI Chat agent sends it: the system prompt is messages[0], so the prompts differ at the messages level
    and the side call is far smaller, but it is another model's cache, not the conversation compacted."""
    system = {"role": "system", "content": words(1500, "sys")}
    main = {"model": "gpt-4.1", "messages": [system, {"role": "user", "content": words(600, "ask")}]}
    more = copy.deepcopy(main)
    more["messages"] += [{"role": "assistant", "content": words(200, "edit")},
                         {"role": "user", "content": words(300, "ok")}]
    side = {"model": "gpt-4.1-mini", "messages": [{"role": "system", "content": "Write a one-line commit message."},
                                                  {"role": "user", "content": words(80, "diff")}]}
    records = [rec("m1", 0, main, {"prompt_tokens": sizes(main)[1], "completion_tokens": 10}),
               rec("m2", 20, more, {"prompt_tokens": sizes(more)[1], "completion_tokens": 10,
                                    "prompt_tokens_details": {"cached_tokens": 1792}}),
               rec("c3", 40, side, {"prompt_tokens": sizes(side)[1], "completion_tokens": 10})]
    assert sizes(side)[1] < 0.7 * sizes(more)[1]  # small enough that a same-model request would be a compaction
    assert run(records).compactions == []


def test_a_tail_past_the_last_breakpoint_is_named_but_not_worth_a_fix():
    """Cline CLI 3 marks only the user's prompt: inside a turn's tool loop the tool call and its result follow
    the last breakpoint. r1 marks the system and the prompt and writes them; r2 adds an unmarked tool round
    trip of ~40 tokens and reads r1's entry only: the rules predict exactly that read. It is no breakpoint at
    the end of reused content (not "unexplained"), and too small a span to be worth a fix of its own."""
    first = claude(system_tokens=3000, turns=1)
    total1 = sizes(first)[1]
    second = copy.deepcopy(first)
    second["messages"] += [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read_files", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": words(30, "r")}]}]
    third = copy.deepcopy(second)
    third["messages"] += [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t2", "name": "read_files", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2", "content": words(30, "s")}]}]
    total2, total3 = sizes(second)[1], sizes(third)[1]
    records = [rec("r1", 0, first, ant_usage(write=total1)),
               rec("r2", 5, second, ant_usage(read=total1, fresh=total2 - total1)),
               rec("r3", 10, third, ant_usage(read=total1, fresh=total3 - total1))]
    for r in records:
        r.provider = infer_provider(r.request, None, r.response)
    report = build_report([], records=records, top=0)
    r3 = report.results[2]
    assert [d.kind for d in r3.diagnoses] == ["missing_breakpoint"]
    assert f"read {total1:,}" in r3.diagnoses[0].detail
    assert not any(f["kind"] == "mark_breakpoint" for f in report.fixes + report.alternatives)


def test_a_new_conversation_in_one_stream_is_named_and_a_changed_first_message_is_not():
    """An agent's tasks captured one after another in one session: the third request starts another conversation
    (its first message is another task's and its history does not go on), so only the tools and system could be
    read; a date rewritten into the first message of a conversation that goes on is a change of that text."""
    def convo(seed: str, turns: int) -> dict:
        body = claude(system_tokens=3000, turns=turns)
        for i, m in enumerate(body["messages"]):
            if isinstance(m["content"], str):
                m["content"] = words(300, f"{seed}{i}")
            else:
                m["content"][0]["text"] = words(300, f"{seed}{i}")
        return body

    a1, a3, b1 = convo("a", 1), convo("a", 3), convo("b", 1)
    system = sizes(a1)[0]
    records = [rec("r1", 0, a1, ant_usage(write=sizes(a1)[1])),
               rec("r2", 10, a3, ant_usage(read=sizes(a1)[1], write=sizes(a3)[1] - sizes(a1)[1])),
               rec("r3", 20, b1, ant_usage(read=system, write=sizes(b1)[1] - system))]
    for r in records:
        r.provider = infer_provider(r.request, None, r.response)
    new = [d for d in build_report([], records=records, top=0, fixes=False).results[2].diagnoses
           if d.kind == "prefix_changed"]
    assert [(d.change, d.token_position) for d in new] == [("restarted", system)]
    assert "another conversation" in new[0].detail and "cache_control" in new[0].advice

    dated = convo("a", 3)
    dated["messages"][0]["content"] = "Today is Friday. " + words(300, "a0")  # (not the last: a plain string)
    records = [rec("d1", 0, a3, ant_usage(write=sizes(a3)[1])),
               rec("d2", 10, dated, ant_usage(read=system, write=sizes(dated)[1] - system))]
    for r in records:
        r.provider = infer_provider(r.request, None, r.response)
    changed = [d for d in build_report([], records=records, top=0, fixes=False).results[1].diagnoses
               if d.kind == "prefix_changed"]
    assert [d.change for d in changed] == [None]
