"""Say what kind of content changed: a timestamp, an id, a reordered or inserted tool, ..."""
from __future__ import annotations

import re

from kvprobe.request.model import Block

# tried in order, each compiled when first tried (and kept by `re`'s own cache): a timestamp, the usual
# change, needs one of the five
_PATTERNS = [
    ("a timestamp", r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2})?|\d{1,2}:\d{2}:\d{2}", 0),
    ("a date", r"\d{4}-\d{2}-\d{2}|\b(Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*,? ", 0),
    ("a UUID", r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I),
    ("an id", r"\b[0-9a-f]{12,}\b|\b(run|req|session|msg|toolu|call)[_-][A-Za-z0-9]{4,}", re.I),
    ("a number", r"\d+", 0),
]


def _window(text: str, offset: int, before: int = 40, after: int = 40) -> str:
    return text[max(0, offset - before): offset + after]


def classify_text_change(a: str, b: str, offset: int) -> str | None:
    """Name the kind of token that changed around `offset`, if it looks volatile."""
    wa, wb = _window(a, offset), _window(b, offset)
    for label, source, flags in _PATTERNS:
        pattern = re.compile(source, flags)
        ma = [m for m in pattern.finditer(wa) if m.start() <= min(offset, 40) + 1 and m.end() >= min(offset, 40)]
        mb = [m for m in pattern.finditer(wb) if m.start() <= min(offset, 40) + 1 and m.end() >= min(offset, 40)]
        if ma or mb:
            return label
    return None


def describe_change(a_blocks: list[Block], b_blocks: list[Block], index: int, offset: int) -> str:
    """A sentence saying what changed at the first differing block."""
    a = a_blocks[index] if index < len(a_blocks) else None
    b = b_blocks[index] if index < len(b_blocks) else None
    level = (b or a).level  # type: ignore[union-attr]
    where = "near the start of" if offset < 200 else "inside"
    if b is None:
        return f"{a.path} and everything after it were removed"  # type: ignore[union-attr]
    if a is None:
        return f"{b.path} was added"
    if level == "tools" and a.level == b.level == "tools":
        a_tools = [x.text for x in a_blocks if x.level == "tools"]
        b_tools = [x.text for x in b_blocks if x.level == "tools"]
        if sorted(a_tools) == sorted(b_tools):
            return "the tool definitions were reordered"
        if a.text in b_tools[index + 1:]:
            return f"a tool was inserted at {b.path}"
        if b.text in a_tools[index + 1:]:
            return f"the tool at {a.path} was removed"
        return f"the definition of {b.path} changed"
    if a.path != b.path:  # the blocks hold different places (e.g. A has tools, B none; or another API's shape)
        return f"A's {a.path} ({a.kind.replace('_', ' ')}) and B's {b.path} ({b.kind.replace('_', ' ')}) differ"
    if a.kind != b.kind:
        return f"{b.path} changed from a {a.kind} block to a {b.kind} block"
    if a.text == b.text:
        return f"the attributes of {b.path} changed (not its text)"
    label = classify_text_change(a.text, b.text, offset)
    what = {"system": "the system prompt", "tools": "a tool definition"}.get(level, f"{b.path}")
    if label:
        return f"{label} {where} {what} changed"
    return f"the text {where} {what} changed"
