"""Trace records (docs/contracts.md §1): read, validate and write JSON Lines, streaming."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvprobe.trace.record import TraceRecord
from kvprobe.trace.reader import ReadStats, read_trace

if TYPE_CHECKING:
    from kvprobe.trace.writer import TraceWriter, write_trace

__all__ = ["TraceRecord", "ReadStats", "read_trace", "TraceWriter", "write_trace"]


def __getattr__(name: str) -> Any:
    """The writer, imported when first named: every importer imports this package (for TraceRecord), while
    only the commands that write a trace need the writer (its threading and signal handling: ~1 ms of
    `usage`'s and `diff`'s start)."""
    if name in ("TraceWriter", "write_trace"):
        from kvprobe.trace import writer

        return getattr(writer, name)
    raise AttributeError(f"module 'kvprobe.trace' has no attribute {name!r}")
