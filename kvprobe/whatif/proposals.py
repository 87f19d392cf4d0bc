"""Candidate fixes for the misses a baseline simulation diagnosed. Each is a pure trace transformation.

A fix only moves, marks, keeps alive or re-times content; it never drops any. Whether it pays is decided
afterwards by re-simulating what it changes (see `evaluate`).

Scope follows what is shared, not who sent it: a fix that edits a block (a tool list, a system prompt line)
edits it in every request of the session that carries it — the main agent's and its subagents' — because
they share the cache entries that block starts. An edit that would leave a record as it was returns it
unchanged, so only records that really change are re-simulated.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kvprobe.analysis.siblings import SiblingGroup, find_groups
from kvprobe.analysis.simulate import RequestResult
from kvprobe.request.model import canonical_json
from kvprobe.tokens import count_text
from kvprobe.trace import TraceRecord
from kvprobe.whatif.edits import (append_after_last_breakpoint, block_at, copy_record, mark_breakpoint,
                                  truncated_through, with_all_ttls)
from kvprobe.wording import show

Records = list[TraceRecord]
Edit = Callable[[TraceRecord], TraceRecord | None]
KEEP_ALIVE_MAX_SPAN = 3600.0  # never keep a cache alive for more than an hour (product policy)
KEEP_ALIVE_MARGIN = 30.0  # send the ping this long before the entry would expire
STABLE_PARAMS = ("tool_choice", "thinking")  # request fields a fix may hold constant
STAGGER_MARGIN_S = 0.01  # start a staggered sibling this long after the first response began


@dataclass(slots=True)
class Candidate:
    kind: str
    requests: list[str]
    detail: str
    apply: Callable[[Records], Records]
    saving_input_equivalent_tokens: float = 0.0
    saving_usd: float | None = None
    extra: dict = field(default_factory=dict)
    exclusive: str | None = None  # candidates with the same value are variants of one fix: at most one applies

    def to_json(self) -> dict:
        return {"kind": self.kind, "requests": self.requests,
                "saving_input_equivalent_tokens": round(self.saving_input_equivalent_tokens, 1),
                "saving_usd": None if self.saving_usd is None else round(self.saving_usd, 6),
                "detail": self.detail, **self.extra}


def _streams(results: list[RequestResult]) -> dict[tuple[str, str], list[RequestResult]]:
    out: dict[tuple[str, str], list[RequestResult]] = {}
    for r in results:
        out.setdefault((r.sk.session, r.sk.agent), []).append(r)
    return out


def _sessions(results: list[RequestResult]) -> dict[str, list[RequestResult]]:
    out: dict[str, list[RequestResult]] = {}
    for r in results:
        if r.sk.request is not None:
            out.setdefault(r.sk.session, []).append(r)
    return out


def _map(records: Records, ids: set[str], edit: Edit) -> Records:
    out = []
    for rec in records:
        origin = rec.id.split("+keepalive", 1)[0]  # a keep-alive copy gets the edits of its source
        changed = edit(rec) if origin in ids and rec.request is not None else None
        out.append(changed if changed is not None else rec)
    return out


def _with_kinds(stream: list[RequestResult], kind: str) -> list[RequestResult]:
    return [r for r in stream if any(d.kind == kind for d in r.diagnoses) and r.sk.request is not None]


def _agents(ids: list[str], results: dict[str, RequestResult]) -> str:
    names = sorted({results[i].sk.agent for i in ids if i in results})
    return ", ".join(names)


# --- stabilize_prefix -------------------------------------------------------------------------------------

def _volatile_lines(texts: list[str]) -> list[int] | None:
    """Indices of lines that differ across versions of one block (same line count required)."""
    split = [t.split("\n") for t in texts]
    if len({len(s) for s in split}) != 1:
        return None
    idx = [i for i in range(len(split[0])) if len({s[i] for s in split}) > 1]
    return idx or None


def _text_at(rec: TraceRecord, path: str) -> str | None:
    _, block = block_at(rec.request, path)
    return block.get("text") if isinstance(block, dict) and isinstance(block.get("text"), str) else None


def _stable_part(text: str, volatile: list[int]) -> tuple[int, list[str]]:
    lines = text.split("\n")
    return len(lines), [line for i, line in enumerate(lines) if i not in volatile]


def _block_tokens(result: RequestResult | None, path: str) -> int | None:
    """The size the baseline gave the block at `path` of a request (anchored on its logged usage)."""
    req = result.sk.request if result is not None else None
    return next((b.tokens for b in req.blocks if b.path == path), None) if req is not None else None


def _split_hints(orig: int | None, path: str, body: dict, stable: str, moved: str,
                 counts: dict[str, int]) -> dict[str, int] | None:
    """Sizes of the two parts of a block a fix split: the block's own size shared by their estimates, so
    the moved line keeps its size (the sizer reads these by path)."""
    if not orig:
        return None
    for text in (stable, moved):
        if text not in counts:
            counts[text] = count_text(text)
    share = counts[moved] / max(counts[moved] + counts[stable], 1)
    msgs = body["messages"]
    moved_path = f"messages[{len(msgs) - 1}].content[{len(msgs[-1]['content']) - 1}]"
    moved_tokens = round(orig * share)
    return {path: orig - moved_tokens, moved_path: moved_tokens}


def _stabilize_text(by_id: dict[str, TraceRecord], session: list[str], stream_ids: list[str], path: str,
                    touched: list[str], results: dict[str, RequestResult]) -> Candidate | None:
    texts = [_text_at(by_id[rid], path) for rid in stream_ids]
    if any(t is None for t in texts):
        return None
    volatile = _volatile_lines(texts)  # type: ignore[arg-type]
    if volatile is None:
        return None
    shape = _stable_part(texts[0], volatile)  # type: ignore[arg-type]
    # every request of the session that carries this block (same lines but the changing ones) gets the edit
    scope = {rid for rid in session if (t := _text_at(by_id[rid], path)) is not None and _stable_part(t, volatile) == shape}
    sample = " / ".join(texts[-1].split("\n")[i] for i in volatile)[:120]  # type: ignore[union-attr]
    sizes = {rid: _block_tokens(results.get(rid), path) for rid in scope}
    counts: dict[str, int] = {}

    def edit(rec: TraceRecord) -> TraceRecord:
        new = copy_record(rec)
        _, block = block_at(new.request, path, writable=True)
        lines = block["text"].split("\n")
        block["text"] = "\n".join(line for i, line in enumerate(lines) if i not in volatile)
        moved = "\n".join(lines[i] for i in volatile)
        append_after_last_breakpoint(new.request, moved)
        hints = _split_hints(sizes.get(rec.id.split("+keepalive", 1)[0]), path, new.request, block["text"],
                             moved, counts)
        if hints:
            new.extra["size_hints"] = hints
        return new

    detail = (f"move the changing line(s) of {path} (e.g. {show(sample, 80)}) out of the cached prefix, to after the "
              f"last breakpoint (the end of the last user message), in all {len(scope)} requests that carry it")
    return Candidate("stabilize_prefix", touched, detail, lambda recs: _map(recs, scope, edit),
                     extra={"edited_requests": len(scope)})


def _tool_name(tool: dict) -> str | None:
    """The tool's name, as a key: a name that is not a string (a malformed log) is compared by its JSON."""
    function = tool.get("function")
    name = tool.get("name") or (function.get("name") if isinstance(function, dict) else None)
    return name if name is None or isinstance(name, str) else canonical_json(name)


def _plain(tool: dict) -> dict:
    return {k: v for k, v in tool.items() if k != "cache_control"}


def _tool_set(rec: TraceRecord) -> frozenset:
    return frozenset(_tool_name(t) for t in rec.request.get("tools") or [] if isinstance(t, dict))


def _stabilize_tools(by_id: dict[str, TraceRecord], session: list[str], stream_ids: list[str],
                     touched: list[str], results: dict[str, RequestResult]) -> Candidate | None:
    sets = {_tool_set(by_id[rid]) for rid in stream_ids}
    # the lists the diagnosed agent sent, wherever in the session they are sent (subagents share them)
    scope = [rid for rid in session if _tool_set(by_id[rid]) in sets]
    union: dict[str, dict] = {}
    for rid in scope:
        for tool in by_id[rid].request.get("tools") or []:
            name = _tool_name(tool)
            if name in union and _plain(union[name]) != _plain(tool):
                return None  # a definition changed: no stable order can keep both versions
            union.setdefault(name, tool)
    tools = [_plain(t) for t in union.values()]

    def edit(rec: TraceRecord) -> TraceRecord | None:
        old = rec.request.get("tools") or []
        marked = any(isinstance(t, dict) and t.get("cache_control") for t in old)
        target = [dict(t) for t in tools]
        if marked:
            target[-1]["cache_control"] = {"type": "ephemeral"}
        if old == target:
            return None
        new = copy_record(rec)
        new.request["tools"] = target
        return new

    detail = (f"send the same {len(tools)} tool definitions in the same order in every request of the session "
              f"(agents: {_agents(scope, results)}), from the first one: load tools through a stable list "
              "instead of adding or reordering them mid-task")
    return Candidate("stabilize_prefix", touched, detail, lambda recs: _map(recs, set(scope), edit),
                     extra={"edited_requests": len(scope)})


def propose_stabilize(records: Records, results: list[RequestResult]) -> list[Candidate]:
    by_id = {r.id: r for r in records}
    by_result = {r.sk.id: r for r in results}
    out = []
    for session in _sessions(results).values():
        session_ids = [r.sk.id for r in session]
        done: set[str] = set()  # one candidate per changed block and session, whichever agent saw it first
        for stream in _streams(session).values():
            diagnosed = _with_kinds(stream, "prefix_changed")
            paths = {d.path for r in diagnosed for d in r.diagnoses if d.kind == "prefix_changed" and d.path}
            ids = [r.sk.id for r in stream]
            for path in sorted(paths):
                key = "tools" if path.startswith("tools") else path
                if key in done:
                    continue
                touched = [r.sk.id for r in session if any(d.kind == "prefix_changed" and d.path and
                                                           (d.path.startswith("tools") if key == "tools" else d.path == path)
                                                           for d in r.diagnoses)]
                cand = _stabilize_tools(by_id, session_ids, ids, touched, by_result) if key == "tools" else \
                    _stabilize_text(by_id, session_ids, ids, path, touched, by_result)
                if cand:
                    done.add(key)
                    out.append(cand)
    return out


# --- stable_params ----------------------------------------------------------------------------------------

def propose_stable_params(records: Records, results: list[RequestResult]) -> list[Candidate]:
    out = []
    by_id = {r.id: r for r in records}
    for stream in _streams(results).values():
        names = {d.param for r in _with_kinds(stream, "params_changed") for d in r.diagnoses
                 if d.kind == "params_changed" and d.param in STABLE_PARAMS}
        ids = [r.sk.id for r in stream if r.sk.request is not None]
        for name in sorted(names):
            first = by_id[ids[0]].request.get(name)
            touched = [i for i in ids if by_id[i].request.get(name) != first]

            def edit(rec: TraceRecord, name: str = name, first: object = first) -> TraceRecord | None:
                if rec.request.get(name) == first:
                    return None
                new = copy_record(rec)
                if first is None:
                    new.request.pop(name, None)
                else:
                    new.request[name] = first
                return new
            shown = _at(first)  # JSON or words, never a Python repr
            out.append(Candidate("stable_params", touched, f"keep {name} {shown} for the whole task instead "
                                 "of changing it mid-session", lambda recs, e=edit, s=set(ids): _map(recs, s, e)))
    return out


def _at(value: object) -> str:
    return "unset" if value is None else f"at {show(value)}"


# --- keep_alive and ttl_1h -------------------------------------------------------------------------------

def _ttl_gaps(stream: list[RequestResult]) -> list[tuple[RequestResult, RequestResult]]:
    pairs = []
    for prev, cur in zip(stream, stream[1:]):
        if any(d.kind == "ttl_expired" for d in cur.diagnoses) and prev.sk.request is not None:
            pairs.append((prev, cur))
    return pairs


def _ttl_seconds(result: RequestResult) -> float:
    table = result.rules.get("ttl_seconds", {"5m": 300}) or {"5m": 300}
    return float(table.get(str(result.rules.get("default_ttl", "5m")), 300))


def propose_keep_alive(records: Records, results: list[RequestResult]) -> list[Candidate]:
    out = []
    for stream in _streams(results).values():
        for prev, cur in _ttl_gaps(stream):
            gap = cur.sk.started_at - prev.sk.started_at
            if gap > KEEP_ALIVE_MAX_SPAN:
                continue
            step = _ttl_seconds(prev) - KEEP_ALIVE_MARGIN
            times = [prev.sk.started_at + k * step for k in range(1, int(gap // step) + 1)
                     if prev.sk.started_at + k * step < cur.sk.started_at]
            if not times:
                continue
            out.append(Candidate("keep_alive", [cur.sk.id],
                                 f"send {len(times)} keep-alive request(s) (the prefix of {prev.sk.id} with "
                                 f"max_tokens 1) every {step:.0f}s after {prev.sk.id}, before {cur.sk.id}",
                                 lambda recs, s=prev.sk.id, t=times: _insert_pings(recs, s, t),
                                 extra={"pings": len(times)}))
    return out


def _insert_pings(records: Records, source_id: str, times: list[float]) -> Records:
    """Copies of the request `source_id` as it is in `records` (with any earlier edits)."""
    source = next((r for r in records if r.id == source_id), None)
    if source is None:
        return records
    pings = []
    for k, t in enumerate(times, start=1):
        ping = copy_record(source, id=f"{source.id}+keepalive{k}", started_at=t, first_token_at=t + 0.5,
                           finished_at=t + 1.0)
        ping.request["max_tokens"] = 1
        ping.extra["keep_alive"] = True  # simulated with one output token
        ping.extra["output_tokens"] = 1
        pings.append(ping)
    return records + pings


def _one_hour(rec: TraceRecord) -> TraceRecord | None:
    body, changed = with_all_ttls(rec.request, "1h")
    if not changed:
        return None
    return copy_record(rec, request=body)


def propose_ttl_1h(records: Records, results: list[RequestResult]) -> list[Candidate]:
    out = []
    for stream in _streams(results).values():
        gaps = _ttl_gaps(stream)
        if not gaps or stream[0].sk.provider != "anthropic":
            continue
        ids = {r.sk.id for r in stream if r.sk.request is not None}
        out.append(Candidate("ttl_1h", [cur.sk.id for _, cur in gaps],
                             f"use \"ttl\": \"1h\" on the breakpoints of {stream[0].sk.agent} in session "
                             f"{stream[0].sk.session} (pauses of "
                             f"{', '.join(f'{c.sk.started_at - p.sk.started_at:.0f}s' for p, c in gaps)})",
                             lambda recs, s=ids: _map(recs, s, _one_hour)))
    return out


# --- lookback_breakpoint ----------------------------------------------------------------------------------

def propose_lookback(records: Records, results: list[RequestResult]) -> list[Candidate]:
    out = []
    for stream in _streams(results).values():
        for r in _with_kinds(stream, "lookback_exceeded"):
            path = next(d.path for d in r.diagnoses if d.kind == "lookback_exceeded")

            def edit(rec: TraceRecord, path: str = path) -> TraceRecord | None:
                new = copy_record(rec)
                return new if mark_breakpoint(new.request, path) else None
            out.append(Candidate("lookback_breakpoint", [r.sk.id],
                                 f"add a cache_control breakpoint on {path} in {r.sk.id} (where the previous "
                                 "request's entry ends), so the lookback window reaches it",
                                 lambda recs, e=edit, i=r.sk.id: _map(recs, {i}, e)))
    return out


# --- shared_breakpoint ------------------------------------------------------------------------------------

def propose_shared(records: Records, results: list[RequestResult]) -> list[Candidate]:
    """Siblings that started together and could not read their shared prefix: mark its end, and either
    stagger them until the first response has begun or send a warm-up request first. Both are priced;
    `evaluate` keeps the cheaper and lists the other as an alternative, each with its added latency."""
    by_id = {r.id: r for r in records}
    out = []
    for g in find_groups(results):
        if not any(d.kind == "not_yet_readable" for r in g.members[1:] for d in r.diagnoses):
            continue
        out.append(_stagger(g))
        warm = _warm_up(g, by_id)
        if warm is not None:
            out.append(warm)
    return out


def _shifted(rec: TraceRecord, new: TraceRecord | None, shift: float) -> TraceRecord:
    new = new or copy_record(rec)
    new.started_at = rec.started_at + shift if rec.started_at is not None else None
    new.first_token_at = rec.first_token_at + shift if rec.first_token_at else None
    new.finished_at = rec.finished_at + shift if rec.finished_at else None
    return new


def _retime(records: Records, marked: set[str], path: str, shifts: dict[tuple[str, str], tuple[float, float]],
            extra: list[TraceRecord] | None = None) -> Records:
    """Mark `path` in the `marked` requests; move each shifted stream's requests from a time on by a shift."""
    out = []
    for rec in records:
        new = None
        if rec.id in marked and rec.request is not None:
            new = copy_record(rec)
            mark_breakpoint(new.request, path)
        since, shift = shifts.get((rec.session or "-", rec.agent or "main"), (0.0, 0.0))
        if shift and rec.started_at is not None and rec.started_at >= since:
            new = _shifted(rec, new, shift)
        out.append(new or rec)
    return out + (extra or [])


def _stagger(g: SiblingGroup) -> Candidate:
    lead = g.members[0]
    ready = lead.sk.readable_at + STAGGER_MARGIN_S
    shifts = {(m.sk.session, m.sk.agent): (m.sk.started_at, ready - m.sk.started_at) for m in g.members[1:]}
    latency = max(s for _, s in shifts.values())
    ids = [m.sk.id for m in g.members]
    mark = "" if g.marked else f"mark {g.path} (the end of the {g.shared_tokens:,}-token prefix they share) with " \
                               "cache_control and "
    detail = (f"{mark}start {', '.join(ids[1:])} after {lead.sk.id}'s response has begun, so they read the "
              f"prefix {lead.sk.id} wrote (adds up to {latency:.1f} s before they start)")
    return Candidate("shared_breakpoint", ids, detail,
                     lambda recs, s=set(ids), p=g.path, sh=shifts: _retime(recs, s, p, sh),
                     extra={"variant": "stagger", "added_latency_s": round(latency, 3), "path": g.path,
                            "shared_tokens": g.shared_tokens},
                     exclusive=f"siblings:{lead.sk.id}")


def _warm_up(g: SiblingGroup, by_id: dict[str, TraceRecord]) -> Candidate | None:
    lead = g.members[0]
    rec = by_id.get(lead.sk.id)
    body = truncated_through(rec.request, g.path) if rec is not None and rec.request else None
    if body is None:
        return None
    start = lead.sk.started_at
    # the warm-up prefills at most what the first sibling did: its time to first token bounds the wait
    ttft = max(lead.sk.readable_at - start, STAGGER_MARGIN_S)
    ready = start + ttft + STAGGER_MARGIN_S
    warm = copy_record(rec, id=f"{lead.sk.id}+warmup", request=body, started_at=start,
                       first_token_at=start + ttft, finished_at=start + ttft + STAGGER_MARGIN_S)
    warm.extra["output_tokens"] = 1
    shifts = {(m.sk.session, m.sk.agent): (m.sk.started_at, ready - m.sk.started_at) for m in g.members}
    latency = max(s for _, s in shifts.values())
    ids = [m.sk.id for m in g.members]
    detail = (f"send a warm-up request (the {g.shared_tokens:,}-token prefix through {g.path}, marked, max_tokens "
              f"1) and start {', '.join(ids)} once its response has begun (adds about {latency:.1f} s to each)")
    return Candidate("shared_breakpoint", ids, detail,
                     lambda recs, s=set(ids), p=g.path, sh=shifts, w=warm: _retime(recs, s, p, sh, [w]),
                     extra={"variant": "warm_up", "added_latency_s": round(latency, 3), "path": g.path,
                            "shared_tokens": g.shared_tokens},
                     exclusive=f"siblings:{lead.sk.id}")


# Content edits first, timing last: keep-alive pings copy requests already edited.
APPLY_ORDER = ("stabilize_prefix", "stable_params", "lookback_breakpoint", "shared_breakpoint", "ttl_1h",
               "keep_alive")

PROPOSERS = (propose_stabilize, propose_stable_params, propose_keep_alive, propose_ttl_1h, propose_lookback,
             propose_shared)
