"""Which texts a span move is proposed for (whatif/propose_content.py): a text block whose change was diagnosed
as what broke a request's prefix ("prefix_changed"), or the block whose volatile span breaks the prefix a fleet's
sessions share (3 sessions at least, analysis/fleet.py MIN_SESSIONS). Not a block that another diagnosis of the
same request names: an entry that expired there says nothing of its text changing.

Two sessions of one support product, 30 s apart, each naming its own customer at the start of a 1,400-token
system text (marked), then a 100-token question (marked) that opens with a version number. Session 1 asks again
400 s later with the version moved on: its question changed (prefix_changed at messages[0].content[0]) and the
system text's entry is gone (ttl_expired at system[0]) — the two diagnoses of one request. By Anthropic's rules
(entries keyed by everything before them): r1 of each session writes 1,500; session 1's r2 writes its 1,650
(nothing is left: 400 s is past the 5-minute lifetime). The names differ in two sessions only: not a fleet, and
no stream ever sees its own system text change, so no move of the name is proposed.
"""
from __future__ import annotations

from kvprobe.pricing import PriceBook
from kvprobe.report import build_report
from kvprobe.trace import TraceRecord

EPH = {"type": "ephemeral"}
T0 = 1_790_000_000.0
VOCAB = "check the order history before you answer and never promise a refund the policy does not allow".split()


def words(n: int, tag: str) -> str:
    return " ".join([tag] + [VOCAB[(i * 5 + len(tag)) % len(VOCAB)] for i in range(n - 1)])


def usage(write: int) -> dict:
    return {"type": "message", "usage": {
        "input_tokens": 0, "cache_read_input_tokens": 0, "cache_creation_input_tokens": write,
        "cache_creation": {"ephemeral_5m_input_tokens": write, "ephemeral_1h_input_tokens": 0}, "output_tokens": 20}}


def question(k: int, version: int, marked: bool) -> dict:
    part = {"type": "text", "text": f"Version {version}. " + words(98, f"question{k}")}
    return {"role": "user", "content": [{**part, "cache_control": EPH} if marked else part]}


def session(k: int, name: str, start: float, requests: int) -> list[TraceRecord]:
    system = [{"type": "text", "text": f"You are the support agent of {name}. " + words(1_393, "policy"),
               "cache_control": EPH}]
    turns = [([question(k, 1, True)], 0.0, 1_500),
             ([question(k, 2, False), {"role": "assistant", "content": words(50, f"answer{k}")},
               {"role": "user", "content": [{"type": "text", "text": words(100, f"again{k}"), "cache_control": EPH}]}],
              400.0, 1_650)]
    return [TraceRecord(id=f"s{k}-r{i + 1}", provider="anthropic", started_at=start + at,
                        request={"model": "claude-sonnet-4-5", "max_tokens": 512, "system": system,
                                 "messages": messages},
                        response=usage(write), session=f"s{k}", agent="main", endpoint="/v1/messages",
                        first_token_at=start + at + 1.5)
            for i, (messages, at, write) in enumerate(turns[:requests])]


def test_a_text_is_moved_only_where_its_change_was_diagnosed_not_where_an_entry_expired():
    records = sorted(session(0, "Quill", T0, 2) + session(1, "Birch", T0 + 30, 1), key=lambda r: r.started_at)
    rep = build_report([], records=records, fixes=True, prices=PriceBook())
    [again] = [r for r in rep.results if r.sk.id == "s0-r2"]
    assert sorted((d.kind, d.path) for d in again.diagnoses) == [
        ("prefix_changed", "messages[0].content[0]"), ("ttl_expired", "system[0]")]
    assert rep.totals["input_equivalent_tokens"] == 1.25 * (1_500 + 1_500 + 1_650)
    assert rep.fleet == []  # two sessions are not a fleet
    assert not [f for f in rep.to_json()["fixes"] if f["kind"] == "stabilize_prefix" and f["path"] == "system[0]"]
