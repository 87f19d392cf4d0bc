"""What `usage` read of each agent log, kept between runs: a file unchanged since is not read again.

Agent logs grow by appending and old sessions never change, so most of a folder that `usage` read yesterday
is the same today. Each file's rows (`importers.summary.usage_row`, what `usage` adds up) and its read
counts (`SourceStats`) are kept in the user's cache (`kvprobe.user_cache`), under the size, modification
and change times and inode its file (and the chunks that continue it) had before it was read (one written to
while it was read is not kept): a file whose stat differs in any of them is read again, so the log stays the
only source of truth.

A file kept is one read alone (its own set of requests seen): the same request in two files is merged
where the rows of all files meet (`loading._dedupe`, in file order), as when files are read by several
processes, so a file's rows do not depend on which other files were read with it. Entries are keyed by the
code that read them (the stats of the modules that make rows and of the rule files: a new kvprobe, an
edited module or rule file starts a new set) and by $KVPROBE_PROVIDERS_DIR.

Only formats whose rows come from the file alone are kept (a Claude Code transcript, a Codex rollout, whose
fork replays its parent's history in its own file; not a Cline task, whose side files count, nor an SQLite
store). A cache missing, damaged, from another Python or unwritable
only costs the reading; `usage --no-cache` (or KVPROBE_ROW_CACHE=0) reads every file.
"""
from __future__ import annotations

import binascii
import marshal
import os
import time
from dataclasses import fields
from pathlib import Path

import xxhash

from kvprobe import user_cache
from kvprobe.environ import providers_dir_override
from kvprobe.importers.base import SourceStats, parts_of

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

FORMAT = 2  # raised when what a pack holds changes
KEPT_FORMATS = frozenset({"claude_code", "codex"})  # rows from the file alone
OFF = "KVPROBE_ROW_CACHE"  # "0": every file read
_PACKAGE = Path(__file__).resolve().parent.parent
# what makes a file's rows: the importers, the record and its usage, the credential scrub, the platform rules
_MAKERS = ("importers", "trace", "request", "usage.py", "secrets.py", "catalog.py", "environ.py")
_STATS = [f.name for f in fields(SourceStats)]
_COUNTERS = frozenset(f.name for f in fields(SourceStats) if f.name in ("skipped", "platforms"))


def kept_alone(path: Path, kind: str) -> bool:
    """Whether the file's rows come from it alone: a JSON Lines transcript of a format kept (not, say, a
    subagent's `.meta.json`, read as nothing only while its transcript sits beside it)."""
    return kind in KEPT_FORMATS and path.name.endswith(".jsonl")


def enabled() -> bool:
    return os.environ.get(OFF, "1") != "0"


class RowCache:
    """The entries kept for one set of roots (the paths `usage` was given) by one code version: `get` a file's
    kept rows, `put` those just read, `flush` them. Entries travel in packs, one written by each run that
    read files (the entries its forked workers made travel back to it: one file a run, not one a log); a
    pack's entries replace older ones, and from `PACKS` packs a run writes what it used as one pack and removes
    those it read.
    `row_class`: the named tuple the rows are (what `load_any`'s `reduce` makes)."""

    __slots__ = ("folder", "row_class", "kept", "packs", "fresh", "used")

    def __init__(self, row_class: Any, roots: list[str], folder: Path | None = None) -> None:
        self.row_class = row_class
        made_by = (row_class.__name__, row_class._fields, *_code_stamp())
        where = sorted(os.path.abspath(r) for r in roots)
        self.folder = (folder or user_cache.folder()) / "usage-rows" / _digest(repr(made_by))[:16] / \
            _digest("\0".join(where))[:16]
        self.kept: dict[tuple[str, str], tuple[Any, ...]] = {}
        self.packs = _packs(self.folder)
        for pack in self.packs:
            self.kept.update(_read_pack(pack))
        self.fresh: dict[tuple[str, str], tuple[Any, ...]] = {}
        self.used: set[tuple[str, str]] = set()

    def get(self, path: Path, kind: str) -> tuple[SourceStats, list[Any]] | None:
        """The file's stats and rows as last read, or None when it changed or was not kept."""
        key = (str(path), kind)
        entry = self.kept.get(key)
        if entry.__class__ is not tuple or len(entry) != 3 or not kept_alone(path, kind):
            return None
        stamp, counts, rows = entry
        if stamp != _file_stamp(path) or stamp is None:
            return None
        self.used.add(key)
        stats = SourceStats(key[0], kind)
        for name, value in zip(_STATS[2:], counts):
            setattr(stats, name, type(getattr(stats, name))(value) if name in _COUNTERS else value)
        return stats, list(map(self.row_class._make, rows))

    def stamp(self, path: Path, kind: str) -> tuple[tuple[int, ...], ...] | None:
        """The file's stat before it is read (what `put` keeps its rows under); None for a format not kept."""
        return _file_stamp(path) if kept_alone(path, kind) else None

    def put(self, path: Path, kind: str, stats: SourceStats, rows: list[Any],
            stamp: tuple[tuple[int, ...], ...] | None) -> None:
        """Keep a file's rows, read alone, with its stats as the file left them (before any merging), under
        its stat from before it was read: a file written to while it was read (an agent appending) is not
        kept, and is read again next run."""
        if stamp is None or not kept_alone(path, kind) or _file_stamp(path) != stamp:
            return
        counts = tuple(dict(v) if k in _COUNTERS else (list(v) if isinstance(v, list) else v)
                       for k, v in ((k, getattr(stats, k)) for k in _STATS[2:]))
        self.fresh[(str(path), kind)] = (stamp, counts, [tuple(r) for r in rows])

    def flush(self) -> None:
        """Write the entries this run read as a pack; once packs pile up, what this run used as one pack in the
        place of those it read (entries of files no longer given are let go)."""
        entries = dict(self.fresh)
        merge = len(self.packs) + 1 >= PACKS
        if merge:
            entries = {key: self.kept[key] for key in self.used} | entries
        _touch(self.folder, self.folder.parent)  # (in use: see _let_go)
        _let_go(self.folder)
        if not entries:
            return
        try:
            payload = marshal.dumps(entries)
        except ValueError:  # a value marshal cannot keep: read again next time
            return
        data = marshal.dumps((FORMAT, binascii.crc32(payload), payload))  # (a pack damaged since is not read)
        # named by time, then process: a later pack's entries win (unwritten, a read-only home: read next run)
        if user_cache.write(self.folder / f"{time.time_ns():020d}-{os.getpid()}.pack", data, mode=0o600):
            if merge:
                for pack in self.packs:
                    try:
                        pack.unlink(missing_ok=True)
                    except OSError:
                        pass
        self.fresh = {}


PACKS = 4  # packs in a folder from which a run writes one in their place
STALE_S = 7 * 86400  # what was kept for other paths or by another code version, untouched this long, goes


def _let_go(current: Path) -> None:
    """Remove what was kept for other paths, and by other code versions (an upgrade, an edited module),
    untouched for STALE_S (a folder's time is its last pack's): two versions, or two folders, used side by side
    keep theirs."""
    now = time.time()
    code = current.parent
    for folder, keep in ((code, current), (code.parent, code)):
        try:
            others = [other for other in os.scandir(folder) if other.path != str(keep) and other.is_dir()
                      and now - other.stat().st_mtime > STALE_S]
        except OSError:
            continue  # (not made yet)
        for other in others:
            import shutil

            shutil.rmtree(other.path, ignore_errors=True)


def _touch(*folders: Path) -> None:
    for folder in folders:
        try:
            os.utime(folder)
        except OSError:
            pass  # (not made yet, or read-only)


def _digest(text: str) -> str:
    """A folder's name for what it keeps (xxh3-128: already loaded with the trace record; hashlib's OpenSSL
    was 4 ms of every `usage` run's start)."""
    return xxhash.xxh3_128_hexdigest(text.encode("utf-8", "surrogateescape"))


def _packs(folder: Path) -> list[Path]:
    try:
        return sorted(folder.glob("*.pack"))
    except OSError:
        return []


def _read_pack(pack: Path) -> dict[tuple[str, str], tuple[Any, ...]]:
    """A pack's entries; none where it is damaged (its checksum differs), cut short or of another format."""
    try:
        fmt, checksum, payload = marshal.loads(pack.read_bytes())
        if fmt != FORMAT or binascii.crc32(payload) != checksum:
            return {}
        entries = marshal.loads(payload)
    except (OSError, ValueError, EOFError, TypeError):
        return {}
    return entries if isinstance(entries, dict) else {}


def _file_stamp(path: Path) -> tuple[tuple[int, ...], ...] | None:
    """Size, times and inode of the file and of each chunk that continues it; None when one cannot be read."""
    try:
        return tuple(_stat(part) for part in parts_of(path))
    except OSError:
        return None


def _stat(path: Path) -> tuple[int, ...]:
    st = os.stat(path)
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


def _code_stamp() -> tuple[Any, ...]:
    """What names the code and rules that make rows: each module's and rule file's stat, and the rules folder
    named by $KVPROBE_PROVIDERS_DIR (stat'ing ~90 files: ~0.5 ms)."""
    from kvprobe.catalog import providers_dir

    stamps: list[tuple[Any, ...]] = [(FORMAT, providers_dir_override())]
    for name in _MAKERS:
        stamps.extend(_tree_stamp(_PACKAGE / name, ".py"))
    stamps.extend(_tree_stamp(providers_dir(), ".toml"))
    return tuple(stamps)


def _tree_stamp(where: Path, suffix: str) -> list[tuple[Any, ...]]:
    if where.is_file():
        st = os.stat(where)
        return [(where.name, st.st_size, st.st_mtime_ns)]
    out = []
    for root, dirs, files in os.walk(where):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(suffix):
                st = os.stat(os.path.join(root, name))
                out.append((os.path.relpath(os.path.join(root, name), where), st.st_size, st.st_mtime_ns))
    return out
