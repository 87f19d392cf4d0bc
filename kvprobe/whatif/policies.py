"""Fixes as policies: one change, described once, applied wherever the log shows the cause it removes.

A fleet's sessions hit the same few breakers; a fix per session would list the same advice two hundred times
and price overlapping savings that do not add. A `Policy` groups the instances of one change — the block it
stabilizes (path and content identity), the parameter it holds, the pauses it bridges — across every session
of the log, and is priced once, by one simulation of the whole log with it applied (`evaluate`).

A policy carries two implementations of the same change: `reshape` edits the sized skeletons (what pricing
simulates, `reshape.py`) and `rewrite` edits trace records (what `kvprobe fix` writes). The tests hold them to
each other: reporting the written trace reproduces the priced saving.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvprobe.analysis.simulate import RequestResult
from kvprobe.analysis.skeleton import Skeleton
from kvprobe.analysis.texts import TextSource
from kvprobe.trace import TraceRecord
from kvprobe.wording import reach as reach_words

Records = list[TraceRecord]
Skeletons = list[Skeleton]

# Content edits first, timing last: keep-alive pings copy requests already edited.
APPLY_ORDER = ("stabilize_prefix", "stable_params", "mark_breakpoint", "lookback_breakpoint", "shared_breakpoint",
               "ttl_1h", "keep_alive")


@dataclass(slots=True)
class Instance:
    """The policy's effect on one session, from the policy's whole-log simulation."""

    session: str
    requests: int  # requests of the session the policy edits or adds
    saving_ie: float
    saving_usd: float | None

    def to_json(self) -> dict[str, Any]:
        return {"session": self.session, "edited_requests": self.requests,
                "saving_input_equivalent_tokens": round(self.saving_ie, 1),
                "saving_usd": None if self.saving_usd is None else round(self.saving_usd, 6)}


@dataclass(slots=True)
class Policy:
    kind: str  # a fix kind of docs/contracts.md §3
    key: str  # what it changes ("system[0]", "tool_choice", "pauses of main"): one policy per kind and key
    detail: str
    requests: list[str]  # the requests whose misses it addresses
    sessions: set[str]  # the sessions it edits
    reshape: Callable[[Skeletons], Skeletons]
    rewrite: Callable[[Records], Records]
    cause_sessions: int = 0  # sessions where the cause it removes was diagnosed
    exclusive: str | None = None  # policies with the same value are variants of one fix: at most one applies
    requires: list["Policy"] = field(default_factory=list)  # priced on top of these, chosen only with them
    extra: dict[str, Any] = field(default_factory=dict)
    saving_input_equivalent_tokens: float = 0.0
    saving_usd: float | None = None
    edited_requests: int = 0
    instances: list[Instance] = field(default_factory=list)

    def apply(self, records: Records) -> Records:
        """The records with this policy applied (what `fix` writes of it alone)."""
        return self.rewrite(records)

    @property
    def reach(self) -> str:
        return reach_words(len(self.sessions), self.cause_sessions, self.edited_requests)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "key": self.key, "requests": self.requests,
                "saving_input_equivalent_tokens": round(self.saving_input_equivalent_tokens, 1),
                "saving_usd": None if self.saving_usd is None else round(self.saving_usd, 6),
                "detail": self.detail, "edited_requests": self.edited_requests, "reach": {"sessions": len(self.sessions),
                                                 "sessions_with_cause": self.cause_sessions,
                                                 "edited_requests": self.edited_requests, "text": self.reach},
                "instances": [i.to_json() for i in self.instances],
                **({"requires": [p.label for p in self.requires]} if self.requires else {}), **self.extra}

    @property
    def label(self) -> str:
        """The kind and what it changes, in a few words: `stabilize_prefix (system[0])`."""
        what = self.extra.get("variant") or self.extra.get("path") or self.extra.get("param")
        return f"{self.kind} ({what})" if what else self.kind


@dataclass(slots=True)
class Evidence:
    """What proposers read: the diagnosed baseline (in start order) and the texts behind it."""

    results: list[RequestResult]
    texts: TextSource
    fleet: list = field(default_factory=list)  # analysis.fleet.SharedPrefix findings
    _found: dict[Any, Any] = field(default_factory=dict)  # what several proposers read, found once
    size: int | None = None  # skeletons in the log (failed ones too); None: past the last result's

    @property
    def log_size(self) -> int:
        """The number a request a policy adds is given after (`Skeleton.order`: the log's own are below it)."""
        if self.size is not None:
            return self.size
        return max((r.sk.order for r in self.results), default=-1) + 1

    def once(self, key: Any, find: Callable[[], Any]) -> Any:
        """`find()`, computed for the first proposer that asks for `key`."""
        if key not in self._found:
            self._found[key] = find()
        return self._found[key]

    def streams(self) -> dict[tuple[str, str], list[RequestResult]]:
        out: dict[tuple[str, str], list[RequestResult]] = {}
        for r in self.results:
            out.setdefault((r.sk.session, r.sk.agent), []).append(r)
        return out

    def sessions(self) -> dict[str, list[RequestResult]]:
        return by_session(self.results)

    def with_kind(self, kind: str) -> list[RequestResult]:
        return self.once(("kind", kind), lambda: [r for r in self.results if r.sk.request is not None
                                                  and any(d.kind == kind for d in r.diagnoses)])


def map_records(records: Records, ids: set[str] | None, edit: Callable[[TraceRecord], TraceRecord | None]) -> Records:
    """Each record in `ids` (all when None) through `edit` (None: unchanged); a keep-alive copy gets the edits of
    its source."""
    out = []
    for rec in records:
        changed = edit(rec) if rec.request is not None and (ids is None or origin(rec.id) in ids) else None
        out.append(changed if changed is not None else rec)
    return out


def map_skeletons(sks: Skeletons, edit: Callable[[Skeleton], Skeleton | None]) -> Skeletons:
    out = []
    for sk in sks:
        changed = edit(sk) if sk.request is not None else None
        out.append(changed if changed is not None else sk)
    return out


def origin(sk_id: str) -> str:
    return sk_id.split("+keepalive", 1)[0]


def by_session(results: list[RequestResult]) -> dict[str, list[RequestResult]]:
    """Results by session, each in the order given."""
    out: dict[str, list[RequestResult]] = {}
    for r in results:
        out.setdefault(r.sk.session, []).append(r)
    return out

