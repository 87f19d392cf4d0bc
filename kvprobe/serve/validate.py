"""Refuse what the real APIs refuse, with their status codes and messages, so code tested against `serve`
behaves the same in production: unknown models (404), malformed content blocks, a conversation that starts
with the assistant, a `stream` that is not a boolean, a mid-conversation system message out of place.

Only the request's shape is checked here (the Messages API's field rules: kvprobe.serve.messages_schema);
documented optional fields (tools, thinking, diagnostics, fallbacks, ...) are accepted whatever the local
engine makes of them. What only the bundled model cannot do (a long reply, a long prompt) is never refused:
it is served within the engine's limits and said so (docs/serve.md).
"""
from __future__ import annotations

from typing import Any

from kvprobe.catalog import load_catalog, rules_for
from kvprobe.serve.errors import ApiError, invalid
from kvprobe.serve.messages_schema import check_fields

# Content block types the Messages API accepts in requests (API reference, Messages: content block params).
ANTHROPIC_BLOCKS = frozenset({
    "text", "image", "document", "search_result", "tool_use", "tool_result", "thinking", "redacted_thinking",
    "server_tool_use", "web_search_tool_result", "web_fetch_tool_result", "code_execution_tool_result",
    "bash_code_execution_tool_result", "text_editor_code_execution_tool_result", "tool_search_tool_result",
    "mcp_tool_use", "mcp_tool_result", "container_upload", "compaction", "fallback", "tool_addition",
    "tool_removal", "advisor_tool_result"})
# What a mid-conversation `role: "system"` message may hold (text, and the mid-conversation tool changes).
SYSTEM_MESSAGE_BLOCKS = ("text", "tool_addition", "tool_removal")
# Content part types of Chat Completions messages (API reference, Chat: message content parts).
OPENAI_PARTS = ("text", "image_url", "input_audio", "file", "refusal")
_REQUIRED = {"text": ("text", str), "tool_use": ("id", str), "tool_result": ("tool_use_id", str),
             "image": ("source", dict), "document": ("source", dict), "thinking": ("thinking", str)}


def check_model(model: str, api: str, served: str, emulated: str | None) -> None:
    """A model a provider speaking this API would know (listed in providers/, or named like its models), or
    the local engine's own name; else 404 as the APIs answer."""
    if model in (served, emulated) or any(_known(p, model) for p in _providers_of(api)):
        return
    if api == "anthropic":
        raise ApiError(404, f"model: {model}")
    if api == "gemini":
        raise ApiError(404, f"models/{model} is not found for API version v1beta, or is not supported for "
                       "generateContent. Call ListModels to see the list of available models and their "
                       "supported methods.")
    raise ApiError(404, f"The model `{model}` does not exist or you do not have access to it.", None,
                   "model_not_found")


def _providers_of(api: str) -> list[str]:
    """Whose models an API serves: the Messages API Anthropic's and those of providers with an
    Anthropic-compatible endpoint (a rule about it in providers/), Gemini's its own, the OpenAI-compatible
    APIs every provider's (gateways serve them all: Qwen Code asks for qwen3-coder-plus there)."""
    catalog = load_catalog()
    if api == "anthropic":
        return [p for p, cat in catalog.items() if p == "anthropic"
                or "anthropic_endpoint_ignores_cache_control" in rules_for(p, None).rules]
    if api == "gemini":
        return ["gemini"]
    return list(catalog)


def _known(provider: str, model: str) -> bool:
    catalog = load_catalog().get(provider)
    if catalog is None:
        return False
    return rules_for(provider, model).known_model or model.startswith(catalog.model_prefixes)


def _stream(body: dict[str, Any], api: str) -> None:
    value = body.get("stream")
    if value is None or isinstance(value, bool):
        return
    if api == "anthropic":
        raise invalid("stream: Input should be a valid boolean")
    raise ApiError(400, f"Invalid type for 'stream': expected a boolean, but got a {type(value).__name__} "
                   "instead.", "stream", "invalid_type")


def check_anthropic(body: dict[str, Any]) -> None:
    """The Messages API's request checks beyond the presence of model/messages/max_tokens. A max_tokens above
    what the local engine writes is not refused: it is served clamped (the response's `kvprobe` says so)."""
    check_fields(body)  # kvprobe.serve.messages_schema: fields, cache_control, tools, sampling, empty text
    _stream(body, "anthropic")
    system = body.get("system")
    if system is not None and not isinstance(system, str):
        if not isinstance(system, list):
            raise invalid("system: Input should be a valid string or a list of text blocks")
        for j, block in enumerate(system):
            _anthropic_block(block, f"system.{j}", ("text",))
    messages = body["messages"]
    if messages and messages[0].get("role") != "user":
        raise invalid('messages: first message must use the "user" role')
    for i, message in enumerate(messages):
        content = message.get("content")
        if isinstance(content, str):
            continue
        if not isinstance(content, list):
            raise invalid(f"messages.{i}.content: Input should be a valid string or a list of content blocks")
        allowed = SYSTEM_MESSAGE_BLOCKS if message.get("role") == "system" else ANTHROPIC_BLOCKS
        for j, block in enumerate(content):
            _anthropic_block(block, f"messages.{i}.content.{j}", allowed)


def _anthropic_block(block: Any, where: str, allowed: frozenset[str] | tuple[str, ...]) -> None:
    if not isinstance(block, dict):
        raise invalid(f"{where}: Input should be a valid dictionary or object to extract fields from")
    kind = block.get("type")
    if kind not in allowed:
        expected = ", ".join(f"'{t}'" for t in sorted(allowed))
        raise invalid(f"{where}: Input tag {str(kind)[:40]!r} found using 'type' does not match any of the "
                      f"expected tags: {expected}")
    field, kind_of = _REQUIRED.get(kind, (None, None))
    if field is not None and not isinstance(block.get(field), kind_of):
        raise invalid(f"{where}.{field}: Field required" if field not in block
                      else f"{where}.{field}: Input should be a valid {'string' if kind_of is str else 'object'}")


def check_openai(body: dict[str, Any]) -> None:
    """The Chat Completions checks beyond roles, n, temperature and stop (see openai_api._validate). A reply
    limit above what the local engine writes is served clamped, not refused."""
    _stream(body, "openai")
    for i, message in enumerate(body["messages"]):
        content = message.get("content")
        if content is None or isinstance(content, str):
            continue
        if not isinstance(content, list):
            raise ApiError(400, f"Invalid type for 'messages[{i}].content': expected one of a string or an "
                           "array of objects.", f"messages[{i}].content", "invalid_type")
        for j, part in enumerate(content):
            _openai_part(part, f"messages[{i}].content[{j}]")


def _openai_part(part: Any, where: str) -> None:
    if not isinstance(part, dict):
        raise ApiError(400, f"Invalid type for '{where}': expected an object.", where, "invalid_type")
    kind = part.get("type")
    if kind not in OPENAI_PARTS:
        supported = ", ".join(f"'{t}'" for t in OPENAI_PARTS)
        raise ApiError(400, f"Invalid value: {str(kind)[:40]!r}. Supported values are: {supported}.",
                       f"{where}.type", "invalid_value")
    if kind in ("text", "refusal") and not isinstance(part.get(kind), str):
        raise ApiError(400, f"Missing required parameter: '{where}.{kind}'.", f"{where}.{kind}",
                       "missing_required_parameter")
