"""Check a report against thresholds: which failed, by how much, and the top causes with their fixes."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kvprobe.analysis.diagnosis import advice_for
from kvprobe.compare import compare, summary_of
from kvprobe.gate.config import Thresholds
from kvprobe.report import Report


@dataclass(slots=True)
class Check:
    name: str
    limit: float
    actual: float | None
    passed: bool | None  # None: could not be decided (e.g. a cost limit over unpriced requests)
    detail: str


@dataclass(slots=True)
class GateResult:
    checks: list[Check]
    causes: list[dict[str, Any]] = field(default_factory=list)
    decidable: bool = True
    reason: str = ""

    @property
    def failed(self) -> bool:
        return any(c.passed is False for c in self.checks)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def exit_code(self) -> int:
        """1 when a check failed (even if another could not be decided), 3 when any could not be decided."""
        if not self.decidable:
            return 3
        if self.failed:
            return 1
        return 0 if self.passed else 3

    def to_json(self) -> dict[str, Any]:
        decided = self.exit_code != 3
        return {"passed": self.passed if decided else None, "decidable": decided,
                "reason": self.reason or None,
                "checks": [{"name": c.name, "limit": c.limit, "actual": c.actual, "passed": c.passed,
                            "detail": c.detail} for c in self.checks],
                "top_causes": self.causes}


def _max(name: str, limit: float, actual: float, unit: str) -> Check:
    ok = actual <= limit
    over = actual - limit
    detail = f"{actual:,.4g}{unit} ≤ {limit:,.4g}{unit}" if ok else \
        f"{actual:,.4g}{unit} exceeds {limit:,.4g}{unit} by {over:,.4g}{unit} ({100 * over / limit:.1f}%)" if limit \
        else f"{actual:,.4g}{unit} exceeds 0"
    return Check(name, limit, actual, ok, detail)


def _regression(name: str, base: float | None, actual: float | None, limit: float, higher_is_better: bool) -> Check:
    if not base or actual is None:
        return Check(name, limit, None, True, "no baseline value")
    change = (actual - base) / abs(base)
    worse = -change if higher_is_better else change
    ok = worse <= limit
    detail = (f"{base:,.4g} → {actual:,.4g} ({100 * change:+.1f}%; allowed {100 * limit:.0f}% worse)")
    return Check(name, limit, round(change, 4), ok, detail)


def unpriced(report: Report) -> Counter[str]:
    """Requests kvprobe could not price, by model."""
    return Counter(f"{r.sk.provider}/{r.sk.model}" for r in report.results if r.cost_usd is None)


def _unpriced_check(name: str, limit: float, missing: Counter[str]) -> Check:
    models = ", ".join(f"{model} ({n} request{'s' if n > 1 else ''})" for model, n in sorted(missing.items()))
    return Check(name, limit, None, None, f"no price for {models}; "
                                          "pass --price-file with their prices")


def causes(report: Report, n: int = 3) -> list[dict[str, Any]]:
    fixes = {rid: f for f in report.fixes for rid in f["requests"]}
    out = []
    for m in report.misses[:n]:
        d = m.result.diagnoses[0]
        fix = fixes.get(m.result.sk.id)
        out.append({"request": m.result.sk.id, "kind": d.kind, "why": d.detail,
                    "cost_usd": None if m.usd is None else round(m.usd, 6),
                    "fix": fix["detail"] if fix else advice_for(d),
                    "fix_saving_usd": fix["saving_usd"] if fix else None})
    return out


def run_gate(report: Report, t: Thresholds, baseline: dict[str, Any] | None = None,
             allow_predicted: bool = False) -> GateResult:
    if not report.results:
        return GateResult([], decidable=False, reason="the trace has no requests")
    if not allow_predicted and not any(r.observed for r in report.results):
        return GateResult([], decidable=False, reason="the trace has no logged usage (use --predicted to gate "
                                                      "on kvprobe's simulation)")
    totals = report.totals
    checks = []
    missing = unpriced(report)
    if t.max_cost_usd is not None:
        checks.append(_unpriced_check("max_cost_usd", t.max_cost_usd, missing) if missing else
                      _max("max_cost_usd", t.max_cost_usd, totals["cost_usd"] or 0.0, " USD"))
    if t.max_cost_per_task is not None:
        checks.append(_unpriced_check("max_cost_per_task", t.max_cost_per_task, missing) if missing else
                      _task_check(report, t.max_cost_per_task))
    if t.min_hit_ratio is not None:
        ratio = totals["token_hit_ratio"]
        ok = ratio >= t.min_hit_ratio
        checks.append(Check("min_hit_ratio", t.min_hit_ratio, ratio, ok,
                            f"{100 * ratio:.1f}% {'≥' if ok else 'is below'} {100 * t.min_hit_ratio:.1f}%"
                            + ("" if ok else f" by {100 * (t.min_hit_ratio - ratio):.1f} points")))
    if t.max_input_equivalent is not None:
        checks.append(_max("max_input_equivalent", t.max_input_equivalent, totals["input_equivalent_tokens"],
                           " tokens"))
    if baseline is not None:
        limit = t.max_regression if t.max_regression is not None else 0.1
        cand = summary_of(report)
        for name, higher in (("cost_usd", False), ("input_equivalent_tokens", False), ("token_hit_ratio", True)):
            if name == "cost_usd" and missing:
                checks.append(_unpriced_check("regression:cost_usd", limit, missing))
                continue
            checks.append(_regression(f"regression:{name}", baseline["totals"].get(name), cand["totals"].get(name),
                                      limit, higher))
        comp = compare(baseline, cand, limit)
        for task in comp.regressed:
            checks.append(Check(f"regression:task:{task.task}", limit, None, False,
                                f"task {task.task} got worse in {', '.join(task.regressed)}"
                                + (f"; new: {', '.join(task.new_diagnoses)}" if task.new_diagnoses else "")))
    return GateResult(checks, causes(report))


def _task_check(report: Report, limit: float) -> Check:
    worst = max(report.tasks, key=lambda task: task.cost_usd)
    check = _max("max_cost_per_task", limit, worst.cost_usd, " USD")
    check.detail = f"task {worst.task}: {check.detail}"
    return check


_MARK = {True: "✅", False: "❌", None: "❔"}


def to_markdown(result: GateResult) -> str:
    if not result.decidable:
        return f"### kvprobe gate: could not decide\n\n{result.reason}"
    head = {0: "✅ passed", 1: "❌ failed", 3: "could not decide"}[result.exit_code]
    lines = [f"### kvprobe gate: {head}", "", "| check | result |", "|---|---|"]
    lines += [f"| {_MARK[c.passed]} {c.name} | {c.detail} |" for c in result.checks]
    if result.causes and result.failed:
        lines += ["", "**Top causes**", "", "| request | cause | cost | fix |", "|---|---|---:|---|"]
        for c in result.causes:
            cost = "–" if c["cost_usd"] is None else f"${c['cost_usd']:.4f}"
            lines.append(f"| {c['request']} | {c['kind']}: {c['why']} | {cost} | {c['fix']} |")
    return "\n".join(lines)
