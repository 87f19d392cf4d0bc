"""Anthropic's prompt cache: explicit/automatic breakpoints, lookback, minimum length, TTL, readability.

An entry is written per breakpoint, keyed by the chained cache key of everything through that block (so
identity parameters invalidate the right levels, and models never share entries). A request reads the
longest live, readable entry found at a block boundary within the lookback window of any of its breakpoints.
TTLs run from the start of the request that wrote or last used the entry; every use refreshes them.
"""
from __future__ import annotations

from dataclasses import dataclass

from kvprobe.catalog import ModelRules
from kvprobe.request.model import RenderedRequest
from kvprobe.sim.implicit import ttl_table
from kvprobe.sim.positions import Column, PrefixFacts
from kvprobe.sim.result import Evidence, Prediction, below_minimum


_DEFAULT_TTLS = {"5m": 300.0, "1h": 3600.0}  # rules without a ttl_seconds table


@dataclass(slots=True, frozen=True)
class Settings:
    """What the cache reads of a model's rules, once per rules object: a simulation asks on every request."""

    counting: str  # lookback counting rule
    ttl_seconds: dict[str, float]  # per TTL class, capped by the platform's sticky routing
    window: int | None  # lookback positions (None: no window)
    minimum: int  # min cacheable tokens
    default_ttl: str

    @staticmethod
    def of(rules: ModelRules) -> "Settings":
        found = rules.derived.get("anthropic_cache")
        if found is None:
            window = rules.get("lookback_positions")
            found = rules.derived["anthropic_cache"] = Settings(
                str(rules.get("lookback_counting", "blocks")), ttl_table(rules, _DEFAULT_TTLS),
                None if window is None else int(window), int(rules.get("min_cacheable_tokens", 0)),
                str(rules.get("default_ttl", "5m")))
        return found


@dataclass(slots=True)
class Entry:
    """A cache entry at a breakpoint: its lifetime, until when it lives, from when it can be read, and the
    request that wrote it."""

    ttl: str
    expires_at: float
    readable_at: float
    writer_id: str


class AnthropicCache:
    """One workspace's cache. Keys include the model, so one instance serves every model."""

    def __init__(self) -> None:
        self.entries: dict[int, Entry] = {}
        self.explain = True  # gather the evidence a diagnosis reads (pricing simulations need none)
        self._facts: dict[str, PrefixFacts] = {}  # per lookback counting rule

    def forget_expired(self, now: float) -> None:
        """Drop the entries expired by `now`, for a replay in start order that gathers no evidence: to every
        later request an expired entry is as good as none (it is neither read, nor refreshed, nor kept as
        the live entry a write extends), and the lookback walks past it as past a block without one."""
        self.entries = {key: entry for key, entry in self.entries.items() if now < entry.expires_at}

    def process(self, req: RenderedRequest, rules: ModelRules, request_id: str, start: float,
                readable_at: float) -> Prediction:
        blocks = req.blocks
        pred = Prediction()
        if not blocks:
            return pred
        settings = Settings.of(rules)
        facts = self._facts.get(settings.counting)
        if facts is None:
            facts = self._facts[settings.counting] = PrefixFacts(settings.counting)
        cum, positions = Column(facts, blocks, 0), Column(facts, blocks, 1)
        total = cum[-1]
        if not req.breakpoints:
            pred.fresh_input_tokens = total
            return pred
        bps = [i for i, _ in req.breakpoints]
        ttl_seconds = settings.ttl_seconds
        hit = self._find_hit(req, settings, bps, start, pred, positions)
        read = cum[hit] if hit is not None else 0
        if hit is not None:
            entry = self.entries[blocks[hit].cache_key]
            entry.expires_at = max(entry.expires_at, start + ttl_seconds.get(entry.ttl, 300))
        pred.cache_read_tokens = read
        self._write(req, settings, bps, cum, hit, request_id, start, readable_at, pred)
        pred.fresh_input_tokens = total - pred.cache_read_tokens - pred.cache_write_tokens
        return pred

    def _find_hit(self, req: RenderedRequest, settings: Settings, bps: list[int], start: float,
                  pred: Prediction, positions: Column) -> int | None:
        window = settings.window if settings.window is not None else len(req.blocks) + 1  # no rule: no window
        best: int | None = None
        blocks, entries = req.blocks, self.entries
        for bp in bps:
            at = positions[bp]
            for j in range(bp, -1, -1):
                entry = entries.get(blocks[j].cache_key)
                if entry is None:  # only entries matter: positions are asked only where one is
                    continue
                if at - positions[j] >= window:
                    break
                if start >= entry.expires_at:
                    pred.evidence.append(Evidence("ttl_expired", f"the entry at {blocks[j].path} expired "
                                                  f"{start - entry.expires_at:.0f}s before this request started",
                                                  j, seconds_past=start - entry.expires_at))
                    continue
                if start < entry.readable_at:
                    pred.evidence.append(Evidence("not_yet_readable", f"the entry at {blocks[j].path} was "
                                                  f"still being written by {entry.writer_id}", j,
                                                  writer_id=entry.writer_id))
                    continue
                best = j if best is None or j > best else best
                break
        if self.explain and (best is None or best < bps[-1]):
            self._note_beyond_window(req, bps, positions, window, start, best, pred)
        return best

    def _note_beyond_window(self, req: RenderedRequest, bps: list[int], positions: Column, window: int,
                            start: float, best: int | None, pred: Prediction) -> None:
        """A live entry that no breakpoint's window reaches: lookback exceeded. Any live, readable entry above
        the one read (`best`) is one: a breakpoint whose window reached it would have read it."""
        last = bps[-1]
        for j in range(last, (best if best is not None else -1), -1):
            entry = self.entries.get(req.blocks[j].cache_key)
            if entry and start < entry.expires_at and start >= entry.readable_at:
                back = positions[last] - positions[j] + 1
                pred.evidence.append(Evidence("lookback_exceeded", f"a live entry at {req.blocks[j].path} is "
                                              f"{back} positions back from the last breakpoint; the window is "
                                              f"{window}", j, positions_back=back))
                return

    def _write(self, req: RenderedRequest, settings: Settings, bps: list[int], cum: Column, hit: int | None,
               request_id: str, start: float, readable_at: float, pred: Prediction) -> None:
        minimum, ttl_seconds = settings.minimum, settings.ttl_seconds
        prev = cum[hit] if hit is not None else 0
        for (bp, marked) in req.breakpoints:
            block = req.blocks[bp]
            ttl = marked if marked in ttl_seconds else settings.default_ttl
            through = cum[bp]  # (read once: each read of a Column is a look-up by block)
            if through < minimum:
                if bp == bps[-1]:
                    pred.evidence.append(below_minimum(block.path, bp, through, minimum))
                continue
            entry = self.entries.get(block.cache_key)
            live = entry is not None and start < entry.expires_at
            if live and start >= entry.readable_at and hit is not None and bp <= hit:
                entry.expires_at = max(entry.expires_at, start + ttl_seconds[ttl])
                continue
            if hit is None or bp > hit:
                span = through - prev
                if ttl == "1h":
                    pred.cache_write_1h_tokens += span
                else:
                    pred.cache_write_5m_tokens += span
                prev = through
            readable = min(entry.readable_at, readable_at) if live and entry else readable_at
            writer = entry.writer_id if live and entry else request_id  # the first writer of a live entry
            self.entries[block.cache_key] = Entry(ttl, start + ttl_seconds[ttl], readable, writer)
