"""`kvprobe replay`: ground truth from the local engine beside the provider simulation and observed usage."""
from __future__ import annotations

import json

import anthropic
import openai
import pytest

from conftest import ROOT
from kvprobe.replay.plan import Timing, plan
from kvprobe.serve import start_server
from kvprobe.trace import TraceRecord, read_trace, write_trace
from kvprobe.usage import normalize_usage

LONG = "You are a careful coding agent. Read the files before you edit them. " * 9  # ~620 byte tokens
TINY = ("--model", "tiny-random", "--device", "cpu", "--kv-blocks", "1024")


@pytest.fixture(scope="module")
def served_trace(tmp_path_factory):
    """A conversation served by `serve --cache engine --trace`, through both SDKs, answered greedily."""
    path = tmp_path_factory.mktemp("serve") / "trace.jsonl"
    with start_server(model="tiny-random", cache="engine", device="cpu", num_blocks=1024, trace=path) as server:
        claude = anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0)
        messages = [{"role": "user", "content": "Fix the login bug."}]
        for turn in range(3):
            reply = claude.messages.create(model="claude-sonnet-4-6", max_tokens=6, messages=messages,
                                           system=[{"type": "text", "text": LONG,
                                                    "cache_control": {"type": "ephemeral"}}],
                                           extra_body={"temperature": 0})
            messages += [{"role": "assistant", "content": reply.content[0].text or "ok"},
                         {"role": "user", "content": f"And step {turn}?"}]
        gpt = openai.OpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0)
        for _ in range(2):
            gpt.chat.completions.create(model="gpt-4o", max_tokens=4, temperature=0,
                                        messages=[{"role": "system", "content": LONG}, {"role": "user", "content": "Hi"}])
    return path


def test_replay_reproduces_the_cached_tokens_serve_reported(cli, served_trace):
    result = cli("replay", served_trace, "--json", *TINY)
    assert result.exit_code == 0, result.output
    replayed = {r["id"]: r for r in json.loads(result.stdout)["requests"]}
    records = list(read_trace(served_trace))
    assert len(records) == 5 and all(replayed[r.id]["status"] == "replayed" for r in records)
    for rec in records:
        served = normalize_usage(rec.provider, rec.usage)
        assert replayed[rec.id]["cached_tokens"] == served.cache_read_tokens == rec.response["kvprobe"]["engine_cached_tokens"]
        assert replayed[rec.id]["prompt_tokens"] == served.input_tokens
    assert [replayed[r.id]["cache"] for r in records] == ["cold"] + ["warm"] * 4  # one system prompt shared


def test_table_shows_engine_beside_provider(cli, served_trace):
    result = cli("replay", served_trace, *TINY)
    assert result.exit_code == 0, result.output
    assert "engine hit ratio" in result.stdout and "warm 4" in result.stdout and "Cold 1" in result.stdout


def _record(rid: str, at: float, body: dict, usage: dict | None = None) -> TraceRecord:
    return TraceRecord(rid, "anthropic", at, body, {"usage": usage} if usage else None, session="s",
                       endpoint="/v1/messages", finished_at=at + 2, first_token_at=at + 1)


def _body(user: str) -> dict:
    """Over the provider's 1,024-token minimum (estimated Claude tokens), so longer than the tiny model's
    context in its byte tokens: replay keeps the prefix that fits."""
    return {"model": "claude-sonnet-4-6", "max_tokens": 8,
            "system": [{"type": "text", "text": LONG * 8, "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": user}]}


def test_provider_ttl_miss_shows_as_a_latency_shortfall(cli, tmp_path):
    t0 = 1_760_000_000.0
    trace = tmp_path / "ttl.jsonl"
    write_trace(trace, [_record("a", t0, _body("one")), _record("b", t0 + 600, _body("two"))])
    result = cli("replay", trace, "--json", *TINY)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    b = next(r for r in out["requests"] if r["id"] == "b")
    assert b["cache"] == "warm" and b["provider"]["simulated"]["cache_read_tokens"] == 0
    assert "ttl_expired" in b["provider"]["diagnoses"]
    assert b["shortfall_tokens"] == b["cached_tokens"] and b["shortfall_seconds_est"] > 0
    assert out["totals"]["provider_shortfall_seconds_est"] > 0


def test_what_if_replays_each_fix(cli, tmp_path):
    t0 = 1_760_000_000.0
    trace = tmp_path / "ttl.jsonl"
    write_trace(trace, [_record("a", t0, _body("one")), _record("b", t0 + 600, _body("two"))])
    result = cli("replay", trace, "--json", "--what-if", *TINY)
    assert result.exit_code == 0, result.output
    what_if = json.loads(result.stdout)["what_if"]
    kinds = [w["kind"] for w in what_if]
    assert kinds[-1] == "all" and len(kinds) >= 2
    assert all(w["provider_prefill_seconds_saved_est"] > 0 for w in what_if)  # the TTL miss, in seconds


def test_long_prompts_are_truncated_or_skipped_and_counted(cli, tmp_path):
    sample = ROOT / "traces" / "sample_session.jsonl"  # 13-18k byte tokens: over the tiny model's context
    result = cli("replay", sample, "--json", "--limit", "2", *TINY)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["totals"]["truncated"] == 2 and all(r["truncated_from"] > r["prompt_tokens"] for r in out["requests"])
    assert any("cut" in n for n in out["notes"])
    skipped = cli("replay", sample, "--json", "--limit", "2", "--too-long", "skip", *TINY)
    totals = json.loads(skipped.stdout)["totals"]
    assert totals["skipped"] == 2 and totals["replayed"] == 0
    assert any("exceeds" in reason for reason in totals["not_replayed"])


def test_usage_only_records_are_skipped_with_a_reason(cli, tmp_path):
    trace = tmp_path / "usage.jsonl"
    trace.write_text(json.dumps({"kvprobe": 1, "id": "u1", "provider": "anthropic",
                                 "response": {"usage": {"input_tokens": 5, "output_tokens": 1}}}) + "\n")
    out = json.loads(cli("replay", trace, "--json", *TINY).stdout)
    assert out["requests"][0]["status"] == "skipped" and "usage-only" in out["requests"][0]["reason"]


def test_recorded_concurrency_is_kept():
    t0 = 1_760_000_000.0
    records = [TraceRecord("a", "anthropic", t0, _body("a"), finished_at=t0 + 5),
               TraceRecord("b", "anthropic", t0 + 1, _body("b"), finished_at=t0 + 4),  # overlaps a
               TraceRecord("c", "anthropic", t0 + 6, _body("c"), finished_at=t0 + 7)]  # after both
    items = plan(records)
    assert [i.depends_on for i in items] == [[], [], [0, 1]]
    assert [i.offset for i in items] == [0.0, 1.0, 6.0]


def test_timing_option_is_validated(cli, served_trace):
    assert Timing.parse("scaled:0.5").scale == 0.5 and Timing.parse("fast").scale == 0
    result = cli("replay", served_trace, "--timing", "slow", *TINY)
    assert result.exit_code == 2 and "--timing" in result.output


def test_openai_compatible_engine_reports_cached_tokens(cli, tmp_path, served_trace):
    with start_server(model="tiny-random", cache="engine", device="cpu", num_blocks=1024) as server:
        result = cli("replay", served_trace, "--json", "--engine", "openai-compatible", "--base-url", server.base_url)
        assert result.exit_code == 0, result.output
        out = json.loads(result.stdout)
        assert out["engine"]["model"] == "tiny-random"  # the first model the server lists
        cached = [r["cached_tokens"] for r in out["requests"]]
        assert cached[0] == 0 and all(c > 600 for c in cached[1:3])  # the converted conversation reuses its prefix
        t0 = 1_760_000_000.0
        trace = tmp_path / "ttl.jsonl"
        write_trace(trace, [_record("a", t0, _body("one")), _record("b", t0 + 600, _body("two"))])
        what_if = cli("replay", trace, "--json", "--what-if", "--engine", "openai-compatible",
                      "--base-url", server.base_url + "/v1")
    assert what_if.exit_code == 0, what_if.output
    report = json.loads(what_if.stdout)
    assert report["what_if"] and not any("could not be cleared" in n for n in report["notes"])  # reset between runs
    # These prompts exceed the tiny model's context: serve answers them in accounting mode (docs/engine.md)
    assert report["totals"]["failed"] == 0


def test_a_model_that_does_not_load_fails_replay_cleanly(cli, served_trace, tmp_path):
    # The engine is built on its own thread (see EngineLoop); its load error must still reach the user.
    res = cli("replay", str(served_trace), "--model", str(tmp_path / "absent.gguf"), "--device", "cpu")
    assert res.exit_code == 2
    assert "absent.gguf" in res.output and "Traceback" not in res.output


def test_the_engine_is_built_and_stepped_on_its_loop_thread():
    import threading

    from kvprobe.serve.engine_loop import EngineLoop
    from localengine import Engine

    threads = []

    def load():
        threads.append(threading.current_thread().name)
        return Engine(model="tiny-random", device="cpu", num_blocks=64)

    loop = EngineLoop(load=load)
    try:
        assert threads == ["kvprobe-engine"]  # not the caller's: only one thread ever runs torch's pools
        stepped = loop.call(lambda e: (threading.current_thread().name, e.generate([5, 6, 7], max_tokens=2)))
        name, result = stepped.result(timeout=60)
        assert name == "kvprobe-engine" and len(result.token_ids) == 2
    finally:
        loop.stop()
    with pytest.raises(ValueError, match="no such model"):
        EngineLoop(load=lambda: (_ for _ in ()).throw(ValueError("no such model")))
    with pytest.raises(ValueError):
        EngineLoop()
