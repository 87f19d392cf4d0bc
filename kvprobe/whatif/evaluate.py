"""Price candidate fixes by re-simulation, choose the set `fix` writes, and simulate it once end to end.

Sizes: every simulation here prices on the block sizes the anchored pass settled (`analysis.sizing`), so the
what-if baseline is the report's own prediction and equals the observed totals wherever those agree.

Cost: a candidate is priced by re-simulating only the segments of requests it can change (`components`),
reusing the baseline elsewhere; the saving is the same as a whole-trace re-simulation.

Overlap: candidates for the same miss (a keep-alive and a 1h TTL for the same pause) are alternatives, not
stacked blindly. Per group of candidates naming a common request the best compatible subset is chosen by
re-simulating the subsets (all of them up to `EXHAUSTIVE_MAX` candidates, greedily beyond); the others are
kept as alternatives with their own prices. Fixes for different misses are combined, and the "with all
fixes" total is one simulation of exactly what `fix` writes.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from itertools import combinations

from kvprobe.analysis.costing import price_results
from kvprobe.analysis.diagnose import diagnose
from kvprobe.analysis.simulate import RequestResult, simulate
from kvprobe.analysis.sizing import CARRIED_KEY, BlockSizer, SizeBook
from kvprobe.analysis.skeleton import BlockStore, Skeleton, skeletons, without_usage
from kvprobe.catalog import rules_for
from kvprobe.pricing import PriceBook
from kvprobe.trace import TraceRecord
from kvprobe.usage import normalize_usage
from kvprobe.whatif.components import Segments, segment
from kvprobe.whatif.proposals import APPLY_ORDER, PROPOSERS, Candidate

# A fix must save more than token-estimate rounding (splitting a block re-rounds its estimate) to be proposed.
MIN_SAVING_TOKENS = 16.0
MIN_SAVING_FRACTION = 0.001  # of the cost of the requests it changes
EXHAUSTIVE_MAX = 4  # overlapping candidates up to this many: every subset is simulated


@dataclass(slots=True)
class Prepared:
    """An anchored parse of the trace: its store, skeletons (observed usage kept) and the sizes it settled."""

    store: BlockStore
    skeletons: list[Skeleton]
    book: SizeBook


@dataclass(slots=True)
class WhatIf:
    baseline: list[RequestResult]
    fixes: list[Candidate]  # the chosen fixes: what `fix` writes
    fixed: list[RequestResult]  # the trace with every chosen fix applied (one simulation)
    fixed_records: list[TraceRecord]
    alternatives: list[Candidate] = field(default_factory=list)  # priced, but a chosen fix does better

    def written_records(self) -> list[TraceRecord]:
        """The fixed trace as `fix` writes it: no logged usage on any record (every one is a prediction now),
        each record carrying the block sizes it was priced on, so `report FIXED` reproduces the saving."""
        sizes = {r.sk.id: [b.tokens for b in r.sk.request.blocks] for r in self.fixed if r.sk.request is not None}
        out = []
        for rec in self.fixed_records:
            extra = {k: v for k, v in rec.extra.items() if k not in (CARRIED_KEY, "size_hints")}
            if rec.id in sizes:
                extra[CARRIED_KEY] = sizes[rec.id]
            if rec.usage is not None:
                extra.setdefault("output_tokens", normalize_usage(rec.provider or "anthropic", rec.usage).output_tokens)
            out.append(replace(rec, response=None, extra=extra))
        return out


def prepare(records: list[TraceRecord]) -> Prepared:
    """Parse and size the trace once, anchored on its logged usage."""
    store = BlockStore()
    sks = list(skeletons(records, store))
    sizer = BlockSizer()
    simulate(sks, store, sizer, ideal=False)
    return Prepared(store, sks, sizer.book_of(store))


def _cost(results: list[RequestResult]) -> tuple[float, float | None]:
    ie = sum(r.input_equivalent for r in results)
    costs = [r.cost_usd for r in results]
    return ie, None if any(c is None for c in costs) else sum(costs)  # type: ignore[arg-type]


@dataclass(slots=True)
class Priced:
    saving_ie: float
    saving_usd: float | None
    base_ie: float  # cost of the requests re-simulated, before
    segments: frozenset[int]


class Pricer:
    """Re-simulates only what a set of fixes changes, against one baseline."""

    def __init__(self, records: list[TraceRecord], prices: PriceBook, prepared: Prepared) -> None:
        self.records, self.prices, self.store, self.book = records, prices, prepared.store, prepared.book
        self.base_sks = [without_usage(sk) for sk in prepared.skeletons]
        self.baseline = diagnose(self.simulate(self.base_sks))
        self.base_by_id = {r.sk.id: r for r in self.baseline}
        self.sk_by_id = {sk.id: sk for sk in self.base_sks}
        self.session_of = {rec.id: rec.session or "-" for rec in records}
        self.by_session: dict[str, list[int]] = {}
        for i, rec in enumerate(records):
            self.by_session.setdefault(rec.session or "-", []).append(i)
        self.segs: Segments = segment(self.base_sks, lambda sk: rules_for(sk.provider, sk.model))

    def simulate(self, sks: list[Skeleton]) -> list[RequestResult]:
        results = simulate(sks, self.store, BlockSizer(self.book))
        price_results(results, self.prices)
        return results

    def simulate_records(self, records: list[TraceRecord]) -> list[RequestResult]:
        """A whole trace, re-simulated on the baseline's sizes (the final simulation, and the reference the
        segment pricing is tested against)."""
        return self.simulate(list(skeletons(records, self.store, use_observed=False)))

    def _scope(self, cands: list[Candidate]) -> list[int]:
        """Positions of the records a set of fixes may edit: every fix works within the sessions it names."""
        sessions = {self.session_of[i] for c in cands for i in c.requests if i in self.session_of}
        return sorted(i for s in sessions for i in self.by_session[s])

    def _transform(self, cands: list[Candidate]) -> tuple[list[int], list[TraceRecord]]:
        idx = self._scope(cands)
        out = [self.records[i] for i in idx]
        for cand in sorted(cands, key=lambda c: APPLY_ORDER.index(c.kind)):
            out = cand.apply(out)
        return idx, out  # out[:len(idx)] replace those positions; any further records are new

    def apply(self, cands: list[Candidate]) -> list[TraceRecord]:
        """The whole trace with these fixes: applied session group by session group, spliced back."""
        groups: list[tuple[set[str], list[Candidate]]] = []
        for cand in cands:
            sessions = {self.session_of[i] for i in cand.requests if i in self.session_of}
            meet = [g for g in groups if g[0] & sessions]
            merged = (sessions.union(*(g[0] for g in meet)), [c for g in meet for c in g[1]] + [cand])
            groups = [g for g in groups if not any(g is m for m in meet)] + [merged]
        out, added = list(self.records), []
        for _, group in groups:
            idx, after = self._transform(group)
            for i, rec in zip(idx, after):
                out[i] = rec
            added += after[len(idx):]
        return out + added

    def price(self, cands: list[Candidate]) -> Priced:
        idx, after = self._transform(cands)
        changed = [(idx[k] if k < len(idx) else len(self.records) + k, r) for k, r in enumerate(after)
                   if k >= len(idx) or r is not self.records[idx[k]]]
        new_sks = list(skeletons([r for _, r in changed], self.store, use_observed=False))
        segs: set[int] = set()
        for (pos, _), sk in zip(changed, new_sks):
            sk.order = pos
            if pos < len(self.records) and self.records[pos].started_at is None:
                base = self.base_sks[pos]  # no start time logged: keep the one the baseline inferred
                sk.started_at, sk.readable_at = base.started_at, base.readable_at
            if sk.id in self.segs.of_id:
                segs.add(self.segs.of_id[sk.id])
            segs |= self.segs.touched(sk, rules_for(sk.provider, sk.model))
        ids = {i for s in segs for i in self.segs.segments[s].ids} | {sk.id for sk in new_sks}
        new_ids = {sk.id for sk in new_sks}
        sub = new_sks + [self.sk_by_id[i] for i in ids if i not in new_ids and i in self.sk_by_id]
        base_ie, base_usd = _cost([self.base_by_id[i] for i in ids if i in self.base_by_id])
        ie, usd = _cost(self.simulate(sub))
        return Priced(base_ie - ie, None if usd is None or base_usd is None else base_usd - usd, base_ie,
                      frozenset(segs))


def _pays(p: Priced) -> bool:
    if p.saving_ie < max(MIN_SAVING_TOKENS, MIN_SAVING_FRACTION * p.base_ie):
        return False
    return p.saving_usd is None or p.saving_usd > 0


def _clusters(priced: list[tuple[Candidate, Priced]]) -> list[list[tuple[Candidate, Priced]]]:
    """Candidates for the same miss (a request they both name), grouped: those are alternatives."""
    parent = list(range(len(priced)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i
    owner: dict[str, int] = {}
    for i, (cand, _) in enumerate(priced):
        for rid in cand.requests:
            if rid in owner:
                parent[find(i)] = find(owner[rid])
            else:
                owner[rid] = i
    groups: dict[int, list[tuple[Candidate, Priced]]] = {}
    for i, item in enumerate(priced):
        groups.setdefault(find(i), []).append(item)
    return list(groups.values())


def _compatible(cands) -> bool:
    """At most one variant of a fix (stagger or warm-up for one group of siblings)."""
    groups = [c.exclusive for c in cands if c.exclusive]
    return len(groups) == len(set(groups))


def _choose(pricer: Pricer, group: list[tuple[Candidate, Priced]]) -> list[Candidate]:
    """The subset of overlapping candidates that saves most when simulated together."""
    if len(group) == 1:
        return [group[0][0]]
    ranked = sorted(group, key=lambda cp: -cp[1].saving_ie)
    best, best_saving = [ranked[0][0]], ranked[0][1].saving_ie
    if len(group) <= EXHAUSTIVE_MAX:
        for size in range(2, len(group) + 1):
            for subset in combinations([c for c, _ in ranked], size):
                if not _compatible(subset):
                    continue
                p = pricer.price(list(subset))
                if p.saving_ie > best_saving + MIN_SAVING_TOKENS and (p.saving_usd is None or p.saving_usd > 0):
                    best, best_saving = list(subset), p.saving_ie
        return best
    for cand, _ in ranked[1:]:  # greedy: keep a candidate only if it adds to what is chosen
        if not _compatible([*best, cand]):
            continue
        p = pricer.price(best + [cand])
        if p.saving_ie > best_saving + MIN_SAVING_TOKENS:
            best, best_saving = best + [cand], p.saving_ie
    return best


def _instead_of(alt: Candidate, chosen: list[Candidate]) -> list[str]:
    same = [c.kind for c in chosen if set(c.requests) & set(alt.requests)]
    return same or [c.kind for c in chosen]


def evaluate(records: list[TraceRecord], prices: PriceBook, kinds: set[str] | None = None,
             prepared: Prepared | None = None) -> WhatIf:
    prepared = prepared or prepare(records)
    pricer = Pricer(records, prices, prepared)
    priced = []
    for propose in PROPOSERS:
        for cand in propose(records, pricer.baseline):
            if kinds and cand.kind not in kinds:
                continue
            p = pricer.price([cand])
            cand.saving_input_equivalent_tokens = p.saving_ie
            cand.saving_usd = p.saving_usd
            if _pays(p):
                priced.append((cand, p))
    chosen, alternatives = [], []
    for group in _clusters(priced):
        best = _choose(pricer, group)
        chosen += best
        for cand, _ in group:
            if not any(cand is b for b in best):
                cand.extra["instead_of"] = _instead_of(cand, best)
                alternatives.append(cand)
    chosen.sort(key=lambda c: -c.saving_input_equivalent_tokens)
    alternatives.sort(key=lambda c: -c.saving_input_equivalent_tokens)
    fixed_records = pricer.apply(chosen) if chosen else records
    fixed = pricer.simulate_records(fixed_records) if chosen else pricer.baseline
    return WhatIf(pricer.baseline, chosen, fixed, fixed_records, alternatives)
