"""GPT-5.6+ prompt caching as OpenAI publishes it, and the other providers' simulators of this rule update.

Block sizes are set by hand on the rendered requests, so every expected figure below is arithmetic on
those sizes and the published rules (write 1.25x, reads only at breakpoints, four writes per request, a
30-minute life, 1,024-token minimum), not kvprobe's tokenizer.
"""
from __future__ import annotations

import json

import pytest

from kvprobe.analysis.costing import input_equivalent
from kvprobe.catalog import rules_for
from kvprobe.report import build_report
from kvprobe.request import render_request
from kvprobe.sim import cache_for
from kvprobe.trace import TraceRecord
from kvprobe.usage import Usage

DEV = "You are Codex, a coding agent. " * 50  # the text is irrelevant: sizes are set by hand


def sized(body: dict, tokens: list[int], **kw):
    req = render_request(body, **kw)
    assert len(req.blocks) == len(tokens), [b.path for b in req.blocks]
    for block, n in zip(req.blocks, tokens):
        block.tokens = n
    return req


class Sim:
    """Requests through one simulated cache, as analysis.simulate drives it."""

    def __init__(self):
        self.caches = {}

    def send(self, req, at: float, rid: str, platform: str | None = None):
        rules = rules_for(req.provider, req.model, platform, req.cache_mode)
        cache = self.caches.setdefault((req.provider, platform, req.cache_mode in ("managed", "explicit")),
                                       cache_for(req.cache_mode))
        return cache.process(req, rules, rid, at, at + 1)


class OneCache:
    """Requests through one given cache (its evidence on), the start time and readable time given."""

    def __init__(self, cache) -> None:
        self.cache = cache

    def send(self, req, at: float, rid: str, readable_at: float | None = None):
        rules = rules_for(req.provider, req.model, None, req.cache_mode)
        return self.cache.process(req, rules, rid, at, at + 1 if readable_at is None else readable_at)


def evidence(pred) -> list[tuple]:
    """What a prediction's evidence says, field by field."""
    return [(e.kind, e.block_index, e.seconds_past, e.writer_id) for e in pred.evidence]


def responses(user: str, model: str = "gpt-5.6-sol", dev_marker: bool = False, mode: str | None = None,
              history: list | None = None, dev_text: str = DEV) -> dict:
    dev = {"type": "input_text", "text": dev_text}
    if dev_marker:
        dev["prompt_cache_breakpoint"] = {"mode": "explicit"}
    body = {"model": model, "prompt_cache_key": "repo-42",
            "input": [{"role": "developer", "content": [dev]}, *(history or []),
                      {"role": "user", "content": [{"type": "input_text", "text": user}]}]}
    if mode:
        body["prompt_cache_options"] = {"mode": mode}
    return body


def test_a_stable_prefix_with_a_changing_suffix_misses_entirely_on_gpt_5_6():
    """openai/codex#35300: the same ~9k-token developer prefix and prompt_cache_key, only the final user
    message changed: 0% hits, because the managed breakpoint sits after the changing message."""
    sim = Sim()
    first = sim.send(sized(responses("Fix the login bug."), [9000, 40]), 0, "r1")
    second = sim.send(sized(responses("Now add a test for it."), [9000, 55]), 60, "r2")
    assert (first.cache_read_tokens, first.cache_write_tokens) == (0, 9040)  # written at the managed breakpoint
    assert (second.cache_read_tokens, second.cache_write_tokens, second.fresh_input_tokens) == (0, 9055, 0)
    [ev] = [e for e in second.evidence if e.kind == "missing_breakpoint"]
    assert (ev.block_index, ev.prefix_tokens, ev.writer_id) == (0, 9000, "r1")  # where a breakpoint belongs
    assert "input[0].content[0]" in ev.detail and "input[1].content[0]" in ev.detail


def test_before_gpt_5_6_the_same_prefix_is_read_in_128_token_steps():
    sim = Sim()
    sim.send(sized(responses("Fix the login bug.", model="gpt-5.5"), [9000, 40]), 0, "r1")
    second = sim.send(sized(responses("Now add a test for it.", model="gpt-5.5"), [9000, 55]), 60, "r2")
    assert (second.cache_read_tokens, second.cache_write_tokens) == (8960, 0)  # 9000 // 128 * 128, no write fee
    assert not [e for e in second.evidence if e.kind == "missing_breakpoint"]


def test_an_explicit_breakpoint_at_the_stable_boundary_makes_it_readable_exactly():
    sim = Sim()
    first = sim.send(sized(responses("Fix the login bug.", dev_marker=True), [9000, 40]), 0, "r1")
    second = sim.send(sized(responses("Now add a test for it.", dev_marker=True), [9000, 55]), 60, "r2")
    assert first.cache_write_tokens == 9040  # two entries: the marked prefix (9000) and the managed one (+40)
    assert (second.cache_read_tokens, second.cache_write_tokens, second.fresh_input_tokens) == (9000, 55, 0)
    assert not second.evidence


def test_a_growing_conversation_reads_the_previous_managed_entry():
    sim = Sim()
    sim.send(sized(responses("Fix the login bug."), [9000, 40]), 0, "r1")
    answer = {"role": "assistant", "content": [{"type": "output_text", "text": "Done: see the diff."}]}
    turn2 = responses("Add a test.", history=[{"role": "user", "content": [{"type": "input_text",
                                                                             "text": "Fix the login bug."}]},
                                               answer])
    pred = sim.send(sized(turn2, [9000, 40, 300, 20]), 60, "r2")
    assert (pred.cache_read_tokens, pred.cache_write_tokens) == (9040, 320)


def test_explicit_mode_without_a_breakpoint_caches_nothing_and_writes_at_most_four():
    sim = Sim()
    bare = sim.send(sized(responses("Fix it.", mode="explicit"), [9000, 40]), 0, "r1")
    assert (bare.cache_read_tokens, bare.cache_write_tokens, bare.fresh_input_tokens) == (0, 0, 9040)
    parts = [{"type": "input_text", "text": f"part {i}", "prompt_cache_breakpoint": {"mode": "explicit"}}
             for i in range(5)]
    body = {"model": "gpt-6.1-terra", "prompt_cache_options": {"mode": "explicit"},
            "input": [{"role": "user", "content": parts}]}
    five = sim.send(sized(body, [1200, 100, 100, 100, 100]), 10, "r2")
    # the latest four markers are written; the first (1,200 tokens) is not: 1,600 - 0 from the last write down
    assert five.cache_write_tokens == 1600 and five.cache_read_tokens == 0


def test_entries_live_30_minutes_after_their_last_use_and_the_minimum_is_1024():
    sim = Sim()
    sim.send(sized(responses("Q1", dev_marker=True), [2000, 10]), 0, "r1")
    assert sim.send(sized(responses("Q2", dev_marker=True), [2000, 10]), 1700, "r2").cache_read_tokens == 2000
    late = sim.send(sized(responses("Q3", dev_marker=True), [2000, 10]), 1700 + 1801, "r3")
    assert late.cache_read_tokens == 0 and [e.kind for e in late.evidence][:1] == ["ttl_expired"]
    small = Sim().send(sized(responses("Q", dev_marker=True), [1000, 23]), 0, "s1")
    assert (small.cache_write_tokens, small.evidence[0].kind) == (0, "below_minimum")  # 1,023 < 1,024
    just = Sim().send(sized(responses("Q", dev_marker=True), [1000, 30]), 0, "s2")
    assert just.cache_write_tokens == 1030  # the marked 1,000 tokens are under the minimum: only the managed one


def test_writes_cost_1_25x_on_gpt_5_6_and_nothing_before():
    usage = Usage(input_tokens=10_000, cache_read_tokens=6_000, cache_write_5m_tokens=4_000)
    assert input_equivalent(usage, rules_for("openai", "gpt-5.6-sol", None, "managed")) == 6000 * 0.1 + 4000 * 1.25
    assert input_equivalent(usage, rules_for("openai", "gpt-6.1-sol", None, "managed")) == 6000 * 0.05 + 4000 * 1.25
    assert input_equivalent(Usage(10_000, 6_000), rules_for("openai", "gpt-4o")) == 4000 + 6000 * 0.5


def test_the_report_turns_the_evidence_into_a_missing_breakpoint_diagnosis():
    def record(rid: str, at: float, user: str) -> TraceRecord:
        return TraceRecord(id=rid, provider="openai", started_at=at, request=responses(user, dev_text=DEV * 6),
                           endpoint="/v1/responses", session="codex")
    report = build_report([], records=[record("r1", 0, "Fix the login bug."), record("r2", 60, "Add a test.")],
                          top=0)
    r2 = report.results[1]
    dev_tokens = r2.sk.request.blocks[0].tokens
    assert dev_tokens > 1024
    assert r2.predicted.cache_read_tokens == 0 and r2.missed_tokens >= dev_tokens
    kinds = {d.kind: d for d in r2.diagnoses}
    assert "missing_breakpoint" in kinds and kinds["missing_breakpoint"].prefix_tokens == dev_tokens
    assert kinds["missing_breakpoint"].path == "input[0].content[0]"


# --- the other providers of this update -------------------------------------------------------------------

def chat(model: str, user: str, **extra) -> dict:
    return {"model": model, "messages": [{"role": "system", "content": DEV}, {"role": "user", "content": user}],
            **extra}


def test_mistral_reads_64_token_blocks_and_its_own_example_says_16():
    """docs.mistral.ai: 'cached_tokens is a multiple of 64'; its example response: 1,008 of 1,013."""
    sim = Sim()
    sim.send(sized(chat("mistral-large-latest", "My API request returns a 401 error."), [1000, 13]), 0, "m1")
    again = sim.send(sized(chat("mistral-large-latest", "My API request returns a 401 error."), [1000, 13]),
                     5, "m2")
    assert again.cache_read_tokens == 960  # 1,012 (the last token is always computed) // 64 * 64
    rules = rules_for("mistral", "mistral-large-latest")
    assert rules.rule("cached_token_step").alternatives == (16,)
    from kvprobe.sim.implicit import round_cached
    assert 1012 // 16 * 16 == 1008  # the alternative reproduces the page's own figure
    assert round_cached(1012, rules, 1013) == 960


def test_xai_caches_per_conversation_id_and_its_example_reads_98_of_125():
    sim = Sim()
    heads = {"x-grok-conv-id": "conv_abc123"}
    sim.send(sized(chat("grok-4.20-reasoning", "What is prompt caching?"), [98, 27], headers=heads), 0, "x1")
    same = sim.send(sized(chat("grok-4.20-reasoning", "And why?"), [98, 27], headers=heads), 5, "x2")
    other = sim.send(sized(chat("grok-4.20-reasoning", "And why?"), [98, 27],
                           headers={"x-grok-conv-id": "conv_other"}), 6, "x3")
    assert same.cache_read_tokens == 98  # usage & pricing page: prompt_tokens 125, cached_tokens 98
    assert other.cache_read_tokens == 0  # another conversation id routes to another server's cache


def test_qwen_explicit_cache_reads_a_marked_block_within_20_blocks_and_implicit_at_0_2():
    marked = {"type": "text", "text": DEV, "cache_control": {"type": "ephemeral"}}

    def body(user: str) -> dict:
        return {"model": "qwen3-max", "messages": [{"role": "system", "content": [marked]},
                                                   {"role": "user", "content": [{"type": "text", "text": user,
                                                                                 "cache_control": {"type": "ephemeral"}}]}]}
    sim = Sim()
    first = sim.send(sized(body("Summarise chapter 1."), [1500, 20]), 0, "q1")
    second = sim.send(sized(body("Summarise chapter 2."), [1500, 25]), 60, "q2")
    assert (first.cache_write_tokens, second.cache_read_tokens, second.cache_write_tokens) == (1520, 1500, 25)
    explicit = rules_for("qwen", "qwen3-max", None, "breakpoints")
    implicit = rules_for("qwen", "qwen3-max")
    assert (explicit.get("read_multiplier"), explicit.get("write_multipliers")["5m"]) == (0.1, 1.25)
    assert (implicit.get("read_multiplier"), implicit.get("min_cacheable_tokens")) == (0.2, 256)
    assert input_equivalent(Usage(1525, 1500, 25), explicit) == 1500 * 0.1 + 25 * 1.25


def test_deepseek_anthropic_endpoint_ignores_cache_control_and_user_id_isolates():
    body = {"model": "deepseek-v4-pro", "max_tokens": 100,
            "system": [{"type": "text", "text": DEV, "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": "Hi"}]}
    req = render_request(body, endpoint="/anthropic/v1/messages")
    assert (req.provider, req.cache_mode, req.breakpoints) == ("deepseek", "implicit", [])
    sim = Sim()
    sim.send(sized(chat("deepseek-v4-pro", "Q1", user_id="alice"), [2000, 5]), 0, "d1")
    alice = sim.send(sized(chat("deepseek-v4-pro", "Q2", user_id="alice"), [2000, 5]), 10, "d2")
    bob = sim.send(sized(chat("deepseek-v4-pro", "Q2", user_id="bob"), [2000, 5]), 11, "d3")
    assert (alice.cache_read_tokens, bob.cache_read_tokens) == (1984, 0)  # 64-token units; bob's cache is apart


def test_openrouter_ends_sticky_routing_after_10_idle_minutes_and_translates_cache_control():
    body = {"model": "anthropic/claude-sonnet-4.5", "messages": [
        {"role": "system", "content": [{"type": "text", "text": DEV,
                                        "cache_control": {"type": "ephemeral", "ttl": "1h"}}]},
        {"role": "user", "content": "Hi"}]}
    endpoint = "https://openrouter.ai/api/v1/chat/completions"
    req = render_request(body, endpoint=endpoint)
    assert (req.provider, req.cache_mode, req.breakpoints) == ("anthropic", "breakpoints", [(0, "1h")])
    routed, direct = Sim(), Sim()
    for sim, platform in ((routed, "openrouter"), (direct, None)):
        sim.send(sized(body, [3000, 2], endpoint=endpoint), 0, "o1", platform)
    late_routed = routed.send(sized(body, [3000, 2], endpoint=endpoint), 11 * 60, "o2", "openrouter")
    late_direct = direct.send(sized(body, [3000, 2], endpoint=endpoint), 11 * 60, "o2", None)
    assert (late_routed.cache_read_tokens, late_direct.cache_read_tokens) == (0, 3000)
    gpt = {"model": "openai/gpt-5.6-sol", "prompt_cache_options": {"mode": "explicit"}, "messages": [
        {"role": "system", "content": [{"type": "text", "text": DEV, "cache_control": {"type": "ephemeral"}}]},
        {"role": "user", "content": "Hi"}]}
    translated = render_request(gpt, endpoint=endpoint)
    assert (translated.provider, translated.cache_mode, translated.breakpoints) == (
        "openai", "explicit", [(0, "explicit")])
    plain = render_request(gpt, endpoint="/v1/chat/completions")
    assert plain.breakpoints == []  # OpenAI itself does not read cache_control


@pytest.mark.parametrize("model, step", [("kimi-k3", 1), ("kimi-for-coding", 256)])
def test_moonshot_prefix_cache_and_the_coding_endpoints_256_token_chunks(model, step):
    sim = Sim()
    sim.send(sized(chat(model, "Q1"), [1000, 5]), 0, "k1")
    again = sim.send(sized(chat(model, "Q2"), [1000, 5]), 10, "k2")
    assert again.cache_read_tokens == 1000 // step * step


def test_diff_shows_the_managed_breakpoint_and_predicts_no_read(cli, write_json):
    a = write_json("a.json", responses("Fix the login bug.", dev_text=DEV * 6))
    b = write_json("b.json", responses("Add a test.", dev_text=DEV * 6))
    data = json.loads(cli("diff", a, b, "--json").stdout)
    assert [(bp["path"], bp["ttl"], bp["reusable"]) for bp in data["breakpoints"]] == [
        ("input[1].content[0]", "managed", False)]
    assert data["predicted"]["cache_read_tokens"] == 0
    marked = write_json("c.json", responses("Add a test.", dev_text=DEV * 6, dev_marker=True))
    data = json.loads(cli("diff", a, marked, "--json").stdout)
    assert [bp["ttl"] for bp in data["breakpoints"]] == ["explicit", "managed"]


def codex_turns(chat: bool = False, mode: str | None = None) -> list[TraceRecord]:
    """Five Codex turns on GPT-5.6, each a new user message after the same developer prefix (DEV x 30); `chat`:
    sent to Chat Completions (`messages`, its usage) instead of the Responses API."""
    users = ["Fix the login bug.", "Now add a test for it.", "Run the suite.", "Fix the flaky one.", "Ship it."]
    records = []
    for k, user in enumerate(users):
        total = 9_040 if k == 0 else 9_055
        usage = {"input_tokens": total, "output_tokens": 20,
                 "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": total}}
        body = responses(user, dev_text=DEV * 30, mode=mode)
        if chat:
            usage = {"prompt_tokens": total, "completion_tokens": 20,
                     "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": total}}
            body = {"model": body["model"], "prompt_cache_key": body["prompt_cache_key"], "messages": [
                {"role": "developer", "content": [{"type": "text", "text": DEV * 30}]},
                {"role": "user", "content": [{"type": "text", "text": user}]}]}
        records.append(TraceRecord(id=f"t{k + 1}", provider="openai", started_at=60.0 * k, request=body,
                                   endpoint="/v1/chat/completions" if chat else "/v1/responses", session="codex",
                                   response={"usage": usage}))
    return records


def test_a_breakpoint_at_the_stable_boundary_is_proposed_and_priced_across_the_session(cli, tmp_path):
    """Five Codex turns, each a new user message after the same developer prefix (usage as GPT-5.6 reports
    it: every turn writes everything at the managed breakpoint). By hand, with the developer prefix D and a
    55-token message: each later turn would read D and write 55 instead of writing D + 55, saving
    1.25 (D + 55) - (0.1 D + 1.25 x 55) = 1.15 D; D is kvprobe's split of the first turn's 9,040 (about
    9,000): 4 x 1.15 x 9,000 = 41,400."""
    from kvprobe.trace import write_trace

    records = codex_turns()
    trace = tmp_path / "codex.jsonl"
    write_trace(trace, records)
    data = json.loads(cli("report", trace, "--json").stdout)
    [mark] = [f for f in data["fixes"] if f["kind"] == "mark_breakpoint"]
    assert mark["saving_input_equivalent_tokens"] == pytest.approx(4 * 1.15 * 9_000, rel=0.02)
    assert "prompt_cache_breakpoint" in mark["detail"] and mark["path"] == "input[0].content[0]"
    fixed = tmp_path / "fixed.jsonl"
    assert cli("fix", trace, "-o", fixed, "--kind", "mark_breakpoint").exit_code == 0
    bodies = [json.loads(line)["request"] for line in fixed.read_text().splitlines()]
    assert all(b["input"][0]["content"][0]["prompt_cache_breakpoint"] == {"mode": "explicit"} for b in bodies)
    after = json.loads(cli("report", fixed, "--no-fixes", "--json").stdout)["totals"]
    before = json.loads(cli("report", trace, "--predicted", "--no-fixes", "--json").stdout)["totals"]
    assert before["input_equivalent_tokens"] - after["input_equivalent_tokens"] == pytest.approx(
        mark["saving_input_equivalent_tokens"], abs=0.5)


def test_the_marks_go_on_copies_and_the_records_the_fix_was_made_from_stay_unmarked():
    # copy on write (kvprobe/whatif/edits.py): the developer block the copies mark is shared with the input
    import copy

    from kvprobe.pricing import PriceBook
    from kvprobe.whatif.evaluate import evaluate

    records = codex_turns()
    before = copy.deepcopy([r.request for r in records])
    written = evaluate(records, PriceBook()).written_records()
    assert all(w.request["input"][0]["content"][0]["prompt_cache_breakpoint"] == {"mode": "explicit"} for w in written)
    assert [r.request for r in records] == before


def test_on_chat_completions_the_mark_is_openais_too():
    """The same five turns sent to Chat Completions: the shared developer block sits at messages[0].content[0]
    (a path an Anthropic body has too), and the fix marks it with `prompt_cache_breakpoint`, OpenAI's marker,
    not Anthropic's cache_control. Saving as on the Responses API: 4 x 1.15 x 9,000 = 41,400 (within 2%: the
    9,000 are kvprobe's split of the first turn's 9,040)."""
    from kvprobe.pricing import PriceBook
    from kvprobe.whatif.evaluate import evaluate

    whatif = evaluate(codex_turns(chat=True), PriceBook())
    [fix] = whatif.fixes
    assert (fix.kind, fix.extra["path"]) == ("mark_breakpoint", "messages[0].content[0]")
    # the misses it is for: every turn after the first; the session it edits: the one Codex session
    assert (fix.requests, fix.sessions) == (["t2", "t3", "t4", "t5"], {"codex"})
    assert "with `prompt_cache_breakpoint`" in fix.detail and "GPT-5.6+ reads only at breakpoints" in fix.detail
    assert fix.saving_input_equivalent_tokens == pytest.approx(4 * 1.15 * 9_000, rel=0.02)
    for written in whatif.written_records():
        block = written.request["messages"][0]["content"][0]
        assert block["prompt_cache_breakpoint"] == {"mode": "explicit"} and "cache_control" not in block


@pytest.mark.parametrize("notes, proposed", [(3, True), (4, False)])
def test_the_shared_end_is_marked_only_within_the_four_breakpoints_a_gpt_5_6_request_writes(notes, proposed):
    """Each turn ends with `notes` explicitly marked notes of its own after the user message. The managed
    breakpoint ends the newest message, on its last note: with 3 notes the request holds 3 breakpoints and the
    fix marks the shared developer block as its 4th (providers/openai.toml max_breakpoints = 4, the managed one
    among them); with 4 there is no room and nothing is proposed."""
    from kvprobe.pricing import PriceBook
    from kvprobe.whatif.evaluate import evaluate

    records = codex_turns()
    for k, r in enumerate(records):
        r.request["input"][-1]["content"] += [{"type": "input_text", "text": f"note {j} of turn {k} " * 20,
                                               "prompt_cache_breakpoint": {"mode": "explicit"}} for j in range(notes)]
    fixes = evaluate(records, PriceBook()).fixes
    assert [(f.kind, f.extra["path"]) for f in fixes] == ([("mark_breakpoint", "input[0].content[0]")] if proposed
                                                          else [])


def test_in_explicit_mode_the_mark_is_named_as_openais_marker():
    """The five turns in explicit mode (`prompt_cache_options.mode`: only marked blocks are written): the fix
    names `prompt_cache_breakpoint` and OpenAI's reason, as in the managed mode."""
    from kvprobe.pricing import PriceBook
    from kvprobe.whatif.evaluate import evaluate

    [fix] = evaluate(codex_turns(mode="explicit"), PriceBook()).fixes
    assert (fix.kind, fix.extra["path"]) == ("mark_breakpoint", "input[0].content[0]")
    assert fix.detail == ("mark the end of the prefix the requests share but no breakpoint ends (e.g. "
                          "input[0].content[0]) with `prompt_cache_breakpoint`, in 5 requests that carry it: the first "
                          "writes it, the later ones read it (GPT-5.6+ reads only at breakpoints; its managed one sits "
                          "after the part that changes)")
