"""Edits of request bodies by block path: mark a breakpoint, replace a block's text, append a block.

Every edit copies the record it changes (copy on write); the input trace is never mutated.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from kvprobe.request.paths import PATH as _PATH
from kvprobe.request.paths import block_at
from kvprobe.request.paths import content_list as _content_list
from kvprobe.request.paths import writable_item as _writable_item
from kvprobe.trace import TraceRecord
from kvprobe.usage import normalize_usage

EPHEMERAL = "ephemeral"


def copy_record(rec: TraceRecord, **changes: Any) -> TraceRecord:
    """A copy with no logged usage (what-if records are simulated) and its own top-level request dict.

    Copy on write: nested parts stay shared with the original until an edit makes them writable
    (`block_at(..., writable=True)`, `append_after_last_breakpoint`, `with_all_ttls`), so editing one field of
    a long request does not copy its whole history.
    """
    extra = dict(rec.extra)
    if rec.usage is not None:  # the answer is not what a fix changes: its output is kept for pricing
        extra.setdefault("output_tokens", normalize_usage(rec.provider, rec.usage).output_tokens)
    if "request" not in changes:
        changes["request"] = dict(rec.request) if rec.request is not None else None
    return replace(rec, response=None, extra=extra, **changes)


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
    _, block = block_at(body, path, writable=True)
    block["cache_control"] = {"type": EPHEMERAL, **({"ttl": ttl} if ttl else {})}
    return True


def with_all_ttls(value: Any, ttl: str) -> tuple[Any, bool]:
    """`value` with every breakpoint's TTL set to `ttl` (so 1h entries never follow 5m ones); containers are
    copied only along the paths that change. Returns (new value, whether anything changed)."""
    if isinstance(value, dict):
        out = None
        for key, item in value.items():
            if key == "cache_control" and isinstance(item, dict):
                new, changed = ({**item, "ttl": ttl}, True) if item.get("ttl") != ttl else (item, False)
            else:
                new, changed = with_all_ttls(item, ttl)
            if changed:
                out = out if out is not None else dict(value)
                out[key] = new
        return (out, True) if out is not None else (value, False)
    if isinstance(value, list):
        items = None
        for idx, item in enumerate(value):
            new, changed = with_all_ttls(item, ttl)
            if changed:
                items = items if items is not None else list(value)
                items[idx] = new
        return (items, True) if items is not None else (value, False)
    return value, False


def append_after_last_breakpoint(body: dict[str, Any], text: str) -> None:
    """Add a text block at the very end of the last message: after every breakpoint."""
    msgs = body.get("messages") or []
    if not msgs:
        return
    msgs = body["messages"] = list(msgs)
    if msgs[-1].get("role") != "user":
        msgs.append({"role": "user", "content": [{"type": "text", "text": text}]})
        return
    last = _writable_item(msgs, len(msgs) - 1)
    _content_list(last, True).append({"type": "text", "text": text})


def truncated_through(body: dict[str, Any], path: str) -> dict[str, Any] | None:
    """A body that ends with the block at a `messages[i].content[j]` path, marked, answering one token:
    the warm-up request that writes a shared prefix before siblings fan out. None when the path is not the
    end of a user turn."""
    m = _PATH.match(path)
    if not m or m.group(1) != "messages" or m.group(2) is None:
        return None
    i = int(m.group(2))
    msgs = list((body.get("messages") or [])[: i + 1])
    if len(msgs) != i + 1 or msgs[-1].get("role") != "user":
        return None
    out = {**body, "messages": msgs, "max_tokens": 1}
    block_at(out, f"messages[{i}]", writable=True)  # own copies of the message and its content list
    holder = out["messages"][i]
    if m.group(3) is not None:
        holder["content"] = holder["content"][: int(m.group(3)) + 1]
    return out if mark_breakpoint(out, path) else None
