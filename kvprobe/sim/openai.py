"""OpenAI's prompt cache from GPT-5.6 on: entries written at breakpoints, read only at breakpoints.

Implicit mode (the default, `managed`): OpenAI places one breakpoint at the end of the newest eligible
message and also writes up to the latest three explicit ones; explicit mode writes up to the latest four
`prompt_cache_breakpoint` markers and nothing else. A later request reads the longest live entry that is an
exact prefix of it, looking back through its block boundaries without a block window but over at most the
latest `lookup_breakpoints` entries; there is no fallback to a shorter unmarked prefix and no 128-token
rounding. Writes cost 1.25x; every entry lives 30 minutes after its last write or use.

So a stable prefix followed by a changing suffix can miss entirely: the managed breakpoint sits after the
suffix, and no entry ends where the stable part does. When a request reads less than a prefix it shares with
an earlier request, and no breakpoint was ever written at the end of that shared prefix, the simulator says
so: evidence `missing_breakpoint` at the block that ends the shared prefix (where a breakpoint would make it
readable), with the shared prefix's tokens and the request that sent it first.
"""
from __future__ import annotations

from dataclasses import dataclass

from kvprobe.catalog import ModelRules
from kvprobe.request.model import RenderedRequest
from kvprobe.sim.implicit import ttl_table
from kvprobe.sim.positions import cumulative_tokens
from kvprobe.sim.result import Evidence, Prediction, below_minimum


@dataclass(slots=True)
class Entry:
    expires_at: float
    readable_at: float
    writer_id: str


@dataclass(slots=True, frozen=True)
class Settings:
    """What the cache reads of a model's rules, once per rules object: a simulation asks on every request."""

    max_breakpoints: int
    lookup_breakpoints: int
    minimum: int  # min cacheable tokens
    life: float  # seconds an entry lives after its last write or use, capped by the platform's sticky routing

    @staticmethod
    def of(rules: ModelRules) -> "Settings":
        found = rules.derived.get("openai_cache")
        if found is None:
            found = rules.derived["openai_cache"] = Settings(
                int(rules.get("max_breakpoints", 4)), int(rules.get("lookup_breakpoints", 80)),
                int(rules.get("min_cacheable_tokens", 0)), _life(rules))
        return found


def written_breakpoints(req: RenderedRequest, rules: ModelRules) -> list[int]:
    """The breakpoints a request writes, ascending: the latest `max_breakpoints`. In implicit mode that is the
    managed one and the latest three explicit ones (the managed one ends the newest eligible message, and no
    marker can follow it: OpenAI takes none on the model's output); in explicit mode the latest four."""
    return req.breakpoint_indices[-Settings.of(rules).max_breakpoints:]


class BreakpointCache:
    """One organisation's GPT-5.6+ cache. Keys carry the model and routing parameters."""

    def __init__(self) -> None:
        self.entries: dict[int, Entry] = {}
        self.explain = True  # gather the evidence a diagnosis reads (pricing simulations need none)
        self.seen: dict[int, str] = {}  # cache key of every prefix sent -> the first request that sent it

    def forget_expired(self, now: float) -> None:
        """Keeps them all: an expired entry still takes one of the `lookup_breakpoints` a request looks at, so
        forgetting it would let a request read further back than OpenAI does."""

    def process(self, req: RenderedRequest, rules: ModelRules, request_id: str, start: float,
                readable_at: float) -> Prediction:
        pred = Prediction()
        if not req.blocks:
            return pred
        cum = cumulative_tokens(req.blocks)
        settings = Settings.of(rules)
        life = settings.life
        hit = self._find_hit(req, settings, start, pred)
        read = cum[hit] if hit is not None else 0
        if hit is not None:
            entry = self.entries[req.blocks[hit].cache_key]
            entry.expires_at = max(entry.expires_at, start + life)
        pred.cache_read_tokens = read
        self._write(req, rules, settings, cum, hit, request_id, start, readable_at, pred)
        pred.fresh_input_tokens = cum[-1] - pred.cache_read_tokens - pred.cache_write_tokens
        if self.explain:  # `seen` serves only the missing_breakpoint evidence
            self._note_unmarked_prefix(req, settings, cum, read, pred)
            for block in req.blocks:
                self.seen.setdefault(block.cache_key, request_id)
        return pred

    def _find_hit(self, req: RenderedRequest, settings: Settings, start: float, pred: Prediction) -> int | None:
        """The last block of the longest live, readable entry that is a prefix of the request."""
        budget = settings.lookup_breakpoints
        for j in range(len(req.blocks) - 1, -1, -1):
            entry = self.entries.get(req.blocks[j].cache_key)
            if entry is None:
                continue
            budget -= 1
            if start >= entry.expires_at:
                pred.evidence.append(Evidence("ttl_expired", f"the entry at {req.blocks[j].path} expired "
                                              f"{start - entry.expires_at:.0f}s before this request started",
                                              j, seconds_past=start - entry.expires_at))
            elif start < entry.readable_at:
                pred.evidence.append(Evidence("not_yet_readable", f"the entry at {req.blocks[j].path} was "
                                              f"still being written by {entry.writer_id}", j,
                                              writer_id=entry.writer_id))
            else:
                return j
            if budget <= 0:
                break
        return None

    def _write(self, req: RenderedRequest, rules: ModelRules, settings: Settings, cum: list[int], hit: int | None,
               request_id: str, start: float, readable_at: float, pred: Prediction) -> None:
        minimum, life = settings.minimum, settings.life
        prev = cum[hit] if hit is not None else 0
        written = written_breakpoints(req, rules)
        for bp in written:
            block, through = req.blocks[bp], cum[bp]  # (read once: each read of a Column is a look-up by block)
            if through < minimum:
                if bp == written[-1]:
                    pred.evidence.append(below_minimum(block.path, bp, through, minimum))
                continue
            entry = self.entries.get(block.cache_key)
            if hit is not None and bp <= hit:
                if entry is not None:
                    entry.expires_at = max(entry.expires_at, start + life)
                continue
            live = entry is not None and entry.expires_at > start
            pred.cache_write_5m_tokens += through - prev
            prev = through
            readable = min(entry.readable_at, readable_at) if live and entry else readable_at
            writer = entry.writer_id if live and entry else request_id
            self.entries[block.cache_key] = Entry(start + life, readable, writer)

    def _note_unmarked_prefix(self, req: RenderedRequest, settings: Settings, cum: list[int], read: int,
                              pred: Prediction) -> None:
        """A prefix an earlier request already sent, longer than what was read, with no entry at its end."""
        minimum = settings.minimum
        for j in range(len(req.blocks) - 1, -1, -1):
            if cum[j] <= read or cum[j] < minimum:
                return
            key = req.blocks[j].cache_key
            first = self.seen.get(key)
            if first is None:
                continue
            if key in self.entries:  # an entry ends there: expiry or readability explains the miss
                return
            pred.evidence.append(Evidence(
                "missing_breakpoint",
                f"the first {cum[j]:,} tokens (through {req.blocks[j].path}) match what {first} sent, but no "
                f"breakpoint was ever written there: GPT-5.6+ reads only at breakpoints"
                + (f" and the managed one sits at {req.blocks[req.managed_breakpoint].path}"
                   if req.managed_breakpoint is not None else ""),
                j, writer_id=first, prefix_tokens=cum[j]))
            return


def _life(rules: ModelRules) -> float:
    """Every rule set that gives a request a managed or explicit mode names the lifetime (providers/openai.toml:
    ttl_seconds and default_ttl, on every platform); ttl_table caps it by the platform's sticky routing."""
    return ttl_table(rules)[str(rules.get("default_ttl"))]
