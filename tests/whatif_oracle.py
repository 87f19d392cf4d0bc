"""The reference the what-if's pricing is held to: records rendered again, sized as the anchored pass of the
original trace sized them (the logged usage settles each block's size), simulated and priced whole. The product
prices sized skeletons (kvprobe.whatif.evaluate); `fix` writes records (Pricer.apply); these tests price what
it writes this other way and compare."""
from __future__ import annotations

from kvprobe.analysis.costing import price_results
from kvprobe.analysis.simulate import RequestResult, simulate
from kvprobe.analysis.sizing import BlockSizer
from kvprobe.analysis.skeleton import BlockStore, skeletons
from kvprobe.pricing import PriceBook
from kvprobe.trace import TraceRecord


def records_priced(original: list[TraceRecord], records: list[TraceRecord],
                   prices: PriceBook | None = None) -> list[RequestResult]:
    """`records` (a rewrite of `original`) simulated on the sizes the anchored pass of `original` settled, as
    predictions (no logged usage), and priced."""
    store, anchored = BlockStore(), BlockSizer()
    simulate(list(skeletons(original, store)), store, anchored, ideal=False)
    book = anchored.book_of(store)  # before the records join the store: their new blocks are not sized yet
    results = simulate(list(skeletons(records, store, use_observed=False)), store, BlockSizer(book), ideal=False)
    price_results(results, prices or PriceBook())
    return results
