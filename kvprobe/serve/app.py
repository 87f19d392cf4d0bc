"""The Starlette application: routes, JSON parsing, and errors in the shape of the API that was called."""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from kvprobe.serve import anthropic_api, gemini_api, openai_api, responses_api
from kvprobe.serve.errors import ApiError, invalid
from kvprobe.serve.service import ServeState

log = logging.getLogger("kvprobe.serve")
Handler = Callable[[ServeState, Any, Request], Awaitable[Response]]


def _api_of(request: Request) -> str:
    """Whose error shape a request gets: the API its path (or, for an unknown path, its headers) names."""
    path = request.url.path
    if "/messages" in path or "anthropic-version" in request.headers:
        return "anthropic"
    if path.startswith(("/v1beta/", "/v1alpha/")) or "/models/" in path and ":" in path.rsplit("/", 1)[-1] \
            or "x-goog-api-key" in request.headers:
        return "gemini"
    return "openai"


TOO_LARGE = "Request exceeds the maximum allowed number of bytes."


async def _body(request: Request, limit: int) -> Any:
    """The JSON body, refused by size before it is read whole (413, as the APIs answer) and parsed off the
    event loop when large, so one huge request never stalls the others. A body the client says is not JSON
    (`Content-Type: text/plain`) is refused as the Messages API refuses it."""
    kind = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    if kind != "application/json" and not kind.endswith("+json") and _api_of(request) == "anthropic":
        raise invalid(f"Content-Type must be application/json, got {kind[:60]!r}")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ApiError(413, TOO_LARGE)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, TOO_LARGE)
        chunks.append(chunk)
    raw = b"".join(chunks)
    try:
        return orjson.loads(raw) if size < 1 << 20 else await asyncio.to_thread(orjson.loads, raw)
    except orjson.JSONDecodeError as exc:
        raise invalid(f"The request body is not valid JSON: {exc}") from None


def _endpoint(state: ServeState, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        api = _api_of(request)
        try:
            response = await handler(state, await _body(request, state.config.max_body_bytes), request)
            state.requests_served += 1
            return response
        except ApiError as exc:
            state.requests_failed += 1
            return exc.response(api)
        except Exception as exc:  # noqa: BLE001 - one failing request never takes the server down
            state.requests_failed += 1
            log.exception("request failed")
            return ApiError(500, f"internal error: {type(exc).__name__}: {exc}").response(api)
    return endpoint


def _models(state: ServeState) -> Callable[[Request], Awaitable[Response]]:
    async def models(request: Request) -> Response:
        name = state.config.model
        if _api_of(request) == "gemini":
            return JSONResponse({"models": [gemini_api.model_info(state, name)]})
        if _api_of(request) == "anthropic":
            created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(state.started_at))
            entry = {"type": "model", "id": name, "display_name": name, "created_at": created}
            return JSONResponse({"data": [entry], "has_more": False, "first_id": name, "last_id": name})
        return JSONResponse({"object": "list", "data": [{"id": name, "object": "model",
                                                          "created": int(state.started_at), "owned_by": "kvprobe"}]})
    return models


def _plain(state: ServeState, handler: Callable[[ServeState, Request], Awaitable[Response]]
           ) -> Callable[[Request], Awaitable[Response]]:
    """An endpoint without a body (GET): errors in its API's shape."""
    async def endpoint(request: Request) -> Response:
        try:
            return await handler(state, request)
        except ApiError as exc:
            return exc.response(_api_of(request))
    return endpoint


async def _gemini_model(state: ServeState, request: Request) -> Response:
    target = request.path_params["target"]
    if ":" in target:
        raise ApiError(405, f"{request.method} {request.url.path}: method not allowed")
    return JSONResponse(gemini_api.model_info(state, target.removeprefix("models/")))


def _health(state: ServeState) -> Callable[[Request], Awaitable[Response]]:
    async def health(request: Request) -> Response:
        stats = await _engine_stats(state)
        return JSONResponse({"status": "ok", "model": state.config.model, "cache": state.cache_mode,
                             "clock": state.config.clock, "context_tokens": state.context_tokens,
                             "model_window": state.config.model_window, "reply_limit": state.reply_limit,
                             "requests_served": state.requests_served, "requests_failed": state.requests_failed,
                             "requests_disconnected": state.requests_disconnected,
                             "trace": state.recorder.stats() if state.recorder else None,
                             "cassette": state.cassette.stats.to_json() if state.cassette else None,
                             "engine": stats})
    return health


async def _engine_stats(state: ServeState) -> dict[str, Any]:
    import asyncio

    stats = await asyncio.wrap_future(state.loop.call(lambda engine: engine.stats))
    return {"prefix_queries": stats.prefix_queries, "prefix_hits": stats.prefix_hits,
            "hit_ratio": round(stats.hit_ratio, 4), "evictions": stats.evictions,
            "blocks_total": stats.blocks_total, "blocks_free": stats.blocks_free, "block_size": stats.block_size,
            "preemptions": stats.preemptions, "requests_finished": stats.requests_finished,
            "step_failures": state.loop.step_failures}


def _reset(state: ServeState) -> Callable[[Request], Awaitable[Response]]:
    async def reset(request: Request) -> Response:
        """`POST /reset_prefix_cache` (vLLM's name): forget cached prefixes, engine and emulated."""
        import asyncio

        await asyncio.wrap_future(state.loop.call(lambda engine: engine.clear_cache()))
        if state.emulator is not None:
            state.emulator.reset()
        return JSONResponse({"status": "ok"})
    return reset


async def _not_found(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 404
    message = f"{request.method} {request.url.path}: " + ("not found" if status == 404 else "method not allowed")
    return ApiError(status, message).response(_api_of(request))


def build_app(state: ServeState) -> Starlette:
    routes = [
        Route("/v1/messages", _endpoint(state, anthropic_api.messages), methods=["POST"]),
        Route("/v1/messages/count_tokens", _endpoint(state, anthropic_api.count_tokens), methods=["POST"]),
        Route("/v1/chat/completions", _endpoint(state, openai_api.chat_completions), methods=["POST"]),
        Route("/v1/responses", _endpoint(state, responses_api.responses), methods=["POST"]),
        Route("/v1/responses/{response_id}", _plain(state, responses_api.retrieve), methods=["GET"]),
        Route("/v1/models", _models(state), methods=["GET"]),
        *(Route(f"/{version}/models", _models(state), methods=["GET"]) for version in ("v1beta", "v1alpha")),
        *(Route(f"/{version}/models/{{target:path}}", _endpoint(state, gemini_api.generate_content),
                methods=["POST"]) for version in ("v1", "v1beta", "v1alpha")),
        *(Route(f"/{version}/models/{{target:path}}", _plain(state, _gemini_model), methods=["GET"])
          for version in ("v1", "v1beta", "v1alpha")),
        Route("/health", _health(state), methods=["GET"]),
        Route("/reset_prefix_cache", _reset(state), methods=["POST"]),
    ]
    return Starlette(routes=routes, exception_handlers={404: _not_found, 405: _not_found})
