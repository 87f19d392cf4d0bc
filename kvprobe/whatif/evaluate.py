"""Price each candidate fix by re-simulating the whole trace with only that change; then all together."""
from __future__ import annotations

from dataclasses import dataclass

from kvprobe.analysis.costing import price_results
from kvprobe.analysis.simulate import RequestResult, simulate
from kvprobe.analysis.skeleton import BlockStore, skeletons
from kvprobe.pricing import PriceBook
from kvprobe.trace import TraceRecord
from kvprobe.whatif.proposals import APPLY_ORDER, PROPOSERS, Candidate

# A fix must save more than token-estimate rounding (splitting a block re-rounds its estimate) to be proposed.
MIN_SAVING_TOKENS = 16.0
MIN_SAVING_FRACTION = 0.001


@dataclass(slots=True)
class WhatIf:
    baseline: list[RequestResult]
    fixes: list[Candidate]
    fixed: list[RequestResult]  # the trace with every proposed fix applied (one simulation)
    fixed_records: list[TraceRecord]


def simulate_predicted(records: list[TraceRecord], prices: PriceBook) -> list[RequestResult]:
    """Simulate as if no usage had been logged: what-if comparisons are prediction against prediction."""
    results = simulate(skeletons(records, BlockStore(), use_observed=False))
    price_results(results, prices)
    return results


def _totals(results: list[RequestResult]) -> tuple[float, float | None]:
    ie = sum(r.input_equivalent for r in results)
    costs = [r.cost_usd for r in results]
    return ie, None if any(c is None for c in costs) else sum(costs)  # type: ignore[arg-type]


def _pays(c: Candidate, base_ie: float) -> bool:
    if c.saving_input_equivalent_tokens < max(MIN_SAVING_TOKENS, MIN_SAVING_FRACTION * base_ie):
        return False
    return c.saving_usd is None or c.saving_usd > 0


def evaluate(records: list[TraceRecord], prices: PriceBook, kinds: set[str] | None = None) -> WhatIf:
    baseline = simulate_predicted(records, prices)
    base_ie, base_usd = _totals(baseline)
    kept = []
    for propose in PROPOSERS:
        for cand in propose(records, baseline):
            if kinds and cand.kind not in kinds:
                continue
            ie, usd = _totals(simulate_predicted(cand.apply(records), prices))
            cand.saving_input_equivalent_tokens = base_ie - ie
            cand.saving_usd = None if usd is None or base_usd is None else base_usd - usd
            if _pays(cand, base_ie):
                kept.append(cand)
    kept.sort(key=lambda c: -c.saving_input_equivalent_tokens)
    fixed_records = records
    for cand in sorted(kept, key=lambda c: APPLY_ORDER.index(c.kind)):
        fixed_records = cand.apply(fixed_records)
    fixed = simulate_predicted(fixed_records, prices) if kept else baseline
    return WhatIf(baseline, kept, fixed, fixed_records)
