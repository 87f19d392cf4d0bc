"""Render an OpenAI Responses body into blocks: tools, instructions, then input items."""
from __future__ import annotations

from kvprobe.catalog import ModelRules
from kvprobe.errors import InputError
from kvprobe.request.content import split_part
from kvprobe.request.model import Block, RenderedRequest, canonical_json, chain_hashes
from kvprobe.request.openai_cache import cache_mode, marker_ttl, openai_params, place_managed, retention

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

_TEXT_KEY = {"input_text": "text", "output_text": "text", "text": "text", "function_call_output": "output",
             "reasoning": "summary"}
_KIND = {"function_call": "tool_use", "function_call_output": "tool_result", "reasoning": "thinking",
         "input_image": "image", "input_file": "document", "input_text": "text", "output_text": "text"}


def _part(path: str, part: Any, role: str, i: int, rules: ModelRules, provider: str) -> Block:
    if not isinstance(part, dict):
        raise InputError("expected a content part object", field=path)
    kind = str(part.get("type", "input_text"))
    text, meta = split_part(part, _TEXT_KEY.get(kind))
    ttl = marker_ttl(part, rules, provider)
    return Block(path, "messages", _KIND.get(kind, kind), text, meta, role, i,
                 breakpoint=ttl, breakpoint_source="explicit" if ttl else None)


def _item_blocks(i: int, item: Any, rules: ModelRules, provider: str) -> list[Block]:
    path = f"input[{i}]"
    if isinstance(item, str):
        blocks = [Block(path, "messages", "text", item, role="user", message_index=i)]
    elif not isinstance(item, dict):
        raise InputError("expected an input item object", field=path)
    elif "role" in item and item.get("type", "message") == "message":
        role, content = str(item["role"]), item.get("content")
        if isinstance(content, str):
            blocks = [Block(path, "messages", "text", content, role=role, message_index=i)]
        elif isinstance(content, list):
            blocks = [_part(f"{path}.content[{j}]", p, role, i, rules, provider) for j, p in enumerate(content)]
        else:
            raise InputError("expected a string or a list of content parts", field=f"{path}.content")
    else:
        blocks = [_part(path, item, str(item.get("role", "")), i, rules, provider)]
    if blocks:
        blocks[0].first_in_message = True
    return blocks


def render_openai_responses(body: dict[str, Any], rules: ModelRules, provider: str = "openai",
                            headers: dict[str, str] | None = None) -> RenderedRequest:
    if "input" not in body:
        raise InputError("expected a Responses body with 'input'", field="input")
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise InputError("expected a list of tools", field="tools")
    blocks = [Block(f"tools[{i}]", "tools", "tool_definition", canonical_json(t)) for i, t in enumerate(tools)]
    if isinstance(body.get("instructions"), str):
        blocks.append(Block("instructions", "system", "text", body["instructions"], role="developer",
                            first_in_message=True))
    items = body["input"]
    for i, item in enumerate([items] if isinstance(items, str) else items if isinstance(items, list) else [None]):
        if item is None:
            raise InputError("expected a string or a list of input items", field="input")
        blocks += _item_blocks(i, item, rules, provider)
    params = openai_params(body, rules, headers)
    chain_hashes(blocks, params)
    req = RenderedRequest(provider, "openai_responses", body.get("model"), blocks, params,
                          cache_mode=cache_mode(body, rules, provider, blocks), retention=retention(body))
    return place_managed(req, rules)
