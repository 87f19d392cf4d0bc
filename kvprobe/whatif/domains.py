"""Cache domains: the sessions whose requests can touch one another's cache entries.

Two requests interact only through an entry both touch. Entries are keyed by chained block keys, so two
requests that share any entry share their first block's key; and an entry outlives the last request that used
it by at most the lifetime that request gave it — the lifetime in force (the TTL of its breakpoints, a
provider's retention), not the longest one the provider offers. A session spans from its first request's
start to its last request's start plus that lifetime; sessions whose spans overlap under a common first-block
key are one domain, and a domain is simulated alone as it would be with the whole log.

Pricing a policy needs only the domains its edits reach (computed over the log before and after the edit,
since an edit can move a session into another's reach), so a policy that edits a few sessions costs a few
sessions, and the unit is the one a parallel or distributed run splits on (docs/scale.md).
"""
from __future__ import annotations

import math
from collections.abc import Hashable, Iterable

from kvprobe.analysis.skeleton import Skeleton
from kvprobe.catalog import ModelRules, rules_for
from kvprobe.sim.implicit import retention_seconds, ttl_table

DEFAULT_LIFE_S = 3600.0  # no rule gives one: no provider keeps an entry longer without a fee


def life_in_force(sk: Skeleton, rules: ModelRules) -> float:
    """How long the entries this request writes or refreshes stay readable after it starts."""
    req = sk.request
    if req is None:
        return 0.0
    if req.cache_mode.startswith("gemini_"):
        return math.inf  # a named cache lives until its own TTL, which a request does not carry
    table = ttl_table(rules)
    if req.breakpoints and table:
        default = table.get(str(rules.get("default_ttl", "5m")), DEFAULT_LIFE_S)
        return max(table.get(ttl, default) for _, ttl in req.breakpoints)
    if rules.get("retention_seconds") is not None:
        return retention_seconds(rules)
    return DEFAULT_LIFE_S


Spans = dict[tuple[str, Hashable], list[float]]  # (session, first-block key) -> [first start, last start + life]


def add_spans(sks: Iterable[Skeleton], spans: Spans) -> Spans:
    """`spans` widened by these requests (returned, for chaining)."""
    rules: dict[tuple, ModelRules] = {}
    for sk in sks:
        req = sk.request
        if req is None or not req.blocks:
            continue
        key = sk.rules_key
        if key not in rules:
            rules[key] = rules_for(*key)
        end = sk.started_at + life_in_force(sk, rules[key])
        span = spans.setdefault((sk.session, (sk.provider, req.blocks[0].cache_key)), [sk.started_at, end])
        span[0], span[1] = min(span[0], sk.started_at), max(span[1], end)
    return spans


def domains_of(changed: set[str], spans: Spans) -> set[str]:
    """The sessions a change to `changed` can reach, given the spans of every version of the log."""
    parent: dict[str, str] = {}

    def find(s: str) -> str:
        parent.setdefault(s, s)
        while parent[s] != s:
            parent[s] = parent[parent[s]]
            s = parent[s]
        return s
    by_key: dict[Hashable, list[tuple[float, float, str]]] = {}
    for (session, key), (lo, hi) in spans.items():  # a session joined to none is returned only when changed
        by_key.setdefault(key, []).append((lo, hi, session))
    for group in by_key.values():
        group.sort()
        reach, owner = -math.inf, None
        for lo, hi, session in group:
            if owner is not None and lo <= reach:
                parent[find(session)] = find(owner)
            if hi > reach:
                reach, owner = hi, session
    roots = {find(s) for s in changed if s in parent}
    return {s for s in parent if find(s) in roots} | changed
