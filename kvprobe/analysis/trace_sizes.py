"""The block sizes `report` gives trace records, for commands that name records of a trace (`diff a#id b#id`)."""
from __future__ import annotations

from kvprobe.analysis.simulate import simulate
from kvprobe.analysis.sizing import BlockSizer, SizeBook
from kvprobe.analysis.skeleton import BlockStore, skeletons
from kvprobe.trace import read_trace


def trace_sizes(args: list[str]) -> SizeBook | None:
    """For `trace.jsonl#ID` arguments: the block sizes `report` gives those records (anchored on the trace's
    logged usage), from the records up to the last one named. None when no argument names a trace record."""
    wanted: dict[str, set[str]] = {}
    for arg in args:
        name, _, rid = arg.partition("#")
        if rid and name.endswith((".jsonl", ".ndjson")):
            wanted.setdefault(name, set()).add(rid)
    if not wanted:
        return None
    book = SizeBook()
    for name, ids in wanted.items():
        records, missing = [], set(ids)
        for rec in read_trace(name, check_duplicates=False):
            records.append(rec)
            missing.discard(rec.id)
            if not missing:
                break
        store, sizer = BlockStore(), BlockSizer()
        simulate(list(skeletons(records, store)), store, sizer, ideal=False)
        part = sizer.book_of(store)
        book.by_key.update(part.by_key)
        for body, tokens in part.by_body.items():
            book.by_body.setdefault(body, tokens)
    return book
