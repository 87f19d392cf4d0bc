"""What made the misses of a gated trace: one cause per task, kind and place, new ones (not in the baseline) first.

A cause gathers every miss of a task with the same diagnosis kind at the same place (the block path's head
for a changed prefix, the parameter for a changed one): the trace's seven misses after a timestamp entered
the system prompt are one cause, with their summed cost, not seven lines. Each cause gets the fix that
addresses its own kind on its own requests (never another miss's fix), else the advice for its kind.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from kvprobe.analysis.diagnosis import advice_for
from kvprobe.report import Miss, Report
from kvprobe.wording import round_usd

# The diagnosis kind each what-if fix kind repairs (kvprobe/whatif/proposals.py makes them).
FIX_ADDRESSES = {"stabilize_prefix": "prefix_changed", "stable_params": "params_changed",
                 "keep_alive": "ttl_expired", "ttl_1h": "ttl_expired", "lookback_breakpoint": "lookback_exceeded",
                 "shared_breakpoint": "not_yet_readable"}
# A fix's example of the changing text, `(e.g. "…")`: prompt content, left out unless asked for
_EXAMPLE = re.compile(r' \(e\.g\. "(?:[^"\\]|\\.)*"\)')


@dataclass(slots=True)
class Cause:
    task: str
    kind: str
    where: str | None  # "system[0]", "tools[2]", "messages", a parameter name, or None
    requests: list[str] = field(default_factory=list)
    why: str = ""  # the first miss's diagnosis
    cost_usd: float | None = 0.0  # what its misses cost above an ideal cache; None when one is unpriced
    input_equivalent: float = 0.0
    fix: str = ""
    fix_saving_usd: float | None = None
    advice: str = ""  # the first miss's advice for its kind, when no fix was priced
    new: bool | None = None  # None without a baseline
    baseline_cost_usd: float | None = None  # the same cause's cost in the baseline, when it was there
    tasks: list[str] = field(default_factory=list)  # every task it stands for, once folded (see `fold`)

    @property
    def label(self) -> str:
        place = f" at {self.where}" if self.where else ""
        return f"{self.kind}{place}"

    @property
    def added_usd(self) -> float | None:
        """What the cause adds to the bill against the baseline (all of it when it is new)."""
        if self.cost_usd is None:
            return None
        if self.new is False:
            return None if self.baseline_cost_usd is None else round(self.cost_usd - self.baseline_cost_usd, 6)
        return self.cost_usd

    def to_json(self, content: bool = True) -> dict[str, Any]:
        return {"request": self.requests[0], "requests": self.requests, "task": self.task, "kind": self.kind,
                "where": self.where, "why": self.why, "cost_usd": round_usd(self.cost_usd),
                "input_equivalent_tokens": round(self.input_equivalent, 1),
                "fix": self.fix if content else without_content(self.fix), "fix_saving_usd": self.fix_saving_usd,
                "new": self.new, "baseline_cost_usd": self.baseline_cost_usd, "added_usd": self.added_usd,
                "tasks": self.tasks or [self.task]}


def without_content(text: str) -> str:
    """The text without the prompt text a fix quotes as its example."""
    return _EXAMPLE.sub("", text)


def place(diagnosis: Any) -> str | None:
    """Where a miss broke, stable from run to run: a message index moves as the history grows."""
    if diagnosis.kind == "params_changed":
        return diagnosis.param
    path = diagnosis.path
    if not path:
        return None
    head = path.split(".", 1)[0]
    return "messages" if head.startswith("messages") or head.startswith("contents") else head


def _task_of(miss: Miss) -> str:
    sk = miss.result.sk
    return sk.task or sk.session


def group(misses: list[Miss]) -> list[Cause]:
    """Misses of one task, kind and place as one cause each, in order of first appearance."""
    causes: dict[tuple[str, str, str | None], Cause] = {}
    for m in sorted(misses, key=lambda m: m.result.sk.order):  # a cause's first request is its earliest
        d = m.result.diagnoses[0]
        key = (_task_of(m), d.kind, place(d))
        cause = causes.get(key)
        if cause is None:
            cause = causes[key] = Cause(*key, why=d.detail, advice=advice_for(d))
        cause.requests.append(m.result.sk.id)
        cause.input_equivalent += m.input_equivalent
        cause.cost_usd = None if cause.cost_usd is None or m.usd is None else cause.cost_usd + m.usd
    return list(causes.values())


def _fix_for(cause: Cause, fixes: list[dict[str, Any]]) -> dict[str, Any] | None:
    ids = set(cause.requests)
    mine = [f for f in fixes if FIX_ADDRESSES.get(f["kind"]) == cause.kind and ids & set(f["requests"])]
    # the policy that changes this cause's own place first (its `key`: "system[0]", "tool_choice"), then the best
    return max(mine, key=lambda f: (f.get("key") == cause.where, f.get("saving_usd") or 0.0), default=None)


def _baseline_causes(baseline: dict[str, Any] | None, task: str) -> tuple[bool, dict | None, set[str]]:
    """(task in the baseline, its causes by (kind, where) or None for a baseline without them, its kinds)."""
    if baseline is None or task not in baseline["tasks"]:
        return False, None, set()
    row = baseline["tasks"][task]
    listed = row.get("causes")
    by_key = None if not isinstance(listed, list) else \
        {(c.get("kind"), c.get("where")): c for c in listed if isinstance(c, dict)}
    return True, by_key, set(row.get("diagnoses", []))


def _compare(cause: Cause, baseline: dict[str, Any] | None) -> None:
    if baseline is None:
        return
    known, by_key, kinds = _baseline_causes(baseline, cause.task)
    if by_key is None:  # a baseline written before causes were kept: compare kinds
        cause.new = not known or cause.kind not in kinds
        return
    before = by_key.get((cause.kind, cause.where))
    cause.new = before is None
    if before is not None and isinstance(before.get("cost_usd"), (int, float)):
        cause.baseline_cost_usd = float(before["cost_usd"])


def causes(report: Report, baseline: dict[str, Any] | None = None) -> list[Cause]:
    """Every cause of the report's misses with its fix; new ones first, then by cost (largest first)."""
    found = group(report.misses)
    for cause in found:
        fix = _fix_for(cause, report.fixes)
        cause.fix = fix["detail"] if fix else cause.advice
        cause.fix_saving_usd = fix.get("saving_usd") if fix else None
        _compare(cause, baseline)
    return sorted(fold(found), key=lambda c: (c.new is False, -(c.cost_usd or 0.0), -c.input_equivalent))


def fold(found: list[Cause]) -> list[Cause]:
    """One line for the same cause in many tasks (a fleet's sessions hit the same breakers): kind, place,
    new-or-not and fix alike, their requests and costs summed; the task names the count."""
    out: dict[tuple, Cause] = {}
    for c in found:
        key = (c.kind, c.where, c.new, c.fix)
        into = out.get(key)
        if into is None:
            c.tasks = [c.task]
            out[key] = c
            continue
        into.tasks.append(c.task)
        into.task = f"{len(into.tasks):,} tasks"
        into.requests += c.requests
        into.input_equivalent += c.input_equivalent
        into.cost_usd = None if into.cost_usd is None or c.cost_usd is None else into.cost_usd + c.cost_usd
        if into.baseline_cost_usd is not None or c.baseline_cost_usd is not None:
            into.baseline_cost_usd = (into.baseline_cost_usd or 0.0) + (c.baseline_cost_usd or 0.0)
    return list(out.values())


def baseline_causes(report: Report) -> dict[str, list[dict[str, Any]]]:
    """Per task, what `kvprobe baseline` keeps of each cause, so a later gate can tell new ones from old."""
    out: dict[str, list[dict[str, Any]]] = {}
    for cause in group(report.misses):
        out.setdefault(cause.task, []).append({"kind": cause.kind, "where": cause.where,
                                               "requests": len(cause.requests), "cost_usd": round_usd(cause.cost_usd)})
    return out


def baseline_bytes(report: Report) -> bytes:
    """The baseline of a run (totals, per-task figures and causes), as `kvprobe baseline` and `gate
    --write-baseline` write it."""
    import orjson

    from kvprobe.compare import summary_of

    data = summary_of(report)
    for task, found in baseline_causes(report).items():
        data["tasks"][task]["causes"] = found
    return orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n"
