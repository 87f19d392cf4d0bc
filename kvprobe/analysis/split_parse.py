"""The parse pass of large traces on two cores.

Reading, rendering, hashing and tokenizing the records is most of `report`'s time, and it needs no state
across requests but the block store. A second process (the helper, `analysis.helper`) takes part in one of
two ways:

- Counting there (inputs under `CUT_MIN_BYTES`, and whenever the what-if needs the records themselves):
  this process reads and renders every record, and the helper loads the tokenizer (`kvprobe.tokenizers`) while it does,
  then counts the new blocks' texts as they come. This process never pays for the load, and the counts are
  ready about when the reading is done.
- Cut in two (larger inputs without the records kept): each large file is cut at a line boundary and the
  helper reads, renders and counts the second part while this one does the first. Its skeletons come back
  pickled a batch at a time (~25 MB per GB of trace: the block texts are already dropped; `split_piece.
  send_piece`) and join the store here, where shared blocks become the same objects again (sizing relies on
  it).

Either way the result is what one sequential pass gives: input order, absolute line numbers, ids made unique
across files, the first error in file order, duplicate ids across the cut, and start times inferred from the
record before.
"""
from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from kvprobe.analysis.helper import Helper, min_split_bytes, reap_dismissed, take
from kvprobe.analysis.skeleton import READABLE_EPSILON, BlockStore, Skeleton, skeletons
from kvprobe.analysis.split_piece import Piece, leading_flags, parse_range
from kvprobe.errors import InputError
from kvprobe.request.responses_chain import ResponseChain
from kvprobe.tokens import count_block_text, count_elsewhere, count_from_table
from kvprobe.trace import ReadStats, TraceRecord, read_trace

# From this much input, large files are cut in two and each process renders and counts its own part (the
# helper also pickles its skeletons back); below it, this process renders every record and the helper only
# counts. Measured with fixes off: 200 MB 0.78 s counting there vs 0.89 s cut; 400 MB about even; 1 GB 3.0-3.4 s
# vs 2.9 s (the cut pays for a second tokenizer load, the pickling and the join).
CUT_MIN_BYTES = 300_000_000
# Of each file cut, the share this process reads.
SHARE = 0.55
# Texts handed to the counting helper per batch: small enough that it starts counting early, large enough
# that the batches are few (~50 per 100 MB trace). The first batch is smaller and each next one twice the last
# until this size: a small trace's texts (~150-190 KB for a 1.3-1.8 MB trace) were one batch sent at the end
# of the parse, and the report waited for the helper to count them all (~25 ms) after it.
BATCH_CHARS = 1 << 18
FIRST_BATCH_CHARS = 1 << 14
# When more than this waits unread, the helper is behind (texts nearly all unique: counting outweighs reading)
# and this process counts the next batch's worth itself, loading its own tokenizer once. Agent traces repeat
# their history and stay far below it: 8 MB at most on 100 MB, 14 MB on 200 MB, all while the helper loads.
BEHIND_BYTES = 32_000_000
# The most characters of texts a parse keeps to count here if the helper is still loading when the parse ends:
# the shipped tables' largest budget (kvprobe.tokentable; `tokens.count_from_table` holds each to its own)
HERE_AT_MOST_CHARS = 250_000


def parse(paths: list[Path], store: BlockStore, stats_out: list[tuple[str, ReadStats]],
          progress: Callable[[int], None] | None = None, keep_records: bool = False,
          while_waiting: Callable[[list[Skeleton], Callable[[], None]], None] | None = None,
          meanwhile: Callable[[], None] | None = None,
          ) -> tuple[list[Skeleton], list[TraceRecord] | None]:
    """Skeletons of every record of `paths` (kvprobe traces), and the records themselves if asked.

    meanwhile: the caller's work that reads nothing parsed, done once this process has read its share, while
    the helper still counts or reads (a small trace is read here before its counts are done); not called where
    no helper runs.

    while_waiting: given the skeletons of this process's share of a single cut file (final: ids, lines and
    order as the result will have them) once they are read, and called before waiting for the other
    process; not called for several files, nor when the records are kept (no file is cut then). Its second
    argument is to be called now and then: it takes the other process's share as soon as that is ready (the
    helper then ends, and its memory with it: its share and the share's pickles at 105,000 requests of a fleet,
    ~220 and 42 MB, where one pickle of the whole share held ~200 MB beside it, the run's high-water mark with
    this process's growing beside it)."""
    if keep_records or sum(p.stat().st_size for p in paths) < cut_min_bytes():
        return _read_all_count_there(paths, store, stats_out, progress, keep_records, meanwhile)
    cuts = {p: _cut(p, SHARE) for p in paths}
    jobs = [(str(p), cut, p.stat().st_size) for p, cut in cuts.items() if cut is not None]
    helper = take(paths, counting=False) if jobs else None
    if helper is None:  # no second process after all: one pass here
        cuts = dict.fromkeys(paths)
    else:
        helper.start(jobs, counting=False)
    joined = _Joiner(store, stats_out, multi=len(paths) > 1)
    try:
        for path in paths:
            cut, chain = cuts[path], ResponseChain()
            joined.add(_read_here(path, cut, store, progress, helper, None, chain))
            if cut is not None and meanwhile is not None:
                meanwhile()
                meanwhile = None
            early: list[Piece] = []
            if cut is not None and while_waiting is not None and len(paths) == 1:
                assert helper is not None
                here = helper

                def take_when_ready(path: Path = path) -> None:
                    if not early and here.ready():
                        early.append(here.result(str(path), progress))
                while_waiting(joined.skeletons, take_when_ready)  # read, not kept: the list grows on
            if cut is not None:
                assert helper is not None
                piece = early[0] if early else helper.result(str(path), progress)
                if piece.unresolved:  # a stateful conversation crosses the cut: read on from this part's end
                    piece = parse_range(path, cut, path.stat().st_size, store, chain)
                joined.add(piece)  # its error, if any, is raised here
        return joined.skeletons, None
    finally:
        if helper is not None:
            helper.close()


def cut_min_bytes() -> int:
    """The input size from which files are cut in two ($KVPROBE_CUT_MIN_BYTES overrides, as the split size)."""
    value = os.environ.get("KVPROBE_CUT_MIN_BYTES")
    return int(value) if value and value.isdigit() else CUT_MIN_BYTES


def _read_all_count_there(paths: list[Path], store: BlockStore, stats_out: list[tuple[str, ReadStats]],
                          progress: Callable[[int], None] | None, keep: bool,
                          meanwhile: Callable[[], None] | None = None,
                          ) -> tuple[list[Skeleton], list[TraceRecord] | None]:
    """Every record read and rendered here (and kept if asked); the helper counts the new blocks' tokens
    meanwhile (where processes fork; elsewhere they are counted here). With the records kept, this is the way
    at any size: this process reads every record for the what-if anyway, and rendering is under half of
    reading."""
    helper = take(paths, counting=True)
    joined = _Joiner(store, stats_out, multi=len(paths) > 1)
    kept: list[TraceRecord] | None = [] if keep else None
    texts = None
    if helper is not None:  # else counted here, as they come
        helper.start([], counting=True)
        texts = store.pending = _TextsToCount(helper)
    try:
        for path in paths:
            joined.add(_read_here(path, None, store, progress, None, kept))
        if texts is not None:
            if meanwhile is not None:
                meanwhile()
            store.settle(texts.counts())
        for rec, sk in zip(kept or (), joined.skeletons):  # as the skeletons name them (ids made unique)
            rec.id, rec.line = sk.id, sk.line
        if texts is not None:
            _lend(helper)  # it counts for this process until `end_counting`
            helper = None
        return joined.skeletons, kept
    finally:
        store.pending = None
        if helper is not None:
            helper.close()


_lent: list[Helper] = []


def _lend(helper: Helper) -> None:
    end_counting()
    _lent.append(helper)
    count_elsewhere(helper.count)


def end_counting() -> None:
    """End the helper that counts texts for this process after a parse (called when the report is built): its
    work is done, so it is not waited for (`Helper.dismiss`)."""
    count_elsewhere(None)
    reap_dismissed()
    while _lent:
        _lent.pop().dismiss()


class _TextsToCount:
    """This process's new block texts, handed to the helper in batches as they come (BlockStore.pending), or
    counted here while the helper is behind: what waits for it stays under BEHIND_BYTES at any trace size.

    A trace whose texts turn out few (under the shipped table's budget, `tokens.count_from_table`) is counted
    here if the helper has not begun counting when the parse ends (it is still loading its tokenizer): waiting
    for it would cost more than the table (a 1.2 MB trace of one short session repeated: ~0.1 s). The helper
    then counts the later single texts as usual."""

    def __init__(self, helper: Helper) -> None:
        self._helper = helper
        self._batch: list[tuple[int, str, str, str]] = []
        self._chars = 0
        self._batch_chars = FIRST_BATCH_CHARS  # doubled with each batch sent, up to BATCH_CHARS
        self._here = 0  # characters still to count in this process before looking at the helper again
        # every text sent, while they are few enough for the table to count here (None past that)
        self._sent: list[tuple[int, str, str, str]] | None = []
        self._sent_chars = 0

    def add(self, body: int, encoding: str, text: str, meta: str) -> int | None:
        size = len(text) + len(meta)
        if self._here > 0:
            self._here -= size
            return count_block_text(text, meta, encoding)
        if self._sent is not None:
            self._sent.append((body, encoding, text, meta))
            self._sent_chars += size
            if self._sent_chars > HERE_AT_MOST_CHARS:
                self._sent = None
        self._batch.append((body, encoding, text, meta))
        self._chars += size
        if self._chars >= self._batch_chars:
            self._flush()
            self._batch_chars = min(2 * self._batch_chars, BATCH_CHARS)
            if (self._helper.unread_bytes or 0) > BEHIND_BYTES:
                self._here = BATCH_CHARS
        return None

    def _flush(self) -> None:
        if self._batch:
            self._helper.send_texts(pickle.dumps(self._batch, protocol=pickle.HIGHEST_PROTOCOL))
            self._batch, self._chars = [], 0

    def counts(self) -> dict[int, int]:
        """Raw token counts of every text added, by body hash (waits for the helper to finish, unless they are
        counted here: see the class)."""
        self._flush()
        if self._sent is not None and self._helper.still_loading():
            here = {}
            for body, encoding, text, meta in self._sent:
                counted = count_from_table(text, meta, encoding)
                if counted is None:
                    break
                here[body] = counted
            else:
                self._helper.forgo_counts()
                return here
        return self._helper.counts()


def _cut(path: Path, share: float = 0.5) -> int | None:
    """A line start after `share` of a large file's bytes, or None when the file is read whole here."""
    size = path.stat().st_size
    if size < min_split_bytes() or size < 2:
        return None
    with path.open("rb") as fh:
        fh.seek(int(size * share))
        fh.readline()
        cut = fh.tell()
    return cut if cut < size else None


def _read_here(path: Path, cut: int | None, store: BlockStore, progress: Callable[[int], None] | None,
               helper: Helper | None, kept: list[TraceRecord] | None, chain: ResponseChain | None = None) -> Piece:
    """The first half (or the whole of a small file) in this process; its errors are raised at once, being
    the first in file order."""
    stats = ReadStats()
    records: Iterable[TraceRecord] = read_trace(path, stats=stats, byte_range=(0, cut) if cut else None)
    if kept is not None:
        records = _keeping(records, kept)
    piece = Piece(path, [], stats)
    last = 0
    for sk in skeletons(leading_flags(records, piece.leading), store, chain=chain):
        piece.skeletons.append(sk)
        if progress is not None:
            progress(stats.bytes_read - last)
            last = stats.bytes_read
            if helper is not None:
                helper.report(progress)
    return piece


def _keeping(records: Iterable[TraceRecord], kept: list[TraceRecord]) -> Iterator[TraceRecord]:
    for rec in records:
        kept.append(rec)
        yield rec


class _Joiner:
    """Adds pieces in input order, making them what one pass over all files would have made."""

    def __init__(self, store: BlockStore, stats_out: list[tuple[str, ReadStats]], multi: bool) -> None:
        self.store, self.stats_out, self.multi = store, stats_out, multi
        self.skeletons: list[Skeleton] = []
        self._ids: set[str] = set()  # across files (ids made unique)
        self._file_ids: dict[str, int] = {}  # id -> line within the current file
        self._path: Path | None = None
        self._stats = ReadStats()
        self._line_shift = 0
        self._last_start = 0.0

    def add(self, piece: Piece) -> None:
        if piece.path != self._path:
            self._path, self._line_shift, self._file_ids, self._stats = piece.path, 0, {}, ReadStats()
            self.stats_out.append((str(piece.path), self._stats))
        _merge_stats(self._stats, piece.stats)
        for k, sk in enumerate(piece.skeletons):
            self._place(sk, piece, inferred=k < len(piece.leading), readable_unknown=piece.leading[k]
                        if k < len(piece.leading) else False)
        if piece.error is not None:
            message, line, fld = piece.error
            raise InputError(message, file=str(piece.path), line=((line or 0) + self._line_shift) or None,
                             field=fld)
        for body, raw in piece.raw_by_body.items():
            self.store.raw_by_body.setdefault(body, raw)
        self._line_shift += piece.lines

    def _place(self, sk: Skeleton, piece: Piece, inferred: bool, readable_unknown: bool) -> None:
        if sk.line is not None:
            sk.line += self._line_shift
        if sk.id in self._file_ids:
            raise InputError(f"duplicate id {sk.id!r} (first seen on line {self._file_ids[sk.id]})",
                             file=str(piece.path), line=sk.line, field="id")
        self._file_ids[sk.id] = sk.line or 0
        if inferred:  # its start time came from a record outside the range it was read in
            sk.started_at = self._last_start + READABLE_EPSILON
            if readable_unknown:
                sk.readable_at = sk.started_at + READABLE_EPSILON
        self._last_start = sk.started_at
        if self.multi and sk.id in self._ids:
            sk.id = f"{piece.path.stem}:{sk.id}"
        self._ids.add(sk.id)
        sk.order = len(self.skeletons)
        if piece.from_helper and sk.request is not None:
            _adopt(sk, self.store, piece.raw_by_body)
        self.skeletons.append(sk)


def _adopt(sk: Skeleton, store: BlockStore, raw_by_body: dict[int, int]) -> None:
    """Point a helper's skeleton at this store's blocks (one object per chained key, as sizing expects). A block
    new here was new to the helper's store in this file too (keys of earlier files are adopted by now), and the
    helper then counted its body in this file."""
    assert sk.request is not None
    blocks = sk.request.blocks
    for j, block in enumerate(blocks):
        known = store.blocks.get(block.cache_key)
        if known is None:
            store.blocks[block.cache_key], store.raw[block.cache_key] = block, raw_by_body[block.body_hash]
        elif known is not block:
            blocks[j] = known


def _merge_stats(into: ReadStats, part: ReadStats) -> None:
    into.records += part.records
    into.blank_lines += part.blank_lines
    into.skipped += part.skipped
    into.errors.extend(part.errors[: max(0, 20 - len(into.errors))])
    into.bytes_read += part.bytes_read
