"""Render a Gemini generateContent body: tools, systemInstruction, then contents (parts)."""
from __future__ import annotations

from kvprobe.catalog import ModelRules
from kvprobe.errors import InputError
from kvprobe.request.content import split_part
from kvprobe.request.model import Block, IdentityParam, RenderedRequest, canonical_json, chain_hashes

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

_KIND = {"text": "text", "inlineData": "image", "inline_data": "image", "fileData": "document",
         "file_data": "document", "functionCall": "tool_use", "function_call": "tool_use",
         "functionResponse": "tool_result", "function_response": "tool_result", "thought": "thinking"}


def _part_block(path: str, part: Any, role: str, i: int) -> Block:
    if not isinstance(part, dict):
        raise InputError("expected a part object", field=path)
    kind = next((_KIND[k] for k in part if k in _KIND), "text")
    text, meta = split_part(part, "text" if isinstance(part.get("text"), str) else None)
    return Block(path, "messages" if role != "system" else "system", kind, text, meta, role, i)


def cache_mode(body: dict[str, Any], endpoint: str | None) -> str:
    """gemini_create: a `cachedContents` creation; gemini_cached: a request reading one; else implicit."""
    if endpoint and endpoint.rstrip("/").endswith("/cachedContents"):
        return "gemini_create"
    return "gemini_cached" if body.get("cachedContent") else "implicit"


def render_gemini(body: dict[str, Any], rules: ModelRules, model: str | None = None,
                  endpoint: str | None = None) -> RenderedRequest:
    contents = body.get("contents")
    if not isinstance(contents, list):
        raise InputError("expected a Gemini body with a 'contents' list", field="contents")
    blocks = [Block(f"tools[{i}]", "tools", "tool_definition", canonical_json(t))
              for i, t in enumerate(body.get("tools") or [])]
    system = body.get("systemInstruction") or body.get("system_instruction")
    if isinstance(system, dict):
        for j, part in enumerate(system.get("parts") or []):
            blocks.append(_part_block(f"systemInstruction.parts[{j}]", part, "system", -1))
    for i, content in enumerate(contents):
        if not isinstance(content, dict) or not isinstance(content.get("parts"), list):
            raise InputError("expected a content with a 'parts' list", field=f"contents[{i}]")
        parts = [_part_block(f"contents[{i}].parts[{j}]", p, str(content.get("role", "user")), i)
                 for j, p in enumerate(content["parts"])]
        if parts:
            parts[0].first_in_message = True
        blocks += parts
    levels: dict[str, str] = rules.get("invalidation", {}) or {}
    values = {"model": model or body.get("model"), "cachedContent": body.get("cachedContent")}
    if cache_mode(body, endpoint) == "gemini_create" and not isinstance(contents, list):
        raise InputError("expected a cachedContents body with a 'contents' list", field="contents")
    params = {n: IdentityParam.of(n, v, levels.get(n, "all")) for n, v in values.items() if n in levels}
    chain_hashes(blocks, params)
    model = model or body.get("model")
    if isinstance(model, str) and model.startswith("models/"):
        model = model[len("models/"):]
    return RenderedRequest("gemini", "gemini_generate", model, blocks, params, cache_mode=cache_mode(body, endpoint))
