"""The one check of provider usage, applied wherever records enter kvprobe (trace reader, importers, capture).

Usage is what every figure is computed from, so a negative, non-finite or absurd count must stop at the
door: otherwise a gate passes on a negative cost, a hit ratio exceeds 100%, or a sum overflows.
Strings and other non-numbers are left to the usage normaliser (it reads them as absent), except under
the count keys kvprobe reads, where anything but a number or null is an error.
"""
from __future__ import annotations

import math
from typing import Any

MAX_TOKENS = 10**10  # no request reads or writes ten billion tokens; beyond that a figure is corrupt
# Keys whose value kvprobe reads as a token count (kvprobe.usage), in every provider's spelling.
COUNT_KEYS = frozenset({
    "input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens",
    "ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens", "prompt_tokens", "completion_tokens",
    "cached_tokens", "cache_write_tokens", "prompt_cache_hit_tokens", "prompt_cache_miss_tokens",
    "promptTokenCount", "cachedContentTokenCount", "candidatesTokenCount", "totalTokenCount",
    "prompt_token_count", "cached_content_token_count", "candidates_token_count", "total_token_count",
})
_DEPTH = 4  # usage nests details a level or two deep (cache_creation, prompt_tokens_details, ...)


def usage_problem(usage: Any, path: str = "usage", depth: int = 0) -> tuple[str, str] | None:
    """(field path, what is wrong) for the first bad value in a usage object, or None when it is valid."""
    if usage is None:
        return None
    if not isinstance(usage, dict):
        return path, f"expected an object of token counts, got {type(usage).__name__}"
    found = _problem(usage, depth)
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


def _show(value: float) -> str:
    text = repr(value)
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
