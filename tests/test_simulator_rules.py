"""Each caching rule checked on a trace written from the provider's documented behaviour.

Observed usage in these traces is written by hand from the rules (not by kvprobe); the simulator's
prediction must equal it, and no request may be left `unexplained`.
"""
from __future__ import annotations

import copy

import pytest

from kvprobe.catalog import rules_for
from kvprobe.report import build_report
from kvprobe.request import render_request
from kvprobe.tokens import TokenCounter
from kvprobe.trace import TraceRecord

EPH = {"type": "ephemeral"}


def words(n: int, seed: str = "lorem") -> str:
    return " ".join(f"{seed}{i % 50}" for i in range(n))


def claude(system_tokens: int = 3000, turns: int = 1, model: str = "claude-sonnet-4-5", system_ttl: str | None = None,
           extra_parts: int = 0, **extra) -> dict:
    sys_bp = {"type": "ephemeral", "ttl": system_ttl} if system_ttl else EPH
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": words(300, f"t{i}")} for i in range(turns)]
    parts = [{"type": "text", "text": words(40, f"p{j}")} for j in range(extra_parts)]
    last = msgs[-1]
    last["content"] = [{"type": "text", "text": last["content"]}] + parts
    last["content"][-1]["cache_control"] = EPH
    body = {"model": model, "max_tokens": 100,
            "system": [{"type": "text", "text": words(system_tokens), "cache_control": sys_bp}], "messages": msgs}
    body.update(extra)
    return body


def sizes(body: dict) -> tuple[int, int]:
    """(tokens through the system prompt, total tokens) of a request, by kvprobe's estimator.

    Claude's tokenizer is not public; these traces define the true sizes as the estimator's, so that the
    observed usage below is written purely from the documented rules.
    """
    req = render_request(body)
    TokenCounter(rules_for(req.provider, req.model)).count_request(req)
    through_system = sum(b.tokens for b in req.blocks if b.level != "messages")
    return through_system, req.total_tokens


def ant_usage(read=0, write=0, fresh=0, write_1h=0):
    return {"input_tokens": fresh, "cache_read_input_tokens": read, "cache_creation_input_tokens": write + write_1h,
            "cache_creation": {"ephemeral_5m_input_tokens": write, "ephemeral_1h_input_tokens": write_1h},
            "output_tokens": 10}


def rec(rid, start, body, usage, first_token=None, finished=None, session="s", agent="main"):
    return TraceRecord(id=rid, provider=None, started_at=start, request=copy.deepcopy(body),
                       response={"usage": usage}, first_token_at=start + 1 if first_token is None else first_token,
                       finished_at=finished, session=session, agent=agent)


def run(records):
    from kvprobe.request.detect import infer_provider
    for r in records:
        r.provider = infer_provider(r.request, None, r.response)
    return build_report([], records=records, top=0)


def assert_predictions_match(report):
    for r in report.results:
        p = r.predicted
        assert (p.cache_read_tokens, p.cache_write_5m_tokens, p.cache_write_1h_tokens) == (
            r.usage.cache_read_tokens, r.usage.cache_write_5m_tokens, r.usage.cache_write_1h_tokens), r.sk.id
        assert not [d for d in r.diagnoses if d.kind == "unexplained"], (r.sk.id, r.diagnoses)


def by_id(report):
    return {r.sk.id: r for r in report.results}


@pytest.mark.parametrize("gap, hit", [(295, True), (305, False)])
def test_ttl_counts_from_the_start_of_the_last_use(gap, hit):
    body = claude()
    first = rec("a", 0, body, ant_usage(write=4000), first_token=2, finished=180)  # ended 180 s in
    second = rec("b", gap, body, ant_usage(read=4000) if hit else ant_usage(write=4000))
    report = run([first, second])
    assert_predictions_match(report)
    b = by_id(report)["b"]
    if not hit:
        [d] = b.diagnoses
        assert d.kind == "ttl_expired" and d.seconds_past == pytest.approx(5)


def test_every_use_refreshes_the_ttl():
    body = claude()
    report = run([rec("a", 0, body, ant_usage(write=4000)), rec("b", 240, body, ant_usage(read=4000)),
                  rec("c", 480, body, ant_usage(read=4000))])  # 8 min after a, 4 after b
    assert_predictions_match(report)


@pytest.mark.parametrize("new_parts, hit", [(18, True), (19, True), (20, False)])
def test_lookback_window_of_20_positions(new_parts, hit):
    """The old end is at position new_parts + 1 counting the new breakpoint's block as 1."""
    a = claude()
    b = claude(extra_parts=new_parts)
    (system, ta), tb = sizes(a), sizes(b)[1]
    # past the window only the system prompt's own entry is found (by the system breakpoint)
    usage_b = ant_usage(read=ta, write=tb - ta) if hit else ant_usage(read=system, write=tb - system)
    report = run([rec("a", 0, a, ant_usage(write=ta)), rec("b", 10, b, usage_b)])
    assert_predictions_match(report)
    if not hit:
        kinds = [d.kind for d in by_id(report)["b"].diagnoses]
        assert kinds == ["lookback_exceeded"]
        assert by_id(report)["b"].diagnoses[0].positions_back == 21


def test_tool_runs_count_as_one_lookback_position():
    a = claude()
    b = copy.deepcopy(a)
    b["messages"][-1]["content"][-1].pop("cache_control")
    calls = [{"type": "tool_use", "id": f"t{i}", "name": "grep", "input": {"q": i}} for i in range(25)]
    results = [{"type": "tool_result", "tool_use_id": f"t{i}", "content": words(8, f"r{i}")} for i in range(25)]
    results[-1]["cache_control"] = EPH
    b["messages"] += [{"role": "assistant", "content": calls}, {"role": "user", "content": results}]
    ta, tb = sizes(a)[1], sizes(b)[1]
    report = run([rec("a", 0, a, ant_usage(write=ta)), rec("b", 10, b, ant_usage(read=ta, write=tb - ta))])
    assert_predictions_match(report)  # 50 blocks back, but only 3 positions


@pytest.mark.parametrize("total, cached", [(1023, False), (1024, True), (1025, True)])
def test_minimum_cacheable_length_plus_minus_one(total, cached):
    body = claude(system_tokens=700)
    body["system"][0].pop("cache_control")
    usage = ant_usage(write=total) if cached else ant_usage(fresh=total)
    report = run([rec("a", 0, body, usage)])
    assert_predictions_match(report)
    if not cached:
        assert report.results[0].diagnoses == [] or report.results[0].diagnoses[0].kind == "below_minimum"


def test_minimum_depends_on_the_model():
    body = claude(system_tokens=700, model="claude-haiku-4-5")  # 4096 minimum
    body["system"][0].pop("cache_control")
    report = run([rec("a", 0, body, ant_usage(fresh=3000)), rec("b", 10, body, ant_usage(fresh=3000))])
    assert_predictions_match(report)
    assert [d.kind for d in by_id(report)["b"].diagnoses] == ["below_minimum"]


def test_concurrent_siblings_all_miss_until_the_first_response_begins():
    body = claude()
    report = run([rec("a", 0, body, ant_usage(write=4000), first_token=3),
                  rec("b", 0.5, body, ant_usage(write=4000), first_token=3.5),
                  rec("c", 5, body, ant_usage(read=4000))])
    assert_predictions_match(report)
    [d] = by_id(report)["b"].diagnoses
    assert d.kind == "not_yet_readable" and d.writer_id == "a"


def test_tool_choice_change_keeps_tools_and_system():
    a = claude()
    b = claude(tool_choice={"type": "any"})
    system, total = sizes(a)
    report = run([rec("a", 0, a, ant_usage(write=total)),
                  rec("b", 10, b, ant_usage(read=system, write=total - system))])
    assert_predictions_match(report)
    assert [d.kind for d in by_id(report)["b"].diagnoses] == ["params_changed"]


@pytest.mark.parametrize("change", ["tools", "system", "model"])
def test_tools_system_and_model_changes(change):
    a = claude(tools=[{"name": "grep", "input_schema": {"type": "object"}}])
    b = copy.deepcopy(a)
    if change == "tools":
        b["tools"][0]["description"] = "search"
    elif change == "system":
        b["system"][0]["text"] = "Now: 10:01. " + b["system"][0]["text"]
    else:
        b["model"] = "claude-opus-4-1"
    report = run([rec("a", 0, a, ant_usage(write=4100)), rec("b", 10, b, ant_usage(write=4100))])
    assert_predictions_match(report)
    kinds = {d.kind for d in by_id(report)["b"].diagnoses}
    assert kinds == ({"params_changed"} if change == "model" else {"prefix_changed"})


def test_1h_entries_before_5m_ones_survive_a_10_minute_pause():
    body = claude(system_ttl="1h")
    system, total = sizes(body)
    report = run([rec("a", 0, body, ant_usage(write_1h=system, write=total - system)),
                  rec("b", 600, body, ant_usage(read=system, write=total - system))])
    assert_predictions_match(report)
    assert [d.kind for d in by_id(report)["b"].diagnoses] == ["ttl_expired"]


def openai(tokens_words: int, extra_words: int = 0, model: str = "gpt-4o") -> dict:
    msgs = [{"role": "system", "content": words(tokens_words)}]
    if extra_words:
        msgs.append({"role": "user", "content": words(extra_words, "q")})
    return {"model": model, "messages": msgs}


@pytest.mark.parametrize("first, cached", [(2000, 1920), (1000, 0), (1100, 1024)])
def test_openai_reads_round_down_to_128_above_1024(first, cached):
    a, b = openai(first), openai(first, 300)
    usage_a = {"prompt_tokens": first, "prompt_tokens_details": {"cached_tokens": 0}, "completion_tokens": 5}
    usage_b = {"prompt_tokens": first + 300, "prompt_tokens_details": {"cached_tokens": cached}, "completion_tokens": 5}
    report = run([rec("a", 0, a, usage_a), rec("b", 10, b, usage_b)])
    assert_predictions_match(report)
    assert by_id(report)["b"].usage.input_tokens == first + 300  # OpenAI's prompt_tokens includes cached


def test_deepseek_hit_and_miss_fields():
    a, b = openai(1000, model="deepseek-chat"), openai(1000, 200, model="deepseek-chat")
    report = run([rec("a", 0, a, {"prompt_tokens": 1000, "prompt_cache_hit_tokens": 0, "prompt_cache_miss_tokens": 1000}),
                  rec("b", 10, b, {"prompt_tokens": 1200, "prompt_cache_hit_tokens": 960, "prompt_cache_miss_tokens": 240})])
    assert_predictions_match(report)
    b_res = by_id(report)["b"]
    assert (b_res.usage.cache_read_tokens, b_res.usage.fresh_input_tokens) == (960, 240)


def test_mixed_providers_models_and_an_unknown_model():
    report = run([
        rec("c1", 0, claude(), ant_usage(write=4000), session="x"),
        rec("o1", 1, openai(2000), {"prompt_tokens": 2000, "prompt_tokens_details": {"cached_tokens": 0}}, session="y"),
        rec("c2", 5, claude(), ant_usage(read=4000), session="x"),
        rec("o2", 6, openai(2000, 100), {"prompt_tokens": 2100, "prompt_tokens_details": {"cached_tokens": 1920}}, session="y"),
        rec("u1", 7, claude(model="claude-future-9"), ant_usage(write=4000), session="z"),
    ])
    assert_predictions_match(report)
    assert report.unknown_models == ["anthropic/claude-future-9"]
    data = report.to_json()
    assert {r["id"]: r["model_known"] for r in data["requests"]}["u1"] is False
    assert set(data["sessions"]) == {"x", "y", "z"}
    assert data["totals"]["token_hit_ratio"] == round((4000 + 1920) / (4000 * 3 + 2000 + 2100), 4)


def test_observed_disagreement_is_unexplained():
    body = claude()
    report = run([rec("a", 0, body, ant_usage(write=4000)), rec("b", 10, body, ant_usage(write=4000))])
    [d] = by_id(report)["b"].diagnoses
    assert d.kind == "unexplained" and "predicted 4,000" in d.detail


def test_provider_reported_reason_wins():
    body = claude()
    usage = ant_usage(write=4000) | {"cache_miss_reason": "system_changed"}
    report = run([rec("a", 0, body, ant_usage(write=4000)), rec("b", 10, body, usage)])
    d = by_id(report)["b"].diagnoses[0]
    assert d.kind == "prefix_changed" and d.inferred is False
    # the current API returns it beside usage: {"diagnostics": {"cache_miss_reason": {"type": ...}}}
    b = rec("b", 10, body, ant_usage(write=4000))
    b.response["diagnostics"] = {"cache_miss_reason": {"type": "tools_changed", "cache_missed_input_tokens": 4000}}
    d = by_id(run([rec("a", 0, body, ant_usage(write=4000)), b]))["b"].diagnoses[0]
    assert d.kind == "prefix_changed" and d.inferred is False and "tools_changed" in d.detail


def test_gemini_bodies_render_and_reuse_implicitly():
    def gem(extra: str = "") -> dict:
        return {"systemInstruction": {"parts": [{"text": words(1500)}]},
                "contents": [{"role": "user", "parts": [{"text": "Summarise." + extra}]}]}
    a, b = gem(), gem(" Briefly.")
    report = run([TraceRecord(id="g1", provider="gemini", started_at=0, request=a,
                              endpoint="/v1beta/models/gemini-2.5-flash:generateContent"),
                  TraceRecord(id="g2", provider="gemini", started_at=10, request=b,
                              endpoint="/v1beta/models/gemini-2.5-flash:generateContent")])
    g1, g2 = report.results
    assert g1.sk.model == "gemini-2.5-flash" and g1.sk.request.blocks[0].path == "systemInstruction.parts[0]"
    assert g2.predicted.cache_read_tokens == g1.sk.request.blocks[0].tokens  # the system part, not the question


def test_openai_explicit_mode_caches_only_at_breakpoints():
    def body(question: str) -> dict:
        return {"model": "gpt-5.6", "prompt_cache_options": {"mode": "explicit"},
                "messages": [{"role": "system", "content": [{"type": "text", "text": words(2000),
                                                             "prompt_cache_breakpoint": {}}]},
                             {"role": "user", "content": question}]}
    report = run([rec("e1", 0, body("one?"), {"input_tokens": 10}), rec("e2", 60, body("two?"), {"input_tokens": 10}),
                  rec("e3", 60 + 1801, body("three?"), {"input_tokens": 10})])
    e1, e2, e3 = report.results
    system = e1.sk.request.blocks[0].tokens
    assert e1.predicted.cache_write_tokens == system and e1.predicted.cache_read_tokens == 0
    assert e2.predicted.cache_read_tokens == system  # exact, no 128-token rounding at a breakpoint
    assert e3.predicted.cache_read_tokens == 0  # 30 minutes after the last use: expired


def test_gemini_explicit_context_cache_reads_until_its_ttl_and_bills_storage():
    create_body = {"model": "models/gemini-2.5-pro", "ttl": "600s",
                   "systemInstruction": {"parts": [{"text": words(3000)}]},
                   "contents": [{"role": "user", "parts": [{"text": words(1000, "doc")}]}]}
    create = TraceRecord(id="c1", provider=None, started_at=0, request=create_body,
                         endpoint="/v1beta/cachedContents",
                         response={"name": "cachedContents/abc", "usageMetadata": {"totalTokenCount": 8000}})

    def ask(rid: str, t: float, read: int) -> TraceRecord:
        body = {"cachedContent": "cachedContents/abc", "contents": [{"role": "user", "parts": [{"text": "Q?"}]}]}
        return TraceRecord(id=rid, provider=None, started_at=t, request=body,
                           endpoint="/v1beta/models/gemini-2.5-pro:generateContent",
                           response={"usageMetadata": {"promptTokenCount": read + 4, "cachedContentTokenCount": read,
                                                       "candidatesTokenCount": 5}})
    report = run([create, ask("q1", 60, 8000), ask("q2", 700, 0)])
    c1, q1, q2 = report.results
    tokens = c1.predicted.cache_write_tokens
    assert c1.sk.model == "gemini-2.5-pro" and tokens > 0
    assert q1.predicted.cache_read_tokens == tokens
    assert q2.predicted.cache_read_tokens == 0 and [d.kind for d in q2.diagnoses] == ["ttl_expired"]
    assert tokens == 8000 and c1.usage.cache_write_tokens == 8000  # sized from the creation's token count
    storage = report.to_json()["requests"][0]["storage_usd"]
    assert storage == pytest.approx(tokens * (600 / 3600) * 4.5 / 1e6, rel=1e-6)  # Pro: $4.50 per Mtok-hour
