"""Tasks and outcomes: cost per task (every request of it), pass/fail, duration, cost per accepted task.

A task is a session unless records carry a `task` id. Outcomes come from the records (`task_passed`) or from
an outcomes file (JSON Lines: {"task": id, "passed": bool, "duration_s": optional}).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from kvprobe.analysis.simulate import RequestResult
from kvprobe.errors import InputError, not_a_file
from kvprobe.usage import Usage


@dataclass(slots=True)
class Outcome:
    passed: bool | None = None
    duration_s: float | None = None
    task_type: str | None = None


@dataclass(slots=True)
class TaskSummary:
    task: str
    requests: list[RequestResult] = field(default_factory=list)
    outcome: Outcome = field(default_factory=Outcome)
    cold: bool | None = None

    @property
    def cost_usd(self) -> float:
        return sum(r.cost_usd or 0.0 for r in self.requests)

    @property
    def usage(self) -> Usage:
        return sum((r.usage for r in self.requests), Usage())

    @property
    def input_equivalent(self) -> float:
        return sum(r.input_equivalent for r in self.requests)

    @property
    def duration_s(self) -> float:
        if self.outcome.duration_s is not None:
            return self.outcome.duration_s
        start = min(r.sk.started_at for r in self.requests)
        end = max((r.sk.finished_at or r.sk.readable_at or r.sk.started_at) for r in self.requests)
        return end - start

    @property
    def hit_ratio(self) -> float:
        u = self.usage
        return u.cache_read_tokens / u.input_tokens if u.input_tokens else 0.0

    def diagnosis_kinds(self) -> set[str]:
        return {d.kind for r in self.requests for d in r.diagnoses}

    def to_json(self) -> dict[str, Any]:
        priced = any(r.cost_usd is not None for r in self.requests)  # else the cost is unknown, not $0
        return {"task": self.task, "requests": len(self.requests),
                "cost_usd": round(self.cost_usd, 6) if priced else None,
                "input_equivalent_tokens": round(self.input_equivalent, 1), "token_hit_ratio": round(self.hit_ratio, 4),
                "passed": self.outcome.passed, "duration_s": round(self.duration_s, 3), "cold": self.cold,
                "agents": sorted({r.sk.agent for r in self.requests}),
                "keep_alive_requests": sum(1 for r in self.requests if r.sk.extra.get("keep_alive"))}


def load_outcomes(path: Path) -> dict[str, Outcome]:
    if not path.is_file():
        raise not_a_file(path, "outcomes file")
    out: dict[str, Outcome] = {}
    for n, line in enumerate(path.read_bytes().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise InputError(f"invalid JSON: {exc}", file=str(path), line=n) from None
        if not isinstance(row, dict) or not isinstance(row.get("task"), (str, int)):
            raise InputError("expected an object with a 'task' id", file=str(path), line=n, field="task")
        if not isinstance(row.get("passed"), bool):
            raise InputError("expected true or false", file=str(path), line=n, field="passed")
        duration = row.get("duration_s")
        if duration is not None and not isinstance(duration, (int, float)):
            raise InputError("expected seconds as a number", file=str(path), line=n, field="duration_s")
        out[str(row["task"])] = Outcome(row["passed"], duration, row.get("task_type"))
    return out


def summarize_tasks(results: list[RequestResult], outcomes: dict[str, Outcome] | None = None) -> list[TaskSummary]:
    tasks: dict[str, TaskSummary] = {}
    for r in results:
        key = r.sk.task or r.sk.session
        task = tasks.setdefault(key, TaskSummary(key))
        task.requests.append(r)
        passed = r.sk.extra.get("task_passed")
        if isinstance(passed, bool):
            task.outcome.passed = passed
    for key, outcome in (outcomes or {}).items():
        if key in tasks:
            tasks[key].outcome = outcome
    _mark_cold(list(tasks.values()))
    return list(tasks.values())


def _mark_cold(tasks: list[TaskSummary]) -> None:
    """The first run of each task type is cold (its prefixes were never cached); later runs are warm."""
    seen: set[str] = set()
    for task in sorted(tasks, key=lambda t: min(r.sk.started_at for r in t.requests)):
        kind = task.outcome.task_type
        if kind is None:
            continue
        task.cold = kind not in seen
        seen.add(kind)


def overall(tasks: list[TaskSummary]) -> dict[str, Any]:
    passed = [t for t in tasks if t.outcome.passed]
    known = [t for t in tasks if t.outcome.passed is not None]
    durations = sorted(t.duration_s for t in tasks)
    total = sum(t.cost_usd for t in tasks)
    out: dict[str, Any] = {
        "tasks": len(tasks), "passed": len(passed), "with_outcome": len(known),
        "pass_rate": round(len(passed) / len(known), 4) if known else None,
        "total_cost_usd": round(total, 6),
        # failed tasks' cost stays in the numerator: they were paid for too
        "cost_per_accepted_task_usd": round(total / len(passed), 6) if passed else None,
        "median_duration_s": round(statistics.median(durations), 3) if durations else None,
        "slowest_decile_duration_s": round(durations[min(len(durations) - 1, int(0.9 * len(durations)))], 3)
        if durations else None,
    }
    cold = [t for t in tasks if t.cold is True]
    warm = [t for t in tasks if t.cold is False]
    if cold or warm:
        out["cold"] = {"tasks": len(cold), "mean_cost_usd": round(statistics.mean(t.cost_usd for t in cold), 6)
                       if cold else None}
        out["warm"] = {"tasks": len(warm), "mean_cost_usd": round(statistics.mean(t.cost_usd for t in warm), 6)
                       if warm else None}
    return out
