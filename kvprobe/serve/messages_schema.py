"""The Messages API's field rules that its SDK types and API reference define, checked as the API checks
them (400 invalid_request_error, the field path in the API's `a.0.b: ...` spelling):

* top-level fields: the request parameters of `MessageCreateParams` (SDK types, standard and beta), and
  the sampling parameters of the API reference; any other field is "Extra inputs are not permitted";
* `cache_control` (top level, system, tools, content blocks): `{"type": "ephemeral", "ttl": "5m" | "1h"}`;
* `metadata`: `user_id` only; `temperature` and `top_p` in 0…1, `top_k` an integer ≥ 0;
* tools: a custom tool (no `type`, or `custom`) has a `name` (`^[a-zA-Z0-9_-]{1,128}$`) and an
  `input_schema` object; a server tool or toolset (`web_search_20250305`, `mcp_toolset`, …) is typed;
* messages: `role: "system"` (mid-conversation system messages, Claude Opus 4.8 and later) is never the
  first message and follows a user message; only system messages take `clear_at` and `output_config`;
* text is never empty: a text block's `text`, and a message's string content (all but a final assistant
  message, which may be empty to prefill).
"""
from __future__ import annotations

import re
from typing import Any

from kvprobe.serve.errors import invalid

# MessageCreateParams (anthropic SDK types, messages and beta.messages) and the API reference's sampling
# parameters (temperature, top_k, top_p).
TOP_LEVEL = frozenset({
    "model", "messages", "max_tokens", "system", "metadata", "stop_sequences", "stream", "temperature",
    "top_k", "top_p", "tools", "tool_choice", "thinking", "service_tier", "container", "diagnostics",
    "output_config", "cache_control", "inference_geo", "speed", "user_profile_id", "workspace_id",
    "mcp_servers", "context_management", "betas", "compaction", "fallbacks", "fallback_credit_token"})
# The fields of one message: `role: "system"` messages (mid-conversation system messages) also take
# `clear_at` and a per-turn `output_config` (BetaMessageParam, SDK types).
MESSAGE_FIELDS = frozenset({"role", "content"})
SYSTEM_MESSAGE_FIELDS = MESSAGE_FIELDS | {"clear_at", "output_config"}
CLEAR_AT = ("next_user_message", "never")
CACHE_TYPES = ("ephemeral",)
CACHE_TTLS = ("5m", "1h")
_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,128}")


def check_fields(body: dict[str, Any]) -> None:
    """Every rule above, in the order the API reports them: the request's own fields, then its parts."""
    for name in body:
        if name not in TOP_LEVEL:
            raise invalid(f"{str(name)[:80]}: Extra inputs are not permitted")
    _metadata(body.get("metadata"))
    sampling_number(body, "temperature", 0.0, 1.0)
    sampling_number(body, "top_p", 0.0, 1.0)
    top_k = body.get("top_k")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0):
        raise invalid("top_k: Input should be an integer greater than or equal to 0")
    _cache_control(body.get("cache_control"), "cache_control")
    _tools(body.get("tools"))
    system = body.get("system")
    if isinstance(system, list):
        for j, block in enumerate(system):
            _block(block, f"system.{j}")
    elif system == "":
        raise invalid("system: text content blocks must be non-empty")
    messages = body["messages"]
    for i, message in enumerate(messages):
        _message_fields(message, f"messages.{i}")
        content = message.get("content")
        final_assistant = i == len(messages) - 1 and message.get("role") == "assistant"
        if content == "" and not final_assistant:
            raise invalid(f"messages.{i}: all messages must have non-empty content except for the optional "
                          "final assistant message")
        if isinstance(content, list):
            for j, block in enumerate(content):
                _block(block, f"messages.{i}.content.{j}")


def check_placement(messages: list[Any]) -> None:
    """Where a mid-conversation system message may stand: not first, and right after a user message."""
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") != "system":
            continue
        if i == 0:
            raise invalid("messages.0: a system message cannot be the first message; put leading instructions "
                          "in the top-level `system` parameter")
        before = messages[i - 1].get("role") if isinstance(messages[i - 1], dict) else None
        if before != "user":
            raise invalid(f"messages.{i}: a system message must follow a user message (it follows "
                          f"{'an' if before == 'assistant' else 'a'} {before} message)")


def _message_fields(message: dict[str, Any], where: str) -> None:
    allowed = SYSTEM_MESSAGE_FIELDS if message.get("role") == "system" else MESSAGE_FIELDS
    for name in message:
        if name not in allowed:
            raise invalid(f"{where}.{str(name)[:80]}: Extra inputs are not permitted")
    clear_at = message.get("clear_at")
    if clear_at is not None and clear_at not in CLEAR_AT:
        raise invalid(f"{where}.clear_at: Input should be 'next_user_message' or 'never'")


def sampling_number(body: dict[str, Any], name: str, low: float, high: float) -> float | None:
    """A sampling parameter's value, None when absent; out of low…high (or no number) is a 400."""
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise invalid(f"{name}: Input should be a number between {low:g} and {high:g}")
    return float(value)


def _metadata(metadata: Any) -> None:
    if metadata is None:
        return
    if not isinstance(metadata, dict):
        raise invalid("metadata: Input should be a valid dictionary")
    for name, value in metadata.items():
        if name != "user_id":
            raise invalid(f"metadata.{str(name)[:80]}: Extra inputs are not permitted")
        if value is not None and not isinstance(value, str):
            raise invalid("metadata.user_id: Input should be a valid string")


def _cache_control(value: Any, where: str) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        raise invalid(f"{where}: Input should be a valid dictionary")
    if value.get("type") not in CACHE_TYPES:
        raise invalid(f"{where}.type: Input should be 'ephemeral'")
    if "ttl" in value and value["ttl"] not in CACHE_TTLS:
        raise invalid(f"{where}.ttl: Input should be '5m' or '1h'")
    for name in value:
        if name not in ("type", "ttl"):
            raise invalid(f"{where}.{str(name)[:80]}: Extra inputs are not permitted")


def _block(block: Any, where: str) -> None:
    if not isinstance(block, dict):
        return  # (its shape is checked with the content block types)
    _cache_control(block.get("cache_control"), f"{where}.cache_control")
    if block.get("type") == "text" and block.get("text") == "":
        raise invalid(f"{where.split('.')[0]}: text content blocks must be non-empty")
    if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
        for k, part in enumerate(block["content"]):
            _block(part, f"{where}.content.{k}")


def _tools(tools: Any) -> None:
    if tools is None:
        return
    if not isinstance(tools, list):
        raise invalid("tools: Input should be a valid list")
    for i, tool in enumerate(tools):
        where = f"tools.{i}"
        if not isinstance(tool, dict):
            raise invalid(f"{where}: Input should be a valid dictionary or object to extract fields from")
        custom = tool.get("type") in (None, "custom")
        name = tool.get("name")
        if custom and not isinstance(name, str):
            raise invalid(f"{where}.name: Field required" if name is None else f"{where}.name: Input should be a "
                          "valid string")
        if custom and not _TOOL_NAME.fullmatch(name):
            raise invalid(f"{where}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'")
        if custom and not isinstance(tool.get("input_schema"), dict):
            raise invalid(f"{where}.custom.input_schema: Field required" if "input_schema" not in tool
                          else f"{where}.custom.input_schema: Input should be a valid dictionary")
        _cache_control(tool.get("cache_control"), f"{where}.cache_control")
