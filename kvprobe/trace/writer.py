"""Write trace records as JSON Lines: one atomic append per record, or a whole file atomically."""
from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path

import orjson

from kvprobe.trace.record import TraceRecord


class TraceWriter:
    """Appends records to a JSONL file, one write() per line, safe across threads."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def append(self, record: TraceRecord) -> None:
        line = memoryview(orjson.dumps(record.to_json()) + b"\n")
        with self._lock:
            while line:  # a short write (signal, nearly full disk) continues where it stopped
                line = line[os.write(self._fd, line):]

    def close(self) -> None:
        with self._lock:
            os.close(self._fd)

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_trace(path: str | Path, records: Iterable[TraceRecord]) -> int:
    """Write a whole trace atomically (temp file + rename): nothing half-written on failure."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
    count = 0
    try:
        with os.fdopen(fd, "wb") as fh:
            for record in records:
                fh.write(orjson.dumps(record.to_json()) + b"\n")
                count += 1
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return count


def write_atomic(path: str | Path, data: bytes) -> None:
    """Write a whole file atomically: a reader never sees half of it, a failure leaves the old one."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
