"""A recording reverse proxy: forwards provider traffic unchanged and appends one trace record per request.

Clients reach it at a per-provider mount (kvprobe.capture.mounts): ``http://127.0.0.1:PORT/anthropic``,
``/openai``, ``/deepseek``, ``/gemini``, ``/vertex``, ``/bedrock``. A request outside every mount is answered
502 naming them and sent nowhere: guessing a provider from a path would hand one provider's key to another.

Bodies pass byte for byte and responses stream through as they arrive (the raw framing is forwarded; a copy
is decoded on the side). The only header changes: Host, hop-by-hop headers, kvprobe's own X-Kvprobe-*
headers, and Accept-Encoding narrowed to encodings the recorder can undo. The record is built after the
client has the last byte, so recording adds no latency to the response.

Framing as RFC 9112 has it: interim 1xx responses (103 Early Hints) are passed on and the final response
follows; a body delimited by the upstream closing (HTTP/1.0, no length) ends the client's connection too;
conflicting Content-Length headers, or a request with both a length and chunks, are refused (400/502). A
client that stops mid-request or sends past the body cap is answered 408/413 (`ClientLimits`).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import orjson

from kvprobe.capture.mounts import (BY_NAME, MOUNTS, child_env, default_upstream, mounts_line, provider_of,
                                    vertex_host)
from kvprobe.capture.recorder import AGENT_HEADER, CLIENT_LEFT, SESSION_HEADER, Exchange, Recorder
from kvprobe.capture.wire import (BodyTooLarge, ChunkedDecoder, Head, ProtocolError, ReadTimeout, content_length,
                                  parse_head, persistent)

log = logging.getLogger("kvprobe.capture")
DEFAULT_UPSTREAMS = {m.name: default_upstream(m, os.environ) for m in MOUNTS}
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "trailer",
                        "transfer-encoding", "upgrade", "host", "content-length", "expect", "accept-encoding",
                        SESSION_HEADER, AGENT_HEADER})
DECODABLE = ("gzip", "deflate", "identity")
READ_SIZE = 65536
CLIENT_CHECK = 0.25  # seconds between checks that a waiting client is still there
MAX_HEAD = 65536  # a client's request head
MAX_RESPONSE_HEAD = 1 << 20  # an upstream's response head (SDK clients accept ~100 KB; never refuse less)


@dataclass(frozen=True, slots=True)
class ClientLimits:
    """How long a client may take and how much it may send (a client that never finishes its request must
    not hold a connection, nor make the proxy buffer without end).

    idle: seconds a kept-alive connection may wait for its next request (closed quietly after, as servers do);
    read: seconds without a byte once a request has begun (head or body): answered 408;
    max_body: bytes of a request body (framing included when chunked): answered 413. The default is above
    every provider's own request limit (Anthropic 32 MB, Gemini 20 MB inline), so nothing they take is refused.
    """

    idle: float = 300.0
    read: float = 60.0
    max_body: int = 64 << 20


@dataclass(frozen=True, slots=True)
class Upstream:
    scheme: str
    host: str
    port: int
    base_path: str  # e.g. /v1 for OpenAI: a mount's paths are appended to it

    @classmethod
    def parse(cls, url: str) -> "Upstream | None":
        """None for the regional Vertex template: its host is chosen per request (`mounts.vertex_host`)."""
        if "{location}" in url:
            return None
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"expected an http(s) URL, got {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(parts.scheme, parts.hostname, port, parts.path.rstrip("/"))

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        return self.host if self.port == default else f"{self.host}:{self.port}"


class UpstreamTimeout(Exception):
    pass


def _accept_encoding(value: str | None) -> str:
    """Keep only codings the recorder can decode (br/zstd would be unreadable in the trace)."""
    if not value:
        return "identity"
    kept = [t.strip() for t in value.split(",") if t.split(";")[0].strip().lower() in DECODABLE]
    return ", ".join(kept) or "identity"


class _UpstreamReader(asyncio.StreamReader):
    """A StreamReader that delivers every byte received before a connection error.

    asyncio's StreamReader raises a stored error before returning bytes still buffered, so a reset right
    after the upstream's last events dropped them. Here the error is kept in `lost` and the stream simply
    ends after the last byte received; the caller checks `lost` to tell a reset from a clean close.
    """

    lost: BaseException | None = None

    def set_exception(self, exc: BaseException) -> None:
        self.lost = exc
        self.feed_eof()


async def _open(up: "Upstream", context: ssl.SSLContext | None) -> tuple[_UpstreamReader, asyncio.StreamWriter]:
    loop = asyncio.get_running_loop()
    reader = _UpstreamReader(limit=MAX_RESPONSE_HEAD, loop=loop)
    protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
    transport, _ = await loop.create_connection(lambda: protocol, up.host, up.port, ssl=context,
                                                server_hostname=up.host if context else None)
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


class _Pool:
    """Idle keep-alive connections per upstream."""

    def __init__(self, limit: int = 512) -> None:
        self._idle: dict[Upstream, list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] = {}
        self._limit = limit
        self._ssl: ssl.SSLContext | None = None

    async def get(self, up: Upstream) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bool]:
        idle = self._idle.get(up)
        if idle:
            await asyncio.sleep(0)  # let a close the upstream already sent reach the idle connections
        while idle:
            reader, writer = idle.pop()
            if not reader.at_eof() and not writer.is_closing():
                return reader, writer, True
            writer.close()
        if up.scheme == "https" and self._ssl is None:
            self._ssl = ssl.create_default_context()
        reader, writer = await _open(up, self._ssl if up.scheme == "https" else None)
        return reader, writer, False

    def put(self, up: Upstream, conn: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
        idle = self._idle.setdefault(up, [])
        if len(idle) < self._limit:
            idle.append(conn)
        else:
            conn[1].close()

    def close(self) -> None:
        for idle in self._idle.values():
            for _, writer in idle:
                writer.close()
        self._idle.clear()


class ClientGone(Exception):
    pass


@dataclass(frozen=True, slots=True)
class Route:
    mount: str
    upstream: Upstream
    path: str  # the upstream path: the mount's base path + what followed the mount
    provider: str | None
    platform: str | None


class CaptureProxy:
    """Run with `await proxy.start()`, stop with `await proxy.stop()`; `recorder=None` forwards only."""

    def __init__(self, recorder: Recorder | None, upstreams: dict[str, str] | None = None, *,
                 host: str = "127.0.0.1", port: int = 0, upstream_timeout: float = 600.0,
                 limits: ClientLimits | None = None) -> None:
        self.limits = limits or ClientLimits()
        merged = {**DEFAULT_UPSTREAMS, **(upstreams or {})}
        self.upstreams = {name: Upstream.parse(url) for name, url in merged.items()}
        self.unrouted: dict[str, int] = {}  # paths outside every mount (answered 502, sent nowhere): count
        self.recorder = recorder
        self.host, self.port = host, port
        self.timeout = upstream_timeout
        self._pool = _Pool()
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task] = set()
        self._busy: set[asyncio.Task] = set()

    @property
    def url(self) -> str:
        return f"http://{self.host if ':' not in self.host else f'[{self.host}]'}:{self.port}"

    def base_urls(self, env: dict[str, str] | None = None) -> dict[str, str]:
        """Environment that points the official SDKs and the agent CLIs at this proxy (`mounts.child_env`;
        `env` decides the Bedrock variables, see there)."""
        return child_env(self.url, os.environ if env is None else env)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve_client, self.host, self.port, limit=MAX_HEAD,
                                                  backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self, grace: float = 5.0) -> None:
        """Stop accepting; let requests in flight finish for `grace` seconds, then cut and record them."""
        if self._server is not None:
            self._server.close()
        for task in self._tasks - self._busy:  # idle keep-alive clients: nothing in flight to wait for
            task.cancel()
        busy = [t for t in self._busy if not t.done()]
        if busy:
            _, pending = await asyncio.wait(busy, timeout=grace)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=2.0)
        rest = list(self._tasks)
        for task in rest:
            task.cancel()
        if rest:  # let every handler run its finally (which records) before the file closes
            await asyncio.wait(rest, timeout=2.0)
        self._pool.close()
        if self.recorder is not None:
            self.recorder.close()

    async def _serve_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        closed = asyncio.ensure_future(_closed(writer))  # resolves when the client goes away
        try:
            while True:
                try:
                    raw = await self._read_head(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                except asyncio.LimitOverrunError:
                    await _simple_response(writer, 431, "request head too large")
                    return
                except ReadTimeout as exc:
                    await _simple_response(writer, exc.status, str(exc))
                    return
                if raw is None:  # idle past the keep-alive time: closed, as any server does
                    return
                self._busy.add(task)
                try:
                    keep = await self._handle(raw, reader, writer, closed)
                finally:
                    self._busy.discard(task)
                if not keep:
                    return
        except (asyncio.CancelledError, ConnectionError, ClientGone):
            pass
        except Exception:  # a bug must cost one connection, never the proxy
            log.exception("kvprobe capture: connection failed")
        finally:
            self._tasks.discard(task)
            closed.cancel()
            writer.close()

    async def _read_head(self, reader: asyncio.StreamReader) -> bytes | None:
        """The next request head; None when none began within the idle time, ReadTimeout when one began and
        stopped (a half-sent head)."""
        try:
            first = await asyncio.wait_for(reader.readexactly(1), self.limits.idle)
        except asyncio.TimeoutError:
            return None
        try:
            return first + await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.limits.read)
        except asyncio.TimeoutError:
            raise ReadTimeout(f"request head not complete after {self.limits.read:g}s") from None

    async def _handle(self, raw: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      closed: asyncio.Future) -> bool:
        try:
            head = parse_head(raw, request=True)
            body = await _read_request_body(head, reader, writer, self.limits)
        except ProtocolError as exc:  # 400, 408 (a client that stopped sending), 413 (over the body limit)
            await _simple_response(writer, exc.status, str(exc))
            return False
        method, target, version = head.start
        route = self._route(target)
        if route is None:
            await self._refuse(target, writer)
            return False
        ex = Exchange(method, route.path, head.lower_dict(), body, time.time(), provider_hint=route.provider,
                      platform=route.platform)
        keep = version == "HTTP/1.1" and "close" not in head.tokens("connection")
        try:
            keep = await self._forward(ex, head, route.upstream, writer, (closed, reader)) and keep
        except asyncio.CancelledError:
            ex.transport_error = ex.transport_error or "interrupted: capture stopped before the response ended"
            raise
        except (ClientGone, ConnectionError):
            ex.transport_error = ex.transport_error or CLIENT_LEFT
            raise
        finally:
            ex.finished_at = ex.finished_at or time.time()
            if self.recorder is not None:
                self.recorder.record(ex)
        return keep

    def _route(self, target: str) -> Route | None:
        """The mount a request target names, or None: nothing outside a mount is forwarded."""
        for name, up in self.upstreams.items():
            mount = "/" + name
            if target == mount or target.startswith((mount + "/", mount + "?")):
                rest = target[len(mount):]
                rest = BY_NAME[name].versioned(rest if rest.startswith("/") or not rest else "/" + rest)
                if up is None:  # regional Vertex AI: the host the path's location is served on
                    up = Upstream("https", vertex_host(rest), 443, "")
                return Route(name, up, up.base_path + rest, *provider_of(name, rest))
        return None

    async def _refuse(self, target: str, writer: asyncio.StreamWriter) -> None:
        path = target.split("?", 1)[0][:200]  # never the query: it may hold a key (?key=...)
        first = path not in self.unrouted
        self.unrouted[path] = self.unrouted.get(path, 0) + 1
        if first:
            log.warning("kvprobe capture: %s is outside every mount; answered 502, sent nowhere", path)
        await _simple_response(writer, 502, f"kvprobe capture: {path} is outside every mount, so it was sent "
                               f"nowhere; point the client at one of {mounts_line(self.url)}")

    def _upstream_head(self, head: Head, up: Upstream, path: str, body: bytes) -> bytes:
        lines = [f"{head.start[0]} {path} HTTP/1.1", f"Host: {up.host_header}"]
        lines += [f"{k}: {v}" for k, v in head.headers if k.lower() not in HOP_BY_HOP]
        lines.append(f"Accept-Encoding: {_accept_encoding(head.get('accept-encoding'))}")
        if body or head.start[0] in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def _forward(self, ex: Exchange, head: Head, up: Upstream, writer: asyncio.StreamWriter,
                       client: tuple[asyncio.Future, asyncio.StreamReader]) -> bool:
        request = self._upstream_head(head, up, ex.path, ex.request_body) + ex.request_body
        try:
            ureader, uwriter, reused = await _race(self._pool.get(up), *client[:1], self.timeout, client[1])
        except (OSError, asyncio.TimeoutError) as exc:
            ex.transport_error = f"could not connect to {up.host_header}: {exc or type(exc).__name__}"
            await _simple_response(writer, 502, ex.transport_error)
            return False
        except ClientGone:
            ex.transport_error = "client disconnected before the response began"
            raise
        # Once written, a request is never sent again: the upstream may have received it and billed it, and
        # nothing on the wire tells a closed idle connection from one closed after reading the request.
        try:
            uwriter.write(request)
            raw = await _race(ureader.readuntil(b"\r\n\r\n"), client[0], self.timeout, client[1])
            while _interim(raw):  # 103 Early Hints and the like: passed on, then the real response follows
                if not raw.startswith(b"HTTP/1.1 100") and head.start[2] == "HTTP/1.1":  # (100: answered here)
                    _send(writer, raw)
                raw = await _race(ureader.readuntil(b"\r\n\r\n"), client[0], self.timeout, client[1])
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            uwriter.close()
            cause = getattr(ureader, "lost", None) or exc
            ex.transport_error = (f"upstream closed the {'reused ' if reused else ''}connection before "
                                  f"responding ({type(cause).__name__}); not resent, as it may have "
                                  "reached the upstream")
            await _simple_response(writer, 502, ex.transport_error)
            return False
        except asyncio.TimeoutError:
            uwriter.close()
            ex.transport_error = f"upstream timed out after {self.timeout:g}s before responding"
            await _simple_response(writer, 504, ex.transport_error)
            return False
        except asyncio.LimitOverrunError:
            uwriter.close()
            ex.transport_error = "upstream response head too large"
            await _simple_response(writer, 502, ex.transport_error)
            return False
        except BaseException:  # the client left, or capture is stopping: the upstream call is abandoned
            uwriter.close()
            if ex.transport_error is None and (client[0].done() or client[1].at_eof()):
                ex.transport_error = "client disconnected before the response began"
            raise
        return await self._relay(ex, raw, (ureader, uwriter), up, writer, client)

    async def _relay(self, ex: Exchange, raw_head: bytes, conn: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                     up: Upstream, writer: asyncio.StreamWriter,
                     client: tuple[asyncio.Future, asyncio.StreamReader]) -> bool:
        ureader, uwriter = conn
        try:
            head = parse_head(raw_head, request=False)
            length = content_length(head)
        except ProtocolError as exc:
            uwriter.close()
            ex.transport_error = f"upstream sent a bad response: {exc}"
            await _simple_response(writer, 502, ex.transport_error)
            return False
        ex.status = int(head.start[1])
        ex.response_headers = head.lower_dict()
        chunked = "chunked" in head.tokens("transfer-encoding")
        no_body = ex.method == "HEAD" or ex.status in (204, 304) or 100 <= ex.status < 200
        # without a length or chunks, the body ends where the upstream closes: the client can only tell the
        # same way, so its connection is closed after it too (it waited for ever before)
        close_delimited = not no_body and not chunked and length is None
        reusable = persistent(head) and not close_delimited
        complete = False
        try:
            _send(writer, raw_head)
            complete = no_body or (length == 0 and not chunked)
            if not complete:
                complete = await self._relay_body(ex, ureader, writer, client,
                                                  ChunkedDecoder(ex.response_body) if chunked else None,
                                                  None if chunked else length)
        finally:
            if complete and reusable:
                self._pool.put(up, conn)
            else:
                uwriter.close()
        if not complete:
            raise ClientGone  # the response was cut: close the client connection so it sees the cut too
        await _drain(writer)
        return reusable

    async def _relay_body(self, ex: Exchange, ureader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                          client: tuple[asyncio.Future, asyncio.StreamReader], chunked: ChunkedDecoder | None,
                          length: int | None) -> bool:
        left = length
        body = ex.response_body
        while True:
            try:
                data = await _race(ureader.read(READ_SIZE if left is None else min(left, READ_SIZE)), client[0],
                                   self.timeout, client[1])
            except asyncio.TimeoutError:
                ex.transport_error = f"upstream timed out after {self.timeout:g}s mid-response"
                return False
            except ConnectionError as exc:
                ex.transport_error = f"upstream connection lost mid-response: {exc!r}"
                return False
            except ClientGone:
                ex.transport_error = CLIENT_LEFT
                return False
            if not data:
                lost = getattr(ureader, "lost", None)
                if lost is not None:  # everything received before the error was forwarded and recorded
                    ex.transport_error = f"upstream connection lost mid-response: {lost!r}"
                    return False
                if chunked is None and left is None:
                    return True  # body delimited by the connection closing
                ex.transport_error = "upstream closed the connection mid-response"
                return False
            if ex.first_byte_at is None:
                ex.first_byte_at = time.time()
            if writer.is_closing():
                ex.transport_error = CLIENT_LEFT
                return False
            writer.write(data)
            if chunked is not None:
                try:
                    chunked.feed(data)
                except ProtocolError as exc:
                    ex.transport_error = f"upstream sent bad chunked framing: {exc}"
                    return False
                if chunked.done:
                    return await _drain_ok(writer, ex)
            else:
                body += data
                if left is not None:
                    left -= len(data)
                    if left <= 0:
                        return await _drain_ok(writer, ex)
            if writer.transport.get_write_buffer_size() > 1 << 20 and not await _drain_ok(writer, ex):
                return False


def _interim(raw_head: bytes) -> bool:
    """A 1xx response other than 101: informational, and followed by the final response (RFC 9110 §15.2)."""
    status = raw_head[9:12]
    return raw_head.startswith(b"HTTP/1.") and status[:1] == b"1" and status != b"101" and status.isdigit()


async def _closed(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        await writer.wait_closed()


async def _race(aw, closed: asyncio.Future, timeout: float, client: asyncio.StreamReader | None = None):
    """Await `aw` unless the client goes away first (ClientGone) or `timeout` passes (TimeoutError).

    A client that closes its socket only half-closes it as far as asyncio knows (EOF on the reader, no
    connection_lost), so the reader is checked too, every CLIENT_CHECK seconds while waiting.
    """
    task = asyncio.ensure_future(aw)
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            done, _ = await asyncio.wait((task, closed), timeout=max(min(left, CLIENT_CHECK), 0),
                                         return_when=asyncio.FIRST_COMPLETED)
            if task in done:
                return task.result()
            if closed in done or (client is not None and client.at_eof()):
                raise ClientGone
            if left <= CLIENT_CHECK:
                raise asyncio.TimeoutError
    except BaseException:
        task.cancel()
        raise


def _send(writer: asyncio.StreamWriter, data: bytes) -> None:
    if writer.is_closing():
        raise ClientGone
    writer.write(data)


async def _drain(writer: asyncio.StreamWriter) -> None:
    try:
        await writer.drain()
    except ConnectionError:
        raise ClientGone from None


async def _drain_ok(writer: asyncio.StreamWriter, ex: Exchange) -> bool:
    try:
        await writer.drain()
        return True
    except ConnectionError:
        ex.transport_error = CLIENT_LEFT
        return False


async def _read_request_body(head: Head, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                             limits: ClientLimits) -> bytes:
    """The request body, framing and limits checked before a 100 Continue invites it: each read must bring a
    byte within `limits.read` (408), the body stays within `limits.max_body` (413)."""
    chunked = "chunked" in head.tokens("transfer-encoding")
    if chunked and head.get("content-length") is not None:  # refused before a 100 Continue invites the body
        raise ProtocolError("both Transfer-Encoding and Content-Length (RFC 9112 §6.1: refused)")
    length = None if chunked else content_length(head)
    if length is not None and length > limits.max_body:
        raise BodyTooLarge(f"request body of {length:,} bytes is over the {limits.max_body:,}-byte limit "
                           "(kvprobe capture --max-request-mb)")
    if "100-continue" in head.tokens("expect"):
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    if chunked:
        decoder = ChunkedDecoder(limit=limits.max_body)
        received = 0
        while not decoder.done:
            data = await _client_read(reader, READ_SIZE, limits.read)
            if not data:
                raise ProtocolError("client closed the connection inside a chunked body")
            received += len(data)
            if received > limits.max_body:
                raise BodyTooLarge(f"chunked request body over the {limits.max_body:,}-byte limit "
                                   "(kvprobe capture --max-request-mb)")
            decoder.feed(data)
        return bytes(decoder.body)
    body = bytearray()
    while len(body) < (length or 0):
        data = await _client_read(reader, min(READ_SIZE, length - len(body)), limits.read)
        if not data:
            raise ProtocolError("client closed the connection before sending the whole body")
        body += data
    return bytes(body)


async def _client_read(reader: asyncio.StreamReader, size: int, timeout: float) -> bytes:
    try:
        return await asyncio.wait_for(reader.read(size), timeout)
    except asyncio.TimeoutError:
        raise ReadTimeout(f"the client sent nothing for {timeout:g}s in the middle of its request body") from None


async def _simple_response(writer: asyncio.StreamWriter, status: int, message: str) -> None:
    """An error from the proxy itself, shaped like a provider error so SDKs report it cleanly."""
    reasons = {400: "Bad Request", 408: "Request Timeout", 413: "Content Too Large",
               431: "Request Header Fields Too Large", 502: "Bad Gateway", 504: "Gateway Timeout"}
    body = orjson.dumps({"type": "error", "error": {"type": "kvprobe_proxy_error", "message": message}})
    head = (f"HTTP/1.1 {status} {reasons.get(status, 'Error')}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    with contextlib.suppress(ConnectionError, RuntimeError):
        writer.write(head + body)
        await writer.drain()
