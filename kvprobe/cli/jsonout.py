"""JSON on standard output, safe for a terminal: without Typer or rich, so that a command answered without
them (`kvprobe usage --json`, kvprobe.cli.fastusage) prints what the full CLI prints, byte for byte."""
from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator

import orjson

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

# JSON encoders escape C0 controls but write DEL and the C1 range (U+0080-U+009F, e.g. U+009B, a one-byte CSI)
# as they are: valid JSON, but a terminal acts on them. Inside JSON strings they are spelled as \u escapes
# (the same value for any parser); in UTF-8 they are 0x7f and 0xc2 0x80-0x9f, which occur nowhere else.
_RAW_CONTROLS = re.compile(rb"\x7f|\xc2[\x80-\x9f]")


def terminal_safe(encoded: bytes) -> bytes:
    """JSON bytes with the control characters JSON leaves raw escaped (`print_json`, streamed lines)."""
    if b"\x7f" not in encoded and b"\xc2" not in encoded:
        return encoded
    return _RAW_CONTROLS.sub(lambda m: b"\\u%04x" % ord(m.group(0).decode()), encoded)


def print_json(data: Any) -> None:
    encoded = terminal_safe(orjson.dumps(
        data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE, default=str))
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is not None:  # the bytes as they are: no decoded copy (tens of MB for a large report)
        sys.stdout.flush()
        buffer.write(encoded)
        buffer.flush()
    else:  # a text-only stream (some test runners)
        sys.stdout.write(encoded.decode())


_JSON_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS


def print_json_items(items: Iterable[tuple[str, Any]]) -> None:
    """`print_json` of the dict these (key, value) pairs make, byte for byte, written as it is encoded: a value
    that is an iterator (a report's request rows) is encoded an element at a time, so neither the rows as
    dicts nor their bytes are ever held whole (about 5 KB a request on a fleet's report)."""
    buffer = getattr(sys.stdout, "buffer", None)
    write = buffer.write if buffer is not None else (lambda data: sys.stdout.write(data.decode()))
    sys.stdout.flush()
    pending: list[bytes] = []
    size = 0

    def put(data: bytes) -> None:
        nonlocal size
        pending.append(data)
        size += len(data)
        if size > 1 << 20:
            write(terminal_safe(b"".join(pending)))
            pending.clear()
            size = 0
    first = True
    for key, value in items:
        put((b"{\n  " if first else b",\n  ") + orjson.dumps(key) + b": ")
        first = False
        if not isinstance(value, Iterator):
            put(orjson.dumps(value, option=_JSON_OPTIONS, default=str).replace(b"\n", b"\n  "))
            continue
        opened = False
        for item in value:  # orjson's own layout of a list: "[", each item on its own lines, "]"
            put((b",\n    " if opened else b"[\n    ")
                + orjson.dumps(item, option=_JSON_OPTIONS, default=str).replace(b"\n", b"\n    "))
            opened = True
        put(b"\n  ]" if opened else b"[]")
    put(b"{}\n" if first else b"\n}\n")
    write(terminal_safe(b"".join(pending)))
    if buffer is not None:
        buffer.flush()
