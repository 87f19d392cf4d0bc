"""Cost attribution by block: each unique block's write, reads and fresh resends over the whole task.

A block is its own content (kind, role, identity bytes and text), wherever it sits: one row per block, first
sent by the first request that carried it. Every block is listed, so the rows add up to the input cost.

A request's input is ordered: the first `read` tokens were cache reads, the next ones cache writes (1h
entries before 5m ones), the rest fresh. Each block's token span is cut at those boundaries and priced at
that class's per-token price, so the blocks of a request add up exactly to its input cost.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvprobe.analysis.simulate import RequestResult
from kvprobe.pricing import PriceBook

UNATTRIBUTED = -1  # input tokens the provider counted beyond the blocks kvprobe sized (rare)
LARGE_RESULT_TOKENS = 2000
LONG_CARRY_REQUESTS = 3

_KIND_LABELS = {"tool_definition": "tool definition", "tool_result": "tool result", "tool_use": "tool call",
                "document": "file", "image": "image", "image_url": "image", "thinking": "thinking"}


@dataclass(slots=True)
class BlockCost:
    key: int
    path: str
    kind: str
    first_request: str
    tokens: int
    requests: int = 0
    write_usd: float = 0.0
    read_usd: float = 0.0
    fresh_usd: float = 0.0
    input_equivalent: float = 0.0

    @property
    def hash(self) -> str | None:
        """The block's own content hash (16 hex digits); None for the unattributed remainder."""
        return f"{self.key:016x}" if self.key >= 0 else None

    @property
    def total_usd(self) -> float:
        return self.write_usd + self.read_usd + self.fresh_usd

    def to_json(self) -> dict[str, Any]:
        return {"hash": self.hash, "path": self.path,
                "kind": self.kind, "first_request": self.first_request, "tokens": self.tokens,
                "requests": self.requests, "write_usd": round(self.write_usd, 6), "read_usd": round(self.read_usd, 6),
                "fresh_usd": round(self.fresh_usd, 6), "total_usd": round(self.total_usd, 6),
                "input_equivalent_tokens": round(self.input_equivalent, 1), "note": carry_note(self)}


def _label(level: str, kind: str) -> str:
    if level == "system" and kind == "text":
        return "system text"
    return _KIND_LABELS.get(kind, "message text" if kind == "text" else kind)


def carry_note(b: BlockCost) -> str | None:
    if b.kind != "tool result" or b.tokens < LARGE_RESULT_TOKENS or b.requests < LONG_CARRY_REQUESTS:
        return None
    per_turn = (b.read_usd + b.fresh_usd) / max(b.requests - 1, 1)
    return (f"a {b.tokens:,}-token tool result from {b.first_request} is carried through {b.requests - 1} later "
            f"requests: write ${b.write_usd:.4f} + reads ${b.read_usd:.4f} (about ${per_turn:.4f} per turn)")


def _segments(r: RequestResult) -> list[tuple[int, int, str]]:
    """(start, end, class) token spans of a request's input in prompt order."""
    u = r.usage
    bounds = [(u.cache_read_tokens, "read"), (u.cache_write_1h_tokens, "write_1h"),
              (u.cache_write_5m_tokens, "write_5m"), (u.fresh_input_tokens, "fresh")]
    out, pos = [], 0
    for size, cls in bounds:
        if size > 0:
            out.append((pos, pos + size, cls))
            pos += size
    return out


_IE_WEIGHT_KEYS = {"read": "read_multiplier"}
_FIELD = {"read": "read_usd", "fresh": "fresh_usd", "write_5m": "write_usd", "write_1h": "write_usd"}


def _weights(r: RequestResult) -> dict[str, float]:
    writes = r.rules.get("write_multipliers", {}) or {}
    w5m = float(writes.get("5m", writes.get("implicit", 1.0)))
    return {"fresh": 1.0, "read": float(r.rules.get("read_multiplier", 1.0)), "write_5m": w5m,
            "write_1h": float(writes.get("1h", w5m))}


def attribute(results: list[RequestResult], prices: PriceBook) -> dict[int, BlockCost]:
    """Every unique block's cost over the given requests (usage-only requests are skipped)."""
    costs: dict[int, BlockCost] = {}
    for r in results:
        req = r.sk.request
        if req is None:
            continue
        units = prices.unit_prices(r.sk.provider, r.sk.model, r.sk.started_at, r.usage.input_tokens,
                                   r.sk.extra.get("platform")) or {}
        weights = _weights(r)
        segments = _segments(r)
        priced = [(s, e, units.get(cls, 0.0), weights[cls], _FIELD[cls]) for s, e, cls in segments]
        seg, pos, count = 0, 0, len(priced)
        for block in req.blocks:
            tokens = block.tokens
            start, pos = pos, pos + tokens
            # one row per block by its own content: the same tool, file or turn sent after an earlier change
            # (a new chained prefix) is still the block first sent by the first request that carried it
            entry = costs.get(block.body_hash)
            if entry is None:
                entry = costs[block.body_hash] = BlockCost(block.body_hash, block.path,
                                                           _label(block.level, block.kind), r.sk.id, tokens)
            entry.requests += 1
            # blocks and segments both run in prompt order: walk them together
            while seg < count and priced[seg][1] <= start:
                seg += 1
            if seg < count and priced[seg][0] <= start and pos <= priced[seg][1]:
                if tokens > 0:  # the usual case, inline: the whole block inside one segment
                    _, _, unit, weight, name = priced[seg]
                    if name == "read_usd":
                        entry.read_usd += tokens * unit
                    elif name == "fresh_usd":
                        entry.fresh_usd += tokens * unit
                    else:
                        entry.write_usd += tokens * unit
                    entry.input_equivalent += tokens * weight
                continue
            k = seg
            while k < count and priced[k][0] < pos:
                s, e, unit, weight, name = priced[k]
                overlap = (pos if pos < e else e) - (start if start > s else s)
                if overlap > 0:
                    setattr(entry, name, getattr(entry, name) + overlap * unit)
                    entry.input_equivalent += overlap * weight
                k += 1
        if pos < r.usage.input_tokens:  # counted by the provider beyond the sized blocks
            extra = costs.get(UNATTRIBUTED)
            if extra is None:
                extra = costs[UNATTRIBUTED] = BlockCost(UNATTRIBUTED, "(unattributed)", "overhead", r.sk.id, 0)
            extra.tokens += r.usage.input_tokens - pos
            _charge(extra, pos, r.usage.input_tokens, segments, units, weights)
            extra.requests += 1
    return costs


def _charge(entry: BlockCost, start: int, end: int, segments: list[tuple[int, int, str]],
            units: dict[str, float], weights: dict[str, float]) -> None:
    for s, e, cls in segments:
        overlap = min(end, e) - max(start, s)
        if overlap <= 0:
            continue
        usd = overlap * units.get(cls, 0.0)
        if cls == "read":
            entry.read_usd += usd
        elif cls == "fresh":
            entry.fresh_usd += usd
        else:
            entry.write_usd += usd
        entry.input_equivalent += overlap * weights[cls]


def top_blocks(costs: dict[int, BlockCost], n: int | None = None) -> list[BlockCost]:
    """Costliest first (ties by input-equivalents, then first sent); every block unless `n` is given."""
    ordered = sorted(costs.values(), key=lambda b: (-b.total_usd, -b.input_equivalent, b.first_request))
    return ordered if n is None else ordered[:n]
