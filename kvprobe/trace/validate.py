"""The one check of provider usage, applied wherever records enter kvprobe (trace reader, importers, capture).

Usage is what every figure is computed from, so a negative, non-finite, fractional or absurd count must stop
at the door: otherwise a gate passes on a negative cost, a hit ratio exceeds 100%, or a sum overflows.
Strings and other non-numbers are left to the usage normaliser (it reads them as absent), except under
the count keys kvprobe reads, where anything but a number or null is an error.

Counts are then checked together: a part is never more than the whole it is part of (cached input within
all input, the 5m/1h split within the cache writes, DeepSeek's hits and misses within its prompt, reasoning
within output). Each count alone can be valid while together they make fresh input negative.
"""
from __future__ import annotations

import math

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

MAX_TOKENS = 10**10  # no request reads or writes ten billion tokens; beyond that a figure is corrupt
# Keys whose value kvprobe reads as a token count (kvprobe.usage), in every provider's spelling.
COUNT_KEYS = frozenset({
    "input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens",
    "ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens", "prompt_tokens", "completion_tokens",
    "cached_tokens", "cache_write_tokens", "prompt_cache_hit_tokens", "prompt_cache_miss_tokens",
    "promptTokenCount", "cachedContentTokenCount", "candidatesTokenCount", "totalTokenCount",
    "prompt_token_count", "cached_content_token_count", "candidates_token_count", "total_token_count",
    "thoughtsTokenCount", "thoughts_token_count", "toolUsePromptTokenCount", "tool_use_prompt_token_count",
    "total_input_tokens", "total_cached_tokens", "total_output_tokens", "reasoning_tokens",
    "inputTokens", "outputTokens", "cacheReadInputTokens", "cacheWriteInputTokens",
})
_DEPTH = 4  # usage nests details a level or two deep (cache_creation, prompt_tokens_details, ...)


def usage_problem(usage: Any, path: str = "usage", depth: int = 0) -> tuple[str, str] | None:
    """(field path, what is wrong) for the first bad value in a usage object, or None when it is valid."""
    if usage is None:
        return None
    if not isinstance(usage, dict):
        return path, f"expected an object of token counts, got {type(usage).__name__}"
    found = _problem(usage, depth) or _parts_problem(usage)
    return None if found is None else (path + found[0], found[1])


def _problem(usage: dict[Any, Any], depth: int) -> tuple[str, str] | None:
    """(path below `usage`, what is wrong): the path is only spelled out for a bad value (this runs for every
    request read, and nested details such as cache_creation are the usual case)."""
    for name, value in usage.items():
        kind = value.__class__
        if (kind is int and 0 <= value <= MAX_TOKENS) or (kind is str and name not in COUNT_KEYS):
            continue  # the usual values, checked inline
        if kind is dict and name not in COUNT_KEYS:  # nested details (cache_creation, ...), also inline
            found = _problem(value, depth + 1) if depth < _DEPTH else None
        else:
            found = _value_problem(name, value, depth)
        if found is not None:
            return f".{name}{found[0]}", found[1]
    return None


def _value_problem(name: Any, value: Any, depth: int) -> tuple[str, str] | None:
    # (path below this value, what is wrong)
    if isinstance(value, bool) or value is None:
        return ("", "expected a token count, got a boolean") if isinstance(value, bool) and name in COUNT_KEYS \
            else None
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            return "", f"expected a finite token count, got {value}"
        if value < 0:
            return "", f"expected a token count of 0 or more, got {_show(value)}"
        if isinstance(value, float) and not value.is_integer() and (name in COUNT_KEYS or
                                                                    "token" in str(name).lower()):
            return "", f"expected a whole token count, got {_show(value)}"
        if value > MAX_TOKENS and "token" in str(name).lower():
            return "", f"expected a token count up to {MAX_TOKENS:,}, got {_show(value)}"
        return None
    if name in COUNT_KEYS:
        return "", f"expected a token count, got {type(value).__name__}"
    if depth >= _DEPTH:
        return None
    if isinstance(value, dict):
        return _problem(value, depth + 1)
    if isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, dict):
                found = _problem(item, depth + 1)
                if found is not None:
                    return f"[{i}]{found[0]}", found[1]
    return None


def _count(holder: Any, key: str) -> float | None:
    value = holder.get(key) if isinstance(holder, dict) else None
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _first_count(holder: dict[Any, Any], *keys: str) -> tuple[str, float] | None:
    """The first of `keys` holding a number, as kvprobe.usage reads them (`prompt_tokens`, else ...)."""
    for key in keys:
        value = _count(holder, key)
        if value is not None:
            return key, value
    return None


def _parts_problem(usage: dict[Any, Any]) -> tuple[str, str] | None:
    """(path below `usage`, what is wrong) for the first part larger than the whole it is part of, read the
    way kvprobe.usage reads each provider's usage (so a part it ignores is not checked)."""
    if "total_cached_tokens" in usage or "total_input_tokens" in usage:  # Gemini Interactions
        cached = _first_count(usage, "total_cached_tokens")
        whole = _first_count(usage, "total_input_tokens") or ("total_input_tokens", 0)
        return _more_than([cached], whole) if cached else None
    if "inputTokens" in usage or "cacheReadInputTokens" in usage:
        return None  # Bedrock Converse: inputTokens counts neither cache reads nor writes, it bounds nothing
    split = usage.get("cache_creation")
    if isinstance(split, dict):  # Anthropic: the 5m/1h split of the cache writes
        w5m, w1h = split.get("ephemeral_5m_input_tokens"), split.get("ephemeral_1h_input_tokens")
        written = usage.get("cache_creation_input_tokens")
        # plain counts (what logs hold, _problem has passed them) are added inline: this runs for every request
        if w5m.__class__ is int and w1h.__class__ is int and written.__class__ is int and w5m + w1h <= written:
            found = None
        else:
            parts = [(f"cache_creation.{k}", _count(split, k)) for k in ("ephemeral_5m_input_tokens",
                                                                         "ephemeral_1h_input_tokens")]
            found = _more_than(parts, ("cache_creation_input_tokens", _count(usage, "cache_creation_input_tokens")
                                       or 0))
        if found:
            return found
    if "cache_read_input_tokens" in usage or "cache_creation_input_tokens" in usage:
        return None  # Anthropic's input_tokens excludes the cache: it bounds nothing
    if "prompt_cache_hit_tokens" in usage:  # DeepSeek: hits + misses make the prompt (when it is given)
        whole = _first_count(usage, "prompt_tokens")
        parts = [(k, _count(usage, k)) for k in ("prompt_cache_hit_tokens", "prompt_cache_miss_tokens")]
        return _more_than(parts, whole) if whole and whole[1] else None
    gemini = ("promptTokenCount" in usage or "prompt_token_count" in usage) and \
        "input_tokens" not in usage and "prompt_tokens" not in usage
    if gemini:  # Gemini (either spelling): cached content is part of the prompt
        whole = _first_count(usage, "promptTokenCount", "prompt_token_count")
        cached = _first_count(usage, "cachedContentTokenCount", "cached_content_token_count")
        return _more_than([cached], whole or ("promptTokenCount", 0)) if cached else None
    return _openai_parts_problem(usage)


def _openai_parts_problem(usage: dict[Any, Any]) -> tuple[str, str] | None:
    """OpenAI Chat / Responses: cached (and written) input within the prompt, reasoning within the output."""
    if _responses_parts_fit(usage):
        return None
    name = next((k for k in ("prompt_tokens_details", "input_tokens_details") if usage.get(k)), None)
    if name is not None and isinstance(usage[name], dict):
        details = usage[name]
        detail = next((k for k in ("cache_write_tokens", "cache_creation_input_tokens") if _count(details, k)),
                       "cache_write_tokens")  # (GPT-5.6+ and OpenRouter; Qwen's explicit cache)
        written = (f"{name}.{detail}", _count(details, detail))
        if not written[1]:  # (kvprobe.usage reads a top-level count when the details have none)
            written = ("cache_write_tokens", _count(usage, "cache_write_tokens"))
        parts = [(f"{name}.cached_tokens", _count(details, "cached_tokens")), written]
        found = _more_than(parts, _first_count(usage, "prompt_tokens", "input_tokens") or ("prompt_tokens", 0))
        if found:
            return found
    name = next((k for k in ("output_tokens_details", "completion_tokens_details") if usage.get(k)), None)
    if name is not None and isinstance(usage[name], dict):
        whole = _first_count(usage, "completion_tokens", "output_tokens") or ("completion_tokens", 0)
        return _more_than([(f"{name}.reasoning_tokens", _count(usage[name], "reasoning_tokens"))], whole)
    return None


def _responses_parts_fit(usage: dict[Any, Any]) -> bool:
    """True for usage in the Responses API's names only (Codex logs every request so) whose parts, all plain
    counts, are within their wholes: what `_openai_parts_problem` finds no problem in, told without its
    look-ups (this runs for every request read). False: anything else, which `_openai_parts_problem` reads."""
    get = usage.get
    if "prompt_tokens" in usage or "completion_tokens" in usage or get("prompt_tokens_details") or \
            get("completion_tokens_details"):
        return False
    details, out_details = get("input_tokens_details"), get("output_tokens_details")
    if details:
        if details.__class__ is not dict or "cache_write_tokens" in usage:
            return False
        cached, written = details.get("cached_tokens", 0), details.get("cache_write_tokens", 0)
        whole = get("input_tokens", 0)
        if written.__class__ is int and not written:  # (the other spelling, Qwen's explicit cache)
            written = details.get("cache_creation_input_tokens", 0)
        if not (cached.__class__ is int and written.__class__ is int and whole.__class__ is int and
                cached + written <= whole):
            return False
    if out_details:
        if out_details.__class__ is not dict:
            return False
        reasoning, whole = out_details.get("reasoning_tokens", 0), get("output_tokens", 0)
        if not (reasoning.__class__ is int and whole.__class__ is int and reasoning <= whole):
            return False
    return True


def _more_than(parts: list[tuple[str, float | None]], whole: tuple[str, float]) -> tuple[str, str] | None:
    """The problem when the parts (those given) add up to more than the whole."""
    given = [(path, n) for path, n in parts if n]
    if not given or sum(n for _, n in given) <= whole[1]:
        return None
    what = " + ".join(f"{path} ({_show(n)})" for path, n in given)
    verb, pronoun = ("are", "them") if len(given) > 1 else ("is", "it")
    return "." + given[0][0], f"{what} {verb} more than {whole[0]} ({_show(whole[1])}), which includes {pronoun}"


def _show(value: float) -> str:
    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 1e16)
    text = f"{int(value):,}" if whole else repr(value)
    return text if len(text) <= 24 else f"{text[:20]}... ({len(text)} digits)"


def model_problem(request: Any, path: str = "request") -> tuple[str, str] | None:
    """A request's model names its price and cache rules: a string, when present."""
    if isinstance(request, dict) and request.get("model") is not None and not isinstance(request["model"], str):
        return f"{path}.model", f"expected the model name as a string, got {type(request['model']).__name__}"
    return None


def response_usage_problem(response: Any) -> tuple[str, str] | None:
    """The usage check on a provider response body (`usage`, or Gemini's `usageMetadata`)."""
    if not isinstance(response, dict):
        return None
    if "usage" in response:
        problem = usage_problem(response["usage"], "response.usage")
        if problem is not None or "usageMetadata" not in response:
            return problem
    return usage_problem(response.get("usageMetadata"), "response.usageMetadata")
