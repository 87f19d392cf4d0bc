"""`report`: simulate traces, diagnose every miss, price the task (docs/contracts.md §3)."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from kvprobe.analysis import split_parse
from kvprobe.analysis.agent_advice import advise as advise_agents, uncached_notes
from kvprobe.analysis.helper import input_bytes, worth_splitting
from kvprobe.analysis.costing import miss_cost, price_results
from kvprobe.analysis.diagnosis import advice_for
from kvprobe.analysis.diagnose import diagnose
from kvprobe.analysis.fleet import find_shared_prefixes
from kvprobe.analysis.simulate import LeadingSimulation, RequestResult, simulate
from kvprobe.analysis.sizing import BlockSizer
from kvprobe.analysis.skeleton import BlockStore, Skeleton, skeletons, without_usage
from kvprobe.analysis.texts import TextSource
from kvprobe.economics.attribution import attribute, top_blocks
from kvprobe.economics.compaction import find_compactions
from kvprobe.economics.tasks import Outcome, summarize_tasks
from kvprobe.economics.tasks import overall as task_overall
from kvprobe.pricing import PriceBook
from kvprobe.request import RenderedRequest, render_request
from kvprobe.tokenizers import expect_input
from kvprobe.trace import ReadStats, TraceRecord, read_trace
from kvprobe.trace.reader import RecordReader
from kvprobe.trace.record import format_time
from kvprobe.wording import round_usd


@dataclass(slots=True)
class Filters:
    session: str | None = None
    agent: str | None = None
    since: float | None = None

    def keep(self, r: RequestResult) -> bool:
        return self.keeps(r.sk)

    def keeps(self, sk: Skeleton) -> bool:
        return ((self.session is None or sk.session == self.session)
                and (self.agent is None or sk.agent == self.agent)
                and (self.since is None or sk.started_at >= self.since))


@dataclass(slots=True)
class Miss:
    result: RequestResult
    input_equivalent: float
    usd: float | None


@dataclass(slots=True)
class Report:
    results: list[RequestResult]
    misses: list[Miss]
    stats: list[tuple[str, ReadStats]] = field(default_factory=list)
    unknown_models: list[str] = field(default_factory=list)
    unpriced_models: list[str] = field(default_factory=list)
    # every model (and platform) whose requests used a default rule, with what it fell back to
    rule_fallbacks: list[dict[str, Any]] = field(default_factory=list)
    fixes: list[dict[str, Any]] = field(default_factory=list)
    alternatives: list[dict[str, Any]] = field(default_factory=list)  # fixes a chosen one does better than
    with_all_fixes: dict[str, Any] | None = None
    what_if: Any = None  # whatif.evaluate.WhatIf when fixes were computed
    notes: list[str] = field(default_factory=list)
    blocks: list[Any] = field(default_factory=list)  # economics.attribution.BlockCost: all, costliest first
    compactions: list[Any] = field(default_factory=list)
    fleet: list[Any] = field(default_factory=list)  # analysis.fleet.SharedPrefix: prefixes sessions share
    # agent logs: what each agent's longer-lifetime setting costs and saves here (analysis.agent_advice)
    lifetime_trades: list[Any] = field(default_factory=list)
    top: int = 10  # misses the terminal lists (the JSON has every one)

    @property
    def causes(self) -> list[Any]:
        """Misses grouped by cause, costliest first (economics.causes.Cause)."""
        from kvprobe.economics.causes import group_causes

        return group_causes(self.misses, self.fixes)
    tasks: list[Any] = field(default_factory=list)  # economics.tasks.TaskSummary
    considered: int = 0  # requests read before the filters (failed ones too): "empty input" or "nothing matched"
    # requests that failed (skeleton.failed_call: an error and no usage, or refused with a 4xx): (id, error).
    # Never simulated, priced, diagnosed or counted in `results`: nothing reached a cache
    failed: list[tuple[str, str]] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)  # the paths given (files or folders), in order
    prices: Any = None  # the PriceBook every cost was priced with (the per-class dollar split reads it)
    bill: Any = None  # economics.bill.Bill: the spend by token class, in total and by model/project/session/agent

    @property
    def failed_note(self) -> str | None:
        """The line every output shows for the failed requests (None when there are none)."""
        return failed_line(self.failed)

    @property
    def totals(self) -> dict[str, Any]:
        return summarize(self.results)

    @property
    def basis(self) -> str:
        """Which figures the totals add up: the usage the provider logged, kvprobe's prediction, or both."""
        predicted = sum(not r.observed for r in self.results)
        if not predicted:
            return "logged usage"
        if predicted == len(self.results):
            return "predicted: no usage logged"
        return f"logged usage; predicted for {predicted} requests without it"

    def groups(self, key: Callable[[RequestResult], str]) -> dict[str, dict[str, Any]]:
        grouped: dict[str, list[RequestResult]] = {}
        for r in self.results:
            grouped.setdefault(key(r), []).append(r)
        return {k: summarize(v) for k, v in grouped.items()}

    def to_json(self) -> dict[str, Any]:
        return {key: list(value) if isinstance(value, Iterator) else value for key, value in self.json_items()}

    def json_items(self) -> Iterator[tuple[str, Any]]:
        """`to_json`'s keys and values in order, the per-request and per-miss lists as iterators: a writer that
        encodes them an element at a time (`cli.common.print_json_items`) never holds them whole."""
        yield "totals", self.totals
        yield "requests", (request_json(r) for r in self.results)
        yield "sessions", self.groups(lambda r: r.sk.session)
        yield "agents", self.groups(lambda r: r.sk.agent)
        yield "misses", ({"id": m.result.sk.id, "input_equivalent_tokens": round(m.input_equivalent, 1),
                          "usd": round_usd(m.usd), "kinds": [d.kind for d in m.result.diagnoses],
                          "why": m.result.diagnoses[0].detail if m.result.diagnoses else "",
                          "what_to_do": advice_for(m.result.diagnoses[0]) if m.result.diagnoses else ""}
                         for m in self.misses)
        yield "causes", [c.to_json() for c in self.causes]
        yield "fixes", self.fixes
        yield "alternatives", self.alternatives
        yield "with_all_fixes", self.with_all_fixes
        yield "inputs", [{"file": name, "records": s.records, "skipped_lines": s.skipped, "errors": s.errors}
                         for name, s in self.stats]
        yield "unknown_models", self.unknown_models
        yield "unpriced_models", self.unpriced_models
        yield "rule_fallbacks", self.rule_fallbacks
        yield "notes", self.notes
        yield "blocks", (b.to_json() for b in self.blocks)
        yield "compactions", [c.to_json() for c in self.compactions]
        yield "fleet", [f.to_json() for f in self.fleet]
        yield "tasks", [t.to_json() for t in self.tasks]
        yield "task_totals", task_overall(self.tasks)
        yield "failed_requests", [{"id": rid, "error": error} for rid, error in self.failed]
        yield "bill", self.bill.to_json() if self.bill is not None else None
        yield "fixes_note", self.fixes_note
        yield "lifetime_trades", [t.to_json() for t in self.lifetime_trades]

    @property
    def fixes_note(self) -> str | None:
        """What stands in for the fixes when there are none: none pays, or (no request bodies) none could be
        simulated, and how to capture them; None when fixes were found or not computed."""
        if self.what_if is None or self.fixes:
            return None
        from kvprobe.analysis.agent_advice import no_bodies_note
        from kvprobe.economics.bill_words import NO_FIX_PAYS

        return no_bodies_note(self.results) or NO_FIX_PAYS


def failed_line(failed: list[tuple[str, str]]) -> str | None:
    """`3 requests failed (HTTP 429: rate_limit_error …; req_1, req_2, req_3): not priced or simulated …`."""
    if not failed:
        return None
    errors = sorted({error.split(";")[0][:80] for _, error in failed})
    said = "; ".join(errors[:2]) + ("; …" if len(errors) > 2 else "")
    named = ", ".join(rid for rid, _ in failed[:3]) + (", …" if len(failed) > 3 else "")
    count = f"{len(failed):,} request{'' if len(failed) == 1 else 's'}"
    return (f"{count} failed ({said}; {named}): not simulated or priced, since a call that failed without "
            "usage or was refused (4xx) wrote no cache")




def summarize(results: Iterable[RequestResult]) -> dict[str, Any]:
    # one pass, plain sums (this runs for the totals and for every session and agent of a large trace; and
    # over results as they are simulated, none kept: `WhatIf.fixed_results`)
    n = inp = read = w5m = w1h = out = cold = rebuild = missed = unpriced = 0
    ie, cost, priced = 0.0, 0.0, False
    for r in results:
        n += 1
        u = r.usage
        inp += u.input_tokens
        read += u.cache_read_tokens
        w5m += u.cache_write_5m_tokens
        w1h += u.cache_write_1h_tokens
        out += u.output_tokens
        ie += r.input_equivalent
        if r.cost_usd is None:
            unpriced += 1
        else:
            cost, priced = cost + r.cost_usd, True
        if r.write_kind == "cold_start":
            cold += u.cache_write_tokens
        elif r.write_kind == "rebuild":
            rebuild += u.cache_write_tokens
        missed += r.missed_tokens
    return {
        "requests": n,
        "input_tokens": inp,
        "cache_read_tokens": read,
        "cache_write_tokens": w5m + w1h,
        "cache_write_5m_tokens": w5m,
        "cache_write_1h_tokens": w1h,
        "fresh_input_tokens": inp - read - w5m - w1h,
        "output_tokens": out,
        "token_hit_ratio": round(read / inp, 4) if inp else 0.0,
        "input_equivalent_tokens": round(ie, 1),
        # None (shown as n/a) when no request could be priced: an unknown cost is not $0
        "cost_usd": round_usd(cost if priced else 0) if priced or not n else None,
        "unpriced_requests": unpriced,
        "cold_start_write_tokens": cold,
        "rebuild_write_tokens": rebuild,
        "extension_write_tokens": w5m + w1h - cold - rebuild,
        "missed_read_tokens": missed,
    }


def rule_fallbacks(results: list[RequestResult]) -> list[dict[str, Any]]:
    """The models (per provider and platform) whose requests used a default rule, with what they fell back
    to and how many requests did: nothing falls back silently."""
    counts: dict[tuple[str, str | None, str | None], list] = {}
    for r in results:
        fallback = r.rules.fallback
        if fallback:
            key = (r.sk.provider, r.rules.platform, r.sk.model)
            counts.setdefault(key, [fallback, 0])[1] += 1
    return [{"provider": p, "platform": plat, "model": m, "requests": n, "fell_back_to": why}
            for (p, plat, m), (why, n) in sorted(counts.items(), key=lambda kv: (kv[0][0], kv[0][1] or "",
                                                                                   kv[0][2] or ""))]


def fallback_lines(rep: "Report") -> list[str]:
    """One line per model that used a default rule (text and HTML reports)."""
    return [f"{f['provider']}/{f['model'] or 'unnamed model'}"
            + (f" on {f['platform']}" if f["platform"] and f["platform"] != f["provider"] else "")
            + f" ({f['requests']:,} request{'' if f['requests'] == 1 else 's'}): {f['fell_back_to']}"
            for f in rep.rule_fallbacks]


def request_json(r: RequestResult) -> dict[str, Any]:
    u, p = r.usage, r.predicted
    return {
        "id": r.sk.id, "session": r.sk.session, "agent": r.sk.agent, "project": _project(r),
        "started_at": format_time(r.sk.started_at),
        "provider": r.sk.provider, "model": r.sk.model, "model_known": r.rules.known_model,
        "platform": r.rules.platform, "rules_family": r.rules.family, "rules_fallback": r.rules.fallback,
        "input_tokens": u.input_tokens, "cache_read_tokens": u.cache_read_tokens,
        "cache_write_tokens": u.cache_write_tokens, "cache_write_5m_tokens": u.cache_write_5m_tokens,
        "cache_write_1h_tokens": u.cache_write_1h_tokens, "fresh_input_tokens": u.fresh_input_tokens,
        "output_tokens": u.output_tokens, "cost_usd": round_usd(r.cost_usd), "cost_source": r.cost_source,
        "storage_usd": round_usd(r.sk.extra.get("storage_usd")),
        "input_equivalent_tokens": round(r.input_equivalent, 1), "observed": r.observed,
        "tokens_source": r.tokens_source, "ideal_read_tokens": r.ideal_read_tokens,
        "ideal_content_read_tokens": r.ideal_content_tokens, "stream_reusable_tokens": r.stream_tokens,
        "missed_read_tokens": r.missed_tokens,
        "write_kind": r.write_kind,
        "predicted": None if p is None else {"cache_read_tokens": p.cache_read_tokens,
                                             "cache_write_tokens": p.cache_write_tokens,
                                             "fresh_input_tokens": p.fresh_input_tokens},
        "diagnoses": [d.to_json() for d in r.diagnoses],
    }


def _project(r: RequestResult) -> str:
    from kvprobe.economics.bill import project_of

    return project_of(r)


def _reread_factory() -> Callable[[Skeleton], RenderedRequest | None]:
    reader = RecordReader()

    @lru_cache(maxsize=64)
    def reread_at(source: str, offset: int) -> RenderedRequest | None:
        rec = reader.read(source, offset)
        return render_request(rec.request, rec.provider, rec.endpoint, rec.response) if rec.request else None

    def reread(sk: Skeleton) -> RenderedRequest | None:
        if sk.source is None or sk.offset is None or not Path(sk.source).is_file():
            return None
        return reread_at(sk.source, sk.offset)
    return reread


def _all_kvprobe_traces(paths: list[Path]) -> bool:
    from kvprobe.importers import detect_format

    return all(p.is_file() and (p.suffix in (".jsonl", ".ndjson") and detect_format(p) in ("kvprobe", None))
               for p in paths)


def records_from(paths: Iterable[str | Path], stats_out: list[tuple[str, ReadStats]],
                 progress: Callable[[int], None] | None = None, notes: list[str] | None = None
                 ) -> Iterator[TraceRecord]:
    """Records of every input: kvprobe traces read strictly (ids made unique across files); any other
    source (Claude Code, Codex, HAR, OpenTelemetry, LiteLLM logs, folders) through the importers, whose
    skipped lines are counted and reported in `notes`."""
    paths = [Path(p) for p in paths]
    if not _all_kvprobe_traces(paths):
        return _imported(paths, progress, notes if notes is not None else [])
    return _traces(paths, stats_out, progress)


def _imported(paths: list[Path], progress: Callable[[int], None] | None, notes: list[str]) -> Iterator[TraceRecord]:
    from kvprobe.importers import ImportReport, load_any

    report = ImportReport()
    yield from load_any(paths, report=report, progress=progress, strict_traces=True)
    notes.extend(report.summary())


def _traces(paths: list[Path], stats_out: list[tuple[str, ReadStats]],
            progress: Callable[[int], None] | None = None) -> Iterator[TraceRecord]:
    seen: set[str] = set()
    multi = len(paths) > 1
    for path in paths:
        stats = ReadStats()
        stats_out.append((str(path), stats))
        last = 0
        for rec in read_trace(path, stats=stats):
            if multi and rec.id in seen:
                rec.id = f"{Path(path).stem}:{rec.id}"
            seen.add(rec.id)
            if progress:
                progress(stats.bytes_read - last)
                last = stats.bytes_read
            yield rec


def build_report(paths: list[str | Path], *, filters: Filters | None = None, prices: PriceBook | None = None,
                 progress: Callable[[int], None] | None = None, top: int = 10,
                 records: Iterable[TraceRecord] | None = None, fixes: bool | None = None,
                 predicted_only: bool = False, outcomes: dict[str, Outcome] | None = None,
                 top_block_count: int | None = None) -> Report:
    """Simulate, diagnose and price the traces at `paths` (or the given records).

    fixes: False skips the what-if fixes; True or None (the default) computes them, at any input size (they
    cost a small constant factor of the report: docs/scale.md).
    predicted_only: ignore logged usage and report the simulation (compare with a `kvprobe fix` output).
    Failed requests (`skeleton.failed_call`) are left out of the simulation and every figure, as the gate
    leaves them out; `Report.failed` lists them.
    """
    try:
        return _build_report(paths, filters=filters, prices=prices, progress=progress, top=top, records=records,
                             fixes=fixes, predicted_only=predicted_only, outcomes=outcomes,
                             top_block_count=top_block_count)
    finally:
        split_parse.end_counting()  # the parse's helper counted the texts read after it: it ends with the report


def _build_report(paths: list[str | Path], *, filters: Filters | None, prices: PriceBook | None,
                  progress: Callable[[int], None] | None, top: int, records: Iterable[TraceRecord] | None,
                  fixes: bool | None, predicted_only: bool, outcomes: dict[str, Outcome] | None,
                  top_block_count: int | None) -> Report:
    prices = prices or PriceBook()
    stats: list[tuple[str, ReadStats]] = []
    store = BlockStore()
    notes: list[str] = []
    files = [Path(p) for p in paths]
    traces = records is None and _all_kvprobe_traces(files)  # (it reads each file's first line: once)
    if traces:  # the tokenizer is chosen by the bytes to read (before the parse's helper is forked: the same one)
        expect_input(input_bytes(files))
    split = traces and worth_splitting(files)
    source = records if records is not None or split else \
        _traces(files, stats, progress) if traces else _imported(files, progress, notes)
    fixes = fixes is not False
    # the what-if reads a few texts: from a kvprobe trace's own lines, else from the records held here
    kept: list[TraceRecord] | None = None
    leading: LeadingSimulation | None = None
    if split:  # large kvprobe traces: the parse pass on two cores; this one simulates its share meanwhile
        leading = LeadingSimulation(store)
        sks, _ = split_parse.parse(files, store, stats, progress, while_waiting=leading.lead,
                                   meanwhile=lambda: _import_later_stages(fixes))
    else:
        if fixes and not traces:
            source = kept = list(source)
        sks = list(skeletons(source, store))
    failed = [sk for sk in sks if sk.failed]  # the simulation leaves them out (analysis.simulate)
    if leading is not None:
        results, sizer = leading.finish(sks), leading.sizer
    else:
        sizer = BlockSizer()
        results = simulate(sks, store, sizer)
    book = sizer.book_of(store) if predicted_only else None
    # the simulation's state (its caches, ideal tables, prefix memo) and the sizer's tables by block are read
    # no more: held to the end they were ~2.4 KB a request of a split parse's report (~1.1 KB unsplit)
    leading = sizer = None
    if predicted_only:  # the simulation alone, on the sizes the logged usage settled (as what-if prices)
        results = simulate([without_usage(sk) for sk in sks], store, BlockSizer(book))
    store.forget_blocks()  # every block is sized: nothing after this looks a block up by key
    price_results(results, prices)
    texts = TextSource(kept)
    fleet = find_shared_prefixes(results, texts, prices)  # reads no diagnosis
    what_if = _diagnose_beside(results, (lambda beside: _what_if(kept, prices, sks, store, texts, fleet, beside))
                               if fixes else None)
    rep, fixed = _with_fixed_totals(what_if, lambda: _rest(results, failed, filters, prices, stats, notes, paths,
                                                            fleet, outcomes, top, top_block_count), len(sks))
    if what_if is not None:
        _add_fixes(rep, what_if, fixed)
    return rep


def _rest(results: list[RequestResult], failed: list[Skeleton], filters: Filters | None, prices: PriceBook,
          stats: list[tuple[str, ReadStats]], notes: list[str], paths: list[str | Path], fleet: list,
          outcomes: dict[str, Outcome] | None, top: int, top_block_count: int | None) -> Report:
    """The report from the diagnosed results: what reads no fix."""
    considered = len(results) + len(failed)
    if filters:
        results = [r for r in results if filters.keep(r)]
        failed = [sk for sk in failed if filters.keeps(sk)]
    trades = advise_agents(results, prices)  # advice in the knobs of the agent that wrote the log
    notes += uncached_notes(results)  # agent logs whose long prompts cached nothing at all
    misses = []
    for r in results:
        if r.diagnoses and r.missed_tokens > 0:
            ie, usd = miss_cost(r, prices)
            misses.append(Miss(r, ie, usd))
    misses.sort(key=lambda m: -m.input_equivalent)
    unknown = sorted({f"{r.sk.provider}/{r.sk.model}" for r in results if not r.rules.known_model})
    listed = [(sk.id, sk.error or "failed") for sk in failed]
    rep = Report(results, misses, stats, unknown, sorted(prices.unknown_models),
                 rule_fallbacks=rule_fallbacks(results), notes=notes + prices.notes, considered=considered, top=top,
                 failed=listed)
    if rep.failed_note:
        rep.notes.insert(0, rep.failed_note)
    rep.blocks = top_blocks(attribute(results, prices), top_block_count)
    rep.compactions = find_compactions(results, prices)
    rep.fleet = fleet
    rep.lifetime_trades = trades
    rep.tasks = summarize_tasks(results, outcomes)
    rep.inputs, rep.prices = [str(p) for p in paths], prices
    rep.bill = _bill(results, misses, prices)
    return rep


def _import_later_stages(fixes: bool) -> None:
    """Import the modules the report reads after the parse (the bill's; the what-if's when fixes are on)
    while the parse's helper still counts: imported later, after the counts, they were ~13 ms more of a
    300-request fleet's report (0.4 s). Imported once only: a later import of them costs nothing."""
    import kvprobe.economics.bill  # noqa: F401
    import kvprobe.economics.causes  # noqa: F401
    import kvprobe.importers.titles  # noqa: F401

    if fixes:
        import kvprobe.whatif.evaluate  # noqa: F401


def _bill(results: list[RequestResult], misses: list[Miss], prices: PriceBook) -> Any:
    from kvprobe.economics.bill import build_bill
    from kvprobe.importers.titles import SessionTitles

    wasted = [m.usd for m in misses]
    sources: dict[str, dict[str, None]] = {}
    for r in results:
        if r.sk.source is not None:
            sources.setdefault(r.sk.session, {})[r.sk.source] = None
    return build_bill(results, prices, wasted, SessionTitles({k: list(v) for k, v in sources.items()}))


def _diagnose_beside(results: list[RequestResult], what_if: Callable[[Callable[[], None]], Any] | None) -> Any:
    """Diagnose the results and compute the what-if (None when not asked). Neither reads the other's output:
    the diagnoses are made in this process while the what-if's pricing runs on the executor's workers (on a
    large log, or a cluster), else before or after it. (A forked child that diagnosed beside the whole
    what-if was retired: it copied most of the parsed log's pages — 210 MB of 1,063 on a 31,500-request
    fleet — and took more CPU than it saved on two cores, docs/scale.md.)"""
    def diagnosed() -> None:
        diagnose(results, _reread_factory())
    if what_if is None:
        diagnosed()
        return None
    return what_if(diagnosed)  # the what-if calls it once, while (or where) it prices


def _what_if(records: list[TraceRecord] | None, prices: PriceBook, sks: list[Skeleton], store: BlockStore,
             texts: TextSource, fleet: list, beside: Callable[[], None]) -> Any:
    """The fixes, priced on the report's sized skeletons."""
    from kvprobe.whatif.evaluate import Prepared, evaluate  # only what-if needs it

    return evaluate(records, prices, prepared=Prepared(store, sks), texts=texts, fleet=fleet, beside=beside,
                    keep=_baseline_totals)


_BASELINE_KEYS = ("token_hit_ratio", "input_equivalent_tokens", "cost_usd")


def _baseline_totals(baseline: list[RequestResult]) -> dict:
    """What the report shows of the what-if's baseline (`with_all_fixes.baseline_predicted`); the diagnosed
    baseline itself is released while the fixes are priced (the `--what-if` table simulates it again)."""
    totals = summarize(baseline)
    return {k: totals[k] for k in _BASELINE_KEYS}


def _fixed_totals(what_if: Any) -> dict | None:
    """The totals of the log with every chosen fix applied (one simulation, summed as it runs)."""
    return what_if.fixed_summary(summarize) if what_if is not None and what_if.fixes else None


def _fixed_unit(shared: Any, unit: int) -> dict | None:
    return _fixed_totals(shared)


def _with_fixed_totals(what_if: Any, rest: Callable[[], Report], requests: int) -> tuple[Report, dict | None]:
    """`rest()` and `_fixed_totals(what_if)`: on two processes where a second one pays (the rest of a 315-request
    fleet's report took ~45 ms, its fixed simulation ~65 ms), never on a cluster (it would be sent the whole
    pricer again for one simulation). Else the fixed totals first: the edited log (~2.5 KB a request of a fleet
    while it is simulated) then comes on top of less than it would once the attribution and bill are built."""
    from kvprobe import forked, run

    if what_if is None or not what_if.fixes:
        return rest(), None
    executor = run.current(parallel=forked.worth_forking(requests), cluster=False)
    if isinstance(executor, run.InProcess):
        fixed = _fixed_totals(what_if)
        return rest(), fixed
    pending = executor.start(_fixed_unit, [0], shared=what_if)
    try:
        rep = rest()
        [fixed] = pending.results()
    finally:
        pending.close()
    return rep, fixed


def _add_fixes(rep: Report, what_if: Any, fixed: dict | None) -> None:
    rep.what_if = what_if
    rep.fixes = [c.to_json() for c in what_if.fixes]
    rep.alternatives = [c.to_json() for c in what_if.alternatives]
    if fixed is None:  # nothing to apply: no "with all fixes" figure to show
        return
    rep.with_all_fixes = {k: fixed[k] for k in ("requests", "input_tokens", "cache_read_tokens",
                                                 "cache_write_tokens", "fresh_input_tokens", "token_hit_ratio",
                                                 "input_equivalent_tokens", "cost_usd")}
    rep.with_all_fixes["baseline_predicted"] = dict(what_if.kept)  # (`_baseline_totals`, kept by the what-if)
