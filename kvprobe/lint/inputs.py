"""Read what lint is given: request bodies, trace records (JSON) and traces (JSONL) -> subjects by stream."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from kvprobe.catalog import rules_for
from kvprobe.errors import InputError
from kvprobe.lint.model import Subject
from kvprobe.request import render_request
from kvprobe.tokens import TokenCounter
from kvprobe.trace import ReadStats, TraceRecord, read_trace
from kvprobe.trace.reader import record_from_json


@dataclass(slots=True)
class InputStats:
    file: str
    requests: int = 0
    usage_only: int = 0  # records without a request body: nothing to lint
    skipped_lines: int = 0
    errors: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "requests": self.requests, "usage_only_records": self.usage_only,
                "skipped_lines": self.skipped_lines, "errors": self.errors}


_counters: dict[tuple[str, str | None], TokenCounter] = {}


def _counter(provider: str, model: str | None) -> TokenCounter:
    """One counter per model for the whole run: a session's repeated blocks are tokenized once."""
    key = (provider, model)
    if key not in _counters:
        _counters[key] = TokenCounter(rules_for(provider, model))
    return _counters[key]


def _subject(body: dict[str, Any], *, rid: str, stream: str, source: str, provider: str | None = None,
             endpoint: str | None = None, response: Any = None, line: int | None = None,
             offset: int | None = None, in_record: bool = False, started_at: float | None = None,
             order: int = 0) -> Subject:
    try:
        req = render_request(body, provider, endpoint, response)
    except InputError as exc:
        field_name = f"request.{exc.field}" if in_record and exc.field else exc.field
        raise InputError(exc.message, file=source, line=line, field=field_name) from None
    rules = rules_for(req.provider, req.model)
    _counter(req.provider, req.model).count_request(req)
    return Subject(rid, stream, 0, req, rules, body, source, line, offset, in_record, started_at, order)


def _from_record(rec: TraceRecord, source: str, order: int) -> Subject:
    stream = f"{rec.session}/{rec.agent or 'main'}" if rec.session else f"{source}/{rec.agent or 'main'}"
    return _subject(rec.request or {}, rid=rec.id, stream=stream, source=source, provider=rec.provider,
                    endpoint=rec.endpoint, response=rec.response, line=rec.line, offset=rec.offset,
                    in_record=True, started_at=rec.started_at, order=order)


def _from_trace(path: Path, stats: InputStats, start: int) -> list[Subject]:
    read = ReadStats()
    subjects = []
    for rec in read_trace(path, strict=False, stats=read, check_duplicates=False):
        if rec.request is None:
            stats.usage_only += 1
            continue
        subjects.append(_from_record(rec, str(path), start + len(subjects)))
    stats.skipped_lines, stats.errors = read.skipped, read.errors
    if not subjects and read.skipped:
        raise InputError(f"no readable record ({read.skipped} malformed lines); first: {read.errors[0]}",
                         file=str(path))
    return subjects


def _from_json(path: Path, order: int) -> Subject:
    try:
        raw = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise InputError(f"not valid JSON: {exc.msg}", file=str(path), line=exc.lineno) from None
    if not isinstance(raw, dict):
        raise InputError("expected a JSON object: a request body or a trace record", file=str(path))
    if "kvprobe" in raw or isinstance(raw.get("request"), dict):
        rec = record_from_json(raw, str(path), None)
        if rec.request is None:
            raise InputError("this record has usage only (no request body) and cannot be linted",
                             file=str(path), field="request")
        return _from_record(rec, str(path), order)
    return _subject(raw, rid=path.name, stream=str(path), source=str(path), order=order)


def load_subjects(paths: list[str | Path]) -> tuple[list[list[Subject]], list[InputStats]]:
    """Every request of every input, grouped into streams (session/agent, or file) in start order."""
    streams: dict[str, list[Subject]] = {}
    all_stats = []
    order = 0
    for p in paths:
        path = Path(p)
        if not path.is_file():
            raise InputError("file does not exist" if not path.exists() else "not a file", file=str(path))
        stats = InputStats(str(path))
        all_stats.append(stats)
        if path.suffix in (".jsonl", ".ndjson"):
            subjects = _from_trace(path, stats, order)
        else:
            subjects = [_from_json(path, order)]
        stats.requests = len(subjects)
        order += len(subjects)
        for s in subjects:
            streams.setdefault(s.stream, []).append(s)
    ordered = []
    for stream in streams.values():
        if all(s.started_at is not None for s in stream):  # else: the order the files list them in
            stream.sort(key=lambda s: (s.started_at, s.order))
        for i, s in enumerate(stream, start=1):
            s.index = i
        ordered.append(stream)
    return ordered, all_stats
