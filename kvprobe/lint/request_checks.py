"""Checks on one request by itself: volatile text in the cached prefix, breakpoint count and placement."""
from __future__ import annotations

import json
from itertools import accumulate

from kvprobe.lint.catalog import LintCatalog, volatile_spans
from kvprobe.lint.model import Finding, Subject, make_finding
from kvprobe.request.model import Block
from kvprobe.request.openai_cache import BREAKPOINT_MARKER
from kvprobe.sim.positions import lookback_positions

# How each API marks a breakpoint, for the fix text.
_MARKERS = {"anthropic_messages": 'cache_control {"type": "ephemeral"}'}
_DEFAULT_MARKER = f'"prompt_cache_breakpoint": {json.dumps(BREAKPOINT_MARKER)}'


def _is_template(block: Block) -> bool:
    """Blocks an agent rebuilds for every request (tools, system prompt), as opposed to history it appends."""
    return block.level in ("tools", "system") or block.role in ("system", "developer")


def volatile_in_prefix(s: Subject, cat: LintCatalog) -> list[Finding]:
    rule = cat.rule("volatile-in-prefix")
    where = ("before the last cache breakpoint" if _uses_breakpoints(s)
             else "in the prefix the provider caches automatically")
    found = []
    for block in s.request.blocks[: s.cached_extent]:
        if not _is_template(block):
            continue
        for start, end, label in volatile_spans(block.text, cat):
            found.append(make_finding(rule, s, block.path, (block.path, label, start), span=(start, end),
                                      text=block.text, label=label[:1].upper() + label[1:], where=where))
    return found


def _uses_breakpoints(s: Subject) -> bool:
    return s.request.cache_mode in ("breakpoints", "explicit")


def breakpoint_count(s: Subject, cat: LintCatalog) -> list[Finding]:
    req, minimum = s.request, int(s.rules.get("min_cacheable_tokens", 0))
    if not _uses_breakpoints(s):
        return []
    count, limit = len(req.breakpoints), s.rules.get("max_breakpoints")
    if count == 0 and req.total_tokens >= minimum:
        marker = _MARKERS.get(req.api, _DEFAULT_MARKER)
        return [make_finding(cat.rule("no-breakpoint"), s, None, (), tokens=f"{req.total_tokens:,}",
                             minimum=f"{minimum:,}", marker=marker)]
    if limit is not None and count > int(limit):
        return [make_finding(cat.rule("too-many-breakpoints"), s, None, (), count=count, limit=limit)]
    return []


def below_minimum(s: Subject, cat: LintCatalog) -> list[Finding]:
    minimum = int(s.rules.get("min_cacheable_tokens", 0))
    if not _uses_breakpoints(s) or not minimum:
        return []
    cum = list(accumulate(b.tokens for b in s.request.blocks))
    found = []
    for i in s.request.breakpoint_indices:
        if cum[i] < minimum:
            path = s.request.blocks[i].path
            found.append(make_finding(cat.rule("below-minimum"), s, path, (path,), tokens=f"{cum[i]:,}",
                                      minimum=f"{minimum:,}"))
    return found


def ttl_order(s: Subject, cat: LintCatalog) -> list[Finding]:
    req = s.request
    seen_5m = False
    for i, ttl in req.breakpoints:
        if ttl == "5m":
            seen_5m = True
        elif ttl == "1h" and seen_5m:
            path = req.blocks[i].path
            return [make_finding(cat.rule("ttl-order"), s, path, (path,))]
    return []


def tail_past_lookback(s: Subject, cat: LintCatalog) -> list[Finding]:
    """Blocks after the last breakpoint beyond the lookback window: a breakpoint at the end of the next
    request cannot reach back to the entry written here. (With a trace, session checks say it exactly.)"""
    limit = s.rules.get("lookback_positions")
    req = s.request
    if limit is None or not _uses_breakpoints(s) or not req.breakpoints:
        return []
    positions = lookback_positions(req.blocks, str(s.rules.get("lookback_counting", "blocks")))
    last = req.breakpoint_indices[-1]
    after = positions[-1] - positions[last]
    if after < int(limit):
        return []
    path = req.blocks[last].path
    detail = (f"{after} block positions follow the last breakpoint ({path}): a breakpoint at the end of the next "
              f"request looks back at most {limit} positions and will not find the entry written here")
    return [make_finding(cat.rule("lookback-exceeded"), s, path, (path,), detail=detail, limit=limit)]


CHECKS = (breakpoint_count, below_minimum, ttl_order)


def check_request(s: Subject, cat: LintCatalog) -> list[Finding]:
    """Every single-request check (the lookback estimate is separate: with a following request of the same
    session, the session checks say it exactly; volatile text is a candidate that the stream's other requests
    confirm or contradict, `session_checks.VolatileWatch`)."""
    return [f for check in CHECKS for f in check(s, cat)]
