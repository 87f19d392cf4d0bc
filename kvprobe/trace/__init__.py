"""Trace records (docs/contracts.md §1): read, validate and write JSON Lines, streaming."""
from __future__ import annotations

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any
    from kvprobe.trace.reader import ReadStats, read_trace
    from kvprobe.trace.record import TraceRecord
    from kvprobe.trace.writer import TraceWriter, write_trace

__all__ = ["TraceRecord", "ReadStats", "read_trace", "TraceWriter", "write_trace"]

_LATER = {"TraceRecord": "record", "ReadStats": "reader", "read_trace": "reader", "TraceWriter": "writer",
          "write_trace": "writer"}


def __getattr__(name: str) -> Any:
    """The record, the reader and the writer, imported when first named: the reader (the provider rules, the
    renderers, the credential shapes) and the writer (threading, signals) are for the commands that read or
    write a trace, and the record for those that hold one, not for `diff` of two request bodies, which
    imports `trace.validate` only."""
    module = _LATER.get(name)
    if module is None:
        raise AttributeError(f"module 'kvprobe.trace' has no attribute {name!r}")
    from importlib import import_module

    value = globals()[name] = getattr(import_module(f"kvprobe.trace.{module}"), name)  # the next look-up: direct
    return value
