"""The Gemini API on the local engine: `POST /v1beta/models/{model}:generateContent`,
`:streamGenerateContent` (`?alt=sse`: server-sent events, as Gemini CLI and the google-genai SDKs ask; without
it a JSON array) and `:countTokens`; `/v1/models/...` the same.

Usage is `usageMetadata`: `promptTokenCount`, `candidatesTokenCount`, `totalTokenCount`, and
`cachedContentTokenCount` when part of the prompt was read from the cache (the API leaves zero counts out),
with `promptTokensDetails` / `cacheTokensDetails` by modality. Emulated, the cache is Gemini's implicit one
(providers/gemini.toml: minimum length, token-prefix matching).
"""
from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from kvprobe.errors import InputError
from kvprobe.request import render_request
from kvprobe.serve.errors import ApiError, invalid
from kvprobe.serve.openai_api import int_param
from kvprobe.serve.replies import gemini_parts
from kvprobe.serve.service import Done, Job, ServeState, UsageFacts, kvprobe_extension
from kvprobe.serve.streaming import DISCONNECTED, answer
from kvprobe.serve.validate import check_model

_FINISH = {"stop": "STOP", "stop_sequence": "STOP", "length": "MAX_TOKENS", DISCONNECTED: None}
_ROLES = ("user", "model", "function", "tool")
METHODS = ("generateContent", "streamGenerateContent", "countTokens")


def _config(body: dict[str, Any]) -> dict[str, Any]:
    config = body.get("generationConfig", body.get("generation_config")) or {}
    if not isinstance(config, dict):
        raise invalid("Invalid value at 'generation_config': expected an object")
    return config


def _validate(body: Any, method: str) -> None:
    if not isinstance(body, dict):
        raise invalid("Invalid JSON payload received. The request body must be a JSON object.")
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise invalid("* GenerateContentRequest.contents: contents is not specified")
    for i, content in enumerate(contents):
        if not isinstance(content, dict) or not isinstance(content.get("parts"), list):
            raise invalid(f"* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty")
        role = content.get("role", "user")
        if role not in _ROLES:
            raise invalid(f"Please use a valid role: user, model. (contents[{i}].role: {str(role)[:40]!r})")


def _target(request: Request) -> tuple[str, str]:
    """(model, method) of `.../models/{model}:{method}`."""
    target = request.path_params["target"]
    model, _, method = target.rpartition(":")
    if not model or method not in METHODS:
        raise ApiError(404, f"{request.method} {request.url.path}: not found")
    return model.removeprefix("models/"), method


def _render(state: ServeState, body: dict[str, Any], model: str, endpoint: str):
    try:
        return render_request(body, "gemini", endpoint)
    except InputError as exc:
        raise invalid(str(exc)) from None


def parse_job(state: ServeState, body: Any, request: Request) -> Job:
    model, method = _target(request)
    _validate(body, method)
    emulated = state.emulator.spec_for("gemini").model if state.emulator else None
    check_model(model, "gemini", state.config.model, emulated)
    endpoint = request.url.path
    rendered = _render(state, body, model, endpoint)
    config = _config(body)
    temperature = config.get("temperature", 1.0)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature <= 2:
        raise invalid(f"Invalid value at 'generation_config.temperature' ({temperature!r}): expected 0 to 2")
    stops = config.get("stopSequences", config.get("stop_sequences")) or []
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise invalid("Invalid value at 'generation_config.stop_sequences': expected a list of strings")
    limit = int_param(config, "maxOutputTokens", "max_output_tokens",
                      refusal="Invalid value at 'generation_config.{name}' ({value!r}): expected a positive "
                              "integer") or state.reply_limit
    job = state.job("gemini", endpoint, "gen", body, rendered, limit, float(temperature), stops, request.headers)
    job.model = model
    return job


def usage_json(u: UsageFacts) -> dict[str, Any]:
    usage: dict[str, Any] = {"promptTokenCount": u.prompt_tokens,
                             "candidatesTokenCount": u.output_tokens - u.reasoning_tokens,
                             "totalTokenCount": u.prompt_tokens + u.output_tokens,
                             "promptTokensDetails": [{"modality": "TEXT", "tokenCount": u.prompt_tokens}]}
    if u.cache_read_tokens:
        usage["cachedContentTokenCount"] = u.cache_read_tokens
        usage["cacheTokensDetails"] = [{"modality": "TEXT", "tokenCount": u.cache_read_tokens}]
    if u.reasoning_tokens:
        usage["thoughtsTokenCount"] = u.reasoning_tokens
    return usage


def _candidate(job: Job, done: Done) -> dict[str, Any]:
    if done.recorded is not None:
        candidates = done.recorded.response.get("candidates") or [{}]
        first = candidates[0] if isinstance(candidates[0], dict) else {}
        finish = first.get("finishReason") or "STOP"
        return {"content": {"parts": gemini_parts(done.recorded.response), "role": "model"},
                "finishReason": finish, "index": 0}
    candidate: dict[str, Any] = {"content": {"parts": [{"text": done.text}], "role": "model"}, "index": 0}
    if _FINISH[done.finish]:
        candidate["finishReason"] = _FINISH[done.finish]
    return candidate


class GenerateContent:
    """The Gemini API's response body and `alt=sse` stream (`kvprobe.serve.streaming.Shape`)."""


    def final(self, state: ServeState, job: Job, done: Done) -> dict[str, Any]:
        return {"candidates": [_candidate(job, done)], "usageMetadata": usage_json(done.usage),
                "modelVersion": job.model, "responseId": job.request_id,
                "kvprobe": kvprobe_extension(state, job, done.usage)}

    def _chunk(self, job: Job, parts: list[Any]) -> bytes:
        chunk = {"candidates": [{"content": {"parts": parts, "role": "model"}, "index": 0}],
                 "modelVersion": job.model, "responseId": job.request_id}
        return b"data: " + orjson.dumps(chunk) + b"\r\n\r\n"

    def start(self, state: ServeState, job: Job, usage: UsageFacts) -> Iterable[bytes]:
        return ()  # the first chunk carries the first text

    def delta(self, job: Job, text: str) -> Iterable[bytes]:
        yield self._chunk(job, [{"text": text}])

    def end(self, state: ServeState, job: Job, done: Done, final: dict[str, Any]) -> Iterable[bytes]:
        candidate = dict(final["candidates"][0])
        if done.recorded is None:  # the text went out in the deltas: the last chunk ends it, with the usage
            candidate["content"] = {"parts": [{"text": ""}], "role": "model"}
        yield b"data: " + orjson.dumps({**final, "candidates": [candidate]}) + b"\r\n\r\n"

    def error(self, exc: ApiError) -> bytes:
        return b"data: " + orjson.dumps(exc.gemini_body()) + b"\r\n\r\n"


async def generate_content(state: ServeState, body: Any, request: Request) -> Response:
    model, method = _target(request)
    if method == "countTokens":
        return await count_tokens(state, body, request, model)
    job = await asyncio.to_thread(parse_job, state, body, request)  # tokenizing a long prompt takes a while
    stream = method == "streamGenerateContent"
    sse = stream and request.query_params.get("alt") == "sse"
    response = await answer(state, job, GenerateContent(), sse, {"x-request-id": job.request_id})
    if stream and not sse and isinstance(response, JSONResponse):  # the JSON-array form of a stream
        return Response(b"[" + response.body + b"]", media_type="application/json",
                        headers={"x-request-id": job.request_id})
    return response


async def count_tokens(state: ServeState, body: Any, request: Request, model: str) -> Response:
    inner = body.get("generateContentRequest") if isinstance(body, dict) else None
    request_body = inner if isinstance(inner, dict) else body
    _validate(request_body, "countTokens")

    def count() -> int:
        rendered = _render(state, request_body, model, request.url.path)
        return state.prompt(rendered, check_length=False).num_tokens
    total = await asyncio.to_thread(count)
    return JSONResponse({"totalTokens": total, "promptTokensDetails": [{"modality": "TEXT", "tokenCount": total}]})


def model_info(state: ServeState, name: str) -> dict[str, Any]:
    return {"name": f"models/{name}", "version": "kvprobe-local", "displayName": name,
            "inputTokenLimit": state.config.max_prompt_tokens, "outputTokenLimit": state.reply_limit,
            "supportedGenerationMethods": ["generateContent", "countTokens"]}
