"""Blocks of an Anthropic request body by block path (`tools[i]`, `system[i]`, `messages[i].content[j]`), and
the text a span can sit in (a text block's text, a tool's description)."""
from __future__ import annotations

import re
from typing import Any

PATH = re.compile(r"^(tools|system|messages)(?:\[(\d+)\])?(?:\.content\[(\d+)\])?$")


def content_list(msg: dict[str, Any], writable: bool) -> list[dict[str, Any]]:
    content = msg.get("content")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
        if writable:
            msg["content"] = content
    elif writable:
        content = msg["content"] = list(content or [])
    return content


def writable_item(items: list, idx: int) -> dict:
    items[idx] = dict(items[idx])
    return items[idx]


def block_at(body: dict[str, Any], path: str, writable: bool = False) -> tuple[dict[str, Any] | None, Any]:
    """(the JSON object holding the block, the block) for an Anthropic path, or (None, None).

    writable: the containers along the path are copied into `body` first, so the block may be edited without
    touching the record it was copied from (a top-level copy, as `copy_record` makes)."""
    m = PATH.match(path)
    if not m:
        return None, None
    level, i, j = m.group(1), m.group(2), m.group(3)
    if level in ("system", "tools"):
        items = body.get(level)
        if level == "system" and isinstance(items, str):
            items = [{"type": "text", "text": items}]
        items = list(items or [])
        if writable:
            body[level] = items
        idx = int(i or 0)
        if idx >= len(items):
            return None, None
        return body, (writable_item(items, idx) if writable else items[idx])
    msgs = body.get("messages") or []
    if i is None or int(i) >= len(msgs):
        return None, None
    if writable:
        msgs = body["messages"] = list(msgs)
        msg = writable_item(msgs, int(i))
    else:
        msg = msgs[int(i)]
    parts = content_list(msg, writable)
    k = int(j or 0)
    if k >= len(parts):
        return None, None
    return msg, (writable_item(parts, k) if writable else parts[k])


def text_at(body: Any, path: str) -> str | None:
    """The text at a block path that a volatile span can sit in: a text block's text, a tool's description."""
    if not isinstance(body, dict):
        return None
    _, block = block_at(body, path)
    if not isinstance(block, dict):
        return None
    value = block.get("description") if path.startswith("tools") else block.get("text")
    return value if isinstance(value, str) else None


_SEGMENT = re.compile(r"^([a-z_]+)(?:\[(\d+)\])?$")


def part_at(body: Any, path: str, writable: bool = False, text_type: str | None = None) -> Any:
    """The content part at any block path of any API's body (`messages[i].content[j]`, `input[i]`,
    `input[i].content[j]`, `messages[i]`); None when there is none. A message whose content is a string is
    addressed as its one text part; writable: containers along the path are copied into `body` first, and
    such a string becomes a list of one text part, so the part may be edited."""
    text_type = text_type or ("input_text" if path.startswith("input") else "text")
    node: Any = body
    segments = path.split(".")
    for n, segment in enumerate(segments):
        m = _SEGMENT.match(segment)
        if m is None or not isinstance(node, dict):
            return None
        key, index = m.group(1), m.group(2)
        value = node.get(key)
        last = n == len(segments) - 1
        if isinstance(value, str) and key in ("content", "input") and (index in (None, "0")):
            if not writable:
                return {"type": text_type, "text": value}
            value = node[key] = [{"type": text_type, "text": value}]
            index = "0"
        if index is None:
            if last and isinstance(value, dict):
                return writable_item_of(node, key) if writable else value
            if last and isinstance(node.get("content"), str):  # `messages[i]`: the message's own text
                return part_at(node, "content[0]", writable, text_type)
            node = value
            continue
        if not isinstance(value, list) or int(index) >= len(value):
            return None
        if writable:
            value = node[key] = list(value)
            value[int(index)] = dict(value[int(index)]) if isinstance(value[int(index)], dict) else value[int(index)]
        node = value[int(index)]
        if last and isinstance(node, dict) and isinstance(node.get("content"), str) and key in ("messages", "input"):
            return part_at(node, "content[0]", writable, text_type)
    return node if isinstance(node, dict) else None


def writable_item_of(holder: dict, key: str) -> dict:
    holder[key] = dict(holder[key])
    return holder[key]
