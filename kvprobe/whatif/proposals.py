"""Candidate fixes for the misses a baseline simulation diagnosed. Each is a pure trace transformation.

A fix only moves, marks, keeps alive or re-times content; it never drops any. Whether it pays is decided
afterwards by re-simulating the whole trace with it (see `evaluate`).
"""
from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field

from kvprobe.analysis.simulate import RequestResult
from kvprobe.request import render_request
from kvprobe.trace import TraceRecord
from kvprobe.whatif.edits import (append_after_last_breakpoint, block_at, copy_record, mark_breakpoint,
                                  set_all_ttls)

Records = list[TraceRecord]
KEEP_ALIVE_MAX_SPAN = 3600.0  # never keep a cache alive for more than an hour (product policy)
KEEP_ALIVE_MARGIN = 30.0  # send the ping this long before the entry would expire
STABLE_PARAMS = ("tool_choice", "thinking")  # request fields a fix may hold constant


@dataclass(slots=True)
class Candidate:
    kind: str
    requests: list[str]
    detail: str
    apply: Callable[[Records], Records]
    saving_input_equivalent_tokens: float = 0.0
    saving_usd: float | None = None
    extra: dict = field(default_factory=dict)

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


def _map(records: Records, ids: set[str], edit: Callable[[TraceRecord], TraceRecord | None]) -> Records:
    out = []
    for rec in records:
        origin = rec.id.split("+keepalive", 1)[0]  # a keep-alive copy gets the edits of its source
        changed = edit(rec) if origin in ids and rec.request is not None else None
        out.append(changed if changed is not None else rec)
    return out


def _with_kinds(stream: list[RequestResult], kind: str) -> list[RequestResult]:
    return [r for r in stream if any(d.kind == kind for d in r.diagnoses) and r.sk.request is not None]


# --- stabilize_prefix -------------------------------------------------------------------------------------

def _volatile_lines(texts: list[str]) -> tuple[list[int], int] | None:
    """Indices of lines that differ across versions of one block (same line count required)."""
    split = [t.split("\n") for t in texts]
    if len({len(s) for s in split}) != 1:
        return None
    idx = [i for i in range(len(split[0])) if len({s[i] for s in split}) > 1]
    return (idx, len(split[0])) if idx else None


def _stabilize_text(records: Records, stream_ids: list[str], path: str, touched: list[str]) -> Candidate | None:
    by_id = {r.id: r for r in records}
    texts = []
    for rid in stream_ids:
        _, block = block_at(_copy_body(by_id[rid]), path)
        if not isinstance(block, dict) or not isinstance(block.get("text"), str):
            return None
        texts.append(block["text"])
    found = _volatile_lines(texts)
    if found is None:
        return None
    volatile, _ = found
    sample = " / ".join(texts[-1].split("\n")[i] for i in volatile)[:120]

    def edit(rec: TraceRecord) -> TraceRecord:
        new = copy_record(rec)
        _, block = block_at(new.request, path)
        lines = block["text"].split("\n")
        block["text"] = "\n".join(line for i, line in enumerate(lines) if i not in volatile)
        append_after_last_breakpoint(new.request, "\n".join(lines[i] for i in volatile))
        return new

    detail = (f"move the changing line(s) of {path} (e.g. {sample!r}) out of the cached prefix, to after the "
              f"last breakpoint (the end of the last user message)")
    return Candidate("stabilize_prefix", touched, detail, lambda recs: _map(recs, set(stream_ids), edit))


def _copy_body(rec: TraceRecord) -> dict:
    return copy.deepcopy(rec.request)


def _stabilize_tools(records: Records, stream_ids: list[str], touched: list[str]) -> Candidate | None:
    by_id = {r.id: r for r in records}
    union: dict[str, dict] = {}
    for rid in stream_ids:
        for tool in by_id[rid].request.get("tools") or []:
            name = tool.get("name") or tool.get("function", {}).get("name")
            plain = {k: v for k, v in tool.items() if k != "cache_control"}
            if name in union and {k: v for k, v in union[name].items() if k != "cache_control"} != plain:
                return None  # a definition changed: no stable order can keep both versions
            union.setdefault(name, tool)
    tools = list(union.values())

    def edit(rec: TraceRecord) -> TraceRecord:
        new = copy_record(rec)
        marked = any(t.get("cache_control") for t in new.request.get("tools") or [])
        new.request["tools"] = [{k: v for k, v in t.items() if k != "cache_control"} for t in tools]
        if marked:
            new.request["tools"][-1]["cache_control"] = {"type": "ephemeral"}
        return new

    detail = (f"send the same {len(tools)} tool definitions in the same order from the first request "
              f"(load tools through a stable list instead of adding or reordering them mid-task)")
    return Candidate("stabilize_prefix", touched, detail, lambda recs: _map(recs, set(stream_ids), edit))


def propose_stabilize(records: Records, results: list[RequestResult]) -> list[Candidate]:
    out = []
    for stream in _streams(results).values():
        diagnosed = _with_kinds(stream, "prefix_changed")
        paths = {d.path for r in diagnosed for d in r.diagnoses if d.kind == "prefix_changed" and d.path}
        ids = [r.sk.id for r in stream if r.sk.request is not None]
        touched = [r.sk.id for r in diagnosed]
        for path in sorted(p for p in paths if p):
            cand = _stabilize_tools(records, ids, touched) if path.startswith("tools") else \
                _stabilize_text(records, ids, path, touched)
            if cand:
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
            touched = [r.sk.id for r in stream if by_id[r.sk.id].request and by_id[r.sk.id].request.get(name) != first]

            def edit(rec: TraceRecord, name: str = name, first: object = first) -> TraceRecord:
                new = copy_record(rec)
                if first is None:
                    new.request.pop(name, None)
                else:
                    new.request[name] = first
                return new
            out.append(Candidate("stable_params", touched, f"keep {name} at {first!r} for the whole task instead "
                                 "of changing it mid-session", lambda recs, e=edit, s=set(ids): _map(recs, s, e)))
    return out


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
    source = next(r for r in records if r.id == source_id)
    pings = []
    for k, t in enumerate(times, start=1):
        ping = copy_record(source, id=f"{source.id}+keepalive{k}", started_at=t, first_token_at=t + 0.5,
                           finished_at=t + 1.0)
        ping.request["max_tokens"] = 1
        ping.extra["keep_alive"] = True  # simulated with one output token
        pings.append(ping)
    return records + pings


def propose_ttl_1h(records: Records, results: list[RequestResult]) -> list[Candidate]:
    out = []
    for stream in _streams(results).values():
        gaps = _ttl_gaps(stream)
        if not gaps or stream[0].sk.provider != "anthropic":
            continue
        ids = {r.sk.id for r in stream if r.sk.request is not None}

        def edit(rec: TraceRecord) -> TraceRecord:
            new = copy_record(rec)
            set_all_ttls(new.request, "1h")
            return new
        out.append(Candidate("ttl_1h", [cur.sk.id for _, cur in gaps],
                             f"use \"ttl\": \"1h\" on the breakpoints of session {stream[0].sk.session} "
                             f"(pauses of {', '.join(f'{c.sk.started_at - p.sk.started_at:.0f}s' for p, c in gaps)})",
                             lambda recs, s=ids: _map(recs, s, edit)))
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
    by_id = {r.id: r for r in records}
    by_result = {r.sk.id: r for r in results}
    out = []
    groups: dict[str, list[RequestResult]] = {}
    for r in results:
        for d in r.diagnoses:
            if d.kind == "not_yet_readable" and d.writer_id in by_result:
                groups.setdefault(d.writer_id, []).append(r)
    for writer_id, siblings in groups.items():
        writer = by_result[writer_id]
        a = render_request(by_id[writer_id].request)
        end, tokens = _shared_end(a, [render_request(by_id[s.sk.id].request) for s in siblings], writer)
        minimum = int(writer.rules.get("min_cacheable_tokens", 0))
        if end is None or tokens < minimum:
            continue
        path = a.blocks[end].path
        ready = writer.sk.readable_at + 0.01
        out.append(Candidate("shared_breakpoint", [s.sk.id for s in siblings],
                             f"mark {path} (the end of the {tokens:,}-token prefix the siblings share) with "
                             f"cache_control and start {', '.join(s.sk.id for s in siblings)} after "
                             f"{writer_id}'s response has begun",
                             lambda recs, w=writer_id, sib=siblings, p=path, t=ready: _retime(recs, w, sib, p, t)))
    return out


def _shared_end(a, others, writer: RequestResult) -> tuple[int | None, int]:
    common = len(a.blocks)
    for b in others:
        n = 0
        for x, y in zip(a.blocks, b.blocks):
            if x.content_hash != y.content_hash:
                break
            n += 1
        common = min(common, n)
    if common == 0:
        return None, 0
    sized = writer.sk.request.blocks  # sized blocks of the baseline simulation
    return common - 1, sum(b.tokens for b in sized[:common])


def _retime(records: Records, writer_id: str, siblings: list[RequestResult], path: str, ready: float) -> Records:
    ids = {s.sk.id for s in siblings} | {writer_id}
    streams = {(s.sk.session, s.sk.agent): max(ready - s.sk.started_at, 0.0) for s in siblings}
    out = []
    for rec in records:
        shift = streams.get((rec.session or "-", rec.agent or "main"), 0.0)
        first_sibling_start = min((s.sk.started_at for s in siblings
                                   if (s.sk.session, s.sk.agent) == (rec.session or "-", rec.agent or "main")),
                                  default=None)
        if rec.request is None or (rec.id not in ids and not shift):
            out.append(rec)
            continue
        new = copy_record(rec)
        if rec.id in ids:
            mark_breakpoint(new.request, path)
        if shift and first_sibling_start is not None and rec.started_at is not None \
                and rec.started_at >= first_sibling_start and rec.id != writer_id:
            new.started_at = rec.started_at + shift
            new.first_token_at = rec.first_token_at + shift if rec.first_token_at else None
            new.finished_at = rec.finished_at + shift if rec.finished_at else None
        out.append(new)
    return out


# Content edits first, timing last: keep-alive pings copy requests already edited.
APPLY_ORDER = ("stabilize_prefix", "stable_params", "lookback_breakpoint", "shared_breakpoint", "ttl_1h",
               "keep_alive")

PROPOSERS = (propose_stabilize, propose_stable_params, propose_keep_alive, propose_ttl_1h, propose_lookback,
             propose_shared)
