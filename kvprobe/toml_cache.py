"""TOML files parsed once, kept between runs (the provider rules: tomllib is pure Python, ~7 ms for
providers/, a tenth of `kvprobe diff`). `--help` keeps the command summaries it reads from the CLI's
modules the same way (`cli.fasthelp`, its own `parse`).

A folder's files are kept parsed in one marshal file in the user's cache (kvprobe.user_cache), each with
the size, times and inode its file had when it was parsed: a file whose stat differs in any of them is
parsed again (an edit is seen at once), and the TOML stays the only source of truth. A cache that is
missing, from another Python, damaged or unwritable only costs the parsing. A file holding a date or time
(which marshal cannot keep) is parsed every run.
"""
from __future__ import annotations

import binascii
import marshal
import os
from collections.abc import Callable
from pathlib import Path

from kvprobe import user_cache

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

FORMAT = 1  # raised when what is kept changes


def read_all(paths: list[Path], parse: Callable[[Path], dict[str, Any]]) -> list[dict[str, Any]]:
    """Each file's parsed TOML (`parse(path)` for those the cache has not, or has stale), in order. All the
    paths are in one folder."""
    if not paths:
        return []
    stats = [_stat(path) for path in paths]
    folder = str(paths[0].parent.resolve())
    cache = user_cache.folder() / f"toml-{binascii.crc32(folder.encode('utf-8', 'surrogateescape')):08x}.marshal"
    kept = _read(cache, folder)
    parsed: list[dict[str, Any]] = []
    fresh: dict[str, tuple[tuple[int, ...], dict[str, Any]]] = {}
    for path, stat in zip(paths, stats):
        entry = kept.get(path.name)
        data = entry[1] if entry is not None and stat is not None and entry[0] == stat else None
        if data is None:
            data = parse(path)
            if stat is not None and _marshallable(data):
                fresh[path.name] = (stat, data)
        parsed.append(data)
    if fresh:
        # (the entries of the folder's other files stay while those files do: the provider rules and the
        # credential shapes are read from one folder by two readers, each naming only its own files)
        names = {path.name for path in paths}
        others = {name: entry for name, entry in kept.items()
                  if name in names or os.path.exists(os.path.join(folder, name))}
        _write(cache, folder, others | fresh)
    return parsed


def parse(path: Path) -> dict[str, Any]:
    """A TOML file parsed, for `read_all` (tomllib imported here: it imports typing, ~7 ms together, and a run
    whose files are all kept needs neither)."""
    import tomllib

    return tomllib.loads(path.read_text(encoding="utf-8"))


def _stat(path: Path) -> tuple[int, ...] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None  # parse() says why
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


def _read(cache: Path, folder: str) -> dict[str, tuple[tuple[int, ...], dict[str, Any]]]:
    """The entries kept for `folder` (the cache file is named by a checksum of its path, which it holds)."""
    try:
        fmt, kept_for, entries = marshal.loads(cache.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        return {}
    if fmt != FORMAT or kept_for != folder or not isinstance(entries, dict):
        return {}
    return {name: entry for name, entry in entries.items() if isinstance(entry, tuple) and len(entry) == 2
            and isinstance(entry[1], dict)}


def _write(cache: Path, folder: str, entries: dict[str, tuple[tuple[int, ...], dict[str, Any]]]) -> None:
    user_cache.write(cache, marshal.dumps((FORMAT, folder, entries)))  # (unwritten: parsed again next run)


def _marshallable(value: Any) -> bool:
    """Whether marshal keeps the value as it is: TOML's tables, arrays, strings, numbers and booleans, not its
    dates and times."""
    if isinstance(value, dict):
        return all(_marshallable(v) for v in value.values())
    if isinstance(value, list):
        return all(_marshallable(v) for v in value)
    return isinstance(value, (str, int, float))  # (bool is an int)
