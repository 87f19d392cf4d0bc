"""Recorded request bodies -> OpenAI Chat Completions bodies, for engines such as vLLM and SGLang.

Anthropic Messages bodies are converted (tools -> functions, system -> a system message, tool_use ->
assistant tool_calls, tool_result -> tool messages, thinking dropped, media as text placeholders), so the
remote engine's own chat template lays out the same conversation. Chat Completions bodies pass through.
"""
from __future__ import annotations

import json
from typing import Any

from kvprobe.request.content import text_of_parts


def _tool(tool: dict[str, Any]) -> dict[str, Any] | None:
    if "input_schema" not in tool:  # server tools (web search, ...) have no schema to send
        return None
    fn = {"name": tool.get("name", "tool"), "parameters": tool.get("input_schema") or {"type": "object"}}
    if tool.get("description"):
        fn["description"] = tool["description"]
    return {"type": "function", "function": fn}


def _system_text(system: Any) -> str:
    if isinstance(system, list):
        return "\n".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in system)
    return str(system or "")


def _user_parts(content: list[Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """(tool messages, text pieces) of a user message's content blocks, in order."""
    tools, texts = [], []
    for part in content:
        if not isinstance(part, dict):
            texts.append(str(part))
        elif part.get("type") == "tool_result":
            tools.append({"role": "tool", "tool_call_id": str(part.get("tool_use_id", "")),
                          "content": text_of_parts(part.get("content"))})
        elif part.get("type") == "text":
            texts.append(str(part.get("text", "")))
        else:
            texts.append(f"[{part.get('type', 'content')}]")
    return tools, texts


def _assistant(content: list[Any]) -> dict[str, Any]:
    texts, calls = [], []
    for part in content:
        if not isinstance(part, dict) or part.get("type") in ("thinking", "redacted_thinking"):
            continue
        if part.get("type") in ("tool_use", "server_tool_use"):
            calls.append({"id": str(part.get("id", "")), "type": "function",
                          "function": {"name": str(part.get("name", "")),
                                       "arguments": json.dumps(part.get("input") or {})}})
        elif part.get("type") == "text":
            texts.append(str(part.get("text", "")))
    # "" rather than null: llama.cpp's servers reject a null content (HTTP 500, or a crash mid-stream when
    # the field is left out); OpenAI and vLLM accept "" beside tool_calls.
    message: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts)}
    if calls:
        message["tool_calls"] = calls
    return message


def anthropic_to_chat(body: dict[str, Any]) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    system = _system_text(body.get("system"))
    if system:
        messages.append({"role": "system", "content": system})
    for msg in body.get("messages") or []:
        role, content = msg.get("role"), msg.get("content")
        if isinstance(content, str):
            messages.append({"role": role, "content": content})
        elif role == "assistant":
            messages.append(_assistant(content or []))
        else:
            tools, texts = _user_parts(content or [])
            messages += tools
            if texts or not tools:
                messages.append({"role": "user", "content": "\n".join(texts)})
    out: dict[str, Any] = {"messages": messages}
    tools = [t for t in (_tool(t) for t in body.get("tools") or [] if isinstance(t, dict)) if t]
    if tools:
        out["tools"] = tools
    return out


def to_chat_body(body: dict[str, Any], api: str) -> dict[str, Any] | None:
    """A Chat Completions body for a recorded request, or None when its format is not convertible."""
    if api == "anthropic_messages":
        return anthropic_to_chat(body)
    if api == "openai_chat":
        keep = ("messages", "tools", "tool_choice", "parallel_tool_calls")
        out = {k: body[k] for k in keep if k in body}
        out["messages"] = [m | {"content": ""} if isinstance(m, dict) and m.get("content") is None else m
                           for m in out.get("messages") or []]  # null or missing content: see _assistant
        return out
    return None
