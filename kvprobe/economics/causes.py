"""Misses grouped by cause: what each cause cost over the whole log, and the fixes that remove it.

A fleet repeats the same few causes in every session; listed per request, the answer drowns in near-copies.
A cause is what broke (the kind, and the block path or parameter it names — a changing message is "the
messages level", wherever in the history it sits); its cost is what its misses paid above an ideal cache,
each miss counted once, under its first diagnosis.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvprobe.analysis.diagnosis import Diagnosis, advice_for


def cause_key(d: Diagnosis) -> tuple[str, str, str]:
    """(kind, what broke, the change a transcript shows): a new turn's dropped reasoning, a rewritten message
    and a rewind break the messages level alike, but each has its own remedy, so each is a cause of its own."""
    if d.kind == "prefix_changed" and d.path:
        where = "tools" if d.path.startswith("tools") else ("messages" if d.path.startswith("messages")
                                                             else d.path)
        return d.kind, where, d.change or ""
    if d.kind == "params_changed":
        return d.kind, d.param or "", ""
    return d.kind, "", ""


# the changes a transcript shows (analysis.rebuilt), as a cause's label names them
CHANGE_WORDS = {"reasoning_dropped": "a new turn", "edited": "a message rewritten", "cleared": "tool results "
                "cleared", "branched": "a rewind or branch", "compacted": "a compaction", "truncated": "older messages dropped", "restarted": "a new "
                "conversation"}


def cause_label(key: tuple[str, str, str]) -> str:
    kind, what, change = key
    if kind == "prefix_changed":
        said = f" ({CHANGE_WORDS.get(change, change)})" if change else ""
        return f"prefix changed at {what or 'an unknown block'}{said}"
    if kind == "params_changed":
        return f"{what} changed" if what else "parameters changed"
    return {"ttl_expired": "TTL expired (a pause)", "not_yet_readable": "siblings started together",
            "lookback_exceeded": "lookback exceeded", "below_minimum": "below the minimum length",
            "missing_breakpoint": "no breakpoint at the end of reused content",
            "stale_read": "read an older entry (another region or replica)",
            "routing": "routed to a cache without the entry",
            "unexplained": "unexplained"}.get(kind, kind.replace("_", " "))


@dataclass(slots=True)
class Cause:
    key: tuple[str, str, str]
    requests: list[str] = field(default_factory=list)
    sessions: set[str] = field(default_factory=set)
    missed_tokens: int = 0
    input_equivalent: float = 0.0
    usd: float | None = 0.0
    example: Diagnosis | None = None  # the costliest instance's diagnosis
    example_request: str = ""
    fixes: list[str] = field(default_factory=list)  # kinds of the chosen fixes that address its requests

    @property
    def label(self) -> str:
        return cause_label(self.key)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.key[0], "what": self.key[1] or None, "change": self.key[2] or None, "label": self.label,
                "requests": len(self.requests),
                "sessions": len(self.sessions), "missed_read_tokens": self.missed_tokens,
                "input_equivalent_tokens": round(self.input_equivalent, 1),
                "usd": None if self.usd is None else round(self.usd, 6), "example_request": self.example_request,
                "example": self.example.detail if self.example else "",
                "what_to_do": advice_for(self.example) if self.example else "", "fixes": self.fixes,
                "request_ids": self.requests}


def group_causes(misses: list[Any], fixes: list[dict[str, Any]] | None = None) -> list[Cause]:
    """misses: report.Miss items (costliest first); fixes: the chosen fixes' JSON."""
    out: dict[tuple[str, str, str], Cause] = {}
    for m in misses:
        d = m.result.diagnoses[0]
        cause = out.setdefault(cause_key(d), Cause(cause_key(d)))
        if cause.example is None:
            cause.example, cause.example_request = d, m.result.sk.id
        cause.requests.append(m.result.sk.id)
        cause.sessions.add(m.result.sk.session)
        cause.missed_tokens += m.result.missed_tokens
        cause.input_equivalent += m.input_equivalent
        cause.usd = None if cause.usd is None or m.usd is None else cause.usd + m.usd
    for fix in fixes or []:
        ids = set(fix.get("requests") or [])
        for cause in out.values():
            if ids.intersection(cause.requests) and fix["kind"] not in cause.fixes:
                cause.fixes.append(fix["kind"])
    return sorted(out.values(), key=lambda c: -c.input_equivalent)
