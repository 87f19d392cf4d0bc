"""The lines of a Claude Code transcript that `usage` need not parse: read by their first bytes, not decoded.

`usage` (importers' `history=False`) needs a transcript's response lines and, of every other line, only the
timestamp of the one a request answers (its `parentUuid`: when the request was sent). Most of a transcript's
bytes are lines that can hold no usage: the main thread's user lines (prompts and tool results, 50-80% of
the bytes) and the progress lines of tools and hooks (`bash_progress` output, `hook_progress`; a subagent's
progress line holding its *user* message). Decoding them is most of what reading costs, so they are
recognised by their head (Claude Code writes `type` before the message; no object or array opens before
it, so that `type` is the line's own) and only held, the last few, until a response names one of them as
its parent: its timestamp is then read beside its `uuid` (Claude Code writes `"uuid":…,"timestamp":…`
together), or the line is decoded when it is written otherwise.

What this gives up, for `usage` only (`report` decodes every line): a held line is checked for its shape (one
object, whole to its closing brace: a line cut short is decoded, so counted as malformed), not decoded, so
text broken inside it, or a second object joined onto it, is not seen there.
"""
from __future__ import annotations

from collections import deque

import orjson

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

HEAD = 1024  # bytes in which a line names its type, or is decoded (Claude Code's keys before `type` are short)
SMALLEST = 2048  # shorter lines are decoded: that costs about what looking at their head would
HELD = 16  # lines held for a parent look-up: a response's parent is the last or second-to-last of them (read
# over 1,331 public and generated transcripts: never further back)
# progress lines that never carry a response: their `data` opens with its type
_IDLE_PROGRESS = (b'"type":"bash_progress"', b'"type":"hook_progress"', b'"type":"mcp_progress"',
                  b'"type":"waiting_for_task"')
_WHOLE = (b"}\n", b"}\r\n", b"}")  # how a whole line of one object ends
_SUBAGENT_PROMPT = b'"message":{"type":"user"'  # an agent_progress line holding the subagent's user message


class Skim:
    """Which lines of one transcript are held instead of decoded, and the parent timestamps read from them."""

    __slots__ = ("held", "count", "own_lines")

    def __init__(self, subagent_file: bool) -> None:
        self.held: deque[bytes] = deque(maxlen=HELD)
        self.count = 0  # lines held (counted as ignored, as a decoded line of their kind would be)
        # in a subagent's own file, user lines are the subagent's (isSidechain true): nothing else needs them
        self.own_lines = subagent_file

    def holds(self, raw: bytes) -> bool:
        """True when the line is one that cannot hold usage: it is held, not decoded."""
        at = raw.find(b'"type":"', 0, HEAD)
        if at < 0 or raw[0] != 123 or raw.find(b"{", 1, at) >= 0 or raw.find(b"[", 1, at) >= 0:
            return False  # no top-level type in the head (another writer, a nested value first): decoded
        value = at + 8
        if raw.startswith(b'user"', value):
            # a main-thread line; an inline subagent's (isSidechain true) tells which subagent its chain is
            if not (self.own_lines or raw.find(b'"isSidechain":false', 0, at) >= 0):
                return False
        elif raw.startswith(b'progress"', value):
            data = raw.find(b'"data":{', value, value + 64) + 8
            if data < 8 or not (raw.startswith(_IDLE_PROGRESS, data) or raw.startswith(_SUBAGENT_PROMPT, data)):
                return False
        else:
            return False
        if not raw.endswith(_WHOLE):  # (iter_lines keeps the line break)
            return False  # cut short: decoded, and counted as malformed there
        self.held.append(raw)
        self.count += 1
        return True

    def timestamp(self, uuid: str) -> Any:
        """The timestamp of the held line whose uuid this is, as written; None when none held is."""
        needle = b'"uuid":"' + uuid.encode() + b'"'
        for raw in reversed(self.held):
            at = raw.rfind(needle)
            if at < 0:
                continue
            start = at + len(needle)
            if raw.startswith(b',"timestamp":"', start):
                start += 14
                end = raw.find(b'"', start)
                if end > start:
                    return raw[start:end].decode(errors="replace")
            try:  # written otherwise: decoded, this line only
                line = orjson.loads(raw)
            except orjson.JSONDecodeError:
                return None
            return line.get("timestamp") if line.__class__ is dict and line.get("uuid") == uuid else None
        return None
