"""`serve -o TRACE`: one trace record per answered request, as kvprobe's own `report` reads them.

A record is written before the response's last event leaves, so a request the trace cannot hold (a full
disk, a quota) is answered with an error instead of a success nobody recorded; the writer cuts off any part
of a line it could not finish, so the trace stays readable, and the lost records are counted (`/health`,
and the line `serve` prints when it stops).

A streamed request whose client went away mid-stream was still prefilled, and so changed the engine's cache
(and the emulated one): it is recorded with what was generated until then and marked
`"client_disconnected": true` (the record, and its response's `kvprobe` object), so a replay of the trace
sees the same cache.
"""
from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from kvprobe.errors import InputError
from kvprobe.trace import TraceRecord, TraceWriter
from kvprobe.trace.writer import line_of

log = logging.getLogger("kvprobe.serve")
DISCONNECTED = "client_disconnected"


class RecordLost(Exception):
    """The record of an answered request could not be written (the client is told; nothing torn stays)."""


class Recorder:
    """Appends serve's records to a trace; counts what it wrote and what it lost."""

    def __init__(self, path: str | Path, *, replace: bool = False) -> None:
        self.path = Path(path)
        self.writer = TraceWriter(self.path, replace=replace)
        self.recorded = 0
        self.lost = 0
        self.last_error: str | None = None
        self._lock = threading.Lock()

    def write(self, record: TraceRecord) -> None:
        """Append one record; RecordLost (counted, logged on one line) when the disk refuses it."""
        try:
            self.writer.append_line(line_of(record))
        except (OSError, InputError) as exc:
            with self._lock:
                self.lost += 1
                self.last_error = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            log.warning("kvprobe serve: request %s not recorded in %s: %s (%d lost so far)", record.id,
                        self.path, self.last_error, self.lost)
            raise RecordLost(f"kvprobe serve answered this request but could not record it in {self.path} "
                             f"({self.last_error}); {self.lost} record(s) lost so far") from None
        with self._lock:
            self.recorded += 1

    def stats(self) -> dict[str, Any]:
        return {"path": str(self.path), "recorded": self.recorded, "lost": self.lost,
                "last_error": self.last_error}

    def close(self) -> None:
        self.writer.close()
