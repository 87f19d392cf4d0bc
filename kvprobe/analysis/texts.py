"""The record behind a skeleton, for the few texts a later stage reads (the parse drops block texts)."""
from __future__ import annotations

from kvprobe.analysis.skeleton import Skeleton
from kvprobe.trace import TraceRecord
from kvprobe.trace.reader import RecordReader


RECENT = 32  # records re-read lately, kept for the next question (the proposals ask of the same few in a row)


class TextSource:
    """The record behind a skeleton, for the few texts a proposal must read: from the records in memory
    when the caller kept them, else re-read from its line in the trace (the parse drops block texts)."""

    def __init__(self, records: list[TraceRecord] | None = None) -> None:
        self._by_order = records
        self._cache: dict[int, TraceRecord | None] = {}
        self._reader = RecordReader()

    def record(self, sk: Skeleton) -> TraceRecord | None:
        if self._by_order is not None:
            return self._by_order[sk.order] if sk.order < len(self._by_order) else None
        if sk.order in self._cache:
            return self._cache[sk.order]
        rec = None
        if sk.source is not None and sk.offset is not None:
            try:
                rec = self._reader.read(sk.source, sk.offset, sk.line)
            except Exception:  # noqa: BLE001 - gone or rewritten since: no text, no span proposal
                rec = None
        if len(self._cache) >= RECENT:  # a parsed record holds its whole body: keep only the latest few
            self._cache.pop(next(iter(self._cache)))
        self._cache[sk.order] = rec
        return rec
