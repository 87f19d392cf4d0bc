"""Compaction: a request whose history was replaced (by a summary or by dropping turns).

Found where a request of a stream does not extend the previous one inside `messages` and is much smaller,
or, in a usage-only log, where the transcript itself marks one (`extra["events"]` kind `compaction`: Claude
Code's `compact_boundary` lines, Codex's `compacted`); there the summarising request is the session's
compaction agent's (Claude Code writes it to `subagents/agent-acompact-*.jsonl`; OpenCode runs a `compaction` agent), and none when the log
holds no usage for it (Codex): the break-even is then unknown, not understated. Its economics: the summarising request (the one before), the rebuild (the first request after, which writes
the new shorter prefix), and the break-even point — after how many later turns the cheaper per-turn input
pays back the summary and the rebuild.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kvprobe.analysis.simulate import RequestResult
from kvprobe.pricing import PriceBook

SHRINK_RATIO = 0.7  # the new prompt is at most this fraction of the previous one


@dataclass(slots=True)
class Compaction:
    summary: RequestResult | None  # the request that produced the summary (None: not in the log)
    rebuild: RequestResult  # the first request with the compacted history
    later: list[RequestResult]
    tokens_before: int
    tokens_after: int
    per_turn_saving_usd: float = 0.0  # each later turn reads the shorter history instead of the old one
    overhead_usd: float = 0.0  # the summarising request + the rebuild's premium over a plain read
    # "summary" (a summarising call made it), or "truncation": the agent dropped older messages itself (Cline's
    # context manager), with no call to pay for: the rebuild is the whole overhead
    kind: str = "summary"

    def break_even_turns(self) -> int | None:
        if self.per_turn_saving_usd <= 0 or (self.summary is None and self.kind != "truncation"):
            return None
        return max(math.ceil(self.overhead_usd / self.per_turn_saving_usd), 1)

    def to_json(self) -> dict[str, Any]:
        be = self.break_even_turns()
        s = self.summary
        return {"kind": self.kind, "summary_request": s.sk.id if s else None, "rebuild_request": self.rebuild.sk.id,
                "tokens_before": self.tokens_before, "tokens_after": self.tokens_after,
                "summary_cost_usd": _r(s.cost_usd) if s else None, "rebuild_cost_usd": _r(self.rebuild.cost_usd),
                "later_requests": len(self.later),
                "later_cost_usd": _r(sum(r.cost_usd or 0.0 for r in self.later)),
                "per_turn_saving_usd": _r(self.per_turn_saving_usd), "overhead_usd": _r(self.overhead_usd),
                # unknown (null) where the summarising call logged no usage (Codex): its break-even is unknown too
                "break_even_turns": be,
                "paid_off": None if s is None and self.kind != "truncation" else be is not None
                and len(self.later) + 1 >= be}


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 6)


def _price(c: Compaction, prices: PriceBook) -> None:
    s, b = c.summary, c.rebuild
    at = s or b
    units = prices.unit_prices(at.sk.provider, at.sk.model, at.sk.started_at, c.tokens_before,
                               at.sk.extra.get("platform"))
    if not units:
        return
    c.per_turn_saving_usd = (c.tokens_before - c.tokens_after) * units["read"]
    u = b.usage
    as_read = u.input_tokens * units["read"]
    paid = (u.cache_read_tokens * units["read"] + u.cache_write_5m_tokens * units["write_5m"]
            + u.cache_write_1h_tokens * units["write_1h"] + u.fresh_input_tokens * units["fresh"])
    c.overhead_usd = ((s.cost_usd or 0.0) if s else 0.0) + max(paid - as_read, 0.0)


def _is_compaction(prev: RequestResult, cur: RequestResult) -> bool:
    a, b = prev.sk.request, cur.sk.request
    if a is None or b is None or cur.usage.input_tokens > SHRINK_RATIO * prev.usage.input_tokens:
        return False
    if prev.sk.model != cur.sk.model:  # a side call on another model (a commit message, a title): no compaction
        return False
    for x, y in zip(a.blocks, b.blocks):
        if x.content_hash != y.content_hash:
            return x.level == "messages" or y.level == "messages"
    return len(b.blocks) < len(a.blocks)


def find_compactions(results: list[RequestResult], prices: PriceBook) -> list[Compaction]:
    streams: dict[tuple[str, str], list[RequestResult]] = {}
    for r in results:
        streams.setdefault((r.sk.session, r.sk.agent), []).append(r)
    found = []
    for stream in streams.values():
        marks = [i for i in range(1, len(stream)) if _is_compaction(stream[i - 1], stream[i])]
        for n, i in enumerate(marks):
            end = marks[n + 1] if n + 1 < len(marks) else len(stream)
            comp = Compaction(stream[i - 1], stream[i], stream[i + 1:end],
                              stream[i - 1].usage.input_tokens, stream[i].usage.input_tokens)
            _price(comp, prices)
            found.append(comp)
    found += _logged_compactions(streams, prices)
    return found


# the agents that write compaction summaries: Claude Code's (subagents/agent-acompact-*.jsonl), OpenCode's
SUMMARY_AGENT_PREFIXES = ("agent-acompact", "compaction")


def _marked(r: RequestResult) -> dict[str, Any] | None:
    """The compaction event a usage-only request carries, if any."""
    events = r.sk.extra.get("events") if r.sk.request is None else None
    for e in events if isinstance(events, list) else ():
        if isinstance(e, dict) and e.get("kind") == "compaction":
            return e
    return None


def _logged_compactions(streams: dict[tuple[str, str], list[RequestResult]],
                        prices: PriceBook) -> list[Compaction]:
    """Compactions the transcript marks: the marked request is the rebuild; the summary is the latest
    request of the session's compaction agent that started before it."""
    summaries: dict[str, list[RequestResult]] = {}
    for (session, agent), stream in streams.items():
        if agent.startswith(SUMMARY_AGENT_PREFIXES):
            summaries.setdefault(session, []).extend(stream)
    found = []
    for (session, agent), stream in streams.items():
        if agent.startswith(SUMMARY_AGENT_PREFIXES):
            continue
        marks = [i for i, r in enumerate(stream) if i > 0 and _marked(r) is not None]
        for n, i in enumerate(marks):
            rebuild, before = stream[i], stream[i - 1]
            end = marks[n + 1] if n + 1 < len(marks) else len(stream)
            earlier = [s for s in summaries.get(session, ()) if before.sk.started_at <= s.sk.started_at
                       <= rebuild.sk.started_at]
            summary = max(earlier, key=lambda s: s.sk.started_at) if earlier else None
            mark = _marked(rebuild) or {}
            pre = mark.get("pre_tokens")
            tokens_before = pre if isinstance(pre, int) and pre > 0 else before.usage.input_tokens
            dropped = mark.get("trigger") == "truncation"
            comp = Compaction(None if dropped else summary, rebuild, stream[i + 1:end], tokens_before,
                              rebuild.usage.input_tokens, kind="truncation" if dropped else "summary")
            _price(comp, prices)
            found.append(comp)
    return found
