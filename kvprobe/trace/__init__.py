"""Trace records (docs/contracts.md §1): read, validate and write JSON Lines, streaming."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvprobe.trace.record import TraceRecord

if TYPE_CHECKING:
    from kvprobe.trace.reader import ReadStats, read_trace
    from kvprobe.trace.writer import TraceWriter, write_trace

__all__ = ["TraceRecord", "ReadStats", "read_trace", "TraceWriter", "write_trace"]

_LATER = {"ReadStats": "reader", "read_trace": "reader", "TraceWriter": "writer", "write_trace": "writer"}


def __getattr__(name: str) -> Any:
    """The reader and the writer, imported when first named: every importer imports this package for
    TraceRecord, while the reader (the provider rules, the renderers, the credential shapes) and the writer
    (threading, signals) are for the commands that read or write a trace, not for `diff`, which asks the
    importers only whether a file is an agent log."""
    module = _LATER.get(name)
    if module is None:
        raise AttributeError(f"module 'kvprobe.trace' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"kvprobe.trace.{module}"), name)
