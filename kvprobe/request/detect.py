"""Which provider and which API a request body belongs to."""
from __future__ import annotations

from functools import lru_cache

from kvprobe.catalog import load_catalog, load_platforms
from kvprobe.environ import providers_dir_override
from kvprobe.model_ids import canonical_model

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

_ANTHROPIC_PART_TYPES = frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking", "document"})


def _by_endpoint(endpoint: str | None, model: str | None) -> str | None:
    """Provider from the API path; a model another provider names wins on the compatible APIs (DeepSeek,
    Moonshot and Qwen serve Anthropic-compatible /messages; xAI, Mistral and others OpenAI-compatible ones)."""
    if not endpoint:
        return None
    named = _by_model(model)
    if endpoint.rstrip("/").endswith("/messages") or endpoint.endswith("/messages/count_tokens"):
        return named or "anthropic"
    if "generateContent" in endpoint or endpoint.rstrip("/").endswith("/cachedContents"):
        return "gemini"
    if "chat/completions" in endpoint or endpoint.rstrip("/").endswith("/responses"):
        return named or "openai"
    return None


def _by_model(model: Any) -> str | None:
    if not isinstance(model, str):
        return None
    return _provider_of_model(model, providers_dir_override())


@lru_cache(maxsize=1024)  # called for every record of a trace; a log names a handful of models
def _provider_of_model(model: str, _rules_dir: str | None) -> str | None:
    name = canonical_model(model)
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
    """The wire format of a body: from the endpoint where it says, else the provider's own, else the shape
    (a Claude model reached through an OpenAI-compatible gateway is still an OpenAI Chat body)."""
    path = (endpoint or "").split("?", 1)[0].rstrip("/")
    if path.endswith("/messages"):
        return "anthropic_messages"
    if path.endswith("/responses") or ("input" in body and "messages" not in body):
        return "openai_responses"
    if "chat/completions" in path:
        return "openai_chat"
    if provider in ("anthropic", "local") or (provider != "openai" and _by_shape(body) == "anthropic"):
        return "anthropic_messages"
    return "openai_chat"


def infer_platform(endpoint: str | None = None, model: Any = None, response: Any = None) -> str | None:
    """Which platform served a request (bedrock, vertex, openrouter, ...) from what a record shows: the
    response id's prefix (msg_bdrk_, msg_vrtx_), the endpoint's host or path, the model id's form
    (us.anthropic.claude-..., claude-...@20250929). None: the provider's own API, or nothing says."""
    return platform_of(endpoint, model, _response_id(response))


def platform_of(endpoint: str | None, model: Any, rid: str) -> str | None:
    """`infer_platform` of a response whose id is `rid` ("" for none)."""
    rules_dir = providers_dir_override()
    if rid:  # every response id differs: checked here, not cached (most start with none of the prefixes)
        known = _id_prefixes(rules_dir)
        if rid.startswith(known[0]):
            for plat, prefixes in known[1]:
                if rid.startswith(prefixes):
                    return plat
    return _platform_of(endpoint.lower() if isinstance(endpoint, str) else "",
                        model.lower() if isinstance(model, str) else "", rules_dir)


def _response_id(response: Any) -> str:
    if not isinstance(response, dict):
        return ""
    rid = response.get("id")
    if not isinstance(rid, str) and isinstance(response.get("message"), dict):  # a stream's message_start
        rid = response["message"].get("id")
    return rid if isinstance(rid, str) else ""


@lru_cache(maxsize=8)
def _id_prefixes(_rules_dir: str | None) -> tuple[tuple[str, ...], tuple[tuple[str, tuple[str, ...]], ...]]:
    """Every platform's response id prefixes together (one test rules most ids out), then each platform's."""
    each = tuple((p.platform, tuple(p.detect.get("response_id_prefixes", ()))) for p in load_platforms().values()
                 if p.detect.get("response_id_prefixes"))
    return tuple(prefix for _, prefixes in each for prefix in prefixes), each


@lru_cache(maxsize=4096)  # a trace names a handful of endpoints and models
def _platform_of(endpoint: str, model: str, _rules_dir: str | None) -> str | None:
    platforms = load_platforms().values()
    checks = ((endpoint, "hosts"), (endpoint, "endpoint_markers"), (model, "model_markers"))
    for text, key in checks:
        if not text:
            continue
        for plat in platforms:
            if any(marker in text for marker in plat.detect.get(key, ())):
                return plat.platform
    return None
