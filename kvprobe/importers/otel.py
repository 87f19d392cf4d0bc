"""OpenTelemetry GenAI spans, as OTLP JSON: one export document, or one export per line (collector
file exporter).

Quirks (semantic conventions, status "development"):
* `gen_ai.usage.input_tokens` includes cache tokens; `gen_ai.usage.cache_read.input_tokens`, and
  `gen_ai.usage.cache_creation.input_tokens` (newer: `gen_ai.usage.cache_write.input_tokens`). Some
  instrumentations still report input without the cache tokens: when input < read + write it is taken as
  the uncached part.
* Provider from `gen_ai.provider.name` (older: `gen_ai.system`); `aws.bedrock`/`gcp.vertex_ai` serve Claude
  models too, so the model name decides there. Model from `gen_ai.response.model`, else `gen_ai.request.model`.
* Session from `gen_ai.conversation.id` (else `session.id`, else the trace id); agent from `gen_ai.agent.name`.
  Spans with neither id are counted: each trace is then its own session, so requests of different traces
  are never compared (the import summary says so).
* One call can be recorded by two instrumentations (OpenLLMetry and the SDK's own, say): spans with the same
  `gen_ai.response.id` are one request, kept once (the span that reports the cache tokens, else the first).
  Such records are keyed by the response id.
* Spans without usage attributes (tool calls, agent spans) are not requests: ignored, not skipped.
* OTLP JSON encodes 64-bit ints as strings and times as unix nanoseconds (also strings).
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson

from kvprobe.errors import InputError
from kvprobe.importers.base import (BadCount, Progress, SourceStats, as_int, as_str, first_count, iter_lines,
                                   loads_line, time_or_none)
from kvprobe.importers.formats import SNIFFERS
from kvprobe.request.detect import infer_provider
from kvprobe.trace import TraceRecord

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

NAME = "otel"
_PROVIDERS = {"anthropic": "anthropic", "openai": "openai", "azure.ai.openai": "openai", "deepseek": "deepseek",
              "gcp.gemini": "gemini", "gcp.gen_ai": "gemini", "gemini": "gemini"}


sniff = SNIFFERS[NAME]  # how a file of this format is recognised (importers.formats)


def _value(v: Any) -> Any:
    if not isinstance(v, dict):
        return v
    for key in ("stringValue", "intValue", "doubleValue", "boolValue"):
        if key in v:
            return v[key]
    if isinstance(v.get("arrayValue"), dict):
        return [_value(x) for x in v["arrayValue"].get("values") or []]
    return None


def _attrs(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):  # some exporters write attributes as a plain map
        return raw
    out = {}
    for item in raw if isinstance(raw, list) else []:
        if isinstance(item, dict) and isinstance(item.get("key"), str):
            out[item["key"]] = _value(item.get("value"))
    return out


def genai_usage(provider: str | None, a: dict[str, Any]) -> dict[str, Any]:
    """A GenAI span's usage attributes in the provider's own shape (also Copilot CLI's export); BadCount for a
    count that is none."""
    total = first_count(a, "gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens")
    read = first_count(a, "gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.cache_read_input_tokens")
    write = first_count(a, "gen_ai.usage.cache_write.input_tokens", "gen_ai.usage.cache_creation.input_tokens",
                        "gen_ai.usage.cache_creation_input_tokens")
    out_tokens = first_count(a, "gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens")
    fresh = total - read - write if total >= read + write else total
    if provider in ("anthropic", None):
        return {"input_tokens": fresh, "cache_read_input_tokens": read, "cache_creation_input_tokens": write,
                "output_tokens": out_tokens}
    if provider == "deepseek":
        return {"prompt_tokens": fresh + read + write, "prompt_cache_hit_tokens": read,
                "prompt_cache_miss_tokens": fresh + write, "completion_tokens": out_tokens}
    details: dict[str, Any] = {"cached_tokens": read}
    if write:
        details["cache_write_tokens"] = write
    return {"input_tokens": fresh + read + write, "input_tokens_details": details, "output_tokens": out_tokens}


def _has_usage(a: dict[str, Any]) -> bool:
    return any(k.startswith("gen_ai.usage.") for k in a)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _spans(doc: dict[str, Any]) -> Iterator[tuple[dict[str, Any], Any]]:
    for rs in _list(doc.get("resourceSpans") or doc.get("resource_spans")):
        if not isinstance(rs, dict):
            continue
        res = rs.get("resource")
        resource = _attrs(res.get("attributes")) if isinstance(res, dict) else {}
        for ss in _list(rs.get("scopeSpans") or rs.get("scope_spans") or rs.get("instrumentationLibrarySpans")):
            for span in _list(ss.get("spans")) if isinstance(ss, dict) else []:
                yield resource, span


def _record(resource: dict[str, Any], span: Any, stats: SourceStats, where: str) -> TraceRecord | None:
    if not isinstance(span, dict):
        stats.skip("span is not an object", where)
        return None
    a = _attrs(span.get("attributes"))
    if not _has_usage(a):
        stats.ignored += 1
        return None
    span_id = as_str(span.get("spanId") or span.get("span_id"))
    if not span_id:
        stats.skip("span without spanId", where)
        return None
    model = as_str(a.get("gen_ai.response.model")) or as_str(a.get("gen_ai.request.model"))
    named = as_str(a.get("gen_ai.provider.name")) or as_str(a.get("gen_ai.system"))
    provider = _PROVIDERS.get((named or "").lower()) or infer_provider({"model": model} if model else None)
    start = time_or_none(span.get("startTimeUnixNano") or span.get("start_time_unix_nano"))
    end = time_or_none(span.get("endTimeUnixNano") or span.get("end_time_unix_nano"))
    status = span.get("status") if isinstance(span.get("status"), dict) else {}
    error = None
    if status.get("code") in (2, "STATUS_CODE_ERROR", "ERROR"):
        error = as_str(status.get("message")) or as_str(a.get("error.type")) or "span status ERROR"
    session = as_str(a.get("gen_ai.conversation.id")) or as_str(a.get("session.id"))
    if session is None:
        stats.sessionless += 1
        session = as_str(span.get("traceId") or span.get("trace_id"))
    try:
        response: dict[str, Any] = {"model": model, "usage": genai_usage(provider, a)}
    except BadCount as exc:
        stats.skip("invalid usage", where, str(exc))
        return None
    response_id = as_str(a.get("gen_ai.response.id"))
    if response_id:
        response["id"] = response_id
    return TraceRecord(id=f"response:{response_id}" if response_id else span_id, provider=provider, started_at=start,
                       response=response, session=session, agent=as_str(a.get("gen_ai.agent.name")),
                       finished_at=end, error=error,
                       extra={"source_format": NAME, "service": resource.get("service.name"),
                              "operation": a.get("gen_ai.operation.name")})


def _from_doc(doc: Any, stats: SourceStats, seen: set[str], where: str) -> Iterator[TraceRecord]:
    if not isinstance(doc, dict) or not sniff(doc):
        stats.skip("not an OTLP trace export (no resourceSpans)", where)
        return
    chosen: dict[str, TraceRecord] = {}  # the same call seen by several instrumentations: one record
    for resource, span in _spans(doc):
        stats.lines += 1
        record = _record(resource, span, stats, where)
        if record is None:
            continue
        held = chosen.get(record.id)
        if held is None:
            chosen[record.id] = record
            continue
        stats.duplicates += 1
        if _detail(record) > _detail(held):
            chosen[record.id] = record
    for record in chosen.values():
        if stats.first_time(record.id, seen):
            yield record


def _detail(record: TraceRecord) -> tuple[int, int]:
    """How much a span says of its call's usage: cache tokens first, then the input it counts."""
    u = (record.response or {}).get("usage") or {}
    details = u.get("input_tokens_details") if isinstance(u.get("input_tokens_details"), dict) else {}
    cache = as_int(u.get("cache_read_input_tokens")) + as_int(u.get("cache_creation_input_tokens")) \
        + as_int(details.get("cached_tokens"))
    return cache, as_int(u.get("input_tokens")) + as_int(u.get("prompt_tokens"))


def read(path: Path, stats: SourceStats, seen: set[str], progress: Progress | None = None) -> Iterator[TraceRecord]:
    data = path.read_bytes() if _single_document(path) else None
    if data is not None:
        if progress:
            progress(len(data))
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise InputError(f"not valid OTLP JSON: {exc.msg}", file=str(path), line=exc.lineno) from None
        yield from _from_doc(doc, stats, seen, "1")
        return
    for lineno, raw in iter_lines(path, progress):
        doc = loads_line(raw, stats, lineno)
        if doc is not None:
            yield from _from_doc(doc, stats, seen, str(lineno))


def _single_document(path: Path) -> bool:
    """A pretty-printed export spans many lines; the collector's file exporter writes one per line."""
    with path.open("rb") as fh:
        first = fh.readline().strip()
    if not first:
        return True
    try:
        orjson.loads(first)
        return False
    except orjson.JSONDecodeError:
        return True
