"""Stateful OpenAI Responses requests (`previous_response_id`): the API puts the stored response's input and
output before the request's own input, so the prompt the model reads, and the cache it hits, is the whole
conversation. A captured trace holds the earlier request and its response; the report must price the prompt
the model saw, not the few items the client sent.

Sizes are given on the records (`block_tokens`, one per block of the prompt the model saw), so each figure is
arithmetic on the rules: gpt-4o caches from 1,024 tokens and reads the matched prefix rounded down to 128
(its entries hold the prompt alone: providers/openai.toml gives it no `entry_holds_response`).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvprobe.analysis import split_parse
from kvprobe.report import build_report
from kvprobe.trace import TraceRecord

INSTRUCTIONS = "Answer from the document the user sent."  # 100 tokens (given)
DOCUMENT = "The quarterly report says revenue grew. " * 40  # 2,000 tokens (given)


T0 = 1_764_583_200.0  # 2025-12-01 10:00 UTC


def turn(rid: str, at: float, text: str, previous: str | None, sizes: list[int]) -> dict:
    body = {"model": "gpt-4o", "instructions": INSTRUCTIONS, "input": [{"role": "user", "content": text}],
            "store": True}
    if previous:
        body["previous_response_id"] = previous
    answer = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": f"answer {rid}"}]}
    return {"id": rid, "session": "s1", "provider": "openai", "endpoint": "/v1/responses", "started_at": at,
            "request": body, "response": {"id": f"resp_{rid}", "object": "response", "output": [answer]},
            "block_tokens": sizes}


# r1 sends the document (instructions 100 + document 2,000; answer 50); r2 and r3 chain on the one before and
# send a 10-token question each: r2's prompt is 100 + 2,000 + 50 + 10 = 2,160, r3's 2,160 + 50 + 10 = 2,220.
CHAIN = [turn("r1", T0, DOCUMENT, None, [100, 2_000]),
         turn("r2", T0 + 60, "What grew?", "resp_r1", [100, 2_000, 50, 10]),
         turn("r3", T0 + 120, "By how much?", "resp_r2", [100, 2_000, 50, 10, 50, 10])]


def records(rows: list[dict]) -> list[TraceRecord]:
    return [TraceRecord(id=r["id"], session=r["session"], provider=r["provider"], endpoint=r["endpoint"],
                        started_at=r["started_at"], request=r["request"], response=r["response"],
                        extra={"block_tokens": r["block_tokens"]})
            for r in rows]


def test_a_chained_request_is_priced_on_the_conversation_the_model_saw():
    results = build_report([], records=records(CHAIN), top=0).results
    assert [r.usage.input_tokens for r in results] == [2_100, 2_160, 2_220]
    # r2 reads r1's stored prompt (2,100 -> 2,048 on the 128 grid); r3 reads r2's (2,160 -> 2,048)
    assert [r.usage.cache_read_tokens for r in results] == [0, 2_048, 2_048]
    r3 = results[2].sk.request
    assert [b.path for b in r3.blocks] == ["instructions", "input[0]", "input[1].content[0]", "input[2]",
                                           "input[3].content[0]", "input[4]"]


def test_a_previous_response_not_in_the_trace_leaves_the_request_as_sent():
    """r2 alone: the history its previous_response_id names is not known here (its own 110 tokens, read 0)."""
    alone = [turn("r2", T0 + 60, "What grew?", "resp_elsewhere", [100, 10])]
    [r2] = build_report([], records=records(alone), top=0).results
    assert (r2.usage.input_tokens, r2.usage.cache_read_tokens) == (110, 0)


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("way", ["count", "cut"])
def test_a_conversation_across_the_cut_of_a_two_core_parse_equals_one_pass(cli, monkeypatch, tmp_path, way):
    """Other sessions' records (another document) lie between r1 and r2, so that the cut falls between them
    (r2's history then lies in the part the other process did not read): the report equals one pass."""
    pad = [turn(f"p{k}", T0 + 10 + k, "Another text entirely. " * 40, None, [100, 2_000]) for k in range(6)]
    for row in pad:
        row["session"] = f"pad{row['id']}"
    trace = _write(tmp_path / "t.jsonl", [CHAIN[0], *pad, *CHAIN[1:]])
    monkeypatch.setenv("KVPROBE_SPLIT_MIN_BYTES", "1")
    cut = split_parse._cut(trace, split_parse.SHARE)
    head = trace.read_bytes()[:cut]
    assert b'"id": "r1"' in head and b'"id": "r2"' not in head  # r1 before the cut, r2 after it
    monkeypatch.delenv("KVPROBE_SPLIT_MIN_BYTES")
    one = cli("report", str(trace), "--json", "--no-fixes")
    monkeypatch.setenv("KVPROBE_SPLIT_MIN_BYTES", "1")
    if way == "cut":
        monkeypatch.setenv("KVPROBE_CUT_MIN_BYTES", "1")
    two = cli("report", str(trace), "--json", "--no-fixes")
    assert one.exit_code == two.exit_code == 0, one.output + two.output
    assert json.loads(two.output) == json.loads(one.output)
    reads = {r["id"]: r["cache_read_tokens"] for r in json.loads(two.output)["requests"]}
    assert (reads["r2"], reads["r3"]) == (2_048, 2_048)


def test_diff_of_two_chained_records_compares_their_conversations(cli, tmp_path):
    """r3 continues r2's conversation (r2's items, its answer, a new question): B extends A, nothing of A
    changed, where the items each sent alone differ from the first one on."""
    trace = _write(tmp_path / "t.jsonl", CHAIN)
    data = json.loads(cli("diff", f"{trace}#r2", f"{trace}#r3", "--json").output)
    assert data["first_change"] is None and data["extends"] is True


def test_a_conversation_object_prepends_its_items_so_far():
    """The same two turns through a conversation object (`conversation`: an id, then {"id": ...}) instead of
    previous_response_id: the second is priced on 100 + 2,000 + 50 + 10 = 2,160 tokens and reads 2,048."""
    rows = [turn("c1", T0, DOCUMENT, None, [100, 2_000]), turn("c2", T0 + 60, "What grew?", None, [100, 2_000, 50, 10])]
    rows[0]["request"]["conversation"] = "conv_1"
    rows[1]["request"]["conversation"] = {"id": "conv_1"}
    results = build_report([], records=records(rows), top=0).results
    assert [(r.usage.input_tokens, r.usage.cache_read_tokens) for r in results] == [(2_100, 0), (2_160, 2_048)]

