"""`kvprobe replay`: run a recorded trace on a real engine and measure what prefix caching did.

    from kvprobe.replay import LocalTarget, replay_trace
    target = LocalTarget(None, max_tokens=16, load=Engine)  # the engine built on the thread that steps it
    report = replay_trace(records, target, timing=Timing.parse("fast"))
    report.to_json()

Per request: ground-truth cached tokens, prefill and decode time, time to first token, cold or warm; beside
them the provider-rule simulation and the observed usage of the same record. With `what_if=True` the trace
is replayed again with each proposed fix, and with all of them, each from a cold cache.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvprobe.analysis.simulate import RequestResult
from kvprobe.errors import InputError
from kvprobe.replay.compare import Row, seconds_per_fresh_token, summarize
from kvprobe.replay.drive import Measured, drive
from kvprobe.replay.plan import Item, Timing, plan
from kvprobe.replay.targets import LocalTarget, RemoteTarget
from kvprobe.trace import TraceRecord

__all__ = ["LocalTarget", "RemoteTarget", "ReplayReport", "ReplayRun", "Timing", "replay_trace"]

Progress = Callable[[str, list[Item]], Callable[[Item, Measured], None] | None]


@dataclass(slots=True)
class ReplayRun:
    label: str
    rows: list[Row]
    totals: dict[str, Any]
    seconds_per_token: float | None

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "totals": self.totals,
                "requests": [r.to_json(self.seconds_per_token) for r in self.rows]}


@dataclass(slots=True)
class ReplayReport:
    engine: dict[str, Any]
    timing: str
    max_tokens: int
    baseline: ReplayRun
    what_if: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"engine": self.engine, "timing": self.timing, "max_tokens": self.max_tokens,
                "totals": self.baseline.totals,
                "requests": [r.to_json(self.baseline.seconds_per_token) for r in self.baseline.rows],
                "what_if": self.what_if, "notes": self.notes}


def simulate_records(records: list[TraceRecord], predicted_only: bool, notes: list[str]) -> dict[str, RequestResult]:
    """The provider-rule simulation of each record (what `kvprobe report` computes), by id."""
    from kvprobe.report import build_report  # the analysis stack loads only when a replay needs it

    usable = [r for r in records if r.request is not None or r.usage is not None]
    try:
        rep = build_report([], records=usable, fixes=False, predicted_only=predicted_only, top=0)
    except InputError as exc:
        notes.append(f"provider simulation unavailable: {exc}")
        return {}
    return {r.sk.id: r for r in rep.results}


def _run(label: str, records: list[TraceRecord], target: Any, timing: Timing, progress: Progress | None,
         predicted_only: bool, notes: list[str]) -> ReplayRun:
    items = plan(records)
    if not target.reset():
        notes.append(f"{label}: the engine's prefix cache could not be cleared before this run, so it may "
                     "start warm (vLLM: set VLLM_SERVER_DEV_MODE=1 for /reset_prefix_cache)")
    measured = drive(items, target, timing, progress(label, items) if progress else None)
    results = simulate_records(records, predicted_only, notes)
    rows = [Row(m, results.get(m.id)) for m in measured]
    spt = seconds_per_fresh_token(measured)
    return ReplayRun(label, rows, summarize(rows), spt)


def _provider_prefill_est(run: ReplayRun, spt: float | None) -> float | None:
    """Prefill seconds had the engine reused only what the provider's rules read."""
    if spt is None:
        return None
    fresh = 0
    for row in run.rows:
        m, frac = row.measured, row.provider_fraction
        if m.status == "replayed":
            fresh += m.prompt_tokens - round((frac or 0.0) * m.prompt_tokens)
    return round(fresh * spt, 6)


def _what_if_entry(kind: str, detail: str, saving: float | None, run: ReplayRun, base: ReplayRun,
                   spt: float | None, base_est: float | None) -> dict[str, Any]:
    t, b = run.totals, base.totals
    est = _provider_prefill_est(run, spt)
    return {"kind": kind, "detail": detail, "predicted_saving_input_equivalent_tokens": saving,
            "engine_hit_ratio": t["engine_hit_ratio"], "provider_hit_ratio": t["provider_hit_ratio"],
            "prefill_seconds": t["prefill_seconds"], "first_token_seconds": t["first_token_seconds"],
            "prefill_seconds_saved": round(b["prefill_seconds"] - t["prefill_seconds"], 6),
            "first_token_seconds_saved": round(b["first_token_seconds"] - t["first_token_seconds"], 6),
            "provider_prefill_seconds_est": est,
            "provider_prefill_seconds_saved_est": None if est is None or base_est is None else round(base_est - est, 6)}


def replay_trace(records: list[TraceRecord], target: Any, *, timing: Timing, what_if: bool = False,
                 progress: Progress | None = None, max_tokens: int = 16) -> ReplayReport:
    notes: list[str] = []
    base = _run("baseline", records, target, timing, progress, False, notes)
    report = ReplayReport(target.describe(), str(timing), max_tokens, base, notes=notes)
    notes.extend(getattr(target, "notes", list)())
    if base.totals["truncated"]:
        notes.append(f"{base.totals['truncated']} prompts were longer than the engine's context and were cut "
                     "to it (the prefix is kept); use --too-long skip to leave them out")
    if what_if:
        _add_what_if(report, records, target, timing, progress)
    return report


def _add_what_if(report: ReplayReport, records: list[TraceRecord], target: Any, timing: Timing,
                 progress: Progress | None) -> None:
    from kvprobe.pricing import PriceBook
    from kvprobe.whatif.evaluate import evaluate

    notes = report.notes
    evaluation = evaluate(records, PriceBook())
    if not evaluation.fixes:
        notes.append("what-if: no fix pays on this trace; nothing more to replay")
        return
    spt = report.baseline.seconds_per_token
    predicted = simulate_records(records, True, notes)  # fixes are priced prediction against prediction
    base = report.baseline
    rows = [Row(r.measured, predicted.get(r.measured.id)) for r in base.rows]
    predicted_base = ReplayRun("baseline (predicted)", rows, summarize(rows), spt)
    base_est = _provider_prefill_est(predicted_base, spt)
    for cand in evaluation.fixes:
        run = _run(f"fix {cand.kind}", cand.apply(records), target, timing, progress, True, notes)
        report.what_if.append(_what_if_entry(cand.kind, cand.detail, round(cand.saving_input_equivalent_tokens, 1),
                                             run, predicted_base, spt, base_est))
    all_run = _run("all fixes", evaluation.fixed_records, target, timing, progress, True, notes)
    total_saving = sum(r.input_equivalent for r in evaluation.baseline) - \
        sum(r.input_equivalent for r in evaluation.fixed)
    report.what_if.append(_what_if_entry("all", "every fix above together", round(total_saving, 1), all_run,
                                         predicted_base, spt, base_est))
    notes.append("what-if: the engine's cache has no TTL, breakpoints or lookback, so fixes for those show in "
                 "provider_prefill_seconds_est (prefill had the engine reused only what the provider's rules "
                 "read); prefix fixes show in measured prefill time as well")
