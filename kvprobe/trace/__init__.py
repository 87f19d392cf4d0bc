"""Trace records (docs/contracts.md §1): read, validate and write JSON Lines, streaming."""
from kvprobe.trace.record import TraceRecord
from kvprobe.trace.reader import ReadStats, read_trace
from kvprobe.trace.writer import TraceWriter, write_trace

__all__ = ["TraceRecord", "ReadStats", "read_trace", "TraceWriter", "write_trace"]
