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

# Skeletons per message when the helper sends its piece back. One pickle of a whole piece held, beside the
# piece, its bytes and the pickler's table of every object in it (at 105,006 requests of a fleet: 42 MB and
# ~160 MB, the run's high-water mark with this process's share beside it); a batch's table is small, and the
# helper lets each batch's skeletons go once pickled. A batch pickles apart from the others, so an object that
# two batches share (a block of a common prefix, a session's name) arrives as two copies: the joiner points
# every skeleton at one block per key (`split_parse._adopt`), and the rest are a few small copies per batch.
SEND_BATCH = 2000


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
    for k, (path, cut, size) in enumerate(jobs):
        def read(n: int, before: int = total) -> None:
            done.value = before + n
        piece = parse_range(Path(path), cut, size, store, read=read)
        piece.from_helper = True
        total += piece.stats.bytes_read
        piece.raw_by_body, store.raw_by_body = store.raw_by_body, {}
        if k == len(jobs) - 1:  # nothing left to parse: a block goes with the last skeleton pickled that holds it
            store.blocks.clear()
            store.raw.clear()
        send_piece(piece, conn)
        if piece.error is not None:
            return False
    return True


def send_piece(piece: Piece, conn: Any) -> None:
    """The piece without its skeletons and their count, then the skeletons `SEND_BATCH` at a time
    (`receive_piece` puts them back). Every batch is pickled before the first message goes: the pipe holds
    64 KB, and this process pickles while the other still reads its own part instead of a batch at a time as
    that one takes them; each batch's skeletons are let go once pickled, and each pickle once sent."""
    skeletons, piece.skeletons = piece.skeletons, []
    pickles: list[bytes | None] = []
    for start in range(0, len(skeletons), SEND_BATCH):
        batch = skeletons[start:start + SEND_BATCH]
        skeletons[start:start + SEND_BATCH] = [None] * len(batch)  # type: ignore[list-item]  # (in place)
        pickles.append(pickle.dumps(("skeletons", batch), protocol=pickle.HIGHEST_PROTOCOL))
    conn.send_bytes(pickle.dumps(("piece", (piece, len(skeletons))), protocol=pickle.HIGHEST_PROTOCOL))
    for k, message in enumerate(pickles):
        pickles[k] = None
        conn.send_bytes(message)  # type: ignore[arg-type]


def receive_piece(receive: Callable[[], Any]) -> Piece:
    """The piece `send_piece` sent, whole again; `receive()` gives the payload of each message in turn."""
    piece, count = receive()
    while len(piece.skeletons) < count:
        piece.skeletons.extend(receive())
    return piece
