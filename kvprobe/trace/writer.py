"""Write trace records as JSON Lines: one atomic append per record, or a whole file atomically."""
from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable
from pathlib import Path

import orjson

from kvprobe.errors import InputError
from kvprobe.output import atomic_output, write_bytes_atomic
from kvprobe.secrets import scrub_identity
from kvprobe.trace.record import TraceRecord


class TraceWriter:
    """Appends records to a JSONL file, one write() per line, safe across threads."""

    def __init__(self, path: str | Path, *, replace: bool = False) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (os.O_TRUNC if replace else 0)
        self._fd = os.open(self.path, flags, 0o600)

    def append(self, record: TraceRecord) -> None:
        self.append_line(_line(record))

    def append_line(self, data: bytes) -> None:
        """Append one already-serialised record line (from `line_of`): all of it, or, when the write fails (a
        full disk: ENOSPC, EFBIG, EDQUOT), none of it: the bytes written are cut off again and the OSError is
        raised, so the file ends with a whole line and the next record is not glued to a torn one. (Another
        process appending to the same file at that moment would lose its line too: one writer per trace.)"""
        line = memoryview(data)
        with self._lock:
            start = os.fstat(self._fd).st_size  # where this line begins (O_APPEND writes at the end)
            try:
                while line:  # a short write (signal, nearly full disk) continues where it stopped
                    line = line[os.write(self._fd, line):]
            except OSError:
                with contextlib.suppress(OSError):  # (a pipe or a device cannot be cut: nothing to undo)
                    if os.fstat(self._fd).st_size > start:
                        os.ftruncate(self._fd, start)
                raise

    def close(self) -> None:
        with self._lock:
            os.close(self._fd)

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_trace(path: str | Path, records: Iterable[TraceRecord]) -> int:
    """Write a whole trace atomically (temp file + rename, see kvprobe.output): nothing half-written."""
    count = 0
    with atomic_output(path, 0o600) as fh:
        for record in records:
            fh.write(_line(record))
            count += 1
    return count


def line_of(record: TraceRecord) -> bytes:
    """One record as its JSON line; InputError when it cannot be written (too deeply nested, huge ints)."""
    return _line(record)


def _line(record: TraceRecord) -> bytes:
    """Every record kvprobe writes passes here: its identity fields (id, session, agent, endpoint, error and
    `extra`: cwd, service, project_hash, kept headers) are scrubbed of credentials first, whoever made it."""
    try:
        return orjson.dumps(scrub_identity(record).to_json()) + b"\n"
    except orjson.JSONEncodeError as exc:  # nesting deeper than JSON writers allow, integers beyond 64 bits
        raise InputError(f"record {record.id!r} cannot be written as JSON: {exc}", file=record.source,
                         line=record.line) from None


def write_atomic(path: str | Path, data: bytes) -> None:
    """Write a whole file atomically: a reader never sees half of it, a failure leaves the old one."""
    write_bytes_atomic(path, data)
