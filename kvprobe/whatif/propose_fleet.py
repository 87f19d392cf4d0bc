"""Share a fleet's common prefix across sessions: where sessions start further apart than entries live, the
breakpoint that ends their shared prefix gets the provider's longer lifetime (Anthropic: ttl 1h), so the
entry one session writes is still there, refreshed by every read, when the next one starts. Priced on top of
the policy that removes what breaks the sharing (a volatile span), which it requires: alone, with the span
still in place, no session could read another's entry."""
from __future__ import annotations

from kvprobe.analysis.fleet import SharedPrefix
from kvprobe.analysis.skeleton import Skeleton
from kvprobe.economics.keep_alive import longer_lifetime
from kvprobe.trace import TraceRecord
from kvprobe.whatif.edits import block_at, copy_record, mark_breakpoint
from kvprobe.whatif.policies import Evidence, Policy, Records, Skeletons, map_records, map_skeletons
from kvprobe.wording import plural
from kvprobe.whatif.reshape import index_of, with_blocks, with_request


class _SharedEnd:
    """The shared prefix's end marked with the longer TTL (and every breakpoint before it: 1h entries must
    come before 5m ones), in every request of the fleet's sessions that carries that block."""

    def __init__(self, path: str, ttl: str, sessions: set[str]) -> None:
        self.path, self.ttl, self.sessions = path, ttl, sessions

    def reshape(self, sks: Skeletons) -> Skeletons:
        return map_skeletons(sks, self._skeleton)

    def _skeleton(self, sk: Skeleton) -> Skeleton | None:
        if sk.session not in self.sessions:
            return None
        req = sk.request
        i = index_of(req, self.path)
        if i is None:
            return None
        marks = dict(req.breakpoints)
        if i not in marks and len(marks) >= 4:
            return None
        marks[i] = self.ttl
        new = sorted((j, self.ttl if j <= i else t) for j, t in marks.items())
        if new == sorted(req.breakpoints):
            return None
        return with_request(sk, with_blocks(req, req.blocks, new))

    def rewrite(self, records: Records) -> Records:
        return map_records(records, None, self._record)

    def _record(self, rec: TraceRecord) -> TraceRecord | None:
        if (rec.session or "-") not in self.sessions or block_at(rec.request, self.path)[1] is None:
            return None
        new = copy_record(rec)
        if not mark_breakpoint(new.request, self.path, self.ttl):
            return None
        _, block = block_at(new.request, self.path, writable=True)
        block["cache_control"] = {**block["cache_control"], "ttl": self.ttl}
        _earlier_to(new.request, self.path, self.ttl)
        return new


def _earlier_to(body: dict, path: str, ttl: str) -> None:
    """Breakpoints before `path` (tools, then system blocks) take the same TTL."""
    for level in ("tools", "system"):
        items = body.get(level)
        if not isinstance(items, list):
            continue
        for k, item in enumerate(items):
            here = f"{level}[{k}]"
            if here == path:
                return
            if isinstance(item, dict) and isinstance(item.get("cache_control"), dict):
                _, block = block_at(body, here, writable=True)
                block["cache_control"] = {**block["cache_control"], "ttl": ttl}


def _end_path(f: SharedPrefix) -> str:
    return f.breaks_at if f.could_share_tokens and f.breaks_at else f.last_path


def propose_fleet(ev: Evidence, earlier: list[Policy]) -> list[Policy]:
    out = []
    for f in ev.fleet:
        if f.median_gap_s is None or f.lifetime_s is None or f.median_gap_s < f.lifetime_s:
            continue  # entries outlive the gaps (one is gone at exactly its lifetime): a stable prefix is enough
        rules = next((r.rules for r in ev.results if r.sk.session == f.sessions[0] and r.sk.request), None)
        knob = longer_lifetime(rules) if rules is not None else None
        if knob is None or knob.get("ttl") is None or float(knob["seconds"]) <= f.median_gap_s:
            continue
        path = _end_path(f)
        requires = [p for p in earlier if p.kind == "stabilize_prefix" and p.extra.get("path") == f.breaks_at] \
            if f.breaker == "volatile span" else []
        if f.breaker == "volatile span" and not requires:
            continue
        if f.breaker in ("tool list", "parameter"):
            continue  # the fix for those is per session (stable tools, held parameters), not a lifetime
        sessions = set(f.sessions)
        first: dict[str, tuple[float, str]] = {}  # each session's first request: it wrote what others held
        for r in ev.results:
            if r.sk.session in sessions and r.sk.request is not None and r.sk.session not in first:
                first[r.sk.session] = (r.sk.started_at, r.sk.id)
        firsts = sorted(first.values())
        end = _SharedEnd(path, str(knob["ttl"]), sessions)
        detail = (f"the {plural(len(sessions), 'session')} start {f.median_gap_s:,.0f}s apart and entries live "
                  f"{f.lifetime_s:,.0f}s: give the breakpoint that ends their shared {f.prefix_tokens:,}-token "
                  f"prefix ({path}) the longer lifetime (\"ttl\": \"{knob['ttl']}\""
                  + ("" if f.marked else ", marking it") + "), so each session reads the entry the one before "
                  "kept alive" + (" (with the volatile span moved out first)" if requires else ""))
        policy = Policy("ttl_1h", f"shared:{path}", detail, [i for _, i in firsts[1:]], sessions, end.reshape,
                        end.rewrite, cause_sessions=len(sessions),
                        extra={"setting": knob["setting"], "scope": "fleet", "path": path,
                               "shared_tokens": f.prefix_tokens})
        policy.requires = requires
        f.fixes.append(policy.label)
        out.append(policy)
    return out
