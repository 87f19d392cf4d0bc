"""Turn growing files into new trace records, each request exactly once.

Two ways to follow a file, by format:
* kvprobe traces (what `capture` writes) are read line by line from where the last poll stopped
  (`FileTail`), so each poll costs only the new bytes.
* Agent logs (Claude Code, Codex, LiteLLM, ...) are re-read through their importer when they change: the
  importers own each source's quirks (one response written as several lines, resumed sessions copying
  history, repeated token counts), and a request is only emitted once its lines are complete. A file is
  re-read only when its size, time or identity changed, at most once per poll.

Requests are keyed by id across all files: a rotated trace read again, a resumed session's copied history
or a file deleted and written back never count a request twice. Malformed lines are counted per reason.
"""
from __future__ import annotations

import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from kvprobe.errors import InputError
from kvprobe.importers import IMPORTERS, detect_format
from kvprobe.importers.base import SourceStats
from kvprobe.trace import TraceRecord
from kvprobe.trace.reader import record_from_json
from kvprobe.trace.record import content_key
from kvprobe.watch.tail import FileTail, TailEvent

SUFFIXES = (".jsonl", ".ndjson", ".json", ".har")
MAX_EXAMPLES = 5
TAIL_PEEK = 1 << 16  # bytes read from a log's end to find its last complete line
Clock = Callable[[], float]


@dataclass(slots=True)
class Skips:
    """Malformed lines by reason (with the first few examples), and files of no known format."""

    reasons: Counter = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    def add(self, reason: str, where: str, count: int = 1) -> None:
        self.reasons[reason] += count
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(f"{where}: {reason}")

    @property
    def total(self) -> int:
        return sum(self.reasons.values())


class _TraceFile:
    """A kvprobe trace: each complete new line is one record."""

    def __init__(self, path: Path, from_end: bool) -> None:
        self.tail = FileTail(path, from_end=from_end)

    def poll(self, skips: Skips, events: list[TailEvent], now: float, final: bool) -> list[TraceRecord]:
        result = self.tail.poll()
        events.extend(result.events)
        records = []
        for lineno, offset, raw in result.lines:
            try:
                rec = record_from_json(orjson.loads(raw), str(self.tail.path), lineno)
            except orjson.JSONDecodeError as exc:
                skips.add(f"invalid JSON ({exc.msg})", f"{self.tail.path}:{lineno}")
                continue
            except InputError as exc:
                skips.add(exc.message + (f" (field '{exc.field}')" if exc.field else ""), f"{self.tail.path}:{lineno}")
                continue
            rec.offset, rec.key = offset, content_key(rec.id, raw.strip())  # ids are local to their file
            records.append(rec)
        return records

    def close(self) -> None:
        self.tail.close()


class _LogFile:
    """An agent log read through its importer whenever it changed; the newest request waits until complete."""

    def __init__(self, path: Path, kind: str, settle_s: float, from_end: bool, now: float) -> None:
        self.path, self.kind, self.settle_s = path, kind, settle_s
        self.signature: tuple[int, int, int, int] | None = None
        self.changed_at = now
        self.skipped: Counter = Counter()  # the latest read's skips (the file is read whole each time)
        self.held: TraceRecord | None = None  # the newest request, possibly still being written
        self.done: set[str] = set()  # ids emitted
        # --from-end: requests that begin on the lines already there are not counted (lines are counted now;
        # the file is parsed only once it changes)
        self.start_lines = _count_lines(path) if from_end else 0
        self.parse_on_change = from_end  # nothing of the present content counts: no need to read it now
        self.identity: tuple[int, int] | None = None  # (device, inode) of the file last read

    def _signature(self) -> tuple[int, int, int, int] | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns

    def poll(self, skips: Skips, events: list[TailEvent], now: float, final: bool) -> list[TraceRecord]:
        sig = self._signature()
        if sig is None:
            if self.signature is not None:
                events.append(TailEvent("deleted", str(self.path)))
                self.signature = None
            return self._release(final or self.held is not None and now - self.changed_at >= self.settle_s)
        if sig == self.signature:
            return self._release(final or now - self.changed_at >= self.settle_s)
        if self.signature is not None and sig[:2] != self.signature[:2]:
            events.append(TailEvent("rotated", str(self.path)))
        elif self.signature is None:
            events.append(TailEvent("opened", str(self.path)))
        # a file first seen has been quiet since it was last written (a finished session is not held back)
        age = max(time.time() - sig[3] / 1e9, 0.0) if self.signature is None else 0.0
        self.signature, self.changed_at = sig, now - age
        if self.identity is not None and sig[:2] != self.identity:
            self._new_file()
        self.identity = sig[:2]
        if self.parse_on_change:
            self.parse_on_change = False
            return []
        return self._reread(skips, final)

    def _new_file(self) -> None:
        """Another file now has this name (rotated, or deleted and written again): ids already counted stay
        counted, so reading it from its start double-counts nothing."""
        self.skipped = Counter()

    def _read(self, skips: Skips, final: bool) -> list[TraceRecord] | None:
        """Every request of the file (read whole), counting newly malformed lines."""
        stats = SourceStats(str(self.path), self.kind)
        try:
            records = list(IMPORTERS[self.kind].read(self.path, stats, set()))
        except InputError:  # a whole-document format (HAR, OTLP JSON) caught mid-write: read it next time
            return None
        except FileNotFoundError:
            return None
        if _last_line(self.path)[1] and stats.skipped["truncated JSON line"]:
            stats.skipped["truncated JSON line"] -= 1  # the line being written now, not a malformed one
        for reason, count in (+(stats.skipped - self.skipped)).items():
            skips.add(reason, str(self.path), count)
        self.skipped = +stats.skipped
        return records

    def _reread(self, skips: Skips, final: bool) -> list[TraceRecord]:
        records = self._read(skips, final)
        if records is None:
            return []
        last_line = _last_line(self.path)[0]
        records = [r for r in records if r.id not in self.done and (r.line or 0) > self.start_lines]
        if not records:
            return []
        *complete, newest = records
        self.held = newest
        self.done.update(r.id for r in complete)
        return complete + self._release(final or not _still_writing(newest, last_line))

    def _release(self, settled: bool) -> list[TraceRecord]:
        if self.held is None or not settled:
            return []
        held, self.held = self.held, None
        self.done.add(held.id)
        return [held]

    def close(self) -> None:
        pass


class _WindowedLog(_LogFile):
    """A Claude Code transcript read from where its newest request begins, not from its start.

    Its importer needs a request's lines together and the line it answers (for the start time), nothing
    earlier; so each poll imports only the lines from the one before the newest request on. Lines before
    that are final: their malformed lines are counted once."""

    def __init__(self, path: Path, kind: str, settle_s: float, from_end: bool, now: float) -> None:
        super().__init__(path, kind, settle_s, from_end, now)
        self.base = 0  # byte offset where the next window starts
        self.base_line = 0  # lines before it

    def _new_file(self) -> None:
        super()._new_file()
        self.base = self.base_line = 0

    def _import(self, window: bytes, whole_file: bool = False) -> tuple[list[TraceRecord], Counter]:
        stats = SourceStats(str(self.path), self.kind)
        if whole_file:  # the window is the file itself (a first read): no copy
            return list(IMPORTERS[self.kind].read(self.path, stats, set())), stats.skipped
        with tempfile.TemporaryDirectory(prefix="kvprobe-watch-") as tmp:
            # same folder and file names: the importer takes session and agent names from them
            scratch = Path(tmp).joinpath(*self.path.parts[-3:])
            scratch.parent.mkdir(parents=True, exist_ok=True)
            scratch.write_bytes(window)
            return list(IMPORTERS[self.kind].read(scratch, stats, set())), stats.skipped

    def _read(self, skips: Skips, final: bool) -> list[TraceRecord] | None:
        try:
            if self.path.stat().st_size < self.base:  # truncated or rewritten: from the start again
                self.base = self.base_line = 0
            with self.path.open("rb") as fh:
                fh.seek(self.base)
                data = fh.read()
        except FileNotFoundError:
            return None
        window = data[: data.rfind(b"\n") + 1]  # complete lines only
        if not window:
            return []
        records, skipped = self._import(window, whole_file=self.base == 0 and len(window) == len(data))
        lines = window.count(b"\n")
        # keep the newest request's lines and the one before them (what it answers) for the next poll
        keep = lines + 1 if final else max((records[-1].line or 1) - 1, 1) if records else lines
        cut = _line_start(window, keep)
        kept = self._import(window[cut:])[1] if cut < len(window) else Counter()
        for reason, count in (+(skipped - kept)).items():
            skips.add(reason, str(self.path), count)
        for rec in records:
            rec.source, rec.line = str(self.path), (rec.line or 0) + self.base_line
        self.base += cut
        self.base_line += keep - 1
        return records



def _line_start(data: bytes, line: int) -> int:
    """Byte offset where line number `line` (from 1) begins; len(data) past the last line."""
    pos = 0
    for _ in range(line - 1):
        nl = data.find(b"\n", pos)
        if nl < 0:
            return len(data)
        pos = nl + 1
    return pos


def _count_lines(path: Path) -> int:
    count = 0
    try:
        with path.open("rb") as fh:
            while chunk := fh.read(1 << 22):
                count += chunk.count(b"\n")
    except OSError:
        return 0
    return count


def _last_line(path: Path) -> tuple[dict[str, Any] | None, bool]:
    """The file's last complete line (decoded, if it is a JSON object) and whether a partial line follows it."""
    try:
        with path.open("rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(size - TAIL_PEEK, 0))
            data = fh.read()
    except OSError:
        return None, False
    partial = not data.endswith(b"\n")
    lines = data.rstrip(b"\n").split(b"\n") if not partial else data.split(b"\n")[:-1]
    for raw in reversed(lines):
        if raw.strip():
            try:
                value = orjson.loads(raw)
            except orjson.JSONDecodeError:
                return None, partial
            return (value if isinstance(value, dict) else None), partial
    return None, partial


def _still_writing(record: TraceRecord, last_line: dict[str, Any] | None) -> bool:
    """Claude Code writes one response as several lines: it may still be going while it is the last thing
    in the file. Anything written after it (a tool result, the next turn) means it is complete."""
    if last_line is None or record.extra.get("source_format") != "claude_code":
        return False
    message = last_line.get("message")
    response_id = (record.response or {}).get("id")
    return isinstance(message, dict) and response_id is not None and message.get("id") == response_id


@dataclass(slots=True)
class Batch:
    records: list[TraceRecord]
    events: list[TailEvent]
    duplicates: int = 0


class Follower:
    """Every watched file under the given paths, new files included; `poll()` returns what is new."""

    def __init__(self, paths: Iterable[str | Path], *, from_end: bool = False, settle_s: float = 5.0,
                 clock: Clock = time.monotonic) -> None:
        self.roots = [Path(p).expanduser() for p in paths]
        for root in self.roots:
            if not root.exists():
                raise InputError("file or directory does not exist", file=str(root))
        self.settle_s, self.clock = settle_s, clock
        self.files: dict[Path, _TraceFile | _LogFile] = {}
        self.unknown: set[Path] = set()  # files of no known format (in a watched directory)
        self.skips = Skips()
        self.seen: set[str] = set()
        self._unreadable_seen: set[str] = set()
        self._from_end = from_end  # only for files present at the first poll
        self._first = True

    def _candidates(self) -> list[Path]:
        found = []
        for root in self.roots:
            if root.is_file():
                found.append(root)
            elif root.is_dir():
                for base, _dirs, names in os.walk(root, onerror=lambda exc: self._unreadable(exc, "folder")):
                    found.extend(Path(base) / n for n in sorted(names) if n.endswith(SUFFIXES))
        return found

    def _unreadable(self, exc: OSError, what: str) -> None:
        """A sub-folder or file that cannot be read: counted and named once (as `usage` and `import` do)."""
        where = str(exc.filename or "?")
        if where not in self._unreadable_seen:
            self._unreadable_seen.add(where)
            self.skips.add(f"{what} cannot be read ({exc.strerror or exc})", where)

    def _adopt(self, path: Path, now: float) -> None:
        try:
            with path.open("rb") as fh:
                head = fh.read(TAIL_PEEK)
        except OSError as exc:
            if path in self.roots:
                raise
            self._unreadable(exc, "file")
            return
        if b"\n" not in head and not (path.suffix in (".json", ".har") and head):
            return  # nothing complete yet: decide its format once a line is there
        kind = detect_format(path)
        if kind is None:
            if path in self.roots:
                raise InputError("not a recognised trace or log: expected a kvprobe trace, or Claude Code, Codex "
                                 "or LiteLLM JSON Lines", file=str(path))
            self.unknown.add(path)
            return
        from_end = self._from_end and self._first
        if kind == "kvprobe":
            self.files[path] = _TraceFile(path, from_end)
        else:
            follow = _WindowedLog if kind == "claude_code" else _LogFile
            self.files[path] = follow(path, kind, self.settle_s, from_end, now)

    def poll(self, final: bool = False) -> Batch:
        """New complete requests since the last poll (in start order) and file events.

        final=True also releases requests that may still be being written (for an exit)."""
        now = self.clock()
        for path in self._candidates():
            if path not in self.files and path not in self.unknown:
                self._adopt(path, now)
        self._first = False
        batch = Batch([], [])
        for path, source in list(self.files.items()):
            for rec in source.poll(self.skips, batch.events, now, final):
                if rec.identity in self.seen:  # the same request in another file (not merely the same id)
                    batch.duplicates += 1
                    continue
                self.seen.add(rec.identity)
                batch.records.append(rec)
        batch.records.sort(key=lambda r: (r.started_at is None, r.started_at or 0.0))
        return batch

    def close(self) -> None:
        for source in self.files.values():
            source.close()
