"""Read what lint is given: request bodies, trace records (JSON) and traces (JSONL) -> subjects by stream."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvprobe.catalog import rules_for
from kvprobe.errors import InputError, not_a_file
from kvprobe.importers import agent_log, bodies_of
from kvprobe.inputs import is_trace_record, read_json_object
from kvprobe.lint.model import RequestRef, Subject
from kvprobe.request import render_request
from kvprobe.tokens import TokenCounter, pooled_counter
from kvprobe.trace import ReadStats, TraceRecord, read_trace
from kvprobe.trace.reader import record_from_json
from kvprobe.usage import normalize_usage
from kvprobe.trace.validate import model_problem


@dataclass(slots=True)
class InputStats:
    file: str
    requests: int = 0
    usage_only: int = 0  # records without a request body: nothing to lint
    skipped_lines: int = 0
    errors: list[str] = field(default_factory=list)
    skipped: str | None = None  # why the file (or the rest of it) was not linted: not a request, unreadable

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "requests": self.requests, "usage_only_records": self.usage_only,
                "skipped_lines": self.skipped_lines, "errors": self.errors, "skipped": self.skipped}


@dataclass(slots=True)
class _Streams:
    """Per run: each request's stream and 1-based position in it, and one token counter per model (a
    session's repeated blocks are tokenized once)."""

    counts: dict[str, int] = field(default_factory=dict)
    order: int = 0
    counters: dict[tuple[str, str | None], TokenCounter] = field(default_factory=dict)

    def counter(self, provider: str, model: str | None) -> TokenCounter:
        return pooled_counter(self.counters, provider, model)

    def ref(self, rid: str, stream: str, **where: Any) -> RequestRef:
        self.counts[stream] = self.counts.get(stream, 0) + 1
        self.order += 1
        return RequestRef(rid, stream, self.counts[stream], order=self.order, **where)


def _subject(body: dict[str, Any], ref: RequestRef, streams: _Streams, provider: str | None = None,
             endpoint: str | None = None, response: Any = None, usage: dict[str, Any] | None = None) -> Subject:
    try:
        req = render_request(body, provider, endpoint, response)
    except InputError as exc:
        field_name = f"request.{exc.field}" if ref.in_record and exc.field else exc.field
        raise InputError(exc.message, file=ref.source, line=ref.line, field=field_name) from None
    streams.counter(req.provider, req.model).count_request(req)
    continues = bool(body.get("previous_response_id") or body.get("conversation"))
    logged = normalize_usage(req.provider, usage) if usage is not None else None
    return Subject(ref, req, rules_for(req.provider, req.model), continues, logged)


def _from_record(rec: TraceRecord, source: str, streams: _Streams) -> Subject:
    stream = f"{rec.session}/{rec.agent or 'main'}" if rec.session else f"{source}/{rec.agent or 'main'}"
    ref = streams.ref(rec.id, stream, source=source, line=rec.line, offset=rec.offset, in_record=True)
    return _subject(rec.request or {}, ref, streams, rec.provider, rec.endpoint, rec.response, rec.usage)


def _from_trace(path: Path, stats: InputStats, streams: _Streams,
                progress: Callable[[int], None] | None) -> Iterator[Subject]:
    read = ReadStats()
    done = 0
    for rec in read_trace(path, strict=False, stats=read, check_duplicates=False):
        if progress:
            progress(read.bytes_read - done)
            done = read.bytes_read
        if rec.request is None:
            stats.usage_only += 1
            continue
        stats.requests += 1
        yield _from_record(rec, str(path), streams)
    stats.skipped_lines, stats.errors = read.skipped, read.errors
    if not stats.requests and read.skipped:
        raise InputError(f"no readable record ({read.skipped} malformed lines); first: {read.errors[0]}",
                         file=str(path))


def _from_json(path: Path, streams: _Streams) -> Subject:
    raw = read_json_object(path)
    if is_trace_record(raw):
        rec = record_from_json(raw, str(path), None)
        if rec.request is None:
            raise InputError("this record has usage only (no request body) and cannot be linted",
                             file=str(path), field="request")
        return _from_record(rec, str(path), streams)
    bad = model_problem(raw, "")  # a body's model names its rules: a string (as for diff)
    if bad is not None:
        raise InputError(bad[1], file=str(path), field=bad[0].lstrip("."))
    return _subject(raw, streams.ref(path.name, str(path), source=str(path)), streams)


def _file_subjects(path: Path, stats: InputStats, streams: _Streams,
                   progress: Callable[[int], None] | None) -> Iterator[Subject]:
    if not path.is_file():
        raise not_a_file(path)
    kind = agent_log(path)
    if kind is not None:  # HAR, LiteLLM, agent logs: the requests whose bodies they hold
        for rec in bodies_of(path, kind, "lint"):
            stats.requests += 1
            yield _from_record(rec, str(path), streams)
    elif path.suffix in (".jsonl", ".ndjson"):
        yield from _from_trace(path, stats, streams, progress)
    else:
        subject = _from_json(path, streams)
        stats.requests = 1
        yield subject


def _reason(exc: InputError) -> str:
    """Why a file was skipped, without its name (the caller names it): line, field, message."""
    where = (f"line {exc.line}" if exc.line else "") + (f" field '{exc.field}'" if exc.field else "")
    return f"{where.strip()}: {exc.message}" if where else exc.message


def iter_subjects(paths: list[str | Path], stats_out: list[InputStats],
                  progress: Callable[[int], None] | None = None, skip_bad: bool = False) -> Iterator[Subject]:
    """Every request of every input in input order (one record in memory at a time). Requests of a session
    are compared in this order: the order a capture trace lists them (sequential agents: start order).

    `skip_bad`: a file that is not a request body, trace or agent log (or cannot be read) is recorded in its
    InputStats.skipped and left out, and the other files are linted (pre-commit passes every file its
    pattern matches); otherwise its InputError stops the run."""
    streams = _Streams()
    for p in paths:
        path = Path(p)
        stats = InputStats(str(path))
        stats_out.append(stats)
        try:
            yield from _file_subjects(path, stats, streams, progress)
        except InputError as exc:
            if not skip_bad:
                raise
            stats.skipped = _reason(exc)
        except OSError as exc:
            if not skip_bad:
                raise
            stats.skipped = f"cannot read it: {exc.strerror or exc}"
