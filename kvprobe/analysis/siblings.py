"""Concurrent siblings: requests of different agents of one session that start before any of them can read
what another writes, and that share a prefix none of their entries covers.

Agents fan out subagents with the same long context (history, a repository map) and a breakpoint only on
their own last block. Each one then writes the shared prefix again: there is no entry at its end, and the
first writer's entries are not readable until its response begins. The group is named, with the shared
block (path and size), how close together they started, and what each one wrote; `whatif` prices the fix.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvprobe.analysis.diagnosis import Diagnosis
from kvprobe.sim.positions import cumulative_tokens

if TYPE_CHECKING:
    from kvprobe.analysis.simulate import RequestResult


@dataclass(slots=True)
class SiblingGroup:
    members: list["RequestResult"]  # start order; the first is the one whose entries the others waited for
    shared_end: int  # index of the last block every member shares (content)
    shared_tokens: int
    marked: bool  # a breakpoint of the first member already ends exactly there

    @property
    def path(self) -> str:
        return self.members[0].sk.request.blocks[self.shared_end].path  # type: ignore[union-attr]

    @property
    def spread_ms(self) -> int:
        return round(1000 * (self.members[-1].sk.started_at - self.members[0].sk.started_at))


def _common_prefix(results: list["RequestResult"]) -> int:
    """Number of leading blocks (by content) every request shares."""
    first = results[0].sk.request.blocks  # type: ignore[union-attr]
    n = len(first)
    for r in results[1:]:
        blocks = r.sk.request.blocks  # type: ignore[union-attr]
        k = 0
        for x, y in zip(first[:n], blocks):
            if x.content_hash != y.content_hash:
                break
            k += 1
        n = k
    return n


def _groups_in(session: list["RequestResult"]) -> list[list["RequestResult"]]:
    """Requests of distinct agents that start before the first of them is readable."""
    out, i = [], 0
    while i < len(session):
        lead = session[i]
        group, agents = [lead], {lead.sk.agent}
        j = i + 1
        while j < len(session) and session[j].sk.started_at < lead.sk.readable_at:
            if session[j].sk.agent not in agents:
                group.append(session[j])
                agents.add(session[j].sk.agent)
            j += 1
        if len(group) > 1:
            out.append(group)
        i = j if len(group) > 1 else i + 1
    return out


def find_groups(results: list["RequestResult"]) -> list[SiblingGroup]:
    by_session: dict[str, list["RequestResult"]] = {}
    for r in results:
        if r.sk.request is not None and r.sk.request.cache_mode == "breakpoints" and r.predicted is not None:
            by_session.setdefault(r.sk.session, []).append(r)
    groups = []
    for session in by_session.values():
        session.sort(key=lambda r: (r.sk.started_at, r.sk.order))
        for members in _groups_in(session):
            n = _common_prefix(members)
            if n == 0:
                continue
            lead = members[0]
            tokens = cumulative_tokens(lead.sk.request.blocks[:n])[-1]  # type: ignore[union-attr]
            if tokens < int(lead.rules.get("min_cacheable_tokens", 0)):
                continue
            marked = (n - 1) in lead.sk.request.breakpoint_indices  # type: ignore[union-attr]
            groups.append(SiblingGroup(members, n - 1, tokens, marked))
    return groups


def diagnose_siblings(results: list["RequestResult"], noise) -> list[SiblingGroup]:
    """Replace the generic diagnosis of each later sibling that could not read the shared prefix."""
    found = []
    for g in find_groups(results):
        later = [r for r in g.members[1:] if r.usage.cache_read_tokens + noise(r) < g.shared_tokens]
        if not later:
            continue
        found.append(g)
        names = ", ".join(r.sk.id for r in g.members)
        wrote = {r.sk.id: r.usage.cache_write_tokens for r in g.members}
        wrote_text = ", ".join(f"{i} {t:,}" for i, t in wrote.items())
        mark = "a breakpoint ends there" if g.marked else "no breakpoint ends there"
        for r in later:
            detail = (f"{names} started within {g.spread_ms:,} ms of each other, before {g.members[0].sk.id}'s "
                      f"response began, and share a {g.shared_tokens:,}-token prefix through {g.path} ({mark}); "
                      f"each wrote it again (cache writes: {wrote_text} tokens)")
            diag = Diagnosis("not_yet_readable", detail, path=g.path, writer_id=g.members[0].sk.id,
                             siblings=[m.sk.id for m in g.members], shared_tokens=g.shared_tokens,
                             started_within_ms=g.spread_ms, wrote=wrote, missed_tokens=r.missed_tokens)
            reported = [d for d in r.diagnoses if not d.inferred]  # the provider's own verdict stays first
            r.diagnoses = reported + [diag] + [d for d in r.diagnoses if d.inferred and d.kind not in
                                               ("not_yet_readable", "missing_breakpoint", "unexplained")]
    return found
