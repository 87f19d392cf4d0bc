"""Follow one growing file like `tail -F`: complete lines only, across rotation, truncation and deletion.

The file stays open between polls, so lines written just before it was renamed away or deleted are still
read from the old handle before the new file at the same path is opened. A last line without its newline
is left for the next poll (a writer may be half-way through it). Line numbers count from 1 in each file
generation, so errors name the line a user would find.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

READ_CHUNK = 1 << 20


@dataclass(slots=True)
class TailEvent:
    kind: str  # opened | rotated | truncated | deleted
    path: str


@dataclass(slots=True)
class Poll:
    lines: list[tuple[int, int, bytes]] = field(default_factory=list)  # (line number, byte offset, line)
    events: list[TailEvent] = field(default_factory=list)
    partial: bool = False  # bytes after the last newline are waiting for the rest of their line


class FileTail:
    """Complete new lines of one path since the last poll."""

    def __init__(self, path: str | Path, from_end: bool = False) -> None:
        self.path = Path(path)
        self._fh: BinaryIO | None = None
        self._ident: tuple[int, int] | None = None
        self._offset = 0  # start of the first line not yet returned
        self._line = 0  # lines returned so far in this generation of the file
        self._from_end = from_end

    @property
    def offset(self) -> int:
        return self._offset

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def poll(self) -> Poll:
        result = Poll()
        if self._fh is not None:
            self._drain(result)  # the rest of the file we have open, even if it was renamed or deleted
        try:
            st = self.path.stat()
        except FileNotFoundError:
            if self._fh is not None:
                self.close()
                result.events.append(TailEvent("deleted", str(self.path)))
            return result
        ident = (st.st_dev, st.st_ino)
        if self._fh is not None and ident != self._ident:
            self.close()
            result.events.append(TailEvent("rotated", str(self.path)))
        elif self._fh is not None and st.st_size < self._offset:
            result.events.append(TailEvent("truncated", str(self.path)))
            self._offset = self._line = 0
            self._drain(result)
            return result
        if self._fh is None:
            self._open(ident, st.st_size, result)
            self._drain(result)
        return result

    def _open(self, ident: tuple[int, int], size: int, result: Poll) -> None:
        try:
            self._fh = self.path.open("rb")
        except FileNotFoundError:
            return
        self._ident = ident
        self._offset = self._line = 0
        if self._from_end:  # start after what is already there (its last complete line)
            self._offset = self._last_newline(size)
            self._from_end = False
        result.events.append(TailEvent("opened", str(self.path)))

    def _last_newline(self, size: int) -> int:
        assert self._fh is not None
        pos = size
        while pos > 0:
            start = max(pos - READ_CHUNK, 0)
            self._fh.seek(start)
            chunk = self._fh.read(pos - start)
            cut = chunk.rfind(b"\n")
            if cut >= 0:
                return start + cut + 1
            pos = start
        return 0

    def _drain(self, result: Poll) -> None:
        assert self._fh is not None
        self._fh.seek(self._offset)
        pending = b""
        while True:
            chunk = self._fh.read(READ_CHUNK)
            if not chunk:
                break
            pending += chunk
            cut = pending.rfind(b"\n")
            if cut < 0:
                continue
            complete, pending = pending[: cut + 1], pending[cut + 1:]
            self._split(complete, result)
        result.partial = bool(pending)

    def _split(self, complete: bytes, result: Poll) -> None:
        start = 0
        while start < len(complete):
            end = complete.index(b"\n", start)
            self._line += 1
            line = complete[start:end]
            if line.strip():
                result.lines.append((self._line, self._offset + start, line))
            start = end + 1
        self._offset += len(complete)
