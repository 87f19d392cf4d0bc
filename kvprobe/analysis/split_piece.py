"""One byte range of a trace parsed into skeletons: what each process of the split parse makes (`split_parse`).

Its own module so that the helper process (`analysis.helper`), which parses the second part, imports this
and not the parse that starts it.
"""
from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvprobe.analysis.skeleton import BlockStore, Skeleton, skeletons
from kvprobe.errors import InputError
from kvprobe.request.responses_chain import ResponseChain
from kvprobe.trace import ReadStats, TraceRecord, read_trace


@dataclass(slots=True)
class Piece:
    """The skeletons of one byte range of one file, as a fresh pass over that range saw them."""

    path: Path
    skeletons: list[Skeleton]
    stats: ReadStats
    from_helper: bool = False
    error: tuple[str, int | None, str | None] | None = None  # message, line within the range, field
    leading: list[bool] = field(default_factory=list)  # records before the first start time: readable unknown?
    raw_by_body: dict[int, int] = field(default_factory=dict)  # raw token counts of the bodies new in it
    # stateful Responses requests whose previous response lies before the range: rendered without that
    # conversation, so the range must be read again after the one before it (`split_parse`)
    unresolved: int = 0

    @property
    def lines(self) -> int:  # every line of a strictly read range is a record or blank
        return self.stats.records + self.stats.blank_lines + self.stats.skipped


def leading_flags(records: Iterable[TraceRecord], flags: list[bool]) -> Iterator[TraceRecord]:
    """Note, for the records before the first one with a start time, whether their readable time is unknown
    too: a pass over a range cannot know the start time of the record before the range."""
    records = iter(records)
    for rec in records:
        if rec.started_at is not None:
            yield rec
            break
        flags.append(not rec.readable_at)
        yield rec
    yield from records


def parse_range(path: Path, start: int, end: int, store: BlockStore, chain: ResponseChain | None = None,
                read: Callable[[int], None] | None = None) -> Piece:
    """The piece of bytes [start, end) of `path`: its error kept (line within the range) for the joiner to
    raise; `chain`, the stateful Responses conversations read before the range, when known; `read(bytes)`
    after each record."""
    stats = ReadStats()
    piece = Piece(path, [], stats)
    chain = chain if chain is not None else ResponseChain()
    unresolved = chain.unresolved
    try:
        records = read_trace(path, stats=stats, byte_range=(start, end), check_duplicates=False)
        for sk in skeletons(leading_flags(records, piece.leading), store, chain=chain):
            piece.skeletons.append(sk)
            if read is not None:
                read(stats.bytes_read)
    except InputError as exc:
        piece.error = (exc.message, exc.line, exc.field)
    piece.unresolved = chain.unresolved - unresolved
    return piece


def parse_parts(jobs: list[tuple[str, int, int]], conn: Any, done: Any) -> bool:
    """In the helper: send a piece per job; False after one that ends in an error (the parent stops there)."""
    store = BlockStore()
    total = 0
    for path, cut, size in jobs:
        def read(n: int, before: int = total) -> None:
            done.value = before + n
        piece = parse_range(Path(path), cut, size, store, read=read)
        piece.from_helper = True
        total += piece.stats.bytes_read
        piece.raw_by_body, store.raw_by_body = store.raw_by_body, {}
        conn.send_bytes(pickle.dumps(("piece", piece), protocol=pickle.HIGHEST_PROTOCOL))
        if piece.error is not None:
            return False
    return True
