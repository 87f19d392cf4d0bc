"""Usage-only causes word for word: each cause a usage-only log can carry (the events before a miss, the level
a read falls to, a pause against the lifetime in force, a model switch, a cut prompt), at the edges of the
rules that choose between them, with every field a user reads (`report --json`'s diagnosis) written out.

The traces are kvprobe's own format with `request` absent (docs/contracts.md §1: what an importer writes for a
usage-only log), so each test sets exactly the usage, the events and the times it needs. Claude Sonnet 4.5 on
the first-party API: 5-minute entries (300 s), 1h entries on request, no routing rule; the estimate noise is
1% of the prompt (rounded), so a read within it of the ideal is no miss. Figures are worked out by hand in
the comments: a request's input is fresh + read + written; what it leaves cached is read + written.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvprobe.report import build_report

SONNET, HAIKU = "claude-sonnet-4-5", "claude-haiku-4-5-20251001"
T0 = 1_770_000_000.0
# The advice of analysis/usage_only.py, as a user reads it in a diagnosis
TOOLS_ADVICE = ("connect tool (MCP) servers before the session starts: a reconnect or a new server mid-session "
                "changes the tool list, the first thing every cached prefix holds")
SETTINGS_ADVICE = ("keep reasoning effort and instructions fixed within a session: a change starts the "
                   "conversation's cache again")
LEVEL_ADVICE = ("the log cannot show what changed: compare two requests' bodies (capture them with `kvprobe "
                "capture`) or the provider's cache diagnostics")
NOTHING_SAYS_WHY = ("within the entry's lifetime, and nothing in the log says why: the prefix changed in a way the "
                    "log does not show, or the entry was evicted or served elsewhere")


def rec(rid: str, t: float, read: int, write: int, fresh: int = 3, *, model: str = SONNET, session: str = "s",
        w1h: int = 0, events: list[Any] | None = None, **extra: Any) -> dict[str, Any]:
    """A usage-only record: `write` tokens written (of them `w1h` as 1h entries), sent at T0 + t."""
    usage = {"input_tokens": fresh, "cache_read_input_tokens": read, "cache_creation_input_tokens": write,
             "cache_creation": {"ephemeral_5m_input_tokens": write - w1h, "ephemeral_1h_input_tokens": w1h},
             "output_tokens": 50}
    out = {"id": rid, "session": session, "provider": "anthropic", "started_at": T0 + t,
           "response": {"model": model, "usage": usage}, **extra}
    if events is not None:
        out["events"] = events
    return out


def report(tmp_path: Path, *records: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each request of the trace as `report --json` lists it (id -> row)."""
    path = tmp_path / "usage.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return {row["id"]: row for row in build_report([str(path)], fixes=False).to_json()["requests"]}


def the_cause(row: dict[str, Any]) -> dict[str, Any]:
    [d] = row["diagnoses"]
    return d


# a at 0 s writes 10,000; b at 10 s reads them and writes 2,000 more: b leaves 12,000 cached
OPENING = (rec("a", 0, read=0, write=10_000), rec("b", 10, read=10_000, write=2_000))


def test_every_event_before_a_miss_is_named_strongest_first_and_the_first_gives_path_and_advice(tmp_path):
    # c at 20 s reads 4,000 of the 12,000 b left (input 3 + 4,000 + 8,500 = 12,503; noise 125): a miss of 8,000.
    # The log's events, in the order the importer saw them, with lines a hand-written trace may hold besides
    events = [{"kind": "interrupt"}, {"kind": "task_notification"}, {"kind": "command", "name": "/mcp"},
              {"kind": "command"}, {"kind": "settings_changed", "settings": ["effort", "model"]},
              {"kind": "tool_first_used", "name": "mcp__db__query"}, {"kind": "tools_changed"},
              {"kind": "interrupt"}, "a line", {"detail": "no kind"}, {"kind": 7}, {"kind": "compaction_x"}]
    rows = report(tmp_path, *OPENING, rec("c", 20, read=4_000, write=8_500, events=events))
    assert the_cause(rows["c"]) == {
        "kind": "prefix_changed", "inferred": True, "path": "tools", "token_position": 4_000, "missed_tokens": 8_000,
        "detail": "the read fell from 12,000 to 4,000 tokens: the prefix broke after 4,000 tokens (10s after b); "
                  "likely trigger (inferred from the log): the tool list changed (a tool server reconnected) and "
                  "a tool not used before in this session appeared (mcp__db__query): the tool list may have "
                  "changed and settings changed (effort, model) and the /mcp command ran and a command ran and "
                  "a background task's notification arrived and the user interrupted the turn",
        "triggers": ["tools_changed", "tool_first_used", "settings_changed", "command", "task_notification",
                     "interrupt"],
        "advice": TOOLS_ADVICE, "evidence": "log_events"}


@pytest.mark.parametrize("events, kind, param, path, tail, triggers, advice", [
    # only the reasoning effort changed: a parameter, not a block of the prefix
    ([{"kind": "settings_changed", "settings": ["effort"]}], "params_changed", "reasoning effort", None,
     "settings changed (effort)", ["settings_changed"], SETTINGS_ADVICE),
    # a settings change that names nothing: the system level, the first one a setting changes
    ([{"kind": "settings_changed"}], "prefix_changed", None, "system", "settings changed (unnamed)",
     ["settings_changed"], SETTINGS_ADVICE),
])
def test_a_settings_change_before_a_miss(tmp_path, events, kind, param, path, tail, triggers, advice):
    rows = report(tmp_path, *OPENING, rec("c", 20, read=4_000, write=8_500, events=events))
    expected = {"kind": kind, "inferred": True, "path": path, "token_position": 4_000, "missed_tokens": 8_000,
                "detail": "the read fell from 12,000 to 4,000 tokens: the prefix broke after 4,000 tokens (10s after "
                          f"b); likely trigger (inferred from the log): {tail}",
                "triggers": triggers, "advice": advice, "evidence": "log_events"}
    if param is not None:
        expected["param"] = param
    assert the_cause(rows["c"]) == expected


@pytest.mark.parametrize("gap, after, idle", [
    (10, "10s", ""),
    (150, "2m30s", ""),  # half the 300 s lifetime: not yet named
    (151, "2m31s", "; it had been idle 2m31s of its 5m00s lifetime (idle entries are the first evicted)"),
    (299, "4m59s", "; it had been idle 4m59s of its 5m00s lifetime (idle entries are the first evicted)"),
])
def test_a_drop_nothing_in_the_log_explains_says_so_and_names_a_long_idle(tmp_path, gap, after, idle):
    rows = report(tmp_path, *OPENING, rec("c", 10 + gap, read=4_000, write=8_500))
    assert the_cause(rows["c"]) == {
        "kind": "unexplained", "inferred": True, "path": None, "token_position": 4_000, "missed_tokens": 8_000,
        "detail": f"the read fell from 12,000 to 4,000 tokens ({after} after b), {NOTHING_SAYS_WHY}{idle}"}


def test_a_pause_past_the_lifetime_with_events_names_both(tmp_path):
    # c 301 s after b: b's 12,000 expired a second before. One ping (ceil(1 / 270)) of 0.1 x 12,000 + 5 = 1,205
    # against a rebuild of (1.25 - 0.1) x 12,000 = 13,800; pings pay up to 300 + floor(13,800 / 1,205) x 270 =
    # 3,270 s (54m30s); the 1h lifetime (writes at 2x) covers the pause too
    events = [{"kind": "interrupt"}, {"kind": "task_notification"}]
    rows = report(tmp_path, *OPENING, rec("c", 311, read=0, write=12_500, events=events))
    d = the_cause(rows["c"])
    assert (d["kind"], d["seconds_past"], d["evidence"], d["triggers"], d["missed_tokens"]) == (
        "ttl_expired", 1.0, "pause", ["task_notification", "interrupt"], 12_000)
    assert d["detail"] == ("5m01s since b started; the entry lives 5m00s (the default); also just before it "
                           "(inferred from the log): a background task's notification arrived and the user "
                           "interrupted the turn")
    assert d["advice"] == (
        "send 1 keep-alive request (the same prefix, max_tokens 1) every 4m30s through pauses like this one: 1,205 "
        "input-equivalents against 13,800 for the rebuild (pings pay for pauses up to 54m30s); or use "
        "\"ttl\": \"1h\" on the cache_control breakpoints: entries live 1h00m, long enough for this pause (writes at "
        "2× input)")


# c compacts without shrinking (3 + 3,000 + 9,500 = 12,503 against the 12,000 b left): only tools+system, the
# 3,000 it read, was reusable, so it is no miss; that size is the session's messages level from then on.
# d reads all of c's 12,500 and leaves 13,000.
COMPACTED = (*OPENING, rec("c", 20, read=3_000, write=9_500, events=[{"kind": "compaction", "pre_tokens": 12_000}]),
             rec("d", 30, read=12_500, write=500))


def test_a_compaction_that_does_not_shrink_the_prompt_is_no_miss_and_a_later_fall_to_its_size_is_the_messages_level(
        tmp_path):
    # e reads 3,000 of d's 13,000 (input 13,503, noise 135): the messages level broke, 10,000 missed
    rows = report(tmp_path, *COMPACTED, rec("e", 40, read=3_000, write=10_500))
    assert rows["c"]["diagnoses"] == [] and rows["c"]["missed_read_tokens"] == 0
    assert the_cause(rows["e"]) == {
        "kind": "prefix_changed", "inferred": True, "path": "messages", "token_position": 3_000,
        "missed_tokens": 10_000, "advice": LEVEL_ADVICE, "evidence": "read_level",
        "detail": "the read fell from 13,000 to 3,000 tokens, the tools+system size of this session (what it read "
                  "after its compaction): the messages level broke (10s after d)"}


def test_a_prompt_cut_below_the_tools_system_size_misses_what_that_level_held(tmp_path):
    # e's prompt is cut to exactly the 3,000-token tools+system size (3 + 1,000 + 1,997; noise 30), far under
    # d's 13,000: only that level was reusable, and e read 1,000 of it
    rows = report(tmp_path, *COMPACTED, rec("e", 40, read=1_000, write=1_997))
    assert rows["e"]["missed_read_tokens"] == 2_000
    assert the_cause(rows["e"]) == {
        "kind": "unexplained", "inferred": True, "path": None, "token_position": 1_000, "missed_tokens": 2_000,
        "detail": "the read fell from 13,000 to 1,000 tokens (10s after d, after the prompt shrank (its history was "
                  f"cut)), {NOTHING_SAYS_WHY}"}


def test_a_prompt_cut_with_no_level_known_misses_nothing(tmp_path):
    # c's prompt (3 + 4,000 + 1,000 = 5,003) is far under b's 12,000: its history was cut, and no tools+system
    # size is known, so what it read is all that was reusable
    rows = report(tmp_path, *OPENING, rec("c", 20, read=4_000, write=1_000))
    assert (rows["c"]["diagnoses"], rows["c"]["missed_read_tokens"], rows["c"]["ideal_read_tokens"]) == ([], 0, 4_000)


def test_a_prompt_one_noise_short_of_the_last_level_is_not_cut(tmp_path):
    # c's prompt is 3 + 5,000 + 6,878 = 11,881 and its noise round(118.81) = 119: 11,881 + 119 = 12,000 is not
    # under b's 12,000, so the prompt was not cut, all 11,881 were readable, and 6,881 were missed
    rows = report(tmp_path, *OPENING, rec("c", 20, read=5_000, write=6_878))
    assert (rows["c"]["missed_read_tokens"], rows["c"]["ideal_read_tokens"]) == (6_881, 11_881)
    assert the_cause(rows["c"])["detail"] == \
        f"the read fell from 12,000 to 5,000 tokens (10s after b), {NOTHING_SAYS_WHY}"


@pytest.mark.parametrize("read, write, missed", [
    (11_875, 625, 0),  # 3 + 11,875 + 625 = 12,503, noise 125: 11,875 + 125 reaches b's 12,000
    (11_874, 626, 126),  # one token less: a miss of 126
])
def test_a_shortfall_at_the_noise_is_none_and_one_token_past_it_is_a_miss(tmp_path, read, write, missed):
    rows = report(tmp_path, *OPENING, rec("c", 20, read=read, write=write))
    assert rows["c"]["missed_read_tokens"] == missed and len(rows["c"]["diagnoses"]) == (1 if missed else 0)


def test_a_read_of_nothing_within_the_noise_is_a_cold_start(tmp_path):
    # a leaves 1,024 cached; b's prompt is 110,000 tokens (noise 1,100): reading none of a's 1,024 is within the
    # noise, so b is a cold start with nothing it could have read, not a rebuild
    rows = report(tmp_path, rec("a", 0, read=0, write=1_024), rec("b", 10, read=0, write=109_997))
    assert (rows["b"]["diagnoses"], rows["b"]["missed_read_tokens"], rows["b"]["ideal_read_tokens"],
            rows["b"]["write_kind"]) == ([], 0, 0, "cold_start")


@pytest.mark.parametrize("shared", [5_000, 1])
def test_a_fall_to_what_two_sessions_first_read_is_the_system_level_not_a_stale_read(tmp_path, shared):
    # x and s both first read `shared` tokens (two sessions: the fewest that make it a shared prefix; one token:
    # the smallest read that is a level). s1 writes nothing, so it leaves exactly `shared` cached; s3 falls to it
    # after s2 left shared + 4,000: the shared level broke, not a stale replica serving s1's entry
    rows = report(tmp_path, rec("x1", 0, read=shared, write=3_000, session="x"),
                  rec("s1", 0, read=shared, write=0, fresh=3_000), rec("s2", 10, read=shared, write=4_000),
                  rec("s3", 20, read=shared, write=4_500))
    left = f"{shared + 4_000:,}"
    assert the_cause(rows["s3"]) == {
        "kind": "prefix_changed", "inferred": True, "path": "system", "token_position": shared,
        "missed_tokens": 4_000, "advice": LEVEL_ADVICE, "evidence": "read_level",
        "detail": f"the read fell from {left} to {shared:,} tokens, the prefix several sessions share (what their "
                  "first requests read): the session's own system prompt and all after it broke (10s after s2)"}


# d1..d5: reads fall to 7,000 twice (d3, d5): an earlier breakpoint of the session's own
AGAIN = (rec("d1", 0, read=0, write=10_000), rec("d2", 10, read=10_000, write=2_000),
         rec("d3", 20, read=7_000, write=5_500), rec("d4", 30, read=12_500, write=500))
AGAIN_WORDS = "a size this session's reads fall to again and again (an earlier breakpoint): the prefix broke after it"


def test_a_size_reads_fall_to_again_and_again_is_the_level_and_an_event_gives_the_path(tmp_path):
    # d6 reads all d5 left: the last request is no fall, and d3 is still named once the whole log is read
    rows = report(tmp_path, *AGAIN, rec("d5", 40, read=7_000, write=6_500, events=[{"kind": "interrupt"}]),
                  rec("d6", 50, read=13_500, write=500))
    assert rows["d6"]["diagnoses"] == []
    assert the_cause(rows["d3"]) == {  # named once the whole log is read: no path, the level's own words
        "kind": "prefix_changed", "inferred": True, "path": None, "token_position": 7_000, "missed_tokens": 5_000,
        "advice": LEVEL_ADVICE, "evidence": "read_level",
        "detail": f"the read fell from 12,000 to 7,000 tokens, {AGAIN_WORDS} (10s after d2)"}
    assert the_cause(rows["d5"]) == {  # the interrupt just before: the messages level, and its advice
        "kind": "prefix_changed", "inferred": True, "path": "messages", "token_position": 7_000,
        "missed_tokens": 6_000, "triggers": ["interrupt"], "evidence": "log_events",
        "advice": "an interrupt drops the turn's unfinished end: the next request writes the history after it again",
        "detail": f"the read fell from 13,000 to 7,000 tokens, {AGAIN_WORDS} (10s after d4); likely trigger "
                  "(inferred from the log): the user interrupted the turn"}


def test_reads_within_the_noise_are_no_falls_to_name_a_level_by(tmp_path):
    # b2 and b3 read 10,000 of the 10,050 b1 and b2 left: 50 short, within their noise (100 and 120), so no
    # fall; 10,000 is then no size the reads fell to, and b5's fall to it (13,000 -> 10,000, no level any
    # request left) is unexplained, not "again and again"
    rows = report(tmp_path, rec("b1", 0, read=0, write=10_050), rec("b2", 10, read=10_000, write=50),
                  rec("b3", 20, read=10_000, write=2_000), rec("b4", 30, read=12_000, write=1_000),
                  rec("b5", 40, read=10_000, write=3_000))
    assert [rows[b]["missed_read_tokens"] for b in ("b2", "b3", "b4")] == [0, 0, 0]
    assert the_cause(rows["b5"])["kind"] == "unexplained"


def test_a_cause_the_provider_reported_is_taken_as_reported(tmp_path):
    # Anthropic's cache diagnostics on c's response: the tools changed, 8,000 tokens after the divergence
    c = rec("c", 20, read=4_000, write=8_500)
    c["response"]["diagnostics"] = {"cache_miss_reason": {"type": "tools_changed", "cache_missed_input_tokens": 8_000}}
    rows = report(tmp_path, *OPENING, c)
    assert the_cause(rows["c"]) == {
        "kind": "prefix_changed", "inferred": False, "path": "tools", "token_position": None,
        "missed_tokens": 8_000, "reported_missed_tokens": 8_000,
        "detail": "provider reported: tools_changed (about 8,000 input tokens after the divergence not read from "
                  "cache)"}


SWITCH_ADVICE = ("switch models between tasks rather than within one: each switch writes the prompt again for the "
                 "other model")


def switch(a: str, b: str, expired: str = "") -> dict[str, Any]:
    return {"kind": "params_changed", "inferred": True, "path": None, "token_position": None, "param": "model",
            "missed_tokens": 0, "a": a, "b": b, "invalidates": "all", "advice": SWITCH_ADVICE, "evidence": "model",
            "detail": f"the model changed from {a} to {b}: caches are per model, so {b} could read none of what {a} "
                      f"cached{expired} (no saving is implied: switching back and forth is the choice being paid for)"}


def test_a_model_switch_and_a_switch_back_after_the_models_own_entry_expired(tmp_path):
    # s2 sends s1's 10,003-token prompt to Haiku; s3 is back on Sonnet 10 s later, reading s1's entry; s4 sends
    # it to Haiku again 311 s after s2: Haiku's own entry (300 s) expired meanwhile. Nothing is charged to a
    # switch: it is the choice being paid for
    rows = report(tmp_path, rec("s1", 0, read=0, write=10_000), rec("s2", 10, read=0, write=10_000, model=HAIKU),
                  rec("s3", 20, read=10_000, write=500), rec("s4", 321, read=0, write=10_500, model=HAIKU))
    assert the_cause(rows["s2"]) == switch(SONNET, HAIKU)
    assert rows["s3"]["diagnoses"] == [] and rows["s3"]["missed_read_tokens"] == 0
    assert the_cause(rows["s4"]) == switch(SONNET, HAIKU, "; its own entry, last used by s2 5m11s before, expired "
                                                          "meanwhile")
    assert [rows[s]["missed_read_tokens"] for s in ("s2", "s4")] == [0, 0]


def test_a_switch_from_a_request_that_named_no_model(tmp_path):
    first = rec("s1", 0, read=0, write=10_000)
    del first["response"]["model"]
    rows = report(tmp_path, first, rec("s2", 10, read=0, write=10_000))
    assert the_cause(rows["s2"]) == switch("another model", SONNET)


def test_the_lifetime_in_force_is_1h_only_where_the_logs_latest_writes_are_all_1h(tmp_path):
    # h1 writes 20,000 as 1h entries; h2, 400 s later, reads 0: within the 1h entry's life, no expiry; h3,
    # 4,000 s after h2, is past it.
    # m1 writes 10,000 as 1h and 10,000 as 5m entries: the 5m lifetime is in force, so m2 400 s later is an
    # expiry of 100 s (one ping of 0.1 x 20,000 + 5 = 2,005 against (1.25 - 0.1) x 20,000 = 23,000)
    rows = report(tmp_path, rec("h1", 0, read=0, write=20_000, w1h=20_000, session="h"),
                  rec("h2", 400, read=0, write=20_500, w1h=20_500, session="h"),
                  rec("h3", 4_400, read=0, write=21_000, w1h=21_000, session="h"),
                  rec("m1", 0, read=0, write=20_000, w1h=10_000, session="m"),
                  rec("m2", 400, read=0, write=20_500, session="m"))
    assert the_cause(rows["h2"])["kind"] == "unexplained"
    assert the_cause(rows["h3"])["detail"] == ("1h06m since h2 started; the entry lives 1h00m (the 1h TTL of this "
                                               "log’s own writes)")
    d = the_cause(rows["m2"])
    assert (d["kind"], d["seconds_past"], d["evidence"], d["missed_tokens"]) == ("ttl_expired", 100.0, "pause", 20_000)
    assert d["detail"] == "6m40s since m1 started; the entry lives 5m00s (the default)"
    assert d["advice"].startswith("send 1 keep-alive request (the same prefix, max_tokens 1) every 4m30s through "
                                  "pauses like this one: 2,005 input-equivalents against 23,000 for the rebuild")


def test_a_pause_nothing_pays_for_is_a_new_start_even_with_events_before_it(tmp_path):
    # c 4 h after b: 53 pings (ceil(14,100 / 270)) of 1,205 cost more than the 13,800 rebuild, and the 1h
    # lifetime does not cover 4 h: nothing could have been read, whatever the log shows before it
    rows = report(tmp_path, *OPENING, rec("c", 10 + 14_400, read=0, write=12_500, events=[{"kind": "interrupt"}]))
    assert (rows["c"]["diagnoses"], rows["c"]["missed_read_tokens"], rows["c"]["write_kind"]) == ([], 0, "cold_start")


def test_a_first_request_is_no_fall_to_name_a_level_by(tmp_path):
    # s1 opens the session reading 5,000 (a prefix written before the log began); s3 falls to 5,000 once: one
    # fall, in one session, is no level, so nothing in the log explains it
    rows = report(tmp_path, rec("s1", 0, read=5_000, write=5_000), rec("s2", 10, read=10_000, write=1_000),
                  rec("s3", 20, read=5_000, write=6_000))
    assert the_cause(rows["s3"]) == {
        "kind": "unexplained", "inferred": True, "path": None, "token_position": 5_000, "missed_tokens": 6_000,
        "detail": f"the read fell from 11,000 to 5,000 tokens (10s after s2), {NOTHING_SAYS_WHY}"}


# Rebuilt histories (docs/contracts.md §1 `history`: estimated message tokens, and where a list changed). a and
# b only grew: b's level rose 2,000 real tokens for 500 estimated, so the stream's messages weigh 4 real tokens
# per estimated one
GREW = (rec("a", 0, read=0, write=10_000, history={"tokens": 1_000}),
        rec("b", 10, read=10_000, write=2_000, history={"tokens": 1_500}))


def test_a_message_rewritten_is_placed_with_the_streams_own_scale_and_the_events_before_it_are_named(tmp_path):
    # c's list was edited at messages[3], after 800 estimated tokens: b's 700 estimated tokens past it are 2,800
    # real, so the change sits at 12,000 - 2,800 = 9,200 tokens; c read 4,000 (before it: under 9,200 - 0.25 x
    # 2,800 - 125 = 8,375) and missed 9,200 - 4,000 = 5,200
    change = {"kind": "edited", "index": 3, "tokens_before": 800}
    rows = report(tmp_path, *GREW, rec("c", 20, read=4_000, write=8_500, history={"tokens": 1_600, "change": change},
                                       events=[{"kind": "interrupt"}, {"kind": "command", "name": "/clear"}]))
    assert the_cause(rows["c"]) == {
        "kind": "prefix_changed", "inferred": True, "path": "messages[3]", "token_position": 9_200,
        "missed_tokens": 5_200, "triggers": ["command", "interrupt"], "evidence": "transcript", "change": "edited",
        "advice": "leave messages already sent as they were: a rewritten tool result or prompt makes every later "
                  "request write the history after it again",
        "detail": "the transcript shows a message already sent was rewritten at messages[3], about 9,200 tokens into "
                  "b's 12,000-token entry (estimated from the rebuilt messages); the read (4,000 tokens) ends before "
                  "it; just before it (inferred from the log): the /clear command ran and the user interrupted the "
                  "turn"}


@pytest.mark.parametrize("read, ends", [
    # b's 1,500 estimated message tokens are 6,000 real: the 6,000 before them are tools and system
    (4_000, "the read ends within what precedes the messages the log shows (tools, system and any context it does "
            "not show: about 6,000 tokens, estimated)"),
    (8_000, "the read covers what precedes the messages the log shows (tools, system: about 6,000 tokens) and about "
            "2,000 of the 6,000 message tokens b was sent (estimated)"),
])
def test_a_drop_in_a_history_that_only_grew_rules_content_out_and_says_where_the_read_ended(tmp_path, read, ends):
    rows = report(tmp_path, *GREW, rec("c", 20, read=read, write=12_500 - read, history={"tokens": 1_600}))
    assert the_cause(rows["c"]) == {
        "kind": "unexplained", "inferred": True, "path": None, "token_position": read,
        "missed_tokens": 12_000 - read, "evidence": "transcript",
        "detail": f"the read fell from 12,000 to {read:,} tokens (10s after b), within the entry's lifetime; the "
                  "transcript shows the history only grew, so the content did not change: the entry was evicted or "
                  f"served elsewhere; {ends}"}


def test_a_fall_to_the_shared_prefix_on_a_platform_that_routes_between_caches_is_routing(tmp_path):
    # as above on Bedrock (providers/bedrock.toml `cache_routing`: cross-region inference): s3 reads only what
    # every session shares, within the lifetime, with nothing in the log before it
    rows = report(tmp_path, *(dict(r, platform="bedrock") for r in (
        rec("x1", 0, read=5_000, write=3_000, session="x"), rec("s1", 0, read=5_000, write=0, fresh=3_000),
        rec("s2", 10, read=5_000, write=4_000), rec("s3", 20, read=5_000, write=4_500))))
    d = the_cause(rows["s3"])
    assert (d["kind"], d["token_position"], d["evidence"], d["missed_tokens"]) == (
        "routing", 0, "platform_routing", 4_000)
    assert d["detail"].startswith("read 5,000 tokens (only the prefix every session shares) 10s after s2 left 9,000 "
                                  "cached, within the entry's lifetime; Bedrock cross-region inference routes "
                                  "requests between caches: ")


@pytest.mark.parametrize("read, kind, writer", [
    # 21,120 is what #3 left inside turn 1, past where turn 1's reasoning began: once the turns after drop it
    # (GPT-5.3: only the current turn's reasoning is sent), no entry holding it can be read, so no replica served it
    (21_120, "unexplained", None),
    (19_968, "stale_read", "cdx-turns#1"),  # turn 1's start, before any reasoning: still readable, #1's entry
])
def test_after_a_turns_reasoning_is_dropped_only_what_preceded_it_is_a_level_left_to_read(tmp_path, read, kind, writer):
    from test_codex_turns import write_rollout  # the Codex rollout of tests/test_codex_turns.py, its last read varied

    rows = {row["id"]: row for row in build_report([str(write_rollout(tmp_path, last_read=read))],
                                                   fixes=False).to_json()["requests"]}
    d = the_cause(rows["cdx-turns#9"])
    assert (d["kind"], d.get("writer_id")) == (kind, writer)
    assert rows["cdx-turns#9"]["missed_read_tokens"] == 30_080 - read  # #8 left 30,080 (its read)


@pytest.mark.parametrize("elsewhere", [(), (rec("o1", 0, read=0, write=10_000, session="o"),
                                            rec("o2", 10, read=4_000, write=6_003, session="o"))])
def test_a_prompt_cut_before_the_compaction_that_shows_the_tools_system_size_is_priced_on_it(tmp_path, elsewhere):
    # c's prompt is cut to 3,003 tokens (under b's 12,000); d compacts and reads 2,500: the session's tools+system
    # size. That level was reusable at c too, which read 1,000 of it: 1,500 missed, whether or not a request of
    # another session (o2: 4,000 of 10,000) fell short
    rows = report(tmp_path, *OPENING, rec("c", 20, read=1_000, write=2_000),
                  rec("d", 30, read=2_500, write=9_000, events=[{"kind": "compaction"}]), *elsewhere)
    assert (rows["c"]["missed_read_tokens"], rows["c"]["ideal_read_tokens"]) == (1_500, 2_500)
    assert the_cause(rows["c"])["detail"] == (
        "the read fell from 12,000 to 1,000 tokens (10s after b, after the prompt shrank (its history was cut)), "
        f"{NOTHING_SAYS_WHY}")
    assert rows["d"]["diagnoses"] == [] and rows["d"]["missed_read_tokens"] == 0


IDLE_299 = "; it had been idle 4m59s of its 5m00s lifetime (idle entries are the first evicted)"
ONE_PING = ("send 1 keep-alive request (the same prefix, max_tokens 1) every 4m30s through pauses like this one: 1,205 "
            "input-equivalents against 13,800 for the rebuild (pings pay for pauses up to 54m30s); or use \"ttl\": "
            "\"1h\" on the cache_control breakpoints: entries live 1h00m, long enough for this pause (writes at 2× "
            "input)")


@pytest.mark.parametrize("gap, cause", [
    # c reads none of the 12,000 b left (input 3 + 0 + 12,500 = 12,503, noise 125): a miss of 12,000 either way
    (299, {"kind": "unexplained", "inferred": True, "path": None, "token_position": 0, "missed_tokens": 12_000,
           "detail": f"the read fell from 12,000 to 0 tokens (4m59s after b), {NOTHING_SAYS_WHY}{IDLE_299}"}),
    # exactly the 300 s lifetime: the entry is gone (as in the simulator). One ping (floor(0 / 270) + 1) of
    # 0.1 x 12,000 + 5 = 1,205 against a rebuild of (1.25 - 0.1) x 12,000 = 13,800; pings pay for pauses under
    # 300 + floor(13,800 / 1,205) x 270 = 3,270 s (54m30s); the 1h lifetime covers the pause too
    (300, {"kind": "ttl_expired", "inferred": True, "path": None, "token_position": None, "seconds_past": 0.0,
           "missed_tokens": 12_000, "evidence": "pause",
           "detail": "5m00s since b started; the entry lives 5m00s (the default)",
           "advice": ONE_PING}),
    (301, {"kind": "ttl_expired", "inferred": True, "path": None, "token_position": None, "seconds_past": 1.0,
           "missed_tokens": 12_000, "evidence": "pause",
           "detail": "5m01s since b started; the entry lives 5m00s (the default)",
           "advice": ONE_PING}),
])
def test_an_entry_is_gone_at_exactly_its_lifetime_as_in_the_simulator(tmp_path, gap, cause):
    rows = report(tmp_path, *OPENING, rec("c", 10 + gap, read=0, write=12_500))
    assert the_cause(rows["c"]) == cause


@pytest.mark.parametrize("gap, cause", [
    # s4 sends s3's 10,503-token prompt to Haiku 299 s after s2: Haiku's own 10,000-token entry still lives, and
    # s4 read none of it
    (299, {"kind": "unexplained", "inferred": True, "path": None, "token_position": 0, "missed_tokens": 10_000,
           "detail": f"the read fell from 10,000 to 0 tokens (4m59s after s2), {NOTHING_SAYS_WHY}{IDLE_299}"}),
    # at exactly 300 s Haiku's entry is gone: a switch with nothing to read, nothing charged
    (300, switch(SONNET, HAIKU, "; its own entry, last used by s2 5m00s before, expired meanwhile")),
    (301, switch(SONNET, HAIKU, "; its own entry, last used by s2 5m01s before, expired meanwhile")),
])
def test_a_switch_back_finds_the_models_own_entry_gone_at_exactly_its_lifetime(tmp_path, gap, cause):
    rows = report(tmp_path, rec("s1", 0, read=0, write=10_000), rec("s2", 10, read=0, write=10_000, model=HAIKU),
                  rec("s3", 20, read=10_000, write=500), rec("s4", 10 + gap, read=0, write=10_500, model=HAIKU))
    assert the_cause(rows["s4"]) == cause


def test_the_second_pass_explains_with_the_levels_of_the_first_and_learns_none(tmp_path):
    # `report` explains the trace again once every level is known: c's prompt was cut (3,003 tokens under b's
    # 12,000) before d's compaction showed the 2,500-token tools+system level, so only the second pass finds
    # c's fall to 1,000 (1,500 missed). f falls to 1,000 once in the log as read (12,000 -> 1,000, 11,000 missed):
    # one fall is no level, and a fall the second pass finds is no second one (levels are the first pass's)
    rows = report(tmp_path, *OPENING, rec("c", 20, read=1_000, write=2_000),
                  rec("d", 30, read=2_500, write=9_000, events=[{"kind": "compaction"}]),
                  rec("e", 40, read=11_500, write=500), rec("f", 50, read=1_000, write=11_000))
    assert [rows[x]["missed_read_tokens"] for x in "cdef"] == [1_500, 0, 0, 11_000]
    assert the_cause(rows["f"]) == {
        "kind": "unexplained", "inferred": True, "path": None, "token_position": 1_000, "missed_tokens": 11_000,
        "detail": f"the read fell from 12,000 to 1,000 tokens (10s after e), {NOTHING_SAYS_WHY}"}


def test_a_reported_cause_on_a_request_that_read_all_it_could_is_no_fall_to_name_a_level_by(tmp_path):
    # c's prompt is cut (3 + 4,000 + 1,000 = 5,003, far under b's 12,000) and no tools+system size is known, so
    # the 4,000 it read is all it could: no fall, though the provider reports a cause. e falls to 4,000 once
    # (12,000 d left -> 4,000, 8,000 missed; no request left a level at 4,000): one fall is no level, and nothing
    # in the log explains it
    c = rec("c", 20, read=4_000, write=1_000)
    reason = {"type": "messages_changed", "cache_missed_input_tokens": 1_000}
    c["response"]["diagnostics"] = {"cache_miss_reason": reason}
    rows = report(tmp_path, *OPENING, c, rec("d", 30, read=5_000, write=7_000), rec("e", 40, read=4_000, write=8_000))
    assert (rows["c"]["missed_read_tokens"], rows["c"]["ideal_read_tokens"], rows["c"]["diagnoses"][0]["inferred"]) \
        == (0, 4_000, False)
    assert the_cause(rows["e"]) == {
        "kind": "unexplained", "inferred": True, "path": None, "token_position": 4_000, "missed_tokens": 8_000,
        "detail": f"the read fell from 12,000 to 4,000 tokens (10s after d), {NOTHING_SAYS_WHY}"}


def test_a_switch_back_on_a_server_whose_rules_give_no_lifetime_says_no_entry_expired(tmp_path):
    # a local server (no rules in providers/: no lifetime): s3 is back on qwen3:8b after s2's llama3.1:8b, and s4
    # back on llama3.1:8b, each resending the prompt before it (10,003 tokens). Nothing says how long a local
    # entry lives, so no "expired meanwhile" is said of it; nothing is charged to a switch
    rows = report(tmp_path, *(dict(r, provider="local") for r in (
        rec("s1", 0, read=0, write=10_000, model="qwen3:8b"), rec("s2", 10, read=0, write=10_000, model="llama3.1:8b"),
        rec("s3", 20, read=0, write=10_000, model="qwen3:8b"),
        rec("s4", 30, read=0, write=10_000, model="llama3.1:8b"))))
    assert the_cause(rows["s3"]) == switch("llama3.1:8b", "qwen3:8b")
    assert the_cause(rows["s4"]) == switch("qwen3:8b", "llama3.1:8b")
    assert [rows[s]["missed_read_tokens"] for s in ("s2", "s3", "s4")] == [0, 0, 0]
