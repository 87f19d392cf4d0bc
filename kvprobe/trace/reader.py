"""Streaming JSONL reader: one record per line, validated, errors naming file, line and field."""
from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from kvprobe.catalog import PROVIDERS
from kvprobe.errors import InputError, not_a_file
from kvprobe.request.detect import infer_provider
from kvprobe.secrets import scrub_identity
from kvprobe.trace.record import FORMAT_VERSION, KNOWN_KEYS, READ_BUFFER, TraceRecord, content_key, parse_time
from kvprobe.trace.validate import model_problem, response_usage_problem
from kvprobe.wording import show


@dataclass(slots=True)
class ReadStats:
    """What a read saw: records, blank lines, and malformed lines skipped (only with strict=False)."""

    records: int = 0
    blank_lines: int = 0
    skipped: int = 0
    errors: list[str] = field(default_factory=list)  # first few skipped-line messages
    bytes_read: int = 0


def _optional_str(raw: dict[str, Any], key: str, where: dict[str, Any]) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InputError("expected a string", **where, field=key)
    return value


def _optional_time(raw: dict[str, Any], key: str, where: dict[str, Any]) -> float | None:
    value = raw.get(key)
    if value is None:
        return None
    try:
        return parse_time(value)
    except ValueError as exc:
        raise InputError(f"expected an RFC 3339 timestamp, got {show(value)}", **where, field=key) from exc


def record_from_json(raw: Any, source: str | None = None, line: int | None = None) -> TraceRecord:
    """Validate one decoded line and build its record."""
    where = {"file": source, "line": line}
    if not isinstance(raw, dict):
        raise InputError("expected a JSON object (one trace record per line)", **where)
    version = raw.get("kvprobe", FORMAT_VERSION)
    if version != FORMAT_VERSION or isinstance(version, bool):  # a later format may mean other things by a key
        newer = isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION
        raise InputError(f"trace format {show(version)} is not one this kvprobe reads (format {FORMAT_VERSION})"
                         + ("; a newer kvprobe wrote it" if newer else ""), **where, field="kvprobe")
    rid = raw.get("id")
    if not isinstance(rid, (str, int)) or isinstance(rid, bool) or rid == "":
        raise InputError("expected a non-empty string id", **where, field="id")
    request, response = raw.get("request"), raw.get("response")
    if request is not None and not isinstance(request, dict):
        raise InputError("expected the provider request body as an object", **where, field="request")
    if response is not None and not isinstance(response, dict):
        raise InputError("expected the provider response body as an object", **where, field="response")
    if request is None and not (isinstance(response, dict) and ("usage" in response or "usageMetadata" in response)):
        raise InputError("a record needs 'request' or 'response.usage'", **where, field="request")
    bad = response_usage_problem(response) or model_problem(request)  # kvprobe.trace.validate
    if bad is not None:
        raise InputError(bad[1], **where, field=bad[0])
    provider = _optional_str(raw, "provider", where)
    endpoint = _optional_str(raw, "endpoint", where)
    if provider is not None and provider not in PROVIDERS:  # the providers the catalog has rules for
        raise InputError(f"expected one of {', '.join(PROVIDERS)}", **where, field="provider")
    if provider is None:
        provider = infer_provider(request, endpoint, response)
    return scrub_identity(TraceRecord(  # a key in its id, session, agent, endpoint, error or extra: never shown
        id=str(rid), provider=provider, started_at=_optional_time(raw, "started_at", where),
        request=request, response=response, session=_optional_str(raw, "session", where),
        agent=_optional_str(raw, "agent", where), endpoint=endpoint,
        first_token_at=_optional_time(raw, "first_token_at", where),
        finished_at=_optional_time(raw, "finished_at", where),
        error=None if raw.get("error") is None else str(raw.get("error")),
        extra={k: v for k, v in raw.items() if k not in KNOWN_KEYS}, source=source, line=line))


def read_trace(path: str | Path, *, strict: bool = True, stats: ReadStats | None = None,
               check_duplicates: bool = True, byte_range: tuple[int, int] | None = None,
               keyed: bool = False) -> Iterator[TraceRecord]:
    """Yield the records of a JSONL trace one at a time (a 1 GB file never sits in memory).

    strict=True raises InputError on the first malformed line; strict=False skips and counts it in `stats`.
    byte_range=(start, end): only the lines starting in it (start at a line start); line numbers then count
    from `start` and duplicate ids are checked within the range only. Offsets stay absolute.
    keyed=True sets each record's `key` (its id and a digest of its line), which tells the same record in
    another file from another record that reuses the id.
    """
    path = Path(path)
    stats = stats if stats is not None else ReadStats()
    if not path.is_file():
        raise not_a_file(path)
    seen: dict[str, int] = {}
    start, end = byte_range if byte_range is not None else (0, None)
    source = str(path)
    with path.open("rb", buffering=READ_BUFFER) as fh:
        fh.seek(start)
        offset = start
        for lineno, raw_line in enumerate(fh, start=1):
            if end is not None and offset >= end:
                break
            stats.bytes_read += len(raw_line)
            record_offset, offset = offset, offset + len(raw_line)
            if raw_line.isspace():  # (no copy of a multi-megabyte line, unlike strip())
                stats.blank_lines += 1
                continue
            try:
                record = _parse_line(raw_line, source, lineno)
                record.offset = record_offset
                if keyed:
                    record.key = content_key(record.id, raw_line.strip())
                if check_duplicates:
                    if record.id in seen:
                        raise InputError(f"duplicate id {record.id!r} (first seen on line {seen[record.id]})",
                                         file=str(path), line=lineno, field="id")
                    seen[record.id] = lineno
            except InputError as exc:
                if strict:
                    raise
                stats.skipped += 1
                if len(stats.errors) < 20:
                    stats.errors.append(str(exc))
                continue
            stats.records += 1
            yield record


def read_record_at(path: str | Path, offset: int, line: int | None = None) -> TraceRecord:
    """Re-read one record by its byte offset (for details needed only for a few requests)."""
    with Path(path).open("rb") as fh:
        fh.seek(offset)
        return _parse_line(fh.readline(), str(path), line or 0)


class RecordReader:
    """`read_record_at` for many records: each file opened once and read where asked (`os.pread`: no shared
    file position, so a forked worker may read through the same descriptor). A report re-reads tens of
    thousands of records of a large trace (the texts its diagnoses and proposals quote); opening the file
    for each was about as long as parsing the line (56 -> 31 us a record of 36 KB)."""

    OPEN_AT_MOST = 16  # files held open at once (a report of many traces re-reads a few at a time)

    def __init__(self) -> None:
        self._fds: dict[str, int] = {}

    def read(self, path: str | Path, offset: int, line: int | None = None) -> TraceRecord:
        if not hasattr(os, "pread"):  # (Windows)
            return read_record_at(path, offset, line)
        source = str(path)
        return _parse_line(_line_at(self._fd(source), offset), source, line or 0)

    def _fd(self, source: str) -> int:
        fd = self._fds.get(source)
        if fd is None:
            if len(self._fds) >= self.OPEN_AT_MOST:
                self.close()
            fd = self._fds[source] = os.open(source, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        return fd

    def __getstate__(self) -> dict:
        return {}  # (sent to another machine: its descriptors name nothing there)

    def __setstate__(self, state: dict) -> None:
        self._fds = {}

    def close(self) -> None:
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            os.close(fd)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - (at interpreter exit, `os` may be gone already)
            pass


_CHUNK = 1 << 16


def _line_at(fd: int, offset: int) -> bytes:
    """The line starting at `offset`, its newline included (as `readline` gives it)."""
    parts = []
    while True:
        chunk = os.pread(fd, _CHUNK, offset)
        end = chunk.find(b"\n")
        if end >= 0:
            parts.append(chunk[:end + 1])
            break
        if not chunk:
            break
        parts.append(chunk)
        offset += len(chunk)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _parse_line(raw_line: bytes, source: str, lineno: int) -> TraceRecord:
    try:
        raw = orjson.loads(raw_line)
    except orjson.JSONDecodeError as exc:
        hint = "truncated line" if not raw_line.rstrip().endswith(b"}") else "invalid JSON"
        raise InputError(f"{hint}: {exc}", file=source, line=lineno) from None
    return record_from_json(raw, source, lineno)
