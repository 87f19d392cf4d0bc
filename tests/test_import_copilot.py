"""GitHub Copilot CLI's OpenTelemetry file export (kvprobe.importers.copilot_cli), written here in the shape its
JS-SDK exporter uses: one span, log or metric per line, chat spans carrying the GenAI usage attributes, the
same call also summarised by an invoke_agent span and an inference log. Figures are the usage written."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvprobe.importers import ImportReport, load_any

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
