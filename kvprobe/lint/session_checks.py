"""Checks across consecutive requests of one session: what changed that the cache needed unchanged."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import orjson

from kvprobe.lint.catalog import LintCatalog, volatile_spans
from kvprobe.lint.model import Finding, Subject, make_finding, one_line
from kvprobe.request.model import Block
from kvprobe.sim.positions import lookback_positions

_SHOWN = 40  # characters of a changed value quoted in a message


def _quote(value: Any) -> str:
    if value is None:
        return "unset"
    text = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
    text = one_line(text)
    return repr(text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…")


def _first_difference(a: list[Block], b: list[Block]) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x.content_hash != y.content_hash:
            return i
    return min(len(a), len(b))


def _widen(text: str, start: int, end: int, cat: LintCatalog) -> tuple[int, int, str | None]:
    """Grow a changed span to the volatile-looking token(s) it overlaps, and name them."""
    lo, hi, label = start, max(end, start + 1), None
    for s, e, lab in volatile_spans(text, cat):
        if s < hi and e > lo:
            start, end, label = min(start, s), max(end, e), label or lab
    return start, end, label


def changed_span(a: str, b: str, cat: LintCatalog) -> tuple[tuple[int, int], tuple[int, int], str]:
    """The changed part of `a` and of `b` (after a common prefix and before a common suffix), widened."""
    start = len(os.path.commonprefix([a, b]))
    tail = len(os.path.commonprefix([a[start:][::-1], b[start:][::-1]]))
    sa, ea, label_a = _widen(a, start, len(a) - tail, cat)
    sb, eb, label_b = _widen(b, start, len(b) - tail, cat)
    return (sa, ea), (sb, eb), (label_b or label_a or "the text")


def _tools(blocks: list[Block]) -> list[Block]:
    return [b for b in blocks if b.level == "tools"]


def _tool_name(block: Block) -> str:
    try:
        tool = orjson.loads(block.text)
    except orjson.JSONDecodeError:
        return block.path
    inner = tool.get("function") if isinstance(tool.get("function"), dict) else tool
    return str(inner.get("name") or tool.get("type") or block.path)


def tools_changed(prev: Subject, cur: Subject, cat: LintCatalog) -> list[Finding]:
    a, b = _tools(prev.request.blocks), _tools(cur.request.blocks)
    if [x.body_hash for x in a] == [y.body_hash for y in b]:
        return []
    names_a, names_b = [_tool_name(x) for x in a], [_tool_name(y) for y in b]
    i = next((k for k, (x, y) in enumerate(zip(a, b)) if x.body_hash != y.body_hash), min(len(a), len(b)))
    path = b[i].path if i < len(b) else (a[i].path if i < len(a) else "tools")
    span = text = None
    if sorted(x.body_hash for x in a) == sorted(y.body_hash for y in b):
        what, kind = f"the tools were reordered ({', '.join(names_a)} -> {', '.join(names_b)})", "order"
    elif set(names_a) == set(names_b):
        j = next(k for k, y in enumerate(b) if y.body_hash not in {x.body_hash for x in a})
        old = a[names_a.index(names_b[j])]
        _, span, _ = changed_span(old.text, b[j].text, cat)
        what, kind, path, text = f"the definition of tool {names_b[j]!r} changed", names_b[j], b[j].path, b[j].text
    else:
        added = [n for n in names_b if n not in names_a]
        removed = [n for n in names_a if n not in names_b]
        parts = [f"{verb} {', '.join(names)}" for verb, names in (("added", added), ("removed", removed)) if names]
        what, kind = "the tool set changed: " + "; ".join(parts), "set"
    return [make_finding(cat.rule("tools-vary"), cur, path, (kind,), span=span, text=text, what=what,
                         previous=prev.id)]


def params_changed(prev: Subject, cur: Subject, cat: LintCatalog) -> list[Finding]:
    found = []
    for name in cat.identity_params:
        pa, pb = prev.request.params.get(name), cur.request.params.get(name)
        if pb is None and pa is None:
            continue
        va, vb = (pa.value if pa else None), (pb.value if pb else None)
        if va != vb:
            level = (pb or pa).invalidates  # type: ignore[union-attr]
            invalidates = "cache (every level)" if level == "all" else f"{level} and everything after"
            found.append(make_finding(cat.rule("identity-param-changed"), cur, name, (name,), param=name,
                                      before=_quote(va), after=_quote(vb), previous=prev.id,
                                      invalidates=invalidates))
    return found


def prefix_changed(prev: Subject, cur: Subject, cat: LintCatalog) -> list[Finding]:
    a, b = prev.request.blocks, cur.request.blocks
    i = _first_difference(a, b)
    extent = prev.cached_extent
    if i >= extent or (i < len(a) and a[i].level == "tools") or (i < len(b) and b[i].level == "tools"):
        return []  # nothing cached was lost, or the tools rule reports it
    lost, logged = prev.lost_tokens(i)
    tokens = f"{lost:,}" if logged else f"~{lost:,}"
    x, y = a[i], (b[i] if i < len(b) else None)
    if y is not None and x.kind == y.kind and x.role == y.role and x.text == y.text:  # ids, flags, media
        return [make_finding(cat.rule("prefix-changed"), cur, y.path, (y.path, "attributes"),
                             label="The attributes (not the text)", previous=prev.id, before=_quote(x.meta),
                             after=_quote(y.meta), tokens=tokens)]
    if y is None or x.kind != y.kind or x.role != y.role:
        what = (f"{x.path} and everything after it were removed" if y is None
                else f"{y.path} was replaced (a {x.kind} block became a {y.kind} block)")
        return [make_finding(cat.rule("history-rewritten"), cur, (y or x).path, ((y or x).path,), what=what,
                             previous=prev.id, tokens=tokens)]
    span_a, span_b, label = changed_span(x.text, y.text, cat)
    return [make_finding(cat.rule("prefix-changed"), cur, y.path, (y.path, label), span=span_b, text=y.text,
                         label=label[:1].upper() + label[1:], previous=prev.id, before=_quote(x.text[slice(*span_a)]),
                         after=_quote(y.text[slice(*span_b)]), tokens=tokens)]


def lookback(prev: Subject, cur: Subject, cat: LintCatalog) -> list[Finding]:
    """The entry `prev` wrote at its last breakpoint must lie within the lookback window of a breakpoint
    of `cur` at or after it; otherwise `cur` writes it all again."""
    limit = cur.rules.get("lookback_positions")
    if limit is None or not prev.request.breakpoints or not cur.request.breakpoints:
        return []
    j = prev.request.breakpoint_indices[-1]
    a, b = prev.request.blocks, cur.request.blocks
    if j >= len(b) or a[j].cache_key != b[j].cache_key:
        return []  # the prefix changed: prefix-changed reports it
    later = [k for k in cur.request.breakpoint_indices if k >= j]
    if not later:
        return []
    positions = lookback_positions(b, str(cur.rules.get("lookback_counting", "blocks")))
    distance = min(positions[k] - positions[j] + 1 for k in later)
    if distance <= int(limit):
        return []
    k = later[0]
    detail = (f"the breakpoint at {b[k].path} is {distance} block positions from the entry {prev.id} wrote at "
              f"{b[j].path}; the lookback window is {limit}: ~{cur.tokens_before(j + 1):,} tokens are written again")
    return [make_finding(cat.rule("lookback-exceeded"), cur, b[k].path, (b[k].path,), detail=detail, limit=limit)]


PAIR_CHECKS = (params_changed, tools_changed, prefix_changed, lookback)


@dataclass(slots=True)
class BreakpointWatch:
    """Per stream: how often the block under each breakpoint path changed in the next request."""

    seen: dict[str, list[Any]] = field(default_factory=dict)  # path -> [first finding subject, turns, changed]

    def update(self, prev: Subject, cur: Subject) -> None:
        by_path = {blk.path: blk for blk in cur.request.blocks}
        for idx in prev.request.breakpoint_indices:
            block = prev.request.blocks[idx]
            if block.path in by_path:
                entry = self.seen.setdefault(block.path, [prev.light(), 0, 0])
                entry[1] += 1
                entry[2] += by_path[block.path].body_hash != block.body_hash

    def findings(self, cat: LintCatalog) -> list[Finding]:
        """A breakpoint on a block whose own content differs in every following request (two or more)."""
        return [make_finding(cat.rule("breakpoint-on-changing-block"), first, path, (path,), turns=turns)
                for path, (first, turns, changed) in self.seen.items() if turns >= 2 and changed == turns]


@dataclass(slots=True)
class _Span:
    finding: Finding  # made at the first request that carried the span
    values: set[str]  # the span's texts through the stream (two are enough to know it changed)
    requests: int = 1


@dataclass(slots=True)
class VolatileWatch:
    """Per stream: the volatile-looking spans of the cached prefix (KV101 candidates, `volatile_in_prefix`) and
    whether the trace shows each changing. A span is the n-th one of its label in its block path, so one that
    moves (text before it grew) is still the same span."""

    spans: dict[tuple[Any, ...], _Span] = field(default_factory=dict)

    def update(self, candidates: list[Finding]) -> None:
        ordinal: dict[tuple[Any, ...], int] = {}
        for f in candidates:
            assert f.span is not None and f.block_text is not None
            path, label = f.key[1], f.key[2]
            n = ordinal[(path, label)] = ordinal.get((path, label), -1) + 1
            value = f.block_text[f.span[0]:f.span[1]]
            seen = self.spans.get((path, label, n))
            if seen is None:
                self.spans[(path, label, n)] = _Span(f, {value})
                continue
            seen.requests += 1
            if len(seen.values) < 2:
                seen.values.add(value)

    def findings(self, cat: LintCatalog) -> list[Finding]:
        """Spans the trace shows changing; a span only one request carried, when its shape changes by nature.
        A span that stays the same through two or more requests is not volatile, whatever it looks like."""
        out = []
        for (_, label, _), seen in self.spans.items():
            if len(seen.values) > 1 or (seen.requests == 1 and cat.by_nature(label)):
                seen.finding.repeats = seen.requests - 1
                out.append(seen.finding)
        return out


def check_pair(prev: Subject, cur: Subject, cat: LintCatalog) -> list[Finding]:
    checks = (params_changed, tools_changed) if cur.continues else PAIR_CHECKS
    return [f for check in checks for f in check(prev, cur, cat)]
