"""Record from inside a Python process, for agents whose base URL cannot be changed.

    client = anthropic.Anthropic(http_client=kvprobe.capture.http_client(out="trace.jsonl"))
    client = openai.AsyncOpenAI(http_client=kvprobe.capture.async_http_client(out="trace.jsonl"))

The transport wraps the real one: requests go out unchanged, the response stream is teed as the SDK reads
it, and the record is appended when the SDK closes the response (at the end of a stream, on error, or on
an early `close()`). Current anthropic/openai SDKs are built on `httpx2`, older ones on `httpx`: by default
the client is made with `httpx2` when it is installed; pass `httpx_module=httpx` for the other.
"""
from __future__ import annotations

import importlib
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from kvprobe.capture.mounts import mount_of_host, provider_of
from kvprobe.capture.recorder import Exchange, Recorder

_classes: dict[str, tuple[type, type]] = {}


def _default_module() -> ModuleType:
    for name in ("httpx2", "httpx"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError("kvprobe.capture.http_client needs httpx2 or httpx")


def _exchange(request: Any, body: bytes) -> Exchange:
    headers = {k.lower(): v for k, v in request.headers.items()}
    query = request.url.query  # kept for the recorder to scrub a `?key=` credential from what it writes
    path = request.url.path + (f"?{query.decode('latin-1') if isinstance(query, bytes) else query}" if query else "")
    mount = mount_of_host(request.url.host)
    provider, platform = provider_of(mount, request.url.path) if mount else (None, None)
    return Exchange(request.method, path, headers, body, time.time(), provider_hint=provider, platform=platform)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class _Tee:
    """Shared by the sync and async streams: collect bytes, record once at close."""

    def __init__(self, ex: Exchange, recorder: Recorder) -> None:
        self.ex, self.recorder, self.done = ex, recorder, False

    def seen(self, chunk: bytes) -> None:
        if self.ex.first_byte_at is None:
            self.ex.first_byte_at = time.time()
        self.ex.response_body += chunk

    def failed(self, exc: BaseException) -> None:
        self.ex.transport_error = f"response stream failed: {_describe(exc)}"

    def finish(self, complete: bool) -> None:
        if self.done:
            return
        self.done = True
        if not complete and self.ex.transport_error is None:
            self.ex.transport_error = "response closed before the body was read to the end"
        self.ex.finished_at = time.time()
        self.recorder.record(self.ex)


def _build_classes(mod: ModuleType) -> tuple[type, type]:
    class TeeStream(mod.SyncByteStream):
        def __init__(self, inner: Any, tee: _Tee) -> None:
            self._inner, self._tee, self._complete = inner, tee, False

        def __iter__(self):
            try:
                for chunk in self._inner:
                    self._tee.seen(chunk)
                    yield chunk
                self._complete = True
            except Exception as exc:
                self._tee.failed(exc)
                raise

        def close(self) -> None:
            try:
                self._inner.close()
            finally:
                self._tee.finish(self._complete)

    class AsyncTeeStream(mod.AsyncByteStream):
        def __init__(self, inner: Any, tee: _Tee) -> None:
            self._inner, self._tee, self._complete = inner, tee, False

        async def __aiter__(self):
            try:
                async for chunk in self._inner:
                    self._tee.seen(chunk)
                    yield chunk
                self._complete = True
            except Exception as exc:
                self._tee.failed(exc)
                raise

        async def aclose(self) -> None:
            try:
                await self._inner.aclose()
            finally:
                self._tee.finish(self._complete)

    class RecordingTransport(mod.BaseTransport):
        """Wraps a transport (default: a plain HTTPTransport) and records every model request."""

        def __init__(self, recorder: Recorder, inner: Any = None, owns_recorder: bool = False) -> None:
            self.recorder, self.inner = recorder, inner or mod.HTTPTransport()
            self.owns_recorder = owns_recorder

        def handle_request(self, request: Any) -> Any:
            ex = _exchange(request, request.read())
            try:
                response = self.inner.handle_request(request)
            except Exception as exc:
                ex.transport_error, ex.finished_at = _describe(exc), time.time()
                self.recorder.record(ex)
                raise
            ex.status, ex.response_headers = response.status_code, {k.lower(): v for k, v in response.headers.items()}
            return mod.Response(response.status_code, headers=response.headers,
                                stream=TeeStream(response.stream, _Tee(ex, self.recorder)),
                                extensions=response.extensions, request=request)

        def close(self) -> None:
            self.inner.close()
            if self.owns_recorder:
                self.recorder.close()

    class AsyncRecordingTransport(mod.AsyncBaseTransport):
        def __init__(self, recorder: Recorder, inner: Any = None, owns_recorder: bool = False) -> None:
            self.recorder, self.inner = recorder, inner or mod.AsyncHTTPTransport()
            self.owns_recorder = owns_recorder

        async def handle_async_request(self, request: Any) -> Any:
            ex = _exchange(request, await request.aread())
            try:
                response = await self.inner.handle_async_request(request)
            except Exception as exc:
                ex.transport_error, ex.finished_at = _describe(exc), time.time()
                self.recorder.record(ex)
                raise
            ex.status, ex.response_headers = response.status_code, {k.lower(): v for k, v in response.headers.items()}
            return mod.Response(response.status_code, headers=response.headers,
                                stream=AsyncTeeStream(response.stream, _Tee(ex, self.recorder)),
                                extensions=response.extensions, request=request)

        async def aclose(self) -> None:
            await self.inner.aclose()
            if self.owns_recorder:
                self.recorder.close()

    return RecordingTransport, AsyncRecordingTransport


def transports(mod: ModuleType | None = None) -> tuple[type, type]:
    """(RecordingTransport, AsyncRecordingTransport) for an httpx-compatible module."""
    mod = mod or _default_module()
    if mod.__name__ not in _classes:
        _classes[mod.__name__] = _build_classes(mod)
    return _classes[mod.__name__]


def _recorder(out: str | Path | Recorder, session: str | None, agent: str | None, redact: bool,
              hash_only: bool) -> Recorder:
    if isinstance(out, Recorder):
        return out
    return Recorder(out, session=session, agent=agent, redact=redact, hash_only=hash_only)


def http_client(out: str | Path | Recorder = "trace.jsonl", *, session: str | None = None,
                agent: str | None = None, redact: bool = False, hash_only: bool = False,
                httpx_module: ModuleType | None = None, transport: Any = None, **client_kwargs: Any) -> Any:
    """A sync httpx(2) Client that appends one trace record per model request to `out`.

    Example: anthropic.Anthropic(http_client=kvprobe.capture.http_client(out="trace.jsonl", session="s1"))
    """
    mod = httpx_module or _default_module()
    sync_cls, _ = transports(mod)
    rec = _recorder(out, session, agent, redact, hash_only)
    client_kwargs.setdefault("timeout", mod.Timeout(600.0, connect=5.0))
    return mod.Client(transport=sync_cls(rec, transport, owns_recorder=rec is not out), **client_kwargs)


def async_http_client(out: str | Path | Recorder = "trace.jsonl", *, session: str | None = None,
                      agent: str | None = None, redact: bool = False, hash_only: bool = False,
                      httpx_module: ModuleType | None = None, transport: Any = None,
                      **client_kwargs: Any) -> Any:
    """The AsyncClient counterpart of `http_client`, for AsyncAnthropic / AsyncOpenAI."""
    mod = httpx_module or _default_module()
    _, async_cls = transports(mod)
    rec = _recorder(out, session, agent, redact, hash_only)
    client_kwargs.setdefault("timeout", mod.Timeout(600.0, connect=5.0))
    return mod.AsyncClient(transport=async_cls(rec, transport, owns_recorder=rec is not out), **client_kwargs)
