"""GitHub Copilot CLI: its OpenTelemetry file export (~/.copilot/otel/*.jsonl, or the file
$COPILOT_OTEL_FILE_EXPORTER_PATH names), one span, log or metric per line.

Quirks:
* Copilot CLI's own session files (~/.copilot/session-state/<id>/events.jsonl) name each call's model and
  `apiCallId` but hold no per-call usage (only per-model totals at `session.shutdown`): the per-call usage
  is in the OTel export, which this reads. Each line is a JS-SDK span (`{"type": "span", "traceId", "spanId",
  "name", "startTime", "endTime", "attributes"}`, times as [seconds, nanoseconds]), a log (`hrTime`, `_body`)
  or a metric.
* One model call = one `chat` span (`gen_ai.operation.name`); the same call is also summarised by its
  `invoke_agent` span and an inference log (`gen_ai.client.inference.operation.details`), which are not
  counted again. Usage attributes as OpenTelemetry GenAI (kvprobe.importers.otel.genai_usage).
* Session from `gen_ai.conversation.id` (else the trace id, counted as sessionless); provider from the model
  id; records carry `platform = "github-copilot"`: Copilot's service sits between the CLI and the model's
  provider, and kvprobe has no rules or prices of its own for it (its subscription is billed in premium
  requests), so the provider's are used and the report says so.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kvprobe.importers.base import BadCount, Progress, SourceStats, as_str, iter_objects, time_or_none
from kvprobe.importers.otel import genai_usage
from kvprobe.request.detect import infer_provider
from kvprobe.trace import TraceRecord

NAME = "copilot_cli"
PLATFORM = "github-copilot"
_KINDS = ("span", "metric", "log")


def default_paths() -> list[Path]:
    named = os.environ.get("COPILOT_OTEL_FILE_EXPORTER_PATH")
    paths = [Path(named).expanduser()] if named else []
    folder = Path(os.environ.get("COPILOT_HOME") or "~/.copilot").expanduser() / "otel"
    return [p for p in paths + [folder] if p.exists()]


def sniff(first: Any) -> bool:
    if not isinstance(first, dict) or not isinstance(first.get("attributes"), dict | None):
        return False
    return (first.get("type") in _KINDS and ("spanId" in first or "name" in first)) or \
        ("hrTime" in first and "attributes" in first)


def _time(value: Any) -> float | None:
    """[seconds, nanoseconds] (the JS SDK's HrTime) as epoch seconds."""
    if isinstance(value, list) and len(value) == 2 and all(v.__class__ in (int, float) for v in value):
        return time_or_none(value[0] + value[1] / 1e9)
    return None


def read(path: Path, stats: SourceStats, seen: set[str], progress: Progress | None = None) -> Iterator[TraceRecord]:
    for lineno, line in iter_objects(path, stats, progress):
        a = line.get("attributes")
        if line.get("type") != "span" or not isinstance(a, dict) or a.get("gen_ai.operation.name") != "chat" \
                or not any(k.startswith("gen_ai.usage.") for k in a):
            stats.ignored += 1  # metrics, logs and the agent's summary spans: the chat span is the call
            continue
        record = _record(line, a, stats, lineno, path)
        if record is not None and stats.first_time(record.id, seen):
            yield record


def _record(span: dict[str, Any], a: dict[str, Any], stats: SourceStats, lineno: int,
            path: Path) -> TraceRecord | None:
    model = as_str(a.get("gen_ai.response.model")) or as_str(a.get("gen_ai.request.model"))
    provider = infer_provider({"model": model} if model else None) or "openai"
    try:
        usage = genai_usage(provider, a)
    except BadCount as exc:
        stats.skip("invalid usage", lineno, str(exc))
        return None
    response_id = as_str(a.get("gen_ai.response.id"))
    span_id = as_str(span.get("spanId"))
    if not response_id and not span_id:
        stats.skip("chat span without spanId or gen_ai.response.id", lineno)
        return None
    session = as_str(a.get("gen_ai.conversation.id"))
    if session is None:
        stats.sessionless += 1
        session = as_str(span.get("traceId")) or span_id
    start, end = _time(span.get("startTime")), _time(span.get("endTime"))
    response: dict[str, Any] = {"model": model, "usage": usage}
    if response_id:
        response["id"] = response_id
    return TraceRecord(id=f"response:{response_id}" if response_id else f"span:{span_id}", provider=provider,
                       started_at=start if start is not None else end, response=response, session=session,
                       agent=as_str(a.get("gen_ai.agent.name")) or "main", finished_at=end,
                       extra={"source_format": NAME, "platform": PLATFORM}, source=str(path), line=lineno)
