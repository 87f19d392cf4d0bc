"""`POST /v1/chat/completions`: the OpenAI Chat Completions API on the local engine."""
from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from kvprobe.errors import InputError
from kvprobe.request import render_request
from kvprobe.serve.errors import ApiError, invalid
from kvprobe.serve.service import (Began, Delta, Done, Job, ServeState, UsageFacts, generate, generate_all,
                                   kvprobe_extension, record_trace)
from kvprobe.serve.validate import check_model, check_openai

_ROLES = ("system", "developer", "user", "assistant", "tool", "function")
_FINISH = {"stop": "stop", "stop_sequence": "stop", "length": "length"}
FINGERPRINT = "fp_kvprobe_local"


def _int_param(body: dict[str, Any], *names: str) -> int | None:
    for name in names:
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise invalid(f"Invalid '{name}': expected an integer of at least 1, got {value!r}", name)
        return value
    return None


def _stops(body: dict[str, Any]) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops) or len(stops) > 4:
        raise invalid("Invalid 'stop': expected a string or a list of at most 4 strings", "stop")
    return stops


def _validate(body: Any) -> None:
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise invalid("you must provide a model parameter", "model")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("Invalid 'messages': expected a non-empty array of messages", "messages")
    for i, msg in enumerate(messages):
        role = msg.get("role") if isinstance(msg, dict) else None
        if role not in _ROLES:
            raise invalid(f"Invalid value for 'messages[{i}].role': expected one of {', '.join(_ROLES)}",
                          f"messages[{i}].role")
    if body.get("n") not in (None, 1):
        raise invalid("Only n=1 is supported by the local engine", "n")
    temperature = body.get("temperature", 1.0)
    if temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, (int, float))
                                    or not 0 <= temperature <= 2):
        raise invalid("Invalid 'temperature': expected a number between 0 and 2", "temperature")


def parse_job(state: ServeState, body: Any, request: Request) -> Job:
    _validate(body)
    check_openai(body, state.context_tokens)
    check_model(body["model"], "openai", state.config.model, state.emulated_model)
    emulated = state.emulator.spec.provider if state.emulator else None
    provider = "deepseek" if emulated == "deepseek" else "openai"  # DeepSeek's identity parameters
    try:
        rendered = render_request(body, provider, "/v1/chat/completions")
    except InputError as exc:
        raise invalid(str(exc)) from None
    max_tokens = _int_param(body, "max_completion_tokens", "max_tokens") or state.config.default_max_tokens
    temperature = body.get("temperature")
    timings = state.timings(request.headers)
    state.check_recordable(body)
    prompt = state.prompt(rendered)
    return Job("openai", "/v1/chat/completions", state.new_id("chatcmpl"), body["model"], body, prompt,
               state.clamp_max_tokens(prompt, max_tokens), 1.0 if temperature is None else float(temperature),
               _stops(body), timings)


def usage_json(state: ServeState, u: UsageFacts) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "prompt_tokens": u.prompt_tokens, "completion_tokens": u.output_tokens,
        "total_tokens": u.prompt_tokens + u.output_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cache_read_tokens, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                      "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}
    if state.emulator and state.emulator.spec.provider == "deepseek":
        usage["prompt_cache_hit_tokens"] = u.cache_read_tokens
        usage["prompt_cache_miss_tokens"] = u.prompt_tokens - u.cache_read_tokens
    return usage


def _base(job: Job, obj: str) -> dict[str, Any]:
    return {"id": job.request_id, "object": obj, "created": int(time.time()), "model": job.model,
            "system_fingerprint": FINGERPRINT}


def _final(state: ServeState, job: Job, done: Done) -> dict[str, Any]:
    return {**_base(job, "chat.completion"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": done.text, "refusal": None},
                         "logprobs": None, "finish_reason": _FINISH[done.finish]}],
            "usage": usage_json(state, done.usage), "kvprobe": kvprobe_extension(state, job, done.usage)}


async def chat_completions(state: ServeState, body: Any, request: Request) -> Response:
    job = await asyncio.to_thread(parse_job, state, body, request)  # tokenizing a long prompt takes a while
    headers = {"x-request-id": job.request_id}
    if body.get("stream"):
        options = body.get("stream_options") or {}
        include_usage = bool(options.get("include_usage")) if isinstance(options, dict) else False
        return StreamingResponse(_chunks(state, job, include_usage), media_type="text/event-stream",
                                 headers={**headers, "cache-control": "no-cache"})
    final = _final(state, job, await generate_all(state, job))
    record_trace(state, job, final, "openai")
    return JSONResponse(final, headers=headers)


def _data(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


async def _chunks(state: ServeState, job: Job, include_usage: bool) -> AsyncIterator[bytes]:
    base = _base(job, "chat.completion.chunk")
    extra = {"usage": None} if include_usage else {}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _data({**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
                      **extra})
    try:
        async for event in generate(state, job):
            if isinstance(event, Began):
                yield chunk({"role": "assistant", "content": "", "refusal": None})
            elif isinstance(event, Delta):
                yield chunk({"content": event.text})
            elif isinstance(event, Done):
                yield chunk({}, _FINISH[event.finish])
                if include_usage:
                    yield _data({**base, "choices": [], "usage": usage_json(state, event.usage),
                                 "kvprobe": kvprobe_extension(state, job, event.usage)})
                record_trace(state, job, _final(state, job, event), "openai")
    except ApiError as exc:
        state.requests_failed += 1
        yield _data(exc.openai_body())
    yield b"data: [DONE]\n\n"
