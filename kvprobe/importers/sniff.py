"""What a file holds, from a bounded prefix: format detection never reads a whole line or a whole document.

A folder scan looks at every `.json`/`.jsonl` file in it, and one of them can be a 2 GB export, a sparse file
or one line with no end: each is sniffed from its first `SNIFF_BYTES`. The first value is, in order:

* the first complete line of the prefix that parses (JSON Lines: a transcript, a rollout, a trace);
* a JSON array's first element, when it is complete in the prefix (`array=True`: a hook-written
  `logs/chat.json` holds a Claude Code transcript's lines as one array);
* the whole document, when the file fits in the prefix;
* else a shallow view of the object the prefix starts (one long line, or a large document): its top-level
  keys in order, each value as parsed where it is complete, and an empty `Cut` dict or list where the prefix
  ends inside it. That is enough for every sniffer (`"log"` is an object, `"sessionId"` is there, …).

`document=True` says the format would be read as one JSON value (an array, a pretty-printed or single-line
document), which `too_large` bounds: reading it means holding all of it.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import orjson

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

SNIFF_BYTES = 1 << 20
# Read in steps, each further one only when no line complete in what was read parses: most logs' first line
# is a few KB (Claude Code's ~0.7-9 KB), and every file of a folder is sniffed before any is read
SNIFF_STEPS = (16 << 10, 64 << 10)
SNIFF_LINES = 20
# A whole-document format (HAR, OTLP JSON, a Gemini CLI session document, chat.json) is parsed in one go:
# ~3-5x its size in memory. Larger ones are refused, said, never half-read (KVPROBE_MAX_DOCUMENT_MB to change).
MAX_DOCUMENT_BYTES = 512 << 20
_DECODER = json.JSONDecoder()
_SPACE = " \t\r\n"


class CutDict(dict):
    """An object the sniffed prefix ends inside of (its content unknown)."""


class CutList(list):
    """An array the sniffed prefix ends inside of."""


@dataclass(frozen=True, slots=True)
class Sniffed:
    """What a file's bounded prefix shows of its format."""

    value: Any  # the first JSON value (see the module docstring), None when nothing parses
    document: bool = False  # read as one JSON value, not line by line
    array: bool = False  # the file is a JSON array; value is its first element
    broken: bool = False  # the whole file was read and is no JSON: value is what its object shows before the break


def max_document_bytes() -> int:
    raw = os.environ.get("KVPROBE_MAX_DOCUMENT_MB", "")
    return int(raw) << 20 if raw.isdigit() and int(raw) > 0 else MAX_DOCUMENT_BYTES


def sniff(path: str | Path) -> Sniffed:
    with open(path, "rb") as fh:
        head = b""
        for step in SNIFF_STEPS:
            head += fh.read(step - len(head))
            found = _first_line_of(head, whole=len(head) < step)
            if found is not None:
                return Sniffed(found)
            if len(head) < step:  # the whole file is read
                break
        prefix = head + fh.read(SNIFF_BYTES - len(head))
        whole = len(prefix) < SNIFF_BYTES or not fh.read(1)
    body = prefix.lstrip(b"\xef\xbb\xbf \t\r\n")  # a UTF-8 BOM, then blank lines
    if not body:
        return Sniffed(None)
    if body[:1] == b"[":
        return Sniffed(_first_element(body, whole), document=True, array=True)
    found = _first_line(body, whole)
    if found is not None:
        return Sniffed(found)
    if whole:
        try:
            return Sniffed(orjson.loads(body), document=True)
        except orjson.JSONDecodeError:  # cut short or broken: what its keys say it was meant to be
            return Sniffed(_shallow(_text(body)) if body[:1] == b"{" else None, document=True, broken=True)
    if body[:1] == b"{":
        return Sniffed(_shallow(_text(body)), document=b"\n" in body.rstrip(b"\r\n"))
    return Sniffed(None)


def _first_line_of(head: bytes, whole: bool) -> Any:
    """What `sniff` finds from `head` alone, when that is the first line that parses (a JSON Lines file, which
    nearly every log is); None when the whole prefix must be read. A line complete in `head` is the same line,
    with the same lines before it, in the longer prefix: reading that (1 MiB of each file, while a log's first
    line is a few KB) cost a tenth of `usage`'s CPU on a folder of 179 transcripts."""
    body = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    return _first_line(body, whole) if body and body[:1] != b"[" else None


def _first_line(body: bytes, whole: bool) -> Any:
    """The first of the prefix's first lines that parses; a line the prefix cuts is not tried."""
    lines = body.split(b"\n", SNIFF_LINES)
    complete = lines if whole else lines[:-1]
    for line in complete[:SNIFF_LINES]:
        if line.strip():
            try:
                return orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
    return None


def _text(body: bytes) -> str:
    return body.decode("utf-8", errors="ignore")  # the prefix may end inside a multi-byte character


def _first_element(body: bytes, whole: bool) -> Any:
    if whole:
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError:
            doc = None
        if isinstance(doc, list):
            return doc[0] if doc else None
    text = _text(body)
    i = _skip(text, 1)
    try:
        return _DECODER.raw_decode(text, i)[0]
    except json.JSONDecodeError:
        return _shallow(text[i:]) if text[i:i + 1] == "{" else None


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _SPACE:
        i += 1
    return i


def _shallow(text: str) -> dict[str, Any] | None:
    """The top-level keys of the object `text` starts, values parsed where complete, a Cut where cut off."""
    out: dict[str, Any] = {}
    i = _skip(text, 1)
    while i < len(text) and text[i] == '"':
        try:
            key, i = _DECODER.raw_decode(text, i)
        except json.JSONDecodeError:
            break
        i = _skip(text, i)
        if text[i:i + 1] != ":":
            break
        i = _skip(text, i + 1)
        try:
            out[key], i = _DECODER.raw_decode(text, i)
        except json.JSONDecodeError:
            opener = text[i:i + 1]
            if opener in ("{", "["):
                out[key] = CutDict() if opener == "{" else CutList()
            break
        i = _skip(text, i)
        if text[i:i + 1] != ",":
            break
        i = _skip(text, i + 1)
    return out or None
