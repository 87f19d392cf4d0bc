"""Refuse what the real APIs refuse, with their status codes and messages, so code tested against `serve`
behaves the same in production: unknown models (404), malformed content blocks, a conversation that starts
with the assistant, a `stream` that is not a boolean, a reply limit beyond what the model can produce.

Only the request's shape is checked here (the Messages API's field rules: kvprobe.serve.messages_schema);
documented optional fields (tools, thinking, diagnostics, ...) are accepted whatever the local engine makes
of them.
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
    "mcp_tool_use", "mcp_tool_result", "container_upload"})
# Content part types of Chat Completions messages (API reference, Chat: message content parts).
OPENAI_PARTS = ("text", "image_url", "input_audio", "file", "refusal")
_REQUIRED = {"text": ("text", str), "tool_use": ("id", str), "tool_result": ("tool_use_id", str),
             "image": ("source", dict), "document": ("source", dict), "thinking": ("thinking", str)}


def check_model(model: str, api: str, served: str, emulated: str | None) -> None:
    """A model the provider would know (listed in providers/, or named like that provider's models), or the
    local engine's own name; else 404 as the APIs answer."""
    providers = ("anthropic",) if api == "anthropic" else ("openai", "deepseek")
    if model in (served, emulated) or any(_known(p, model) for p in providers):
        return
    if api == "anthropic":
        raise ApiError(404, f"model: {model}")
    raise ApiError(404, f"The model `{model}` does not exist or you do not have access to it.", None,
                   "model_not_found")


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


def check_anthropic(body: dict[str, Any], max_output: int) -> None:
    """The Messages API's request checks beyond the presence of model/messages/max_tokens."""
    check_fields(body)  # kvprobe.serve.messages_schema: fields, cache_control, tools, sampling, empty text
    _stream(body, "anthropic")
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and max_tokens > max_output:
        raise invalid(f"max_tokens: {max_tokens} > {max_output}, which is the maximum allowed number of output "
                      f"tokens for {body.get('model')}")
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
        for j, block in enumerate(content):
            _anthropic_block(block, f"messages.{i}.content.{j}", ANTHROPIC_BLOCKS)


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


def check_openai(body: dict[str, Any], max_output: int) -> None:
    """The Chat Completions checks beyond roles, n, temperature and stop (see openai_api._validate)."""
    _stream(body, "openai")
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > max_output:
            raise ApiError(400, f"{name} is too large: {value}. This model supports at most {max_output} "
                           f"completion tokens, whereas you provided {value}.", name, "invalid_value")
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
