"""Record every model call made in this process, whoever built the HTTP client, through the capture hook.

The Anthropic and OpenAI SDKs send requests through `httpx2.HTTPTransport` (older ones: `httpx`). While a
recording is active, those transports' request methods are wrapped, at class level, so clients created
before the test (module-level clients, fixtures) are recorded too. Each model request goes through the
capture hook's recording transport (`kvprobe.capture.hook`), so records are exactly what `capture` writes;
other HTTP traffic passes untouched.
"""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from kvprobe.capture.hook import transports
from kvprobe.capture.recorder import Recorder
from kvprobe.catalog import load_catalog


def _modules() -> list[ModuleType]:
    found = []
    for name in ("httpx2", "httpx"):
        try:
            found.append(importlib.import_module(name))
        except ImportError:
            continue
    return found


def model_endpoints() -> tuple[str, ...]:
    """Path endings of every provider's model endpoints (providers/*.toml `endpoints`)."""
    return tuple(sorted({e for cat in load_catalog().values() for e in cat.endpoints}))


class _Direct:
    """The wrapped transport's original method, as the hook's `inner` transport."""

    def __init__(self, transport: Any, original: Any) -> None:
        self.transport, self.original = transport, original

    def handle_request(self, request: Any) -> Any:
        return self.original(self.transport, request)

    async def handle_async_request(self, request: Any) -> Any:
        return await self.original(self.transport, request)


class Interceptor:
    """Context manager: while active, every model request of the process is appended to `recorder`."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.endpoints = model_endpoints()
        self._saved: list[tuple[type, str, Any]] = []

    def is_model_call(self, request: Any) -> bool:
        return request.method.upper() == "POST" and request.url.path.endswith(self.endpoints)

    def _wrap_sync(self, mod: ModuleType) -> Any:
        recording_cls, _ = transports(mod)
        original = mod.HTTPTransport.handle_request
        interceptor = self

        def handle_request(transport: Any, request: Any) -> Any:
            if not interceptor.is_model_call(request):
                return original(transport, request)
            return recording_cls(interceptor.recorder, _Direct(transport, original)).handle_request(request)
        return handle_request

    def _wrap_async(self, mod: ModuleType) -> Any:
        _, recording_cls = transports(mod)
        original = mod.AsyncHTTPTransport.handle_async_request
        interceptor = self

        async def handle_async_request(transport: Any, request: Any) -> Any:
            if not interceptor.is_model_call(request):
                return await original(transport, request)
            inner = _Direct(transport, original)
            return await recording_cls(interceptor.recorder, inner).handle_async_request(request)
        return handle_async_request

    def __enter__(self) -> Interceptor:
        for mod in _modules():
            for cls, name, wrapper in ((mod.HTTPTransport, "handle_request", self._wrap_sync(mod)),
                                       (mod.AsyncHTTPTransport, "handle_async_request", self._wrap_async(mod))):
                self._saved.append((cls, name, cls.__dict__[name]))
                setattr(cls, name, wrapper)
        return self

    def __exit__(self, *exc: object) -> None:
        while self._saved:  # restore in reverse: nested recordings unwind in order
            cls, name, original = self._saved.pop()
            setattr(cls, name, original)
