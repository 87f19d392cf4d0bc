"""GitHub Copilot CLI's OpenTelemetry file export (kvprobe.importers.copilot_cli), written here in the shape its
JS-SDK exporter uses: one span, log or metric per line, chat spans carrying the GenAI usage attributes, the
same call also summarised by an invoke_agent span and an inference log. Figures are the usage written."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvprobe.importers import ImportReport, load_any
from kvprobe.usage import normalize_usage

T0 = 1_775_934_000  # 2026-04-11 19:00:00 UTC


def _chat(t: int, resp: str, model: str, inp: int, out: int, read: int = 0, write: int = 0,
          conv: str | None = "conv-1") -> dict:
    attrs = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model, "gen_ai.response.model": model,
             "gen_ai.response.id": resp, "gen_ai.usage.input_tokens": inp, "gen_ai.usage.output_tokens": out}
    if conv:
        attrs["gen_ai.conversation.id"] = conv
    if read:
        attrs["gen_ai.usage.cache_read.input_tokens"] = read
    if write:
        attrs["gen_ai.usage.cache_creation.input_tokens"] = write
    return {"type": "span", "traceId": f"trace-{resp}", "spanId": f"span-{resp}", "name": f"chat {model}",
            "startTime": [T0 + t, 0], "endTime": [T0 + t + 4, 500_000_000], "attributes": attrs}


@pytest.fixture
def export(tmp_path: Path) -> Path:
    rows = [
        {"type": "metric", "name": "gen_ai.client.token.usage"},
        _chat(0, "r1", "claude-sonnet-4-5", inp=30_000, out=400, write=29_000),
        {"type": "span", "traceId": "trace-r1", "spanId": "agent-1", "name": "invoke_agent GitHub Copilot",
         "attributes": {"gen_ai.operation.name": "invoke_agent", "gen_ai.response.id": "r1",
                        "gen_ai.conversation.id": "conv-1", "gen_ai.usage.input_tokens": 30_000,
                        "gen_ai.usage.output_tokens": 400}},
        {"hrTime": [T0 + 4, 0], "_body": "GenAI inference", "traceId": "trace-r1",
         "attributes": {"event.name": "gen_ai.client.inference.operation.details", "gen_ai.response.id": "r1",
                        "gen_ai.usage.input_tokens": 30_000, "gen_ai.usage.output_tokens": 400}},
        _chat(20, "r2", "claude-sonnet-4-5", inp=31_000, out=300, read=29_000, write=1_500),
        _chat(40, "r3", "gpt-5.4", inp=12_000, out=100, read=10_240, conv=None),
    ]
    path = tmp_path / "otel" / "copilot.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_each_chat_span_is_one_request_and_its_summaries_are_not_counted_again(export):
    report = ImportReport()
    records = {r.id: r for r in load_any(export.parent, report=report)}
    assert list(records) == ["response:r1", "response:r2", "response:r3"]
    r2 = records["response:r2"]
    assert (r2.provider, r2.session, r2.platform) == ("anthropic", "conv-1", "github-copilot")
    assert (r2.started_at, r2.finished_at) == (T0 + 20, T0 + 24.5)
    # GenAI input counts the cache tokens: 31,000 - 29,000 read - 1,500 written = 500 uncached
    assert r2.usage == {"input_tokens": 500, "cache_read_input_tokens": 29_000, "cache_creation_input_tokens": 1_500,
                        "output_tokens": 300}
    assert records["response:r3"].session == "trace-r3" and report.sources[0].sessionless == 1
    assert report.skipped == 0 and report.sources[0].format == "copilot_cli"


def test_usage_totals_and_the_platform_is_named(cli, export):
    data = json.loads(cli("usage", export, "--json").stdout)
    t = data["totals"]
    assert (t["requests"], t["input_tokens"], t["cache_read_tokens"], t["cache_write_tokens"]) == \
        (3, 73_000, 39_240, 30_500)


def test_a_report_on_the_export_says_fixes_need_bodies_capture_cannot_record(cli, export):
    text = cli("report", export, "--what-if").stdout
    assert "Fixes: no request bodies: fixes cannot be simulated" in text
    assert "Copilot CLI: Copilot CLI sends its requests to GitHub's Copilot service" in text


def _event(t: int, kind: str, data: dict) -> dict:
    return {"type": kind, "data": data, "id": f"e{t}", "timestamp": f"2026-04-11T19:{t // 60:02d}:{t % 60:02d}.000Z",
            "parentId": None}


@pytest.fixture
def copilot_home(tmp_path: Path) -> Path:
    """A session file of two process lifetimes: the first with per-model totals, the resumed one with only the
    process's tokenDetails; and Copilot's own settings beside session-state/. Copilot's input counts are the
    whole prompt, its cached part included (its own summary: "7.5m input, 5.6m cache read"): 344,000 of which
    300,000 read and 40,000 written; 59,000 of which 50,000 read and 8,000 written."""
    home = tmp_path / ".copilot"
    folder = home / "session-state" / "c623bce1-5906-429f-a517-d4fb2cee7cf7"
    folder.mkdir(parents=True)
    metrics = {"claude-sonnet-4.5": {"requests": {"count": 12, "cost": 12},
                                     "usage": {"inputTokens": 344_000, "outputTokens": 2_500,
                                               "cacheReadTokens": 300_000, "cacheWriteTokens": 40_000}},
               "gpt-5.4-mini": {"requests": {"count": 2, "cost": 0},
                                "usage": {"inputTokens": 900, "outputTokens": 40, "cacheReadTokens": 0,
                                          "cacheWriteTokens": 0}}}
    events = [
        _event(0, "session.start", {"sessionId": "c623bce1-5906-429f-a517-d4fb2cee7cf7", "version": 1,
                                    "producer": "copilot-agent", "copilotVersion": "0.0.369"}),
        _event(5, "session.model_change", {"newModel": "claude-sonnet-4.5"}),
        _event(6, "user.message", {"content": "fix it", "interactionId": "i1"}),
        _event(30, "assistant.message", {"messageId": "a1", "content": "done", "model": "claude-sonnet-4.5"}),
        _event(600, "session.shutdown", {"modelMetrics": metrics, "currentModel": "claude-sonnet-4.5"}),
        _event(1_200, "session.resume", {}),
        _event(1_800, "session.shutdown", {"currentModel": "claude-sonnet-4.5", "tokenDetails": {
            "input": {"tokenCount": 59_000}, "cache_read": {"tokenCount": 50_000},
            "cache_write": {"tokenCount": 8_000}, "output": {"tokenCount": 700}}}),
    ]
    (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (home / "config.json").write_text(json.dumps({"model": "claude-sonnet-4.5"}, indent=2))
    return home


def test_a_session_file_gives_each_process_and_models_totals_as_records_of_their_own(cli, copilot_home):
    report = ImportReport()
    records = {r.id: r for r in load_any(copilot_home, report=report)}
    sid = "c623bce1-5906-429f-a517-d4fb2cee7cf7"
    assert list(records) == [f"{sid}:process-1:claude-sonnet-4.5", f"{sid}:process-1:gpt-5.4-mini",
                             f"{sid}:process-2:claude-sonnet-4.5"]
    first = records[f"{sid}:process-1:claude-sonnet-4.5"]
    assert first.usage == {"input_tokens": 4_000, "cache_read_input_tokens": 300_000,
                           "cache_creation_input_tokens": 40_000, "output_tokens": 2_500}
    assert (first.agent, first.finished_at - first.started_at) == ("process-1:claude-sonnet-4.5", 600)
    assert records[f"{sid}:process-2:claude-sonnet-4.5"].started_at - first.started_at == 1_200  # its resume
    assert report.skipped == 0 and sum(s.totals for s in report.sources) == 3
    assert any("Copilot CLI process's token totals" in line for line in report.summary())
    data = json.loads(cli("report", copilot_home, "--json").stdout)
    # sums are never compared with each other: no cause is inferred from them
    assert data["totals"]["input_tokens"] == 344_000 + 900 + 59_000 and data["misses"] == []


def test_a_session_files_input_count_holds_its_cached_part_and_a_copy_under_another_name_is_read(tmp_path):
    """Four one-shot gpt-5.4-mini sessions of a public Copilot CLI log (Entire's checkpoints, as `full.jsonl`)
    count 15,517 / 15,528 / 15,530 / 15,534 input tokens, the last with 14,848 read from the cache: the count
    is the whole prompt. Read as uncached it was a 30,382-token prompt at a 48.9% hit ratio; by hand it is
    15,534 tokens, 686 of them fresh, 95.6% read. And the copy named full.jsonl was read as an OTel export:
    every line ignored, no request."""
    folder = tmp_path / "6a" / "6787e4f86b" / "3"
    folder.mkdir(parents=True)
    usage = {"inputTokens": 15_534, "outputTokens": 30, "cacheReadTokens": 14_848, "cacheWriteTokens": 0,
             "reasoningTokens": 15}
    events = [_event(0, "session.start", {"sessionId": "s-mini", "version": 1, "producer": "copilot-agent",
                                          "copilotVersion": "1.0.64"}),
              _event(1, "user.message", {"content": "hi", "interactionId": "i1"}),
              _event(9, "session.shutdown", {"modelMetrics": {"gpt-5.4-mini": {"requests": {"count": 1},
                                                                                "usage": usage}},
                                             "currentModel": "gpt-5.4-mini"})]
    (folder / "full.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (record,) = load_any(tmp_path)
    u = normalize_usage(record.provider, record.usage)
    assert (u.input_tokens, u.fresh_input_tokens, u.cache_read_tokens) == (15_534, 686, 14_848)


def test_a_session_file_beside_the_otel_export_is_not_counted_twice(copilot_home, export):
    (copilot_home / "otel").mkdir()
    (copilot_home / "otel" / "copilot.jsonl").write_bytes(export.read_bytes())
    report = ImportReport()
    records = list(load_any(copilot_home, report=report))
    assert [r.id for r in records] == ["response:r1", "response:r2", "response:r3"]
    assert report.reasons() == {"session totals beside an OpenTelemetry export (read call by call there)": 1}
