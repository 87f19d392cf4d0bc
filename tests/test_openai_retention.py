"""A request's own cache retention (OpenAI's `prompt_cache_retention`, models before GPT-5.6): `in_memory`
(the default; SDKs spell it `in_memory` or `in-memory`) keeps a prefix 10 minutes after its last use, `24h` a
day (providers/openai.toml, the prompt-caching guide). Agents built on the OpenAI SDKs send `24h` (the Agents
SDK's ModelSettings, pi, Factory Droid), so a log of theirs must be simulated with the day it asked for:
otherwise every pause over 10 minutes reads as an expiry, with advice to set what is already set.

Block sizes are given on the records (`block_tokens`, as a fixed trace carries them), so each figure is
arithmetic on the rules: gpt-5 reads the matched prefix rounded down to 128 tokens from 1,024 on.
"""
from __future__ import annotations

import json

import pytest

from kvprobe.report import build_report
from kvprobe.trace import TraceRecord

SYSTEM = "You are a careful coding agent. Keep answers short."  # its size is given: 2,000 tokens
SIZES = [2_000, 10]  # the system message, then the question (a new one every request)
READ = 1_920  # 2,000 matched, rounded down to 128 tokens
IN_MEMORY, DAY = 600, 86_400


def record(rid: str, at: float, retention: str | None, model: str = "gpt-5", question: str = "") -> TraceRecord:
    body = {"model": model, "messages": [{"role": "system", "content": SYSTEM},
                                         {"role": "user", "content": question or f"Question {rid}?"}]}
    if retention is not None:
        body["prompt_cache_retention"] = retention
    return TraceRecord(id=rid, provider="openai", started_at=at, request=body, endpoint="/v1/chat/completions",
                       session="agent", extra={"block_tokens": SIZES})


def reads(*sent: tuple[str, float, str | None]) -> list[int]:
    report = build_report([], records=[record(rid, at, ret) for rid, at, ret in sent], top=0)
    return [r.usage.cache_read_tokens for r in report.results]


@pytest.mark.parametrize("retention, life", [
    (None, IN_MEMORY), ("in_memory", IN_MEMORY), ("in-memory", IN_MEMORY), ("24h", DAY),
    ("7d", IN_MEMORY),  # not a retention the provider offers: the default stands
])
@pytest.mark.parametrize("past, read", [(-1, READ), (0, 0), (1, 0)])
def test_a_prefix_lives_the_retention_its_request_asked_for(retention, life, past, read):
    """Written at 0 s; asked again at its lifetime - 1 s (read), exactly at it and 1 s after (gone)."""
    assert reads(("r1", 0, retention), ("r2", life + past, retention)) == [0, read]


def test_a_shorter_retention_does_not_cut_a_day_long_entry():
    """r1 asks for a day; r2 (in memory) reads it 20 minutes later; r3, 10 minutes after r2 (past in-memory
    retention from r2), still reads the entry r1 kept for a day."""
    assert reads(("r1", 0, "24h"), ("r2", 1_200, None), ("r3", 1_800, None)) == [0, READ, READ]


def test_gpt_5_6_has_no_retention_setting_to_ask_for():
    """GPT-5.6+: prompt_cache_options.ttl (30 minutes) supersedes prompt_cache_retention, which applies to
    earlier models only: an entry read at 1,799 s is gone at 1,800 s whatever the request says. (The same
    question twice: GPT-5.6's managed breakpoint sits after it.)"""
    def run(at: float) -> int:
        sent = [record(rid, t, "24h", "gpt-5.6-sol", "Same question?") for rid, t in (("r1", 0), ("r2", at))]
        return build_report([], records=sent, top=0).results[1].usage.cache_read_tokens
    assert run(1_799) == run(60) > 0
    assert run(1_800) == 0


def advice(retention: str | None, gap: float) -> str:
    report = build_report([], records=[record("r1", 0, retention), record("r2", gap, retention)], top=0)
    expired = [d for d in report.results[1].diagnoses if d.kind == "ttl_expired"]
    assert len(expired) == 1, report.results[1].diagnoses
    return expired[0].advice or ""


def test_a_pause_past_in_memory_retention_is_told_to_ask_for_a_day():
    assert '"prompt_cache_retention": "24h"' in advice(None, 1_200)


def test_a_request_that_asked_for_a_day_is_not_told_to_ask_for_it():
    """A pause of 25 hours outlasts the day it asked for: the advice is about that pause, not the setting."""
    said = advice("24h", 90_000)
    assert "prompt_cache_retention" not in said
    assert said  # something is said: a keep-alive, or that nothing pays for a pause this long


def _trace(tmp_path, retention: str | None, gaps=(0, 1_200, 2_400)) -> str:
    path = tmp_path / "t.jsonl"
    rows = []
    for k, at in enumerate(gaps):
        rec = record(f"r{k}", at, retention)
        rows.append({"id": rec.id, "session": rec.session, "provider": "openai", "endpoint": rec.endpoint,
                     "started_at": 1_764_583_200 + at, "request": rec.request, "block_tokens": SIZES})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_the_what_if_prices_a_day_of_retention_for_pauses_past_in_memory(cli, tmp_path):
    """r1 and r2 come 20 minutes after the request before: in memory, both rebuild; asking for a day, both read
    1,920 tokens at 0.1x instead of fresh (gpt-5 writes are free): 2 x 1,920 x 0.9 = 3,456 input equivalents.
    `fix` writes the setting into every request, and the report of its output reproduces the saving."""
    trace = _trace(tmp_path, None)
    data = json.loads(cli("report", trace, "--json").stdout)
    [fix] = data["fixes"]
    assert (fix["kind"], fix["key"], fix["requests"]) == ("ttl_1h", "retention", ["r1", "r2"])
    assert fix["saving_input_equivalent_tokens"] == 3_456.0
    fixed = tmp_path / "fixed.jsonl"
    assert cli("fix", trace, "-o", str(fixed)).exit_code == 0
    written = [json.loads(line)["request"] for line in fixed.read_text().splitlines()]
    assert [body["prompt_cache_retention"] for body in written] == ["24h", "24h", "24h"]
    after = json.loads(cli("report", str(fixed), "--json").stdout)["totals"]["input_equivalent_tokens"]
    assert data["totals"]["input_equivalent_tokens"] - after == 3_456.0


def test_no_retention_is_proposed_to_requests_that_already_ask_for_a_day(cli, tmp_path):
    """A day already asked for: the 20-minute pause is no miss; the 24h40m one outlasts a day, and only a ping
    within the day (a read of 1,920 at 0.1x) is proposed for it, not the setting the requests already send."""
    data = json.loads(cli("report", _trace(tmp_path, "24h", gaps=(0, 1_200, 90_000)), "--json").stdout)
    assert [(f["kind"], f["requests"]) for f in data["fixes"]] == [("keep_alive", ["r2"])]


def test_the_retention_is_written_only_where_the_api_takes_it(cli, tmp_path):
    """A Claude call in the same session and agent (between r1 and r2) is left as it was: Anthropic's API
    refuses fields it does not know; so is another session of the same model whose requests come a minute
    apart (no pause to outlast)."""
    trace = tmp_path / "mixed.jsonl"
    rows = [json.loads(line) for line in open(_trace(tmp_path, None))]
    claude = {"id": "c1", "session": "agent", "provider": "anthropic", "endpoint": "/v1/messages",
              "started_at": 1_764_583_200 + 1_800, "block_tokens": [10],
              "request": {"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}}
    other = [{**row, "id": f"o{k}", "session": "other", "started_at": 1_764_583_200 + 60 * k}
             for k, row in enumerate(rows[:2])]
    trace.write_text("".join(json.dumps(r) + "\n" for r in [*rows[:2], *other, claude, rows[2]]))
    fixed = tmp_path / "fixed.jsonl"
    assert cli("fix", str(trace), "-o", str(fixed), "--kind", "ttl_1h").exit_code == 0
    written = {r["id"]: r["request"] for r in map(json.loads, fixed.read_text().splitlines())}
    assert [written[i].get("prompt_cache_retention") for i in ("r0", "r1", "o0", "o1", "c1", "r2")] == [
        "24h", "24h", None, None, None, "24h"]
