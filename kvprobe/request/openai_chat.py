"""Render an OpenAI Chat Completions body (also DeepSeek's and other compatible APIs) into blocks.

OpenAI caches a token prefix; blocks here are the units a change is reported in: one per tool, one per
message content part (string contents are one block), one per assistant tool call.
"""
from __future__ import annotations

from kvprobe.catalog import ModelRules
from kvprobe.errors import InputError
from kvprobe.request.content import split_part
from kvprobe.request.model import Block, RenderedRequest, canonical_json, chain_hashes
from kvprobe.request.openai_cache import cache_mode, marker_ttl, openai_params, place_managed, retention

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

_TEXT_KEY = {"text": "text", "input_text": "text", "refusal": "refusal"}


def _part_block(path: str, part: Any, role: str, i: int, rules: ModelRules, provider: str) -> Block:
    if isinstance(part, str):
        return Block(path, "messages", "text", part, role=role, message_index=i)
    if not isinstance(part, dict):
        raise InputError("expected a content part object", field=path)
    kind = str(part.get("type", "text"))
    text, meta = split_part(part, _TEXT_KEY.get(kind))
    ttl = marker_ttl(part, rules, provider)
    return Block(path, "messages", kind, text, meta, role, i, breakpoint=ttl,
                 breakpoint_source="explicit" if ttl else None)


def _message_blocks(i: int, msg: Any, rules: ModelRules, provider: str) -> list[Block]:
    if not isinstance(msg, dict) or "role" not in msg:
        raise InputError("expected a message object with 'role'", field=f"messages[{i}]")
    role, content = str(msg["role"]), msg.get("content")
    blocks: list[Block] = []
    if isinstance(content, str):
        meta = canonical_json({"tool_call_id": msg["tool_call_id"]}) if "tool_call_id" in msg else ""
        kind = "tool_result" if role == "tool" else "text"
        blocks.append(Block(f"messages[{i}]", "messages", kind, content, meta, role, i))
    elif isinstance(content, list):
        blocks += [_part_block(f"messages[{i}].content[{j}]", p, role, i, rules, provider)
                   for j, p in enumerate(content)]
    elif content is not None:
        raise InputError("expected a string, a list of content parts or null", field=f"messages[{i}].content")
    for k, call in enumerate(msg.get("tool_calls") or []):
        blocks.append(Block(f"messages[{i}].tool_calls[{k}]", "messages", "tool_use", canonical_json(call),
                            role=role, message_index=i))
    if not blocks:  # an empty message still costs its role tokens
        blocks.append(Block(f"messages[{i}]", "messages", "text", "", role=role, message_index=i))
    blocks[0].first_in_message = True
    return blocks


def _tool_blocks(tools: Any) -> list[Block]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise InputError("expected a list of tools", field="tools")
    return [Block(f"tools[{i}]", "tools", "tool_definition", canonical_json(t)) for i, t in enumerate(tools)]


def render_openai_chat(body: dict[str, Any], rules: ModelRules, provider: str = "openai",
                       headers: dict[str, str] | None = None) -> RenderedRequest:
    if "messages" not in body:
        raise InputError("expected a Chat Completions body with 'messages'", field="messages")
    if not isinstance(body["messages"], list):
        raise InputError("expected a list of messages", field="messages")
    blocks = _tool_blocks(body.get("tools"))
    for i, msg in enumerate(body["messages"]):
        blocks += _message_blocks(i, msg, rules, provider)
    params = openai_params(body, rules, headers)
    chain_hashes(blocks, params)
    req = RenderedRequest(provider, "openai_chat", body.get("model"), blocks, params,
                          cache_mode=cache_mode(body, rules, provider, blocks), retention=retention(body))
    return place_managed(req, rules)
