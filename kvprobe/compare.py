"""A/B comparison of two trace sets of the same tasks: per task and in total, with what regressed and why.

Works on *summaries* (what `kvprobe baseline` writes), so a committed baseline file and a fresh trace compare
the same way as two traces.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from kvprobe.economics.tasks import overall
from kvprobe.errors import InputError, not_a_file
from kvprobe.report import Report
from kvprobe.wording import usd

BASELINE_VERSION = 1
METRICS = ("cost_usd", "input_equivalent_tokens", "token_hit_ratio", "duration_s")
LOWER_IS_BETTER = {"cost_usd": True, "input_equivalent_tokens": True, "token_hit_ratio": False, "duration_s": True}


def summary_of(report: Report) -> dict[str, Any]:
    """The comparable summary of a report: totals, task totals, and per task metrics and diagnosis kinds."""
    totals = report.totals
    tasks = {}
    for t in report.tasks:
        row = t.to_json()
        row["diagnoses"] = sorted(t.diagnosis_kinds())
        tasks[t.task] = row
    return {"kvprobe_baseline": BASELINE_VERSION,
            "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "totals": {**{k: totals[k] for k in ("requests", "input_tokens", "cache_read_tokens",
                                                 "token_hit_ratio", "input_equivalent_tokens", "cost_usd")},
                       **{k: v for k, v in _task_totals(report).items()}},
            "tasks": tasks}


def _task_totals(report: Report) -> dict[str, Any]:
    o = overall(report.tasks)
    return {"tasks": o["tasks"], "pass_rate": o["pass_rate"], "cost_per_accepted_task_usd": o["cost_per_accepted_task_usd"],
            "median_duration_s": o["median_duration_s"],
            "max_task_cost_usd": max((t.cost_usd for t in report.tasks), default=0.0)}


def load_baseline(path: Path) -> dict[str, Any]:
    """A baseline file, every field checked against what `kvprobe baseline` can write (InputError naming the
    file and the field otherwise): a hand-edited `token_hit_ratio: 5` would gate every run against 500%."""
    if not path.is_file():
        raise not_a_file(path, "baseline file")
    try:
        data = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise InputError(f"not valid JSON: {exc}", file=str(path)) from None
    if not isinstance(data, dict) or data.get("kvprobe_baseline") != BASELINE_VERSION:
        raise InputError("not a kvprobe baseline (write one with `kvprobe baseline TRACE -o FILE`)",
                         file=str(path), field="kvprobe_baseline")
    for key in ("totals", "tasks"):
        if not isinstance(data.get(key), dict):
            raise InputError("expected an object", file=str(path), field=key)
    _check_created(data.get("created"), path)
    _check_figures(data["totals"], "totals", path)
    _check_totals(data["totals"], path)
    for name, task in data["tasks"].items():
        if not isinstance(task, dict):
            raise InputError("expected an object", file=str(path), field=f"tasks.{name}")
        _check_task(task, f"tasks.{name}", path)
    return data


# The range of each figure a baseline holds (null is allowed for every one: "unknown", e.g. an unpriced model)
_RATIO = "a ratio from 0 to 1"
_COUNT = "a whole number of 0 or more"
_AMOUNT = "a finite number of 0 or more"
_RANGES = {
    "token_hit_ratio": _RATIO, "pass_rate": _RATIO,
    "requests": _COUNT, "input_tokens": _COUNT, "cache_read_tokens": _COUNT, "tasks": _COUNT,
    "keep_alive_requests": _COUNT,
    "cost_usd": _AMOUNT, "cost_per_accepted_task_usd": _AMOUNT, "max_task_cost_usd": _AMOUNT,
    "input_equivalent_tokens": _AMOUNT, "duration_s": _AMOUNT, "median_duration_s": _AMOUNT,
}
_LARGEST = 1e18  # beyond any real count or cost (and where a float stops holding whole numbers)


def _in_range(value: Any, kind: str) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < _LARGEST:
        return False  # (NaN fails the comparison too)
    if kind == _RATIO:
        return value <= 1
    return kind != _COUNT or float(value).is_integer()


def _check_figures(row: dict[str, Any], where: str, path: Path, names: tuple[str, ...] = tuple(_RANGES)) -> None:
    """Every figure a comparison reads is null or in its range."""
    for key in names:
        value = row.get(key)
        if value is not None and not _in_range(value, _RANGES[key]):
            raise InputError(f"expected {_RANGES[key]} (or null), got {str(value)[:40]}", file=str(path),
                             field=f"{where}.{key}")


def _check_totals(totals: dict[str, Any], path: Path) -> None:
    """Cache reads are part of the input (input_tokens counts all of it): more reads than input is no run's.
    (A ratio edited by hand away from reads / input is allowed: a baseline may state a target.)"""
    reads, inputs = totals.get("cache_read_tokens"), totals.get("input_tokens")
    if reads is not None and inputs is not None and reads > inputs:
        raise InputError(f"expected no more than input_tokens ({inputs}), got {reads}", file=str(path),
                         field="totals.cache_read_tokens")


def _check_task(task: dict[str, Any], where: str, path: Path) -> None:
    _check_figures(task, where, path)
    for key in ("passed", "cold"):
        if task.get(key) is not None and not isinstance(task[key], bool):
            raise InputError("expected true, false or null", file=str(path), field=f"{where}.{key}")
    for key, what in (("diagnoses", "diagnosis kinds"), ("agents", "agent names")):
        items = task.get(key, [])
        if not isinstance(items, list) or not all(isinstance(d, str) for d in items):
            raise InputError(f"expected a list of {what}", file=str(path), field=f"{where}.{key}")
    causes = task.get("causes", [])
    if not isinstance(causes, list):
        raise InputError("expected a list of causes", file=str(path), field=f"{where}.causes")
    for i, cause in enumerate(causes):
        if not isinstance(cause, dict) or not isinstance(cause.get("kind"), str):
            raise InputError("expected an object with a 'kind'", file=str(path), field=f"{where}.causes[{i}]")
        _check_figures(cause, f"{where}.causes[{i}]", path, ("requests", "cost_usd"))


def _check_created(created: Any, path: Path) -> None:
    if created is None:
        return
    try:
        dt.datetime.fromisoformat(created)  # what summary_of writes (isoformat); "Z" too, on Python 3.11
    except (TypeError, ValueError):
        raise InputError(f"expected an RFC 3339 time, got {str(created)[:40]}", file=str(path),
                         field="created") from None


@dataclass(slots=True)
class TaskDelta:
    task: str
    base: dict[str, Any] | None
    cand: dict[str, Any] | None
    regressed: list[str] = field(default_factory=list)  # metrics that got worse beyond the tolerance
    new_diagnoses: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"task": self.task, "regressed": self.regressed, "new_diagnoses": self.new_diagnoses}
        for m in METRICS:
            a = self.base.get(m) if self.base else None
            b = self.cand.get(m) if self.cand else None
            out[m] = {"base": a, "candidate": b, "change": _rel(a, b)}
        out["passed"] = {"base": self.base.get("passed") if self.base else None,
                         "candidate": self.cand.get("passed") if self.cand else None}
        return out


def _rel(a: Any, b: Any) -> float | None:
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return None
    if a == 0:
        return None if b == 0 else float("inf") if b > 0 else float("-inf")
    return round((b - a) / abs(a), 4)


@dataclass(slots=True)
class Comparison:
    base: dict[str, Any]
    cand: dict[str, Any]
    tasks: list[TaskDelta]

    @property
    def regressed(self) -> list[TaskDelta]:
        return [t for t in self.tasks if t.regressed]

    @property
    def improved(self) -> list[TaskDelta]:
        return [t for t in self.tasks if not t.regressed and t.base and t.cand
                and None not in (t.cand.get("cost_usd"), t.base.get("cost_usd"))
                and t.cand["cost_usd"] < t.base["cost_usd"]]

    def totals(self) -> dict[str, Any]:
        keys = ("cost_usd", "input_equivalent_tokens", "token_hit_ratio", "pass_rate", "cost_per_accepted_task_usd",
                "median_duration_s")
        return {k: {"base": self.base["totals"].get(k), "candidate": self.cand["totals"].get(k),
                    "change": _rel(self.base["totals"].get(k), self.cand["totals"].get(k))} for k in keys}

    def to_json(self) -> dict[str, Any]:
        return {"totals": self.totals(), "tasks": [t.to_json() for t in self.tasks],
                "regressed": [t.task for t in self.regressed], "improved": [t.task for t in self.improved]}


def _worse(metric: str, a: Any, b: Any, tolerance: float) -> bool:
    change = _rel(a, b)
    if change is None:
        return False
    return change > tolerance if LOWER_IS_BETTER[metric] else change < -tolerance


def compare(base: dict[str, Any], cand: dict[str, Any], tolerance: float = 0.05) -> Comparison:
    """Task by task (matched by task id); a metric regresses when it is worse by more than `tolerance`."""
    deltas = []
    for name in sorted(set(base["tasks"]) | set(cand["tasks"])):
        a, b = base["tasks"].get(name), cand["tasks"].get(name)
        delta = TaskDelta(name, a, b)
        if a and b:
            # hit ratio alone is no regression: a shorter task can read less and still cost less
            delta.regressed = [m for m in ("cost_usd", "input_equivalent_tokens")
                               if _worse(m, a.get(m), b.get(m), tolerance)]
            if a.get("passed") is True and b.get("passed") is False:
                delta.regressed.append("passed")
            delta.new_diagnoses = sorted(set(b.get("diagnoses", [])) - set(a.get("diagnoses", [])))
        deltas.append(delta)
    return Comparison(base, cand, deltas)


# How each figure reads: (label, unit). A ratio's change is in percentage points (39.9% → 81.9% is
# +42.0 pp, not +105%); every other change is relative.
FIGURES: dict[str, tuple[str, str]] = {
    "cost_usd": ("cost", "usd"), "input_equivalent_tokens": ("input-equivalent tokens", "tokens"),
    "token_hit_ratio": ("token hit ratio", "ratio"), "pass_rate": ("pass rate", "ratio"),
    "cost_per_accepted_task_usd": ("cost per accepted task", "usd"),
    "median_duration_s": ("median task duration", "seconds"), "duration_s": ("duration", "seconds"),
}


def shown(metric: str, value: Any) -> str:
    """A figure as a person reads it: $0.0706, 19,404 (tokens), 39.9%, 561.5 s; – when unknown."""
    if not isinstance(value, (int, float)):
        return "–"
    unit = FIGURES.get(metric, ("", "tokens"))[1]
    if unit == "usd":
        return usd(value)
    if unit == "ratio":
        return f"{100 * value:.1f}%"
    if unit == "seconds":
        return f"{value:,.1f} s"
    return f"{value:,.0f}"


def change(metric: str, base: Any, candidate: Any) -> str:
    """The change from base to candidate: in points for a ratio, else relative; – when undefined."""
    if not isinstance(base, (int, float)) or not isinstance(candidate, (int, float)):
        return "–"
    if FIGURES.get(metric, ("", ""))[1] == "ratio":
        return f"{100 * (candidate - base):+.1f} pp"
    rel = _rel(base, candidate)
    return "–" if rel is None or rel in (float("inf"), float("-inf")) else f"{100 * rel:+.1f}%"


def to_markdown(c: Comparison) -> str:
    lines = ["### kvprobe compare", "", "| | base | candidate | change |", "|---|---:|---:|---:|"]
    for k, v in c.totals().items():
        lines.append(f"| {FIGURES[k][0]} | {shown(k, v['base'])} | {shown(k, v['candidate'])} | "
                     f"{change(k, v['base'], v['candidate'])} |")
    if c.regressed:
        lines += ["", "**Regressed tasks**", "", "| task | worse | new diagnoses |", "|---|---|---|"]
        lines += [f"| {t.task} | {', '.join(t.regressed)} | {', '.join(t.new_diagnoses) or '–'} |" for t in c.regressed]
    if c.improved:
        lines += ["", f"Cheaper: {', '.join(t.task for t in c.improved)}"]
    return "\n".join(lines)
