"""Normalise provider usage into one shape: all input, cache read, 5m/1h write, fresh, output.

Anthropic's `input_tokens` excludes cache tokens; OpenAI (Chat and Responses), DeepSeek and Gemini count
cached tokens inside their input figure. `input_tokens` here always means all input tokens.
"""
from __future__ import annotations

from dataclasses import dataclass
TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any


# Not frozen (nothing changes one): a frozen dataclass's __init__ costs 4x, and one is built per request read.
@dataclass(slots=True)
class Usage:
    input_tokens: int = 0  # all input tokens, cached or not
    cache_read_tokens: int = 0
    cache_write_5m_tokens: int = 0
    cache_write_1h_tokens: int = 0
    output_tokens: int = 0
    miss_reason: str | None = None  # provider-reported cache miss reason, when present
    reasoning_output_tokens: int = 0  # part of output_tokens (OpenAI, Codex): shown apart, billed as output

    @property
    def cache_write_tokens(self) -> int:
        return self.cache_write_5m_tokens + self.cache_write_1h_tokens

    @property
    def fresh_input_tokens(self) -> int:
        return self.input_tokens - self.cache_read_tokens - self.cache_write_tokens

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(self.input_tokens + other.input_tokens, self.cache_read_tokens + other.cache_read_tokens,
                     self.cache_write_5m_tokens + other.cache_write_5m_tokens,
                     self.cache_write_1h_tokens + other.cache_write_1h_tokens,
                     self.output_tokens + other.output_tokens,
                   reasoning_output_tokens=self.reasoning_output_tokens + other.reasoning_output_tokens)


def _int(d: dict[str, Any] | None, *keys: str) -> int:
    if not isinstance(d, dict):
        return 0
    for key in keys:
        value = d.get(key)
        if value.__class__ is int:  # the common case, checked first: this runs for every logged request
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return int(value)
    return 0


def _anthropic(u: dict[str, Any]) -> Usage:
    get = u.get
    fresh, read, created = get("input_tokens"), get("cache_read_input_tokens"), get("cache_creation_input_tokens")
    output = get("output_tokens")
    # plain counts (what logs hold) as they are, without a call each: this runs for every request read
    if fresh.__class__ is not int:
        fresh = _int(u, "input_tokens")
    if read.__class__ is not int:
        read = _int(u, "cache_read_input_tokens")
    if created.__class__ is not int:
        created = _int(u, "cache_creation_input_tokens")
    if output.__class__ is not int:
        output = _int(u, "output_tokens")
    split = get("cache_creation")
    if isinstance(split, dict):
        w1h, w5m = split.get("ephemeral_1h_input_tokens"), split.get("ephemeral_5m_input_tokens")
        if w1h.__class__ is not int:  # (plain counts as they are, as above)
            w1h = _int(split, "ephemeral_1h_input_tokens")
        if w5m.__class__ is not int:
            w5m = _int(split, "ephemeral_5m_input_tokens")
        if w5m + w1h != created:  # trust the total; attribute the rest to 5m
            w5m = max(created - w1h, 0)
    else:
        w1h, w5m = 0, created
    reason = get("cache_miss_reason")
    return Usage(fresh + read + created, read, w5m, w1h, output, str(reason) if reason else None)


def _openai(u: dict[str, Any]) -> Usage:
    get = u.get
    details = get("prompt_tokens_details") or get("input_tokens_details") or {}
    # plain counts (what logs hold) as they are, without a call each: this runs for every request read
    total = get("prompt_tokens") if "prompt_tokens" in u else get("input_tokens")
    if total.__class__ is not int:
        total = _int(u, "prompt_tokens", "input_tokens")
    read = details.get("cached_tokens") if details.__class__ is dict else None
    if read.__class__ is not int:
        read = _int(details, "cached_tokens")
    # GPT-5.6+ and OpenRouter: cache_write_tokens; Qwen's explicit cache: cache_creation_input_tokens
    write = details.get("cache_write_tokens") if details.__class__ is dict else None
    if write.__class__ is not int:
        write = _int(details, "cache_write_tokens", "cache_creation_input_tokens")
    if not write and "cache_write_tokens" in u:
        write = _int(u, "cache_write_tokens")
    output = get("completion_tokens") if "completion_tokens" in u else get("output_tokens")
    if output.__class__ is not int:
        output = _int(u, "completion_tokens", "output_tokens")
    out_details = get("output_tokens_details") or get("completion_tokens_details")
    reasoning = out_details.get("reasoning_tokens") if out_details.__class__ is dict else None
    if reasoning.__class__ is not int:
        reasoning = _int(out_details, "reasoning_tokens")
    return Usage(total, read, write, 0, output, reasoning_output_tokens=reasoning)


def _deepseek(u: dict[str, Any]) -> Usage:
    """DeepSeek's own fields; its Anthropic-compatible endpoint's plain input_tokens / output_tokens (no cache
    field: nothing read) were counted as zero tokens."""
    hit, miss = _int(u, "prompt_cache_hit_tokens"), _int(u, "prompt_cache_miss_tokens")
    total = _int(u, "prompt_tokens", "input_tokens") or hit + miss
    return Usage(total, hit, 0, 0, _int(u, "completion_tokens", "output_tokens"))


def _gemini(u: dict[str, Any]) -> Usage:
    if "promptTokenCount" not in u and "prompt_token_count" not in u:
        # a cachedContents creation reports only totalTokenCount: the size of the cache it wrote
        total = _int(u, "totalTokenCount", "total_token_count")
        return Usage(total, 0, total, 0, 0)
    # thinking is billed as output but counted apart from the candidates; the prompt of a tool-use step
    # (toolUsePromptTokenCount) is input the prompt count leaves out
    thoughts = _int(u, "thoughtsTokenCount", "thoughts_token_count")
    return Usage(_int(u, "promptTokenCount", "prompt_token_count")
                 + _int(u, "toolUsePromptTokenCount", "tool_use_prompt_token_count"),
                 _int(u, "cachedContentTokenCount", "cached_content_token_count"), 0, 0,
                 _int(u, "candidatesTokenCount", "candidates_token_count") + thoughts,
                 reasoning_output_tokens=thoughts)


def _interactions(u: dict[str, Any]) -> Usage:
    """Gemini's Interactions API: total_input_tokens includes total_cached_tokens."""
    return Usage(_int(u, "total_input_tokens"), _int(u, "total_cached_tokens"), 0, 0, _int(u, "total_output_tokens"))


def _converse(u: dict[str, Any]) -> Usage:
    """Bedrock's Converse API: inputTokens counts neither cache reads nor cache writes."""
    read, write = _int(u, "cacheReadInputTokens"), _int(u, "cacheWriteInputTokens")
    return Usage(_int(u, "inputTokens") + read + write, read, write, 0, _int(u, "outputTokens"))


def normalize_usage(provider: str | None, usage: dict[str, Any] | None) -> Usage | None:
    """One provider usage object (as returned, streamed and reassembled, or logged) in the common shape."""
    if not isinstance(usage, dict):
        return None
    if "total_cached_tokens" in usage or "total_input_tokens" in usage:
        return _interactions(usage)
    if "inputTokens" in usage or "cacheReadInputTokens" in usage:
        return _converse(usage)
    anthropic_keys = "cache_creation_input_tokens" in usage or "cache_read_input_tokens" in usage
    # the usage's own shape before the provider's: a local server speaking OpenAI's API (Codex on Ollama)
    # reports cached tokens inside input_tokens, under input_tokens_details, as OpenAI's Responses API does
    openai_shape = "prompt_tokens" in usage or "input_tokens_details" in usage
    if anthropic_keys or (provider in ("anthropic", "local") and not openai_shape):
        return _anthropic(usage)
    if "prompt_cache_hit_tokens" in usage or (provider == "deepseek" and "prompt_tokens_details" not in usage):
        return _deepseek(usage)
    gemini_keys = "promptTokenCount" in usage or "prompt_token_count" in usage or "totalTokenCount" in usage or \
        "total_token_count" in usage
    if gemini_keys and "input_tokens" not in usage and "prompt_tokens" not in usage:
        return _gemini(usage)
    return _openai(usage)
