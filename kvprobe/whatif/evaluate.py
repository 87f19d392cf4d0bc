"""The propose and price stages: policies from the diagnosed baseline, each priced by one simulation of the
whole log with it applied, the set `fix` writes chosen, and that set simulated once end to end.

Sizes: every simulation here runs on the block sizes the anchored pass settled (`analysis.sizing`), carried
by the skeletons themselves (an edit gives new blocks their sizes), so the baseline is the report's own
prediction and equals the observed totals wherever those agree.

Cost: a constant number of whole-log simulations — the baseline, one per policy, the subsets of policies that
compete for the same misses (at most `EXHAUSTIVE_MAX` at a time; greedily beyond) and the final one — each
linear in the log. No record is rendered again: policies edit skeletons (`reshape`).

Memory: a pricing never holds its whole edited log. `Pricer.stream` edits the log a part at a time in start
order (each policy's memo of new blocks bounded), and the simulation takes each part as it comes; the domains
the edits reach are known once they have all passed (docs/scale.md).

Overlap: policies for the same misses (a keep-alive and a longer lifetime for the same pauses, a stagger and
a warm-up for the same siblings) are alternatives, not stacked blindly: per group, the best compatible subset
is chosen by simulating the subsets; the others are kept as alternatives with their own prices.
"""
from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from heapq import heappop, heappush
from itertools import combinations
from typing import TypeVar

from kvprobe.analysis.costing import Tally, price_result, price_results, tally, tally_rows
from kvprobe.analysis.diagnose import diagnose
from kvprobe.analysis.fleet import find_shared_prefixes
from kvprobe.analysis.simulate import Replayer, RequestResult, replay, simulate, start_order
from kvprobe.analysis.sizing import CARRIED_KEY, BlockSizer
from kvprobe.analysis.skeleton import BlockStore, Skeleton, skeletons
from kvprobe.pricing import PriceBook
from kvprobe.trace import TraceRecord
from kvprobe.usage import normalize_usage
from kvprobe.analysis.texts import TextSource
from kvprobe.whatif.domains import add_spans, domains_of
from kvprobe.whatif.parallel import Summary, price_chains, price_sets
from kvprobe.whatif.reshape import held_memos
from kvprobe.whatif.policies import APPLY_ORDER, Evidence, Instance, Policy
from kvprobe.whatif.propose_content import propose_params, propose_spans, propose_tools
from kvprobe.whatif.propose_fleet import propose_fleet
from kvprobe.whatif.propose_marks import propose_marks
from kvprobe.whatif.propose_timing import (propose_keep_alive, propose_longer_lifetime, propose_lookback,
                                           propose_siblings)

# A fix must save more than token-estimate rounding (splitting a block re-rounds its estimate) to be proposed.
MIN_SAVING_TOKENS = 16.0
MIN_SAVING_FRACTION = 0.001  # of the cost of the sessions it edits
EXHAUSTIVE_MAX = 4  # overlapping policies up to this many: every subset is simulated

PROPOSERS = (propose_spans, propose_tools, propose_params, propose_marks, propose_keep_alive,
             propose_longer_lifetime, propose_lookback, propose_siblings)


@dataclass(slots=True)
class Prepared:
    """An anchored parse of the trace: its store, skeletons (observed usage kept) and the sizes it settled."""

    store: BlockStore
    skeletons: list[Skeleton]  # sized: every simulation of the what-if prices them as they are
    results: list[RequestResult] | None = None  # its simulation, when no report holds it (fleet findings)


def prepare(records: list[TraceRecord]) -> Prepared:
    """Parse and size the trace once, anchored on its logged usage."""
    store = BlockStore()
    sks = list(skeletons(records, store))
    results = simulate(sks, store, BlockSizer(), ideal=False)
    return Prepared(store, sks, results)


@dataclass(slots=True)
class Priced:
    saving_ie: float
    saving_usd: float | None
    base_ie: float  # cost of the sessions the policies edit, before
    # (input equivalents, USD) of each session simulated, in the order the simulation first met them: what
    # a pricing keeps of its results (`costing.tally`; a whole log's results held while the next policy is
    # priced were ~1.5 KB a request on a fleet)
    costs: dict[str, tuple[float, float | None]]
    edited: dict[str, int]  # session -> requests edited or added
    sks: list[Skeleton] | None  # the skeletons simulated; None: streamed (`Pricer.stream`), not held
    under: dict[str, tuple[float, float | None]] | None = None  # what it is compared with, if not the baseline
    differs: dict[str, int] | None = None  # streamed on top of a set: per session, requests that differ from it


def _sum_usd(values) -> float | None:
    total = 0.0
    for v in values:
        if v is None:
            return None
        total += v
    return total


T = TypeVar("T")
STREAM_PART = 4096  # requests edited at a time when an edited log is streamed (`Pricer.stream`)


class OutOfOrder(Exception):
    """An edited log streamed in start order met a request an edit moved before one already given."""


def _item_order(item: tuple[Skeleton, bool, bool]) -> tuple[float, int]:
    return start_order(item[0])


class _Merge:
    """One edited log put in start order as its parts come: what an edit added or moved that starts at or after
    the next part's first request waits for that part (`Pricer.stream`).

    What waits is a heap keyed by start order, so each item is sorted in once however many parts it waits: a
    fleet's pings wait through the parts that pass during its sessions' gaps, ever more of them in a larger
    fleet, and sorting all that waited again with every part (its start order asked each time) grew with the
    square of the log (0.1 s at 105,006 requests, 0.9 s at 315,000)."""

    __slots__ = ("pending", "last", "taken")

    def __init__(self) -> None:
        # a heap of (start order, arrival number, item): the arrival number keeps equal starts in the order they
        # came (waiting ones first), as a stable sort of the waiting items and then the new ones would
        self.pending: list[tuple[tuple[float, int], int, tuple[Skeleton, bool, bool]]] = []
        self.last: tuple[float, int] | None = None
        self.taken = 0

    def take(self, items: list[tuple[Skeleton, bool, bool]], bound: tuple[float, int] | None
             ) -> list[tuple[Skeleton, bool, bool]]:
        """The items final once this part's are in (all of them at the log's end: `bound` None)."""
        n = self.taken
        self.taken += len(items)
        arrived = [(_item_order(item), n + k, item) for k, item in enumerate(items)]
        arrived.sort()  # (arrival numbers differ: the items themselves are never compared)
        cut = len(arrived) if bound is None else bisect_left(arrived, (bound,))  # the first at or after bound
        final, later, pending = arrived[:cut], arrived[cut:], self.pending
        if pending:  # a heap: what waits is sorted in once, however many parts it waits
            for entry in later:
                heappush(pending, entry)
            due = []
            while pending and (bound is None or pending[0][0] < bound):
                due.append(heappop(pending))
            if due:
                final = due + final
                final.sort()  # (two sorted runs: merged in one pass)
        else:  # (a sorted list is a heap already)
            self.pending = later
        if final:
            if self.last is not None and final[0][0] < self.last:
                raise OutOfOrder
            self.last = final[-1][0]
        return [entry[2] for entry in final]


def _in_order(policies: list[Policy]) -> list[Policy]:
    return sorted(policies, key=lambda p: APPLY_ORDER.index(p.kind))


def _applied(policies: list[Policy], sks: list[Skeleton]) -> list[Skeleton]:
    for policy in policies:
        sks = policy.reshape(sks)
    return sks


def _edited(part: list[Skeleton], policies: list[Policy], under: list[Policy] | None
            ) -> list[tuple[Skeleton, bool, bool]]:
    """A part of the log with the policies applied: each skeleton, whether an edit changed it (or added it),
    and whether it differs from the part with `under` applied (as `Pricer.marginal` compares whole logs: a
    set applied on top of `under` starts from its result, as `Pricer.reshape` does)."""
    ordered = _in_order(policies)
    if under is None:
        return _alone(part, _applied(ordered, part))
    first = _in_order(under)
    below = _applied(first, part)
    rest = ordered[len(first):] if [id(p) for p in ordered[:len(first)]] == [id(p) for p in first] else None
    out = _applied(rest, below) if rest is not None else _applied(ordered, part)
    return _on_top(part, below, out)


def _alone(part: list[Skeleton], out: list[Skeleton]) -> list[tuple[Skeleton, bool, bool]]:
    """`out` (the part edited) as `_edited` gives it with nothing under it: whether each differs from the part."""
    n = len(part)
    return [(sk, k >= n or sk is not part[k], True) for k, sk in enumerate(out)]


def _on_top(part: list[Skeleton], below: list[Skeleton], out: list[Skeleton]) -> list[tuple[Skeleton, bool, bool]]:
    """`out` (`below` edited further) as `_edited` gives it: whether each differs from the part, and from below."""
    n = len(part)
    changed = [k >= n or sk is not part[k] for k, sk in enumerate(out)]
    beyond = [True] * max(len(out) - len(below), 0)
    differs = [a is not b and (a.request is not b.request or a.started_at != b.started_at)
               for a, b in zip(below, out)] + beyond
    return list(zip(out, changed, differs))


class Pricer:
    """Simulates the log with sets of policies applied, against one baseline."""

    def __init__(self, records: list[TraceRecord] | None, prices: PriceBook, prepared: Prepared) -> None:
        self.records, self.prices, self.store = records, prices, prepared.store
        # the parse's own skeletons, their logged usage left unread (every simulation here predicts)
        self.base_sks = list(prepared.skeletons)
        self.baseline = diagnose(self.simulate(self.base_sks, ideal=True))
        # each session's cost, added up as a policy's pricing adds up its own (the baseline's results are priced)
        self.base_sessions = tally(self.baseline).sessions
        self.kept: dict[tuple[int, ...], Priced] = {}  # the sets a later marginal price starts from
        self.spans = add_spans(self.base_sks, {})  # cache domains of the log as it is
        self.reshaped: dict[tuple[int, ...], list[Skeleton]] = {}  # policy sets another starts from
        self.keep_reshaped: set[tuple[int, ...]] = set()
        self._by_start: list[Skeleton] | None = None

    def __getstate__(self) -> dict:
        """What a cluster's worker prices with (`parallel`: the pricer is sent to each once): not the diagnosed
        baseline, which only the proposals here read (half of what was sent: ~0.9 of 1.7 KB a request on a
        fleet), nor the records, which only `fix` writes from."""
        return {**self.__dict__, "baseline": [], "records": None}

    def simulate(self, sks: list[Skeleton], ideal: bool = False) -> list[RequestResult]:
        results = simulate(sks, self.store, presized=True, ideal=ideal, predict=True)
        price_results(results, self.prices)
        return results

    def replay(self, sks: Iterable[Skeleton], ordered: bool = False) -> Iterator[RequestResult]:
        """`simulate` one priced result at a time, for a pass that keeps none (`simulate.replay`); ordered:
        the skeletons come in start order already (`stream`)."""
        for result in replay(sks, self.store, ordered=ordered):
            price_result(result, self.prices)
            yield result

    def stream(self, policies: list[Policy], under: list[Policy] | None = None, sessions: set[str] | None = None
               ) -> Iterator[tuple[Skeleton, bool, bool]]:
        """The log with these policies applied, in start order, edited a part at a time (`STREAM_PART`
        requests): the whole edited log is never held (~1.7 KB a request of a fleet while it was simulated).
        Yields (skeleton, whether it differs from the log's own, whether it differs from the log with `under`
        applied: a marginal price). sessions: only these sessions' requests (and what edits add to them).
        Raises `OutOfOrder` if an edit moved a request before one already given (no policy does: a staggered
        sibling and a ping start later, a warm-up with its group's first)."""
        merge = _Merge()
        with held_memos():
            for part, bound in self._parts(sessions):
                yield from merge.take(_edited(part, policies, under), bound)

    def _parts(self, sessions: set[str] | None = None) -> Iterator[tuple[list[Skeleton], tuple[float, int] | None]]:
        """The log in start order, `STREAM_PART` requests at a time (only `sessions`' when given), each with
        the start order of the next part's first request (None for the last part)."""
        base = self.by_start()
        for lo in range(0, len(base), STREAM_PART):
            part = base[lo:lo + STREAM_PART]
            if sessions is not None:
                part = [sk for sk in part if sk.session in sessions]
            yield part, start_order(base[lo + STREAM_PART]) if lo + STREAM_PART < len(base) else None

    def by_start(self) -> list[Skeleton]:
        """The log's own skeletons in start order (sorted once)."""
        if self._by_start is None:
            self._by_start = sorted(self.base_sks, key=start_order)
        return self._by_start

    def reshape(self, policies: list[Policy]) -> list[Skeleton]:
        """The log with these policies applied (in apply order); a set that extends one applied just before
        starts from its result (a policy priced on top of the one it requires, the final set)."""
        ordered = _in_order(policies)
        sks, done = self.base_sks, 0
        for n in range(len(ordered), 0, -1):
            found = self.reshaped.get(tuple(id(p) for p in ordered[:n]))
            if found is not None:
                sks, done = found, n
                break
        for n in range(done, len(ordered)):
            sks = ordered[n].reshape(sks)
        key = tuple(id(p) for p in ordered)
        if key in self.keep_reshaped:
            self.reshaped[key] = sks
        return sks

    def price(self, policies: list[Policy], under: list[Policy] | None = None) -> Priced:
        """The log simulated with these policies: only the cache domains their edits reach (sessions outside
        them read and write exactly as in the baseline). Streamed a part at a time (`stream`) where the log
        is longer than one part; whole where it is not (a part is held whole anyway, and a set priced on top
        of another then starts from that one's edited log instead of editing the log again) or where an edit
        moved a request earlier.
        under: the set a marginal price compares with (`Priced.edited` counts the requests that differ)."""
        if len(self.base_sks) > STREAM_PART:
            try:
                return self._price_streamed(policies, under)
            except OutOfOrder:
                pass
        return self._price_whole(policies)

    def _price_streamed(self, policies: list[Policy], under: list[Policy] | None) -> Priced:
        """`price` on the edited log as it streams: its edits noted as they pass, then the domains they reach
        priced. Where the policies edit most sessions, every session is simulated in the one pass and the
        reached ones' results added up after (in the order the simulation gave them, as a simulation of those
        alone adds them); else a first pass finds the reached domains and a second simulates only them."""
        one_pass = self._one_pass([*policies, *(under or [])])
        passing = _Pass(self, under, simulated=one_pass)
        with held_memos():
            for part, bound in self._parts():
                passing.feed(_edited(part, policies, under), bound)
        if one_pass:
            return passing.priced()
        domains = passing.reached()
        summed = tally(self.replay((sk for sk, _, _ in self.stream(policies, under, domains)
                                    if sk.session in domains), ordered=True))
        return self._priced(summed, domains, passing.edited, None, passing.differs if under is not None else None)

    def _one_pass(self, policies: list[Policy]) -> bool:
        """Whether the policies edit most sessions: a streamed pricing then simulates every one in one pass."""
        touched = set().union(*(p.sessions for p in policies))
        return 2 * len(touched) >= len(self.base_sessions)

    def price_family(self, requires: list[Policy], on_top: list[Policy]) -> tuple[Priced, list[Priced]] | None:
        """`price(requires)` and `marginal(p)` of each policy on top of them, in one streamed pass: each part of
        the log is edited by the requirements once, then by each policy on top of that, and every edited log
        simulated as it comes (the requirements' edit, a fleet's system prompt made stable, was the costliest
        step of pricing the two apart, and it was made twice). None where the sets are not priced in one pass
        each (`_price_streamed`), or a policy is not applied after its requirements: `price` and `marginal`
        then price them apart."""
        first = _in_order(requires)
        ids = [id(p) for p in first]
        if len(self.base_sks) <= STREAM_PART or not self._one_pass(requires) or any(
                [id(p) for p in _in_order([*requires, top])[:len(first)]] != ids for top in on_top):
            return None
        passes = [_Pass(self, None)] + [_Pass(self, requires) for _ in on_top]
        try:
            with held_memos():
                for part, bound in self._parts():
                    below = _applied(first, part)
                    passes[0].feed(_alone(part, below), bound)
                    for top, one in zip(on_top, passes[1:]):
                        one.feed(_on_top(part, below, _applied([top], below)), bound)
        except OutOfOrder:
            return None
        under = passes[0].priced()
        return under, [self._marginal_of(under, one.priced()) for one in passes[1:]]

    def _priced(self, summed: Tally, reached: set[str], edited: dict[str, int], sks: list[Skeleton] | None,
                differs: dict[str, int] | None = None) -> Priced:
        ie, usd = summed.input_equivalent, summed.usd
        # summed in a fixed order: a set's order follows the process's string hash seed, and float sums their order
        before = [self.base_sessions[s] for s in sorted(reached) if s in self.base_sessions]
        base_ie, base_usd = sum(c[0] for c in before), _sum_usd(c[1] for c in before)
        saving_usd = None if usd is None or base_usd is None else base_usd - usd
        edited_ie = sum(self.base_sessions[s][0] for s in edited if s in self.base_sessions)
        return Priced(base_ie - ie, saving_usd, edited_ie, summed.sessions, edited, sks, differs=differs)

    def _price_whole(self, policies: list[Policy]) -> Priced:
        """`price` on the whole edited log, held (kept for the sets that start from it)."""
        sks = self.reshape(policies)
        edited: dict[str, int] = {}
        changed: list[Skeleton] = []
        for k, sk in enumerate(sks):
            if k >= len(self.base_sks) or sk is not self.base_sks[k]:
                edited[sk.session] = edited.get(sk.session, 0) + 1
                changed.append(sk)
        spans = add_spans(changed, {key: list(span) for key, span in self.spans.items()})
        reached = domains_of(set(edited), spans)
        sub = [sk for sk in sks if sk.session in reached] if len(reached) < len(self.base_sessions) else sks
        return self._priced(tally(self.replay(sub)), reached, edited, sks)

    def price_chain(self, chain: list[Policy]) -> list[Priced]:
        """The first policy priced alone (or on top of what it requires, `marginal`), and each next one, which
        requires exactly the first, on top of it: in one streamed pass where it can be (`price_family`), else
        from the first one's edited log, kept while the others are priced. What is kept is let go after."""
        head, tops = chain[0], chain[1:]
        try:
            family = self.price_family([head], tops) if tops and not head.requires else None
            if family is not None:
                return [family[0], *family[1]]
            first = self.marginal(head) if head.requires else self.price([head])
            if tops:
                self.kept[(id(head),)] = first
            return [first, *(self.marginal(top) for top in tops)]
        finally:
            self.kept.clear()
            self.reshaped.clear()

    def marginal(self, policy: Policy) -> Priced:
        """What a policy adds on top of the ones it requires (the baseline of its instances is theirs)."""
        key = tuple(id(p) for p in policy.requires)
        under = self.kept.get(key) or self.price(policy.requires)
        both = self.price([*policy.requires, policy], under=policy.requires)
        if both.differs is not None:
            edited = both.differs
        else:
            if under.sks is None:  # (streamed: the set it starts from is edited again, whole)
                under = self._price_whole(policy.requires)
            edited = {}
            for a, b in zip(under.sks, both.sks):
                if a is not b and (a.request is not b.request or a.started_at != b.started_at):
                    edited[b.session] = edited.get(b.session, 0) + 1
            for sk in both.sks[len(under.sks):]:
                edited[sk.session] = edited.get(sk.session, 0) + 1
        return self._marginal_of(under, both, edited)

    @staticmethod
    def _marginal_of(under: Priced, both: Priced, edited: dict[str, int] | None = None) -> Priced:
        """What `both` adds to `under` (the set it was priced on top of); edited: the requests that differ from
        `under`'s (a streamed pricing counted them: `Priced.differs`)."""
        usd = None if both.saving_usd is None or under.saving_usd is None else both.saving_usd - under.saving_usd
        return Priced(both.saving_ie - under.saving_ie, usd, both.base_ie, both.costs,
                      both.differs if edited is None else edited, both.sks, under.costs)

    def instances(self, priced: Priced) -> list[Instance]:
        """Per session: what the policy's simulation saved there (reads of entries other sessions kept alive
        count where they were read)."""
        out = []
        before = self.base_sessions if priced.under is None else {**self.base_sessions, **priced.under}
        for session, (ie, usd) in priced.costs.items():
            base_ie, base_usd = before.get(session, (0.0, 0.0))
            edited = priced.edited.get(session, 0)
            if edited or abs(base_ie - ie) > 1e-6:
                out.append(Instance(session, edited, base_ie - ie,
                                    None if usd is None or base_usd is None else base_usd - usd))
        out.sort(key=lambda i: -i.saving_ie)
        return out

    # record-level: what `fix` writes (the tests price it whole again: tests/whatif_oracle.py)
    def apply(self, policies: list[Policy]) -> list[TraceRecord]:
        assert self.records is not None, "the records are needed to write them"
        records = self.records
        for policy in sorted(policies, key=lambda p: APPLY_ORDER.index(p.kind)):
            records = policy.apply(records)
        return records


def _price_each(pricer: Pricer, proposed: list[Policy], required: set[tuple[int, ...]],
                beside: Callable[[], None] | None = None) -> dict[int, Summary]:
    """Each policy priced alone (on top of the ones it requires), a chain at a time (`_chains`), on the executor's
    workers when the log is large enough (`parallel`); `beside` (the caller's own work: the report's diagnoses)
    runs here meanwhile, then this process takes chains from the end of the list."""
    chains = _chains(proposed, required)
    summaries: dict[int, Summary] = {}
    for chain, got in zip(chains, price_chains(pricer, chains, beside)):
        for policy, s in zip(chain, got):
            summaries[id(policy)] = s
    # every marginal price is made, and with them every pricing that starts from a kept edited log: held while
    # other sets are priced, one was ~2 KB a request of a fleet (a subset `_choose` prices edits the log again)
    pricer.keep_reshaped = set()
    pricer.kept.clear()
    pricer.reshaped.clear()
    return summaries


def _chains(proposed: list[Policy], required: set[tuple[int, ...]]) -> list[list[Policy]]:
    """The pricing units: each policy others require with those on top of it alone (its edited log made once
    for them all: `Pricer.price_chain`), first, as the longest; then each other policy by itself."""
    heads = [p for p in proposed if (id(p),) in required]
    chains = [[head, *(p for p in proposed if len(p.requires) == 1 and p.requires[0] is head)] for head in heads]
    chains.sort(key=len, reverse=True)  # (a stable sort: proposal order among equals)
    taken = {id(p) for chain in chains for p in chain}
    return chains + [[p] for p in proposed if id(p) not in taken]


def _pays(p: Priced | Summary) -> bool:
    if p.saving_ie < max(MIN_SAVING_TOKENS, MIN_SAVING_FRACTION * p.base_ie):
        return False
    return p.saving_usd is None or p.saving_usd > 0


def _clusters(priced: list[tuple[Policy, Summary]]) -> list[list[tuple[Policy, Summary]]]:
    """Policies for the same misses (a request they both address), grouped: those are alternatives."""
    parent = list(range(len(priced)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i
    owner: dict[str, int] = {}
    for i, (policy, _) in enumerate(priced):
        for rid in policy.requests:
            if rid in owner:
                parent[find(i)] = find(owner[rid])
            else:
                owner[rid] = i
    groups: dict[int, list[tuple[Policy, Summary]]] = {}
    for i, item in enumerate(priced):
        groups.setdefault(find(i), []).append(item)
    return list(groups.values())


def _compatible(policies) -> bool:
    """At most one variant of a fix (stagger or warm-up of the same siblings)."""
    groups = [p.exclusive for p in policies if p.exclusive]
    return len(groups) == len(set(groups))


def _choose(pricer: Pricer, group: list[tuple[Policy, Summary]]) -> list[Policy]:
    """The subset of overlapping policies that saves most when simulated together."""
    ranked = sorted(group, key=lambda pp: -pp[1].saving_ie)
    best, best_saving = [ranked[0][0]], ranked[0][1].saving_ie
    if len(group) == 1:
        return best
    subsets = ([list(s) for size in range(2, len(group) + 1) for s in combinations([p for p, _ in ranked], size)]
               if len(group) <= EXHAUSTIVE_MAX else None)
    if subsets is not None:
        subsets = [s for s in subsets if _compatible(s)]
        for subset, p in zip(subsets, price_sets(pricer, subsets)):
            if p.saving_ie > best_saving + MIN_SAVING_TOKENS and (p.saving_usd is None or p.saving_usd > 0):
                best, best_saving = subset, p.saving_ie
        return best
    for policy, _ in ranked[1:]:  # greedy: keep a policy only if it adds to what is chosen
        if _compatible([*best, policy]):
            p = pricer.price(best + [policy])
            if p.saving_ie > best_saving + MIN_SAVING_TOKENS:
                best, best_saving = best + [policy], p.saving_ie
    return best


def _instead_of(alt: Policy, chosen: list[Policy]) -> list[str]:
    same = [c.label for c in chosen if set(c.requests) & set(alt.requests)]
    return same or [c.label for c in chosen]


class _Pass:
    """One streamed pass over a set's edited log (`_price_streamed`, `price_family`): its parts put in start
    order as they come, its edits noted for the domains they reach, and, simulated, every request simulated
    and added up (the one-pass pricing)."""

    def __init__(self, pricer: Pricer, under: list[Policy] | None, simulated: bool = True) -> None:
        self.pricer, self.under = pricer, under
        self.merge = _Merge()
        self.replayer = Replayer(pricer.store) if simulated else None
        self.rows: list[tuple[str, float, float | None]] = []
        self.edited: dict[str, int] = {}
        self.differs: dict[str, int] = {}
        self.spans = {key: list(span) for key, span in pricer.spans.items()}
        self.changed: list[Skeleton] = []

    def feed(self, items: list[tuple[Skeleton, bool, bool]], bound: tuple[float, int] | None) -> None:
        prices, rows, replayer = self.pricer.prices, self.rows, self.replayer
        for sk, edit, diff in self.merge.take(items, bound):
            if edit:
                self.edited[sk.session] = self.edited.get(sk.session, 0) + 1
                self.changed.append(sk)
                if len(self.changed) >= STREAM_PART:
                    add_spans(self.changed, self.spans)
                    self.changed.clear()
            if diff:
                self.differs[sk.session] = self.differs.get(sk.session, 0) + 1
            result = replayer.step(sk) if replayer is not None else None
            if result is not None:
                price_result(result, prices)
                rows.append((sk.session, result.input_equivalent, result.cost_usd))

    def reached(self) -> set[str]:
        """The sessions the edits reach (once every part has passed)."""
        add_spans(self.changed, self.spans)
        self.changed.clear()
        return domains_of(set(self.edited), self.spans)

    def priced(self) -> Priced:
        """The simulated pass's price: the reached sessions' results, added up in the simulation's order."""
        pricer, rows = self.pricer, self.rows
        domains = self.reached()
        summed = tally_rows([row for row in rows if row[0] in domains]
                            if len(domains) < len(pricer.base_sessions) else rows)
        return pricer._priced(summed, domains, self.edited, None, self.differs if self.under is not None else None)


@dataclass(slots=True)
class WhatIf:
    _baseline: list[RequestResult] | None  # None: released once the proposals were made (`evaluate`'s keep)
    fixes: list[Policy]  # the chosen policies: what `fix` writes
    pricer: Pricer
    alternatives: list[Policy] = field(default_factory=list)  # priced, but a chosen policy does better
    _fixed: list[RequestResult] | None = None
    kept: object = None  # what `evaluate`'s caller kept of the diagnosed baseline before it was released

    @property
    def baseline(self) -> list[RequestResult]:
        """The log as it is, simulated and priced: the diagnosed baseline the proposals read, or, once that
        was released, the same simulation again (the same usage and cost of every request; no diagnoses)."""
        if self._baseline is None:
            self._baseline = self.pricer.simulate(self.pricer.base_sks)
        return self._baseline

    @property
    def fixed(self) -> list[RequestResult]:
        """The log with every chosen policy applied (one simulation), made when first asked for: a report's
        totals read it once as it is simulated (`fixed_results`), and a whole log of results held to the end
        was ~2.9 KB a request on a fleet; the per-request table, `fix` and `replay` ask for it."""
        if self._fixed is None:
            self._fixed = self.pricer.simulate(self.pricer.reshape(self.fixes)) if self.fixes else self.baseline
        return self._fixed

    def fixed_results(self) -> Iterator[RequestResult]:
        """The results of `fixed` one at a time, priced, and kept only when `fixed` already was; the edited log
        streamed (`Pricer.stream`: it raises `OutOfOrder` where an edit moved a request earlier)."""
        if self._fixed is not None or not self.fixes:
            return iter(self.fixed)
        return self.pricer.replay((sk for sk, _, _ in self.pricer.stream(self.fixes)), ordered=True)

    def fixed_summary(self, add_up: Callable[[Iterable[RequestResult]], T]) -> T:
        """`add_up(fixed_results())`, over the whole edited log where an edit moved a request earlier."""
        try:
            return add_up(self.fixed_results())
        except OutOfOrder:
            return add_up(self.pricer.replay(self.pricer.reshape(self.fixes)))

    @property
    def fixed_records(self) -> list[TraceRecord]:
        return self.pricer.apply(self.fixes) if self.fixes else list(self.pricer.records or [])

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
                # the usage's own shape where the record names no provider (as `copy_record` reads it)
                extra.setdefault("output_tokens", normalize_usage(rec.provider, rec.usage).output_tokens)
            out.append(replace(rec, response=None, extra=extra))
        return out


def propose(pricer: Pricer, texts: TextSource, kinds: set[str] | None = None, fleet: list | None = None
            ) -> list[Policy]:
    ev = Evidence(pricer.baseline, texts, fleet or [], size=len(pricer.base_sks))
    out = [p for propose_one in PROPOSERS for p in propose_one(ev)]
    out += propose_fleet(ev, out)  # on top of the policies that remove what breaks the sharing
    return [p for p in out if not kinds or p.kind in kinds]


def evaluate(records: list[TraceRecord] | None, prices: PriceBook, kinds: set[str] | None = None,
             prepared: Prepared | None = None, texts: TextSource | None = None, fleet: list | None = None,
             beside: Callable[[], None] | None = None,
             keep: Callable[[list[RequestResult]], object] | None = None) -> WhatIf:
    """records: the trace's records in input order when the caller holds them (needed to write `fix`'s
    output); without them, the few texts a proposal reads are re-read from the skeletons' lines. `beside`:
    work of the caller's that this process does while the policies are priced elsewhere (called once).
    `keep`: what the caller needs of the diagnosed baseline (`WhatIf.kept`), taken once the proposals are
    made; the baseline is then released (~0.9 KB a request of a fleet, held while every policy is priced)."""
    if prepared is None:
        assert records is not None
        prepared = prepare(records)
    pricer = Pricer(records, prices, prepared)
    texts = texts or TextSource(records)
    if fleet is None and prepared.results is not None:  # `fix` and `replay`: the report's fleet findings
        fleet = find_shared_prefixes(prepared.results, texts, prices)
    proposed = propose(pricer, texts, kinds, fleet)
    kept = None
    if keep is not None:
        kept, pricer.baseline = keep(pricer.baseline), []
    required = {tuple(id(r) for r in p.requires) for p in proposed if p.requires}
    pricer.keep_reshaped = required  # a policy priced on top of others starts from their edited log
    summaries = _price_each(pricer, proposed, required, beside)
    priced, on_top = [], []
    for policy in proposed:
        s = summaries[id(policy)]
        policy.saving_input_equivalent_tokens, policy.saving_usd = s.saving_ie, s.saving_usd
        policy.edited_requests = sum(s.edited.values())
        policy.instances = s.instances
        if _pays(s):
            (on_top if policy.requires else priced).append((policy, s))
    chosen, alternatives = [], []
    for group in _clusters(priced):
        best = _choose(pricer, group)
        chosen += best
        for policy, _ in group:
            if not any(policy is b for b in best):
                policy.extra["instead_of"] = _instead_of(policy, best)
                alternatives.append(policy)
    for policy, s in on_top:
        missing = [r for r in policy.requires if not any(r is c for c in chosen)]
        # a requirement that does not pay alone is chosen with what it enables, where together they pay (a
        # fleet's name moved out saves nothing while its sessions start further apart than entries live); one
        # set aside for another fix of the same misses is not taken back
        if not any(r is a for r in missing for a in alternatives) and _pays(replace(
                s, saving_ie=s.saving_ie + sum(r.saving_input_equivalent_tokens for r in missing),
                saving_usd=_sum_usd([s.saving_usd, *(r.saving_usd for r in missing)]))):
            chosen += [*missing, policy]
    chosen.sort(key=lambda c: -c.saving_input_equivalent_tokens)
    alternatives.sort(key=lambda c: -c.saving_input_equivalent_tokens)
    return WhatIf(pricer.baseline if keep is None else None, chosen, pricer, alternatives, kept=kept)
