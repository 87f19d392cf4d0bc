"""Check a report against thresholds: which failed, by how much, and the causes (new ones first) with their fixes.

Never green on nothing: requests that failed without usage are counted and named and fail the gate (beyond
`max_failed_requests`), never priced or passed; a trace without a request that succeeded, or without logged
usage (unless `--predicted`), decides nothing; a baseline task the trace does not contain leaves the
comparison undecided, and so does a baseline file that does not exist yet (a new repository's first run: the
check says which file to commit). Exit 0 held, 1 failed, 2 bad input (`GateResult.of_error`: the CI formats
are written for it too), 3 undecided (`undecided = "warn"`: 0 with a warning when every check that could be
decided held).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kvprobe.compare import compare, summary_of
from kvprobe.gate.causes import Cause, causes as find_causes
from kvprobe.gate.config import Thresholds
from kvprobe.gate.wording import tokens, usd
from kvprobe.report import Report
from kvprobe.wording import percent, plural


@dataclass(slots=True)
class Check:
    name: str
    limit: float
    actual: float | None
    passed: bool | None  # None: could not be decided (e.g. a cost limit over unpriced requests)
    detail: str
    source: str | None = None  # what set the limit: "--flag", a config file, or the baseline (and its limit)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "limit": self.limit, "actual": self.actual, "passed": self.passed,
                "detail": self.detail, "source": self.source}


@dataclass(slots=True)
class GateResult:
    checks: list[Check]
    causes: list[Cause] = field(default_factory=list)
    reason: str = ""  # why nothing could be decided ("" when checks were made)
    undecided_mode: str = "fail"
    inputs: dict[str, Any] = field(default_factory=dict)  # traces, requests, failed, config, baseline
    notes: list[str] = field(default_factory=list)  # warnings: configs that disagree, derived prices, ...
    error: str = ""  # bad input (exit 2): the gate could not run; "" when it ran
    error_file: str | None = None  # where the bad input is (for the annotation), when the error names it
    error_line: int | None = None
    baseline_written: str | None = None  # where this run's baseline was written (--write-baseline)

    @classmethod
    def of_error(cls, message: str, file: str | None = None, line: int | None = None) -> "GateResult":
        """The result of a gate that could not run (bad input, exit 2), so CI still gets a true summary."""
        return cls([], error=message, error_file=file, error_line=line)

    @property
    def failed(self) -> bool:
        return any(c.passed is False for c in self.checks)

    @property
    def errored(self) -> bool:
        return bool(self.error)

    @property
    def undecided(self) -> list[Check]:
        return [c for c in self.checks if c.passed is None]

    @property
    def undecided_warns(self) -> bool:
        """An undecided check is a warning, not an error, in the formats CI reads (warn mode, checks were made)."""
        return self.undecided_mode == "warn" and not self.reason

    @property
    def decidable(self) -> bool:
        if self.error:
            return False
        return self.failed or (not self.reason and not self.undecided)

    @property
    def passed(self) -> bool | None:
        return (not self.failed) if self.decidable else None

    @property
    def exit_code(self) -> int:
        """1 when a check failed (even if another could not be decided), 3 when anything was undecided;
        in warn mode an undecided check is a warning if some threshold was decided and held; 2 on bad input."""
        if self.error:
            return 2
        if self.failed:
            return 1
        if self.reason:
            return 3
        if self.undecided:
            held = any(c.passed for c in self.checks if c.name != "failed_requests")
            return 0 if self.undecided_mode == "warn" and held else 3
        return 0

    @property
    def verdict(self) -> str:
        if self.error:
            return "error"
        if self.failed:
            return "failed"
        if self.exit_code == 0:
            return "passed with warnings" if self.undecided else "passed"
        return "could not decide"

    def to_json(self, content: bool = True) -> dict[str, Any]:
        return {"passed": self.passed, "decidable": self.decidable, "reason": self.reason or None,
                "exit_code": self.exit_code, "undecided": self.undecided_mode,
                "checks": [c.to_json() for c in self.checks],
                "top_causes": [c.to_json(content) for c in self.causes],
                "inputs": self.inputs, "notes": self.notes, "baseline_written": self.baseline_written}


def _limit_pct(fraction: float) -> str:
    return f"{100 * fraction:,.4g}%"


def _max(name: str, limit: float, actual: float, fmt: Any, source: str | None) -> Check:
    ok = actual <= limit
    over = actual - limit
    if ok:
        detail = f"{fmt(actual)} ≤ {fmt(limit)}"
    elif limit:
        detail = f"{fmt(actual)} exceeds {fmt(limit)} by {fmt(over)} ({100 * over / limit:,.1f}%)"
    else:
        detail = f"{fmt(actual)} exceeds {fmt(limit)}"
    return Check(name, limit, actual, ok, detail, source)


def unpriced(report: Report) -> Counter[str]:
    """Requests kvprobe could not price, by model."""
    return Counter(f"{r.sk.provider}/{r.sk.model}" for r in report.results if r.cost_usd is None)


def _unpriced_check(name: str, limit: float, missing: Counter[str], source: str | None) -> Check:
    models = ", ".join(f"{model} ({n} request{'s' if n > 1 else ''})" for model, n in sorted(missing.items()))
    return Check(name, limit, None, None, f"no price for {models}; pass --price-file with their prices "
                                          "(`kvprobe schema price-file`)", source)


def _failed_check(report: Report, limit: int, source: str | None) -> Check:
    failed, total = len(report.failed), len(report.failed) + len(report.results)
    allowed = f" (at most {limit:,} allowed)" if limit else ""
    if not failed:
        return Check("failed_requests", limit, 0, True, f"none of {plural(total, 'request')} failed", source)
    errors = Counter(error.strip().splitlines()[0][:160] if error.strip() else "no response"
                     for _, error in report.failed)
    named = ", ".join(rid for rid, _ in report.failed[:3]) + (", …" if failed > 3 else "")
    said = "; ".join(f"{text}" + (f" ({n}×)" if n > 1 else "") for text, n in errors.most_common(2))
    more = f"; and {len(errors) - 2} other errors" if len(errors) > 2 else ""
    return Check("failed_requests", limit, failed, failed <= limit,
                 f"{failed:,} of {plural(total, 'request')} failed: {said}{more} ({named}); a request that failed has no "
                 f"usage: it is neither priced nor passed{allowed}", source)


def _relative(name: str, base: Any, actual: float | None, limit: float, fmt: Any, source: str) -> Check:
    if not isinstance(base, (int, float)):
        return Check(name, limit, None, None, "the baseline has no value for it (its requests were not priced?): "
                     "write the baseline again with prices (`--price-file`)", source)
    if actual is None:
        return Check(name, limit, None, None, "the trace has no value for it", source)
    if base == 0:
        ok = actual <= 0
        return Check(name, limit, None if not ok else 0.0, ok,
                     f"{fmt(0)} → {fmt(actual)}" + ("" if ok else ": the baseline's was 0, so any increase is "
                                                    f"beyond the allowed +{_limit_pct(limit)}"), source)
    change = (actual - base) / abs(base)
    return Check(name, limit, round(change, 4), change <= limit,
                 f"{fmt(base)} → {fmt(actual)} ({100 * change:+,.1f}%; allowed +{_limit_pct(limit)})", source)


def _points(name: str, base: Any, actual: float, limit: float, source: str) -> Check:
    """A ratio's regression in percentage points (59.4% → 47.1% is −12.3 points, not −20.7%)."""
    if not isinstance(base, (int, float)):
        return Check(name, limit, None, None, "the baseline has no value for it", source)
    change = actual - base
    return Check(name, limit, round(change, 4), -change <= limit + 1e-12,
                 f"{percent(base)} → {percent(actual)} ({100 * change:+.1f} points; allowed "
                 f"−{100 * limit:,.4g} points)", source)


def _tasks_check(baseline: dict[str, Any], cand: dict[str, Any], source: str) -> Check:
    base_tasks, cand_tasks = set(baseline["tasks"]), set(cand["tasks"])
    missing, extra = sorted(base_tasks - cand_tasks), sorted(cand_tasks - base_tasks)
    new = f"; new in the trace: {_names(extra)}" if extra else ""
    if missing:
        return Check("regression:tasks", 0, len(missing), None,
                     f"{len(missing)} of {len(base_tasks)} baseline task{'s' if len(base_tasks) > 1 else ''} "
                     f"not in the trace: {_names(missing)}{new}; a comparison without them would not be like for "
                     "like (tasks are matched by `task`, else the session: capture with --session NAME so every "
                     "run keeps the same one)", source)
    return Check("regression:tasks", 0, 0, True, f"every baseline task is in the trace ({plural(len(base_tasks), 'task')})"
                 f"{new}", source)


def _names(items: list[str], n: int = 5) -> str:
    return ", ".join(items[:n]) + (f" and {len(items) - n} more" if len(items) > n else "")


def missing_baseline_check(path: str, written: str | None) -> Check:
    """The baseline the settings name does not exist yet (a first run): undecided, saying what to commit."""
    from kvprobe.gate.wording import shown_path

    where = f" This run's baseline is {shown_path(written)}: commit it as {shown_path(path)}" if written else \
        f" Make it with `kvprobe baseline TRACE -o {shown_path(path)}` from a run that worked and commit it"
    return Check("regression:baseline", 0, None, None,
                 f"no baseline at {shown_path(path)} yet, so nothing to compare this run with.{where}; the next "
                 "runs are compared with it", f"baseline {path}")


def _regressions(report: Report, t: Thresholds, baseline: dict[str, Any], missing: Counter[str]) -> list[Check]:
    limit = t.regression_limit
    source = f"baseline {t.baseline}; limit from " + t.sources.get("max_regression", "the default 10%")
    cand = summary_of(report)
    base_totals, totals = baseline["totals"], cand["totals"]
    checks = [_tasks_check(baseline, cand, f"baseline {t.baseline}")]
    if missing:
        checks.append(_unpriced_check("regression:cost_usd", limit, missing, source))
    else:
        checks.append(_relative("regression:cost_usd", base_totals.get("cost_usd"), totals.get("cost_usd"),
                                limit, usd, source))
    checks.append(_relative("regression:input_equivalent_tokens", base_totals.get("input_equivalent_tokens"),
                            totals.get("input_equivalent_tokens"), limit, tokens, source))
    drop_source = source if t.max_hit_ratio_drop is None else \
        f"baseline {t.baseline}; limit from {t.sources.get('max_hit_ratio_drop')}"
    checks.append(_points("regression:token_hit_ratio", base_totals.get("token_hit_ratio"),
                          totals["token_hit_ratio"], t.hit_ratio_drop_limit, drop_source))
    for task in compare(baseline, cand, limit).regressed:
        checks.append(Check(f"regression:task:{task.task}", limit, None, False,
                            f"task {task.task} got worse in {', '.join(task.regressed)}"
                            + (f"; new: {', '.join(task.new_diagnoses)}" if task.new_diagnoses else ""), source))
    return checks


def _thresholds(report: Report, t: Thresholds, missing: Counter[str]) -> list[Check]:
    totals, src = report.totals, t.sources.get
    checks = []
    if t.max_cost_usd is not None:
        checks.append(_unpriced_check("max_cost_usd", t.max_cost_usd, missing, src("max_cost_usd")) if missing
                      else _max("max_cost_usd", t.max_cost_usd, totals["cost_usd"] or 0.0, usd, src("max_cost_usd")))
    if t.max_cost_per_task is not None:
        checks.append(_unpriced_check("max_cost_per_task", t.max_cost_per_task, missing, src("max_cost_per_task"))
                      if missing else _task_check(report, t.max_cost_per_task, src("max_cost_per_task")))
    if t.min_hit_ratio is not None:
        ratio = totals["token_hit_ratio"]
        ok = ratio >= t.min_hit_ratio
        checks.append(Check("min_hit_ratio", t.min_hit_ratio, ratio, ok,
                            f"{percent(ratio)} {'≥' if ok else 'is below'} {percent(t.min_hit_ratio)}"
                            + ("" if ok else f" by {100 * (t.min_hit_ratio - ratio):.1f} points"),
                            src("min_hit_ratio")))
    if t.max_input_equivalent is not None:
        checks.append(_max("max_input_equivalent", t.max_input_equivalent, totals["input_equivalent_tokens"],
                           tokens, src("max_input_equivalent")))
    return checks


def _task_check(report: Report, limit: float, source: str | None) -> Check:
    worst = max(report.tasks, key=lambda task: task.cost_usd)
    check = _max("max_cost_per_task", limit, worst.cost_usd, usd, source)
    check.detail = f"task {worst.task}: {check.detail}"
    return check


def run_gate(report: Report, t: Thresholds, baseline: dict[str, Any] | None = None,
             allow_predicted: bool = False, baseline_missing: Check | None = None) -> GateResult:
    """Every check of `t` on the report (built with top=0; failed requests are not in its results), and
    the causes of its misses. `baseline_missing`: the check to make instead of the comparison when the
    baseline file does not exist."""
    mode = t.undecided or "fail"
    checks = [_failed_check(report, t.max_failed_requests or 0, t.sources.get("max_failed_requests"))]
    if not report.results:
        return GateResult(checks, reason="no request succeeded, so nothing else could be checked", undecided_mode=mode)
    if not allow_predicted and not any(r.observed for r in report.results):
        return GateResult(checks, reason="the trace has no logged usage (use --predicted to gate on kvprobe's "
                                         "simulation)", undecided_mode=mode)
    if t.empty:
        return GateResult(checks, reason="no thresholds: pass flags, --config, or set [tool.kvprobe.gate] in "
                                         "pyproject.toml (`kvprobe schema gate-config` lists the keys)",
                          undecided_mode=mode)
    missing = unpriced(report)
    checks += _thresholds(report, t, missing)
    if baseline is not None:
        checks += _regressions(report, t, baseline, missing)
    elif baseline_missing is not None:
        checks.append(baseline_missing)
    return GateResult(checks, find_causes(report, baseline), undecided_mode=mode)
