"""Policies that change when and how long entries live: keep-alive pings (only where they cost less than the
rebuild they avoid), the provider's longer lifetime, a breakpoint the lookback can reach, and siblings that
wait for the first write (staggered, or after a warm-up request)."""
from __future__ import annotations

from dataclasses import replace

from kvprobe.analysis.siblings import SiblingGroup, find_groups
from kvprobe.analysis.simulate import RequestResult
from kvprobe.analysis.skeleton import Skeleton
from kvprobe.catalog import rules_for
from kvprobe.economics.keep_alive import KeepAlivePlan, longer_lifetime, plan
from kvprobe.request.openai_cache import RETENTION_FIELD
from kvprobe.trace import TraceRecord
from kvprobe.whatif.edits import copy_record, mark_breakpoint, truncated_through, with_all_ttls
from kvprobe.whatif.policies import Evidence, Policy, Records, Skeletons, map_records, map_skeletons, origin
from kvprobe.wording import plural
from kvprobe.whatif.reshape import index_of, with_blocks, with_request

STAGGER_MARGIN_S = 0.01  # start a staggered sibling this long after the first response began
# Requests a policy adds are numbered after the log's own (`Skeleton.order`: the tie-break among requests that
# start at the same time): warm-ups from the log's size on, keep-alive pings from this far past it
PINGS_ORDER = 1 << 40


# --- pauses ---------------------------------------------------------------------------------------------

def _cached_extent(r: RequestResult) -> tuple[int, int]:
    """(tokens a request leaves cached, tokens after its last breakpoint that a ping resends fresh)."""
    req = r.sk.request
    assert req is not None
    total = req.total_tokens
    if not req.breakpoints:  # a prefix cache (implicit mode has no breakpoints): the whole prompt
        return total, 0
    end = req.breakpoint_indices[-1] + 1
    cached = sum(b.tokens for b in req.blocks[:end])
    return cached, total - cached


def pauses(ev: Evidence) -> list[tuple[RequestResult, RequestResult, KeepAlivePlan | None]]:
    """Each expiry with the request before it in its stream and what bridging the pause would cost (found
    once for the keep-alive and the longer-lifetime proposals)."""
    return ev.once("pauses", lambda: _pauses(ev))


def _pauses(ev: Evidence) -> list[tuple[RequestResult, RequestResult, KeepAlivePlan | None]]:
    out = []
    for stream in ev.streams().values():
        for prev, cur in zip(stream, stream[1:]):
            if prev.sk.request is None or not any(d.kind == "ttl_expired" for d in cur.diagnoses):
                continue
            cached, tail = _cached_extent(prev)
            out.append((prev, cur, plan(prev.rules, cached, cur.sk.started_at - prev.sk.started_at, tail)))
    return out


class _Pings:
    def __init__(self, times: dict[str, list[float]], first_order: int) -> None:
        self.times = times  # source request id -> ping start times
        # each ping's place among requests that start at the same time: after the log's own and any warm-up,
        # in the order of `times` (numbered here, not by the list reshaped: a part of the log gives the same)
        self.orders: dict[str, int] = {}  # source request id -> its first ping's
        n = first_order + PINGS_ORDER
        for source, pings in times.items():
            self.orders[source], n = n, n + len(pings)

    def reshape(self, sks: Skeletons) -> Skeletons:
        by_id = {sk.id: sk for sk in sks if sk.id in self.times}
        added = []
        # the sources in this part of the log (`Pricer.stream` edits it a part at a time), in the order of
        # `times`: looked up from the part, not every source walked for every part (quadratic in the log)
        for source in sorted(by_id, key=self.orders.__getitem__):
            src, times = by_id[source], self.times[source]
            for k, t in enumerate(times, start=1):
                extra = {**src.extra, "keep_alive": True, "output_tokens": 1}
                added.append(replace(src, id=f"{source}+keepalive{k}", order=self.orders[source] + k - 1,
                                     started_at=t, readable_at=t + 0.5, finished_at=t + 1.0, observed=None,
                                     extra=extra))
        return sks + added

    def rewrite(self, records: Records) -> Records:
        by_id = {r.id: r for r in records}
        pings = []
        for source, times in self.times.items():  # a record's id is its skeleton's: every one is there
            src = by_id[source]
            for k, t in enumerate(times, start=1):
                ping = copy_record(src, id=f"{source}+keepalive{k}", started_at=t, first_token_at=t + 0.5,
                                   finished_at=t + 1.0)
                ping.request["max_tokens"] = 1
                ping.extra["keep_alive"] = True  # simulated with one output token
                ping.extra["output_tokens"] = 1
                pings.append(ping)
        return records + pings


def propose_keep_alive(ev: Evidence) -> list[Policy]:
    found = pauses(ev)
    paying = [(p, c, k) for p, c, k in found if k is not None and k.pays]
    if not paying:
        return []
    times = {p.sk.id: [p.sk.started_at + n * k.interval_s for n in range(1, k.pings + 1)] for p, _, k in paying}
    longest = max(k.pause_s for _, _, k in paying)
    break_even = min(k.break_even_s for _, _, k in paying)
    past = [k for _, _, k in found if k is not None and k.needed and not k.pays]
    interval = min(k.interval_s for _, _, k in paying)
    detail = (f"during pauses, send a keep-alive (the last request's prefix with max_tokens 1) every "
              f"{interval:.0f}s: {plural(len(paying), 'pause')} of up to {longest:,.0f}s, "
              f"{plural(sum(len(t) for t in times.values()), 'ping')} in all; pings pay for pauses up to about "
              f"{break_even:,.0f}s (past that they cost more than the rebuild)")
    if past:
        detail += f"; not proposed for {plural(len(past), 'longer pause')}"
    sessions = {p.sk.session for p, _, _ in paying}
    pings = _Pings(times, ev.log_size)
    return [Policy("keep_alive", "pauses", detail, [c.sk.id for _, c, _ in paying], sessions, pings.reshape,
                   pings.rewrite, cause_sessions=len({c.sk.session for _, c, _ in found}),
                   extra={"pings": sum(len(t) for t in times.values()), "break_even_pause_s": round(break_even, 1),
                          "pauses_past_break_even": len(past)})]


class _Lifetime:
    def __init__(self, ttl: str, streams: set[tuple[str, str]]) -> None:
        self.ttl, self.streams = ttl, streams

    def reshape(self, sks: Skeletons) -> Skeletons:
        def edit(sk: Skeleton) -> Skeleton | None:
            req = sk.request
            if (sk.session, sk.agent) not in self.streams or not req.breakpoints \
                    or all(t == self.ttl for _, t in req.breakpoints):
                return None
            return with_request(sk, with_blocks(req, req.blocks, [(i, self.ttl) for i, _ in req.breakpoints]))
        return map_skeletons(sks, edit)

    def rewrite(self, records: Records) -> Records:
        def edit(rec: TraceRecord) -> TraceRecord | None:
            if (rec.session or "-", rec.agent or "main") not in self.streams:
                return None
            body, changed = with_all_ttls(rec.request, self.ttl)
            return copy_record(rec, request=body) if changed else None
        return map_records(records, None, edit)


class _Retention:
    """These requests ask for the retention (`prompt_cache_retention`: a prefix cache's entries live as long as
    the request that wrote or read them last asked)."""

    def __init__(self, name: str, ids: set[str]) -> None:
        self.name, self.ids = name, ids

    def reshape(self, sks: Skeletons) -> Skeletons:
        def edit(sk: Skeleton) -> Skeleton | None:
            req = sk.request
            if origin(sk.id) not in self.ids or req.retention == self.name:
                return None
            new = with_blocks(req, req.blocks)
            new.retention = self.name
            return with_request(sk, new)
        return map_skeletons(sks, edit)

    def rewrite(self, records: Records) -> Records:
        return map_records(records, self.ids,
                           lambda rec: copy_record(rec, request={**rec.request, RETENTION_FIELD: self.name}))


def _asking(ev: Evidence, streams: set[tuple[str, str]], mode: str, retention: str) -> set[str]:
    """The requests of these streams that can ask for the retention: in a prefix cache whose rules offer it (a
    stream may also hold another provider's requests, whose API would refuse the field)."""
    return {r.sk.id for r in ev.results if (r.sk.session, r.sk.agent) in streams and r.sk.request is not None
            and r.sk.request.cache_mode == mode
            and (longer_lifetime(r.rules) or {}).get("retention") == retention}


# the cache mode a longer lifetime applies to, the knob's key that says how, and the policy's key
_LIFETIMES = (("breakpoints", "ttl", "lifetime"), ("implicit", "retention", "retention"))


def propose_longer_lifetime(ev: Evidence) -> list[Policy]:
    """The provider's own longer lifetime for the streams with pauses it outlasts: a breakpoint's TTL
    (Anthropic: ttl 1h), or the retention a prefix cache's requests ask for (OpenAI: prompt_cache_retention
    24h)."""
    out = []
    for mode, how, key in _LIFETIMES:
        found = [(p, c) for p, c, _ in pauses(ev) if p.sk.request is not None and p.sk.request.cache_mode == mode]
        knob = longer_lifetime(found[0][0].rules) if found else None
        if not found or knob is None or knob.get(how) is None:
            continue
        # an entry is gone at exactly its lifetime (as in kvprobe.sim): a pause of exactly that is not outlasted
        lasting = [(p, c) for p, c in found if c.sk.started_at - p.sk.started_at < float(knob["seconds"])]
        if not lasting:
            continue
        streams = {(c.sk.session, c.sk.agent) for _, c in lasting}
        longest = max(c.sk.started_at - p.sk.started_at for p, c in lasting)
        detail = (f"use {knob['setting']} for {plural(len(streams), 'agent stream')} with pauses of up to "
                  f"{longest:,.0f}s (entries then live {float(knob['seconds']):,.0f}s; writes cost "
                  f"{knob.get('write_multiplier', '?')}x input)")
        edit = _Lifetime(str(knob[how]), streams) if how == "ttl" else \
            _Retention(str(knob[how]), _asking(ev, streams, mode, str(knob[how])))
        out.append(Policy("ttl_1h", key, detail, [c.sk.id for _, c in lasting], {s for s, _ in streams},
                          edit.reshape, edit.rewrite, cause_sessions=len({c.sk.session for _, c in found}),
                          extra={"setting": knob["setting"]}))
    return out


# --- lookback ---------------------------------------------------------------------------------------------

class _Marks:
    def __init__(self, paths: dict[str, str]) -> None:
        self.paths = paths  # request id -> the path to mark

    def reshape(self, sks: Skeletons) -> Skeletons:
        def edit(sk: Skeleton) -> Skeleton | None:
            path = self.paths.get(origin(sk.id))
            req = sk.request
            i = index_of(req, path) if path else None
            if i is None or i in req.breakpoint_indices or len(req.breakpoints) >= 4:
                return None
            marks = sorted([*req.breakpoints, (i, str(rules_for(*sk.rules_key).get("default_ttl", "5m")))])
            return with_request(sk, with_blocks(req, req.blocks, marks))
        return map_skeletons(sks, edit)

    def rewrite(self, records: Records) -> Records:
        def edit(rec: TraceRecord) -> TraceRecord | None:
            new = copy_record(rec)
            return new if mark_breakpoint(new.request, self.paths[origin(rec.id)]) else None
        return map_records(records, set(self.paths), edit)


def propose_lookback(ev: Evidence) -> list[Policy]:
    paths = {}
    for r in ev.with_kind("lookback_exceeded"):
        paths[r.sk.id] = next(d.path for d in r.diagnoses if d.kind == "lookback_exceeded")
    if not paths:
        return []
    marks = _Marks({rid: p for rid, p in paths.items() if p})
    sessions = {r.sk.session for r in ev.results if r.sk.id in marks.paths}
    detail = (f"add a cache_control breakpoint where the previous request's entry ends, in "
              f"{plural(len(marks.paths), 'request')} whose last entry lies beyond the lookback window "
              f"(e.g. {next(iter(marks.paths.values()))} in {next(iter(marks.paths))})")
    return [Policy("lookback_breakpoint", "lookback", detail, list(marks.paths), sessions, marks.reshape,
                   marks.rewrite, cause_sessions=len(sessions))]


# --- concurrent siblings --------------------------------------------------------------------------------

def _stream_shifts(members: list[RequestResult], ready: float) -> dict[tuple[str, str], tuple[float, float]]:
    return {(m.sk.session, m.sk.agent): (m.sk.started_at, ready - m.sk.started_at) for m in members}


class _Siblings:
    """Every group of siblings: its shared end marked, its later members (or all, after a warm-up) moved."""

    def __init__(self, groups: list[SiblingGroup], warm_up: bool, first_order: int = 0) -> None:
        self.groups, self.warm = groups, warm_up
        self.first_order = first_order  # the warm-ups' numbers (`PINGS_ORDER`): group k's is first_order + k
        self.marked = {m.sk.id: g.path for g in groups for m in g.members}
        self.led: dict[str, list[int]] = {}  # each lead's request id -> the numbers of the groups it leads
        self.shifts: dict[tuple[str, str], tuple[float, float]] = {}
        self.latency = 0.0
        for k, g in enumerate(groups):
            lead = g.members[0]
            self.led.setdefault(lead.sk.id, []).append(k)
            if not warm_up:
                shifts = _stream_shifts(g.members[1:], lead.sk.readable_at + STAGGER_MARGIN_S)
            else:
                ttft = max(lead.sk.readable_at - lead.sk.started_at, STAGGER_MARGIN_S)
                shifts = _stream_shifts(g.members, lead.sk.started_at + ttft + STAGGER_MARGIN_S)
            self.shifts.update(shifts)
            self.latency = max([self.latency, *(s for _, s in shifts.values())])

    def _moved(self, stream: tuple[str, str], start: float) -> float:
        since, shift = self.shifts.get(stream, (0.0, 0.0))
        return shift if shift and start >= since else 0.0

    def reshape(self, sks: Skeletons) -> Skeletons:
        out = []
        for sk in sks:
            new = sk
            path = self.marked.get(sk.id)
            end = index_of(sk.request, path) if path is not None and sk.request is not None else None
            if end is not None and end not in sk.request.breakpoint_indices:
                marks = sorted([*sk.request.breakpoints, (end, "5m")])
                new = with_request(sk, with_blocks(sk.request, sk.request.blocks, marks))
            shift = self._moved((sk.session, sk.agent), sk.started_at)
            if shift:
                new = replace(new, started_at=sk.started_at + shift, readable_at=sk.readable_at + shift,
                              finished_at=sk.finished_at + shift if sk.finished_at else None, observed=None)
            out.append(new)
        return out + (self._warm_skeletons(out) if self.warm else [])

    def _warm_skeletons(self, sks: Skeletons) -> Skeletons:
        leads = self.led
        by_id = {sk.id: sk for sk in sks if sk.id in leads}
        added = []
        # the groups led from this part of the log (`Pricer.stream` edits it a part at a time), in group order:
        # found from the part, not every group walked for every part (quadratic in the log)
        for k, lead in sorted((k, sk) for rid, sk in by_id.items() for k in leads[rid]):
            g = self.groups[k]  # (`lead`: the member as this log has it, with its body; an edit keeps both)
            start = g.members[0].sk.started_at
            ttft = max(g.members[0].sk.readable_at - start, STAGGER_MARGIN_S)
            req = lead.request
            end = index_of(req, g.path)
            if end is None:
                continue
            # the lead is marked at the shared end already (reshape marks every member first, keeping a mark of
            # its own there, as the written warm-up does: mark_breakpoint)
            marks = [(i, t) for i, t in req.breakpoints if i <= end]
            added.append(replace(lead, id=f"{g.members[0].sk.id}+warmup", order=self.first_order + k,
                                 started_at=start, readable_at=start + ttft, finished_at=start + ttft + STAGGER_MARGIN_S,
                                 observed=None, request=with_blocks(req, req.blocks[:end + 1], marks),
                                 extra={**lead.extra, "output_tokens": 1}))
        return added

    def rewrite(self, records: Records) -> Records:
        out = []
        for rec in records:
            new = None
            g_end = self.marked.get(rec.id)
            if g_end is not None and rec.request is not None:
                new = copy_record(rec)
                mark_breakpoint(new.request, g_end)
            shift = self._moved((rec.session or "-", rec.agent or "main"), rec.started_at or 0.0)
            if shift and rec.started_at is not None:
                new = new or copy_record(rec)
                new.started_at = rec.started_at + shift
                new.first_token_at = rec.first_token_at + shift if rec.first_token_at else None
                new.finished_at = rec.finished_at + shift if rec.finished_at else None
            out.append(new or rec)
        return out + (self._warm_records(records) if self.warm else [])

    def _warm_records(self, records: Records) -> Records:
        by_id = {r.id: r for r in records}
        added = []
        for g in self.groups:
            lead = g.members[0]
            rec = by_id[lead.sk.id]  # a record's id is its skeleton's, and a member has a body
            body = truncated_through(rec.request, g.path)
            if body is None:
                continue
            start = lead.sk.started_at
            ttft = max(lead.sk.readable_at - start, STAGGER_MARGIN_S)
            warm = copy_record(rec, id=f"{lead.sk.id}+warmup", request=body, started_at=start,
                               first_token_at=start + ttft, finished_at=start + ttft + STAGGER_MARGIN_S)
            warm.extra["output_tokens"] = 1
            added.append(warm)
        return added


def _warm_body(ev: Evidence, g: SiblingGroup) -> dict | None:
    rec = ev.texts.record(g.members[0].sk)
    return truncated_through(rec.request, g.path) if rec is not None and rec.request else None


def propose_siblings(ev: Evidence) -> list[Policy]:
    groups = [g for g in find_groups(ev.results)
              if any(d.kind == "not_yet_readable" for r in g.members[1:] for d in r.diagnoses)]
    if not groups:
        return []
    ids = [m.sk.id for g in groups for m in g.members]
    sessions = {m.sk.session for g in groups for m in g.members}
    shared = sorted({g.shared_tokens for g in groups})
    size = f"{shared[0]:,}" if len(shared) == 1 else f"{shared[0]:,}-{shared[-1]:,}"
    unmarked = sum(not g.marked for g in groups)
    mark = (f"mark the end of the prefix they share ({size} tokens, e.g. {groups[0].path}) with cache_control "
            "and ") if unmarked else ""
    stagger = _Siblings(groups, warm_up=False)
    out = [Policy("shared_breakpoint", "siblings", f"{mark}start the later siblings of "
                  f"{plural(len(groups), 'group')} (e.g. {', '.join(m.sk.id for m in groups[0].members)}) once the "
                  f"first one's response has begun, so they read the prefix it wrote (adds up to "
                  f"{stagger.latency:.1f} s before they start)", ids, sessions, stagger.reshape, stagger.rewrite,
                  cause_sessions=len(sessions), exclusive="siblings",
                  extra={"variant": "stagger", "added_latency_s": round(stagger.latency, 3),
                         "path": groups[0].path, "shared_tokens": groups[0].shared_tokens, "groups": len(groups)})]
    ready = [g for g in groups if _warm_body(ev, g) is not None]
    if not ready:
        return out
    warm = _Siblings(ready, warm_up=True, first_order=ev.log_size)
    out.append(Policy("shared_breakpoint", "siblings-warm-up",
                      f"send a warm-up request (the shared {size}-token prefix, marked, max_tokens 1) before each of "
                      f"{plural(len(ready), 'group')} of siblings and start them once its response has begun (adds "
                      f"about {warm.latency:.1f} s to each)", [m.sk.id for g in ready for m in g.members],
                      {m.sk.session for g in ready for m in g.members}, warm.reshape, warm.rewrite,
                      cause_sessions=len(sessions), exclusive="siblings",
                      extra={"variant": "warm_up", "added_latency_s": round(warm.latency, 3), "path": groups[0].path,
                             "shared_tokens": ready[0].shared_tokens, "groups": len(ready)}))
    return out
