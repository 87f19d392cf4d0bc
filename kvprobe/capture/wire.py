"""The little of HTTP/1.1 the proxy needs: message heads and chunked framing (RFC 9112)."""
from __future__ import annotations

from dataclasses import dataclass


class ProtocolError(Exception):
    """A peer sent something that is not HTTP/1.1."""

    status = 400  # what the proxy answers a client that sent it


class BodyTooLarge(ProtocolError):
    """A body (or one chunk of it) over the limit the reader was given."""

    status = 413


class ReadTimeout(ProtocolError):
    """A client stopped sending in the middle of its request."""

    status = 408


@dataclass(slots=True)
class Head:
    start: list[str]  # request: method, target, version; response: version, status, reason
    headers: list[tuple[str, str]]  # as sent (names keep their case)

    def get(self, name: str, default: str | None = None) -> str | None:
        name = name.lower()
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return default

    def lower_dict(self) -> dict[str, str]:
        return {k.lower(): v for k, v in self.headers}

    def tokens(self, name: str) -> set[str]:
        """Comma-separated values of a header, lower-cased (Connection, Transfer-Encoding)."""
        found: set[str] = set()
        lname = name.lower()
        for key, value in self.headers:
            if key.lower() == lname:
                found.update(t.strip().lower() for t in value.split(",") if t.strip())
        return found


def parse_head(raw: bytes, request: bool) -> Head:
    text = raw.decode("latin-1")
    lines = text.split("\r\n")
    first = lines[0].split(" ", 2)
    if request and (len(first) != 3 or not first[2].startswith("HTTP/1.")):
        raise ProtocolError(f"bad request line {lines[0][:80]!r}")
    status_ok = len(first) >= 2 and first[1].isascii() and first[1].isdigit()
    if not request and (not status_ok or not first[0].startswith("HTTP/1.")):
        raise ProtocolError(f"bad status line {lines[0][:80]!r}")
    headers = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise ProtocolError(f"bad header line {line[:80]!r}")
        headers.append((name, value.strip()))
    return Head(first, headers)


def content_length(head: Head) -> int | None:
    """The body's length; ProtocolError for a bad value or for Content-Length headers that disagree (RFC
    9112 §6.3: a recipient cannot know where the body ends, and a proxy that picks one lets a request be
    smuggled past it). The same value repeated (`5, 5` or two equal headers) is one length."""
    values = [v for k, v in head.headers if k.lower() == "content-length"]
    if not values:
        return None
    lengths = {part.strip() for v in values for part in v.split(",")}
    if len(lengths) > 1:
        raise ProtocolError(f"conflicting Content-Length headers ({', '.join(values)})")
    value = lengths.pop()
    if not (value.isascii() and value.isdigit()):
        raise ProtocolError(f"bad Content-Length {value!r}")
    return int(value)


def persistent(head: Head) -> bool:
    """The connection stays open after this message: HTTP/1.1 unless `Connection: close`; HTTP/1.0 only with
    `Connection: keep-alive` (RFC 9112 §9.3)."""
    tokens = head.tokens("connection")
    version = head.start[0] if head.start[0].startswith("HTTP/") else head.start[2]
    return "close" not in tokens if version == "HTTP/1.1" else "keep-alive" in tokens


class ChunkedDecoder:
    """Incremental decoder of a chunked body: feed raw bytes, collect the payload, know where it ends."""

    __slots__ = ("_buf", "_remaining", "_state", "done", "body", "_limit")

    def __init__(self, body: bytearray | None = None, limit: int | None = None) -> None:
        self._buf = bytearray()
        self._remaining = 0
        self._state = "size"
        self.done = False
        self.body = body if body is not None else bytearray()  # the decoded payload is appended here
        self._limit = limit  # BodyTooLarge as soon as a chunk's size line would take the body past it

    def feed(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        while not self.done:
            if self._state == "data":
                take = min(self._remaining, len(buf))
                self.body += buf[:take]
                del buf[:take]
                self._remaining -= take
                if self._remaining:
                    return
                self._state = "crlf"
                continue
            if self._state == "crlf":
                if len(buf) < 2:
                    return
                if buf[:2] != b"\r\n":
                    raise ProtocolError("chunk data not followed by CRLF")
                del buf[:2]
                self._state = "size"
                continue
            end = buf.find(b"\r\n")
            if end < 0:
                if len(buf) > 4096:
                    raise ProtocolError("chunk size line too long")
                return
            line = bytes(buf[:end])
            del buf[:end + 2]
            if self._state == "trailer":
                self.done = not line
                continue
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise ProtocolError(f"bad chunk size {line[:40]!r}") from None
            if self._limit is not None and len(self.body) + size > self._limit:
                raise BodyTooLarge(f"chunked body over the {self._limit:,}-byte limit")
            self._state, self._remaining = ("trailer", 0) if size == 0 else ("data", size)
