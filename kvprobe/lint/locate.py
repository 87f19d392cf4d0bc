"""Place a finding in its source file: the line and columns of a block's text inside the JSON.

The request body is parsed again with positions (only along the path of the block), so a finding points
at the string in the file, and a character span of the block's text at its exact columns, escapes included.
"""
from __future__ import annotations

import json
import re
from typing import Any

from kvprobe.lint.model import Region

_WS = re.compile(r"[ \t\n\r]*")
_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]")
_TEXT_KEYS = ("text", "content", "thinking", "output", "data")
_decoder = json.JSONDecoder()


def pointer(path: str) -> list[str | int]:
    """`messages[3].content[0]` -> ["messages", 3, "content", 0]."""
    return [int(m.group(2)) if m.group(2) is not None else m.group(1) for m in _STEP.finditer(path)]


def _skip_ws(text: str, pos: int) -> int:
    return _WS.match(text, pos).end()  # type: ignore[union-attr]


def _members(text: str, pos: int):
    """(key or index, value start) of each member of the object or array starting at `pos`."""
    opener = text[pos]
    pos = _skip_ws(text, pos + 1)
    index = 0
    while text[pos] not in "}]":
        key: str | int = index
        if opener == "{":
            key, pos = json.decoder.scanstring(text, pos + 1)
            pos = _skip_ws(text, _skip_ws(text, pos) + 1)  # past ':'
        yield key, pos
        _, pos = _decoder.raw_decode(text, pos)
        pos = _skip_ws(text, pos)
        if text[pos] == ",":
            pos = _skip_ws(text, pos + 1)
        index += 1


def value_at(text: str, steps: list[str | int], pos: int = 0) -> int | None:
    """Offset of the value at `steps` in a JSON document, or None when it is not there."""
    pos = _skip_ws(text, pos)
    for step in steps:
        if text[pos] not in "{[":
            return None
        pos = next((start for key, start in _members(text, pos) if key == step), -1)
        if pos < 0:
            return None
    return pos


def string_offset(text: str, literal: int, chars: int) -> int:
    """Offset in `text` of the `chars`-th decoded character of the string literal starting at `literal`."""
    pos = literal + 1
    for _ in range(chars):
        if text[pos] != "\\":
            pos += 1
        elif text[pos + 1] != "u":
            pos += 2
        else:  # \\uXXXX, two of them for a surrogate pair (one character once decoded)
            high = int(text[pos + 2: pos + 6], 16)
            pos += 12 if 0xD800 <= high < 0xDC00 and text[pos + 6: pos + 8] == "\\u" else 6
    return pos


def _text_literal(text: str, pos: int, block_text: str) -> int | None:
    """The string literal holding the block's text: the value itself or its text field."""
    candidates = [pos]
    if text[pos] == "{":
        candidates += [start for key, start in _members(text, pos) if key in _TEXT_KEYS]
    for start in candidates:
        if text[start] == '"' and _decoder.raw_decode(text, start)[0] == block_text:
            return start
    return None


def _line_col(text: str, offset: int, base_line: int) -> tuple[int, int]:
    line_start = text.rfind("\n", 0, offset) + 1
    return base_line + text.count("\n", 0, offset), offset - line_start + 1


def locate(text: str, steps: list[str | int], base_line: int = 1, block_text: str | None = None,
           span: tuple[int, int] | None = None) -> Region | None:
    """The region of a block (or of a span of its text) in the JSON `text`; None when the path is absent."""
    try:
        pos = value_at(text, steps)
        if pos is None:
            return None
        literal = _text_literal(text, pos, block_text) if block_text is not None and span else None
    except (ValueError, IndexError):
        return None
    if literal is None or span is None:
        line, col = _line_col(text, pos, base_line)
        return Region(line, col)
    start = _line_col(text, string_offset(text, literal, span[0]), base_line)
    end = _line_col(text, string_offset(text, literal, span[1]), base_line)
    return Region(start[0], start[1], end[0], end[1])


def record_text(source: str, offset: int | None) -> str | None:
    """The text of a whole JSON file (offset None) or of one JSONL line."""
    try:
        with open(source, "rb") as fh:
            if offset is None:
                return fh.read().decode("utf-8", "replace")
            fh.seek(offset)
            return fh.readline().decode("utf-8", "replace")
    except OSError:
        return None


def steps_for(path: str | None, in_record: bool) -> list[Any]:
    head: list[Any] = ["request"] if in_record else []
    return head + (pointer(path) if path else [])
