"""Compare two requests: the earliest changing prefix position, parameter changes and what B would reuse."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from kvprobe.catalog import ModelRules, rules_for
from kvprobe.changes import describe_change
from kvprobe.request.model import Block, RenderedRequest
from kvprobe.sim import Prediction, cache_for
from kvprobe.sim.implicit import round_cached
from kvprobe.sim.positions import cumulative_tokens
from kvprobe.tokens import TokenCounter

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

if TYPE_CHECKING:  # analysis imports diff (reported causes), never the other way round
    from kvprobe.analysis.sizing import SizeBook

SNIPPET_BEFORE, SNIPPET_AFTER = 16, 40


@dataclass(slots=True)
class FirstChange:
    """Where B first differs from A: the block, the character and token positions, and what changed."""

    path: str
    block_index: int
    char_offset: int
    token_position: int
    token_position_exact: bool
    a_snippet: str
    b_snippet: str
    detail: str
    snippet_mark: int = 0  # where the change starts inside each snippet (for highlighting)


@dataclass(slots=True)
class BreakpointStatus:
    """One of B's cache breakpoints: the prefix it closes and whether A's cache holds it."""

    path: str
    ttl: str
    prefix_tokens: int
    reusable: bool


@dataclass(slots=True)
class DiffResult:
    """What `diff` answers: the first change, the parameters changed and what B would reuse of A."""

    provider: str
    model: str | None
    rules: ModelRules
    identical: bool
    extends: bool
    first_change: FirstChange | None
    params_changed: list[dict[str, Any]]
    predicted: Prediction
    breakpoints: list[BreakpointStatus] = field(default_factory=list)
    a_tokens: int = 0
    b_tokens: int = 0
    warnings: list[str] = field(default_factory=list)
    tokens_exact: bool = False
    tokens_source: str = "estimated"  # exact | estimated | anchored (sized on a trace's logged usage)
    a_provider: str = ""  # differs from `provider` (B's) when the two requests go to different providers

    @property
    def shared_cache(self) -> bool:
        """Whether B could read what A cached: only requests to the same provider share a cache."""
        return self.a_provider in ("", self.provider)

    @property
    def breaks_reuse(self) -> bool:
        """True when B cannot reuse all of A (another provider, a change before A's end, a parameter change)."""
        return not self.shared_cache or not (self.identical or self.extends) or bool(self.params_changed)

    def to_json(self) -> dict[str, Any]:
        fc = self.first_change
        return {
            "provider": self.provider,
            "model": self.model,
            "identical": self.identical,
            "extends": self.extends,
            "first_change": None if fc is None else {
                "path": fc.path, "char_offset": fc.char_offset, "token_position": fc.token_position,
                "token_position_exact": fc.token_position_exact, "a_snippet": fc.a_snippet,
                "b_snippet": fc.b_snippet, "detail": fc.detail},
            "params_changed": self.params_changed,
            "predicted": self.predicted.as_dict() | {
                "cache_write_5m_tokens": self.predicted.cache_write_5m_tokens,
                "cache_write_1h_tokens": self.predicted.cache_write_1h_tokens},
            "breakpoints": [{"path": b.path, "ttl": b.ttl, "prefix_tokens": b.prefix_tokens,
                             "reusable": b.reusable} for b in self.breakpoints],
            "tokens": {"a": self.a_tokens, "b": self.b_tokens, "exact": self.tokens_exact,
                       "source": self.tokens_source},
            "model_known": self.rules.known_model,
            "rules_fallback": self.rules.fallback,
            "a_provider": self.a_provider or self.provider,
            "shared_cache": self.shared_cache,
            "warnings": self.warnings,
        }


def _common_blocks(a: list[Block], b: list[Block], attr: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if getattr(x, attr) != getattr(y, attr):
            break
        n += 1
    return n


def _one_line(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")


def _snippet(text: str, offset: int) -> str:
    start = max(0, offset - SNIPPET_BEFORE)
    head = "…" if start > 0 else ""
    tail = "…" if offset + SNIPPET_AFTER < len(text) else ""
    return head + _one_line(text[start: offset + SNIPPET_AFTER]) + tail


def _first_change(a: RenderedRequest, b: RenderedRequest, index: int, counter: TokenCounter) -> FirstChange:
    ba = a.blocks[index] if index < len(a.blocks) else None
    bb = b.blocks[index] if index < len(b.blocks) else None
    offset = 0
    if ba is not None and bb is not None and ba.kind == bb.kind and ba.meta == bb.meta:
        offset = len(os.path.commonprefix([ba.text, bb.text]))
    before = sum(x.tokens for x in b.blocks[:index])
    position = before + (_tokens_before(counter, bb, offset) if bb is not None else 0)
    exact = counter.exact and all(x.tokens_exact for x in b.blocks[: index + 1])
    return FirstChange(
        path=(bb or ba).path, block_index=index, char_offset=offset, token_position=position,  # type: ignore[union-attr]
        token_position_exact=exact,
        a_snippet=_snippet(ba.text, offset) if ba else "", b_snippet=_snippet(bb.text, offset) if bb else "",
        detail=describe_change(a.blocks, b.blocks, index, offset),
        snippet_mark=min(offset, SNIPPET_BEFORE) + (1 if offset > SNIPPET_BEFORE else 0))


def _tokens_before(counter: TokenCounter, block: Block, offset: int) -> int:
    """Tokens of a block before a character offset, in the block's own size (anchored sizes included)."""
    within = counter.tokens_before_offset(block, offset)
    estimate = counter.count_block(block)
    return round(block.tokens * within / estimate) if estimate and block.tokens != estimate else within


def _apply_sizes(req: RenderedRequest, book: SizeBook) -> bool:
    """Sizes a trace's logged usage settled for these blocks; True when any block had one."""
    found = False
    for block in req.blocks:
        tokens = book.by_key.get(block.cache_key, book.by_body.get(block.body_hash))
        if tokens is not None:
            block.tokens, found = tokens, True
    return found


def _params_changed(a: RenderedRequest, b: RenderedRequest) -> list[dict[str, Any]]:
    changed = []
    for name in list(dict.fromkeys([*a.params, *b.params])):
        pa, pb = a.params.get(name), b.params.get(name)
        va, vb = (pa.value if pa else None), (pb.value if pb else None)
        if va != vb:
            changed.append({"name": name, "a": va, "b": vb, "invalidates": (pb or pa).invalidates})  # type: ignore[union-attr]
    return changed


def _predict(a: RenderedRequest, b: RenderedRequest, ra: ModelRules, rb: ModelRules,
             common_keys: int, partial_tokens: int) -> Prediction:
    cache = cache_for(b.cache_mode)
    if a.provider != b.provider:  # A went to another provider's cache: B starts cold
        return cache.process(b, rb, "B", start=1.0, readable_at=1.0)
    cache.process(a, ra, "A", start=0.0, readable_at=0.0)
    pred = cache.process(b, rb, "B", start=1.0, readable_at=1.0)
    if b.cache_mode == "implicit" and partial_tokens and b.blocks:
        # implicit caches match tokens, not blocks: add the unchanged part of the first changed block
        cum = cumulative_tokens(b.blocks)
        matched = (cum[common_keys - 1] if common_keys else 0) + partial_tokens
        if matched <= a.total_tokens:
            pred.cache_read_tokens = max(pred.cache_read_tokens, round_cached(matched, rb, cum[-1]))
            pred.fresh_input_tokens = cum[-1] - pred.cache_read_tokens - pred.cache_write_tokens
    return pred


def diff_requests(a: RenderedRequest, b: RenderedRequest, sizes: SizeBook | None = None) -> DiffResult:
    """Diff two rendered requests (B against A as if A had been sent and cached just before).

    sizes: block sizes from a trace (`trace_sizes`), so trace records are diffed on the sizes `report` uses.
    Across providers nothing is shared: B starts cold, parameters of two APIs are not compared (their
    names and defaults differ), and the content is compared block text by block text.
    """
    rb = rules_for(b.provider, b.model)
    ra = rules_for(a.provider, a.model)
    counter = TokenCounter(rb)
    counter.count_request(a)
    counter.count_request(b)
    anchored = sizes is not None and _apply_sizes(a, sizes) | _apply_sizes(b, sizes)
    same = a.provider == b.provider
    common = _common_blocks(a.blocks, b.blocks, "content_hash" if same else "text")
    common_keys = _common_blocks(a.blocks, b.blocks, "cache_key") if same else 0
    extends = common == len(a.blocks) and len(b.blocks) > len(a.blocks)
    identical = common == len(a.blocks) == len(b.blocks)
    first = None if (identical or extends) else _first_change(a, b, common, counter)
    params = _params_changed(a, b) if same else []
    partial = 0
    if first and common_keys == common and first.block_index < len(b.blocks) and first.char_offset:
        partial = _tokens_before(counter, b.blocks[first.block_index], first.char_offset)
    pred = _predict(a, b, ra, rb, common_keys, partial)
    cum = cumulative_tokens(b.blocks)
    bps = [BreakpointStatus(b.blocks[i].path, ttl or "", cum[i], i < common_keys)  # GPT-5.6+: "managed" too
           for i, ttl in b.breakpoints]
    return DiffResult(b.provider, b.model, rb, identical and not params, extends, first, params, pred, bps,
                      a.total_tokens, b.total_tokens, [*a.warnings, *b.warnings],
                      all(x.tokens_exact for x in b.blocks), "anchored" if anchored else
                      ("exact" if all(x.tokens_exact for x in b.blocks) else "estimated"), a.provider)
