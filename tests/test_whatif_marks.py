"""The missing-breakpoint fix (kvprobe/whatif/propose_marks.py), from its rules with the figures by hand:
- the fix marks the block where the prefix a request shares with an earlier one ends, in every request that
  carries that block unmarked; the marker is the one the request's cache reads: `prompt_cache_breakpoint` for
  GPT-5.6+ (managed or explicit mode, providers/openai.toml), cache_control for every other breakpoint cache
  (Claude's; Qwen's explicit cache, providers/qwen.toml mode_rules: "explicit cache via cache_control");
- the written trace, reported again, reproduces the saving the fix was priced at.

Qwen's explicit cache (providers/qwen.toml mode_rules.breakpoints): writes 1.25x, reads 0.1x, 5-minute entries,
a 1,024-token minimum. Sizes come from a calibration request of another Qwen model an hour before (its 3,000
marked tokens written, its 20-token question fresh): another model's entries are no request's to read, so it
changes no figure below but the sizes.
"""
from __future__ import annotations

import copy

import pytest

from kvprobe.pricing import PriceBook
from kvprobe.whatif.evaluate import evaluate

from test_whatif_timing import EPH, MODEL, part, rec, text, usage

SHARED = text(3_000, "rules")


def qwen_body(question: str, model: str = "qwen3-max", mark_shared: bool = False, mark_question: bool = True
              ) -> dict:
    shared = {"type": "text", "text": SHARED, **({"cache_control": dict(EPH)} if mark_shared else {})}
    ask = {"type": "text", "text": question, **({"cache_control": dict(EPH)} if mark_question else {})}
    return {"model": model, "messages": [{"role": "system", "content": [shared]},
                                         {"role": "user", "content": [ask]}]}


def qwen_usage(total: int, written: int, read: int = 0) -> dict:
    """DashScope's explicit-cache usage (Model Studio's example: input_tokens_details)."""
    return {"input_tokens": total, "output_tokens": 10, "input_tokens_details": {
        "cached_tokens": read, "cache_creation_input_tokens": written, "cache_type": "ephemeral"}}


def qwen_pair() -> list:
    """Sessions a and b each send the 3,000-token system text and a question of their own, marked (a0: 20
    tokens, b0 60 s later: 25); nothing marks the end of the system text they share."""
    calibration = rec("cal", -3_600, qwen_body("Calibrate the sizes.", "qwen3-coder-plus", True, False),
                      qwen_usage(3_020, 3_000), session="cal", provider="qwen")
    return [calibration,
            rec("a0", 0, qwen_body("Summarise chapter one."), qwen_usage(3_020, 3_020), session="a", provider="qwen"),
            rec("b0", 60, qwen_body("Summarise chapter two now."), qwen_usage(3_025, 3_025), session="b",
                provider="qwen")]


def test_qwens_explicit_cache_is_marked_with_cache_control_and_the_fixed_trace_saves_what_was_priced():
    """Before: a0 writes 3,020 (3,775 input equivalents), b0 writes 3,025 (3,781.25). Marking the system text
    in both: a0 writes the same 3,020 (its entries end at the system text and at the question: 3,775), b0
    reads 3,000 (300) and writes its 25 (31.25): 331.25, a saving of 3,450. Written with
    `prompt_cache_breakpoint`, which Qwen does not read, the fixed trace saved nothing."""
    records = qwen_pair()
    before = copy.deepcopy([r.request for r in records])
    whatif = evaluate(records, PriceBook())
    [fix] = whatif.fixes
    assert (fix.kind, fix.extra["path"], fix.saving_input_equivalent_tokens) == (
        "mark_breakpoint", "messages[0].content[0]", 3_450.0)
    assert "with cache_control, in 2 requests" in fix.detail and "GPT-5.6" not in fix.detail
    written = whatif.written_records()
    assert [(r.id, r.request["messages"][0]["content"][0].get("cache_control"),
             "prompt_cache_breakpoint" in r.request["messages"][0]["content"][0]) for r in written] == [
        ("cal", EPH, False), ("a0", EPH, False), ("b0", EPH, False)]
    again = evaluate(written, PriceBook())
    assert [(r.sk.id, r.input_equivalent) for r in again.baseline] == [
        ("cal", 3_770.0), ("a0", 3_775.0), ("b0", 331.25)]
    assert [r.request for r in records] == before


def test_in_gpt_5_6s_explicit_mode_the_written_mark_is_prompt_cache_breakpoint():
    """Five Codex turns in explicit mode (only marked blocks are written): every written request marks the
    shared developer block with `prompt_cache_breakpoint` ({"mode": "explicit"}), never cache_control."""
    from test_openai_breakpoints import codex_turns

    written = evaluate(codex_turns(mode="explicit"), PriceBook()).written_records()
    assert [(w.id, w.request["input"][0]["content"][0].get("prompt_cache_breakpoint"),
             "cache_control" in w.request["input"][0]["content"][0]) for w in written] == [
        (f"t{k}", {"mode": "explicit"}, False) for k in range(1, 6)]


def qwen_notes(notes: int) -> list:
    """The Qwen pair, each question now `notes` marked notes of its own (about 20 tokens each)."""
    records = qwen_pair()
    for r in records[1:]:
        r.request["messages"][1]["content"] = [
            {"type": "text", "text": f"note {k} of {r.id} " * 5, "cache_control": dict(EPH)} for k in range(notes)]
        r.response["usage"] = qwen_usage(3_000 + 20 * notes, 3_000 + 20 * notes)
    return records


@pytest.mark.parametrize("notes, saving", [(3, 3_450.0), (4, None)])
def test_the_shared_end_is_marked_only_while_a_qwen_request_has_fewer_than_four_markers(notes, saving):
    """Qwen's explicit cache takes up to 4 markers (providers/qwen.toml). With 3 marked notes after the shared
    system text, its end is the 4th: b0 reads the 3,000 (300) and writes its 60 (75) instead of writing 3,060
    (3,825): 3,450 saved. With 4 there is no room: nothing is proposed, though b0 still misses the 3,000."""
    whatif = evaluate(qwen_notes(notes), PriceBook())
    assert [(f.kind, f.saving_input_equivalent_tokens) for f in whatif.fixes] == (
        [("mark_breakpoint", saving)] if saving else [])
    [b0] = [r for r in whatif.baseline if r.sk.id == "b0"]
    assert [d.kind for d in b0.diagnoses] == ["missing_breakpoint"]


def test_a_gpt_5_6_request_with_three_explicit_marks_and_the_managed_one_has_no_room_for_a_fifth():
    """The five Codex turns, each with a short marked introduction before the shared developer text and two
    marked notes before its user text (where the managed breakpoint goes): four breakpoints already, the most
    a request writes (providers/openai.toml max_breakpoints = 4, the managed one among them). Though every
    later turn misses the developer text, no mark is proposed for it."""
    from test_openai_breakpoints import codex_turns

    marker = {"mode": "explicit"}
    records = codex_turns()
    for k, r in enumerate(records):
        r.request["input"][0]["content"].insert(0, {"type": "input_text", "text": "You are Codex, by OpenAI. " * 60,
                                                    "prompt_cache_breakpoint": dict(marker)})
        r.request["input"][-1]["content"][:0] = [
            {"type": "input_text", "text": f"note {j} of turn {k} " * 20, "prompt_cache_breakpoint": dict(marker)}
            for j in range(2)]
    whatif = evaluate(records, PriceBook())
    assert [(r.sk.request.breakpoints, r.sk.request.managed_breakpoint) for r in whatif.baseline] == [
        ([(0, "explicit"), (2, "explicit"), (3, "explicit"), (4, "managed")], 4)] * 5
    assert [("missing_breakpoint", "input[0].content[1]") in [(d.kind, d.path) for d in r.diagnoses]
            for r in whatif.baseline] == [False, True, True, True, True]
    assert whatif.fixes == [] and whatif.alternatives == []


def test_the_mark_ends_the_prefix_an_earlier_request_could_serve_not_the_content_they_share():
    """Sessions a and b send the same 2,000-token system text and 1,500-token document, then a question of
    their own (marked: a 20 tokens, b 25), nothing else marked; a asks with tool_choice "any", which changes
    what the messages are cached under (providers/anthropic.toml invalidation: tool_choice -> messages). b0
    shares 3,500 tokens of content with a0 but could read only the system text a0 would write: the mark goes
    there, in both. Sizes from a calibration request of another model (system text written, document fresh).
    Before: a0 writes 3,520 (4,400), b0 writes 3,525 (4,406.25). After: a0 the same; b0 reads 2,000 (200) and
    writes 1,525 (1,906.25): 2,300 saved."""
    shared, document = text(2_000, "sys"), text(1_500, "doc")

    def body(question: str | None, model: str = MODEL, mark_system: bool = False, **params) -> dict:
        content = [part(document)] + ([part(question, marked=True)] if question else [])
        return {"model": model, "max_tokens": 64, "system": [part(shared, marked=mark_system)],
                "messages": [{"role": "user", "content": content}], **params}
    records = [rec("cal", -3_600, body(None, "claude-opus-4-5", True), usage(w5m=2_000, fresh=1_500), session="cal"),
               rec("a0", 0, body(text(20, "qa"), tool_choice={"type": "any"}), usage(w5m=3_520), session="a"),
               rec("b0", 60, body(text(25, "qb")), usage(w5m=3_525), session="b")]
    whatif = evaluate(records, PriceBook())
    [fix] = whatif.fixes
    assert (fix.kind, fix.extra["path"], fix.requests, fix.saving_input_equivalent_tokens) == (
        "mark_breakpoint", "system[0]", ["b0"], 2_300.0)
    assert [r.id for r in whatif.written_records() if r.request["system"][0].get("cache_control")] == [
        "cal", "a0", "b0"]


@pytest.mark.parametrize("mode", [None, "explicit"])
def test_no_mark_is_proposed_where_gpt_5_6_takes_none_the_instructions_string(mode):
    """The five Codex turns with the shared developer text sent as the Responses `instructions` string (as
    Codex sends its prompt) instead of a developer message, in the managed or the explicit mode: every later
    turn misses it, but `prompt_cache_breakpoint` goes on a content block of a message, and `instructions` is
    none. Nothing is proposed: before, a mark there was priced at about 41,000 input equivalents (managed
    mode) and the written trace carried none."""
    from test_openai_breakpoints import codex_turns

    records = codex_turns(mode=mode)
    for r in records:
        r.request["instructions"] = r.request["input"].pop(0)["content"][0]["text"]
    whatif = evaluate(records, PriceBook())
    assert [[d.path for d in r.diagnoses if d.kind == "missing_breakpoint"] for r in whatif.baseline] == [
        [], ["instructions"], ["instructions"], ["instructions"], ["instructions"]]
    assert whatif.fixes == [] and whatif.alternatives == []
