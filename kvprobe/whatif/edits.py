"""Edits of request bodies by block path: mark a breakpoint, replace a block's text, append a block.

Every edit copies the record it changes; the input trace is never mutated.
"""
from __future__ import annotations

import copy
import re
from dataclasses import replace
from typing import Any

from kvprobe.trace import TraceRecord

_PATH = re.compile(r"^(tools|system|messages)(?:\[(\d+)\])?(?:\.content\[(\d+)\])?$")
EPHEMERAL = "ephemeral"


def copy_record(rec: TraceRecord, **changes: Any) -> TraceRecord:
    """A copy with its own request body (deep) and no observed usage: what-if traces are simulated."""
    out = replace(rec, request=copy.deepcopy(rec.request), response=None, extra=dict(rec.extra), **changes)
    return out


def _content_list(msg: dict[str, Any]) -> list[dict[str, Any]]:
    if isinstance(msg.get("content"), str):
        msg["content"] = [{"type": "text", "text": msg["content"]}]
    return msg["content"]


def block_at(body: dict[str, Any], path: str) -> tuple[dict[str, Any] | None, Any]:
    """(the JSON object holding the block, the block) for an Anthropic path, or (None, None)."""
    m = _PATH.match(path)
    if not m:
        return None, None
    level, i, j = m.group(1), m.group(2), m.group(3)
    if level == "system":
        if isinstance(body.get("system"), str):
            body["system"] = [{"type": "text", "text": body["system"]}]
        items = body.get("system") or []
        idx = int(i or 0)
        return (body, items[idx]) if idx < len(items) else (None, None)
    if level == "tools":
        items = body.get("tools") or []
        idx = int(i or 0)
        return (body, items[idx]) if idx < len(items) else (None, None)
    msgs = body.get("messages") or []
    if i is None or int(i) >= len(msgs):
        return None, None
    parts = _content_list(msgs[int(i)])
    k = int(j or 0)
    return (msgs[int(i)], parts[k]) if k < len(parts) else (None, None)


def breakpoint_count(body: dict[str, Any]) -> int:
    count = 1 if body.get("cache_control") else 0
    for tool in body.get("tools") or []:
        count += bool(isinstance(tool, dict) and tool.get("cache_control"))
    system = body.get("system")
    for part in system if isinstance(system, list) else []:
        count += bool(isinstance(part, dict) and part.get("cache_control"))
    for msg in body.get("messages") or []:
        content = msg.get("content") if isinstance(msg, dict) else None
        for part in content if isinstance(content, list) else []:
            count += bool(isinstance(part, dict) and part.get("cache_control"))
    return count


def mark_breakpoint(body: dict[str, Any], path: str, ttl: str | None = None, limit: int = 4) -> bool:
    """Put a cache_control marker on the block at `path`; False when impossible (no such block, limit)."""
    _, block = block_at(body, path)
    if not isinstance(block, dict):
        return False
    if block.get("cache_control"):
        return True
    if breakpoint_count(body) >= limit:
        return False
    block["cache_control"] = {"type": EPHEMERAL, **({"ttl": ttl} if ttl else {})}
    return True


def set_all_ttls(body: dict[str, Any], ttl: str) -> None:
    """Every breakpoint of the request gets the same TTL (so 1h entries never follow 5m ones)."""
    def visit(obj: Any) -> None:
        if isinstance(obj, dict):
            if isinstance(obj.get("cache_control"), dict):
                obj["cache_control"] = {**obj["cache_control"], "ttl": ttl}
            for value in obj.values():
                visit(value)
        elif isinstance(obj, list):
            for value in obj:
                visit(value)
    visit(body)


def append_after_last_breakpoint(body: dict[str, Any], text: str) -> None:
    """Add a text block at the very end of the last message: after every breakpoint."""
    msgs = body.get("messages") or []
    if not msgs:
        return
    last = msgs[-1]
    if last.get("role") != "user":
        msgs.append({"role": "user", "content": [{"type": "text", "text": text}]})
        return
    _content_list(last).append({"type": "text", "text": text})
