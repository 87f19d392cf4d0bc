"""Which provider and which API a request body belongs to."""
from __future__ import annotations

import os
from functools import lru_cache
from typing import Any

from kvprobe.catalog import load_catalog

_ANTHROPIC_PART_TYPES = frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking", "document"})


def _by_endpoint(endpoint: str | None, model: str | None) -> str | None:
    if not endpoint:
        return None
    if endpoint.rstrip("/").endswith("/messages") or endpoint.endswith("/messages/count_tokens"):
        return "anthropic"
    if "generateContent" in endpoint or endpoint.rstrip("/").endswith("/cachedContents"):
        return "gemini"
    if "chat/completions" in endpoint or endpoint.rstrip("/").endswith("/responses"):
        return _by_model(model) if _by_model(model) in ("deepseek", "openai") else "openai"
    return None


def _by_model(model: Any) -> str | None:
    if not isinstance(model, str):
        return None
    return _provider_of_model(model, os.environ.get("KVPROBE_PROVIDERS_DIR"))


@lru_cache(maxsize=1024)  # called for every record of a trace; a log names a handful of models
def _provider_of_model(model: str, _rules_dir: str | None) -> str | None:
    name = model.lower().rsplit("/", 1)[-1]
    for cat in load_catalog().values():
        if any(name.startswith(p) for p in cat.model_prefixes):
            return cat.provider
    return None


def _by_shape(body: dict[str, Any]) -> str | None:
    if "input" in body and "messages" not in body:
        return "openai"
    if "contents" in body:
        return "gemini"
    if "system" in body or "cache_control" in body:
        return "anthropic"
    for msg in body.get("messages") or []:
        if not isinstance(msg, dict):
            continue
        if msg.get("role") in ("system", "developer", "tool") or "tool_calls" in msg:
            return "openai"
        content = msg.get("content")
        for part in content if isinstance(content, list) else []:
            if isinstance(part, dict) and (part.get("type") in _ANTHROPIC_PART_TYPES or "cache_control" in part):
                return "anthropic"
            if isinstance(part, dict) and part.get("type") in ("image_url", "input_audio"):
                return "openai"
    return None


def _by_usage(response: Any) -> str | None:
    usage = response.get("usage") if isinstance(response, dict) else None
    if isinstance(response, dict) and "usageMetadata" in response:
        return "gemini"
    if not isinstance(usage, dict):
        return None
    if "cache_creation_input_tokens" in usage or "cache_read_input_tokens" in usage:
        return "anthropic"
    if "prompt_cache_hit_tokens" in usage:
        return "deepseek"
    if "prompt_tokens" in usage or "input_tokens_details" in usage:
        return "openai"
    return None


def infer_provider(body: dict[str, Any] | None, endpoint: str | None = None,
                   response: Any = None) -> str | None:
    """Provider from the endpoint, then the model name, then the usage shape, then the body shape."""
    model = body.get("model") if isinstance(body, dict) else None
    return (_by_endpoint(endpoint, model) or _by_model(model) or _by_usage(response)
            or (_by_shape(body) if isinstance(body, dict) else None))


def infer_api(body: dict[str, Any], provider: str, endpoint: str | None = None) -> str:
    if provider == "anthropic":
        return "anthropic_messages"
    if (endpoint and endpoint.rstrip("/").endswith("/responses")) or ("input" in body and "messages" not in body):
        return "openai_responses"
    return "openai_chat"
