"""GitHub Copilot CLI: its OpenTelemetry file export (~/.copilot/otel/*.jsonl, or the file
$COPILOT_OTEL_FILE_EXPORTER_PATH names), one span, log or metric per line; and its session files
(~/.copilot/session-state/<id>/events.jsonl, or a copy of it under another name), where only each process's
totals are kept.

Quirks:
* Per-call usage is in the OTel export only. Each line is a JS-SDK span (`{"type": "span", "traceId", "spanId",
  "name", "startTime", "endTime", "attributes"}`, times as [seconds, nanoseconds]), a log (`hrTime`, `_body`)
  or a metric. One model call = one `chat` span (`gen_ai.operation.name`); the same call is also summarised by
  its `invoke_agent` span and an inference log (`gen_ai.client.inference.operation.details`), which are not
  counted again. Usage attributes as OpenTelemetry GenAI (kvprobe.importers.otel.genai_usage).
* The session files (`{type, data, id, timestamp, parentId}` events) name each call's model but hold usage only
  in `session.shutdown`: per model in `modelMetrics[model].usage` {inputTokens (the whole prompt, the cached
  part included), cacheReadTokens, cacheWriteTokens, outputTokens} (else the process's `tokenDetails`). Each shutdown covers one process
  lifetime (a resumed session appends another). Each model's total becomes one record, counted as a process
  total (`SourceStats.totals`): its own stream (`agent = "process-<n>:<model>"`), so no cause is inferred
  from sums, and timed from the process's start to its shutdown. A session file beside an OTel export (the
  same Copilot folder) is skipped, counted: the export has the same tokens call by call.
* Session from `gen_ai.conversation.id` (else the trace id, counted as sessionless) or the session file's id;
  provider from the model id; records carry `platform = "github-copilot"`: Copilot's service sits between the
  CLI and the model's provider, and kvprobe has no rules or prices of its own for it (its subscription is
  billed in premium requests), so the provider's are used and the report says so.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import orjson

from kvprobe.importers.base import (BadCount, Progress, SourceStats, as_str, first_count, iter_objects,
                                   time_or_none)
from kvprobe.importers.formats import SNIFFERS, copilot_side_file as side_file
from kvprobe.importers.otel import genai_usage
from kvprobe.request.detect import infer_provider
from kvprobe.trace import TraceRecord

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

NAME = "copilot_cli"
EVENTS = "events.jsonl"  # a session file: ~/.copilot/session-state/<session id>/events.jsonl
PLATFORM = "github-copilot"


def default_paths() -> list[Path]:
    named = os.environ.get("COPILOT_OTEL_FILE_EXPORTER_PATH")
    paths = [Path(named).expanduser()] if named else []
    home = Path(os.environ.get("COPILOT_HOME") or "~/.copilot").expanduser()
    return [p for p in paths + [home / "otel", home / "session-state"] if p.exists()]


sniff = SNIFFERS[NAME]  # how a file of this format is recognised (importers.formats)


def _time(value: Any) -> float | None:
    """[seconds, nanoseconds] (the JS SDK's HrTime) as epoch seconds."""
    if isinstance(value, list) and len(value) == 2 and all(v.__class__ in (int, float) for v in value):
        return time_or_none(value[0] + value[1] / 1e9)
    return None


def read(path: Path, stats: SourceStats, seen: set[str], progress: Progress | None = None) -> Iterator[TraceRecord]:
    if side_file(path):  # settings and history: no usage (not parsed)
        stats.lines += 1
        stats.ignored += 1
        return
    if _session_file(path):
        yield from _session_totals(path, stats, seen, progress)
        return
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


def _session_file(path: Path) -> bool:
    """A session file: `events.jsonl`, or a copy under another name whose first line is a session event (the
    Entire CLI's checkpoints keep it as `full.jsonl`; read as an OTel export, its lines were all ignored)."""
    if path.name == EVENTS:
        return True
    try:
        with path.open("rb") as fh:
            first = orjson.loads(fh.readline(1 << 20))
    except (OSError, orjson.JSONDecodeError):
        return False
    kind = first.get("type") if isinstance(first, dict) else None
    return isinstance(kind, str) and kind.startswith("session.") and "parentId" in first


def _beside_an_export(path: Path) -> bool:
    """Whether the Copilot folder holding this session file also holds an OTel export (with the same tokens)."""
    home = path.parent.parent.parent  # <copilot home>/session-state/<id>/events.jsonl
    otel = home / "otel"
    return otel.is_dir() and any(otel.glob("*.jsonl"))


def _session_totals(path: Path, stats: SourceStats, seen: set[str],
                    progress: Progress | None) -> Iterator[TraceRecord]:
    if _beside_an_export(path):
        stats.lines += 1
        stats.skip("session totals beside an OpenTelemetry export (read call by call there)", None)
        return
    session, started, process = path.parent.name, None, 0
    for lineno, line in iter_objects(path, stats, progress):
        data = line.get("data") if isinstance(line.get("data"), dict) else {}
        stamp = time_or_none(line.get("timestamp"))
        kind = line.get("type")
        if kind == "session.start":
            session = as_str(data.get("sessionId")) or session
        if started is None:
            started = stamp
        if kind != "session.shutdown":
            stats.ignored += 1
            continue
        process += 1
        for model, usage in _model_totals(data, stats, lineno):
            rid = f"{session}:process-{process}:{model}"
            if not stats.first_time(rid, seen):
                continue
            stats.totals += 1
            provider = infer_provider({"model": model}) or "openai"
            yield TraceRecord(id=rid, provider=provider, started_at=started if started is not None else stamp,
                              response={"model": model, "usage": usage}, session=session,
                              agent=f"process-{process}:{model}", finished_at=stamp,
                              extra={"source_format": NAME, "platform": PLATFORM, "process_total": True},
                              source=str(path), line=lineno)
        started = None  # a resumed session's next process starts at its next event


def _model_totals(data: dict[str, Any], stats: SourceStats, lineno: int) -> list[tuple[str, dict[str, Any]]]:
    """(model, usage in Anthropic's shape) per model a shutdown names with tokens, else the process's
    `tokenDetails` under its current model; a count that is no count is a counted skip."""
    out = []
    try:
        metrics = data.get("modelMetrics") if isinstance(data.get("modelMetrics"), dict) else {}
        for model, entry in sorted(metrics.items()):
            usage = entry.get("usage") if isinstance(entry, dict) else None
            if isinstance(usage, dict):
                shaped = _shaped(first_count(usage, "inputTokens"), first_count(usage, "cacheReadTokens"),
                                 first_count(usage, "cacheWriteTokens"), first_count(usage, "outputTokens"))
                if any(shaped.values()):
                    out.append((model, shaped))
        details = data.get("tokenDetails")
        if not out and isinstance(details, dict):
            count = lambda k: first_count(details[k], "tokenCount") if isinstance(details.get(k), dict) else 0  # noqa: E731
            shaped = _shaped(count("input"), count("cache_read"), count("cache_write"), count("output"))
            model = as_str(data.get("currentModel"))
            if any(shaped.values()) and model:
                out.append((model, shaped))
    except BadCount as exc:
        stats.skip("invalid usage", lineno, str(exc))
        return []
    return out


def _shaped(prompt: int, read: int, write: int, output: int) -> dict[str, int]:
    """Usage in Anthropic's shape from Copilot's counts, whose input is the whole prompt, its cached part
    included (as the CLI's own summary shows it: "7.5m input, 5.6m cache read"; and as OpenTelemetry's
    `gen_ai.usage.input_tokens`, importers.otel): the uncached part is what the cache neither read nor wrote.
    A prompt count below the two is taken as the uncached part already."""
    fresh = prompt - read - write if prompt >= read + write else prompt
    return {"input_tokens": fresh, "cache_read_input_tokens": read, "cache_creation_input_tokens": write,
            "output_tokens": output}

