"""`POST /v1/chat/completions`: the OpenAI Chat Completions API on the local engine."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from kvprobe.errors import InputError
from kvprobe.request import infer_provider, render_request
from kvprobe.serve.emulation import API_PATHS
from kvprobe.serve.errors import ApiError, invalid
from kvprobe.serve.service import Done, Job, ServeState, UsageFacts, kvprobe_extension
from kvprobe.serve.streaming import DISCONNECTED, answer
from kvprobe.serve.validate import check_model, check_openai

_ROLES = ("system", "developer", "user", "assistant", "tool", "function")
_FINISH = {"stop": "stop", "stop_sequence": "stop", "length": "length", DISCONNECTED: None}
FINGERPRINT = "fp_kvprobe_local"


def int_param(body: dict[str, Any], *names: str,
              refusal: str = "Invalid '{name}': expected an integer of at least 1, got {value!r}") -> int | None:
    """The first of these reply-limit fields that is set (an integer of at least 1), else None; `refusal` is
    the API's words for a bad one."""
    for name in names:
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise invalid(refusal.format(name=name, value=value), name)
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


def temperature_of(body: dict[str, Any]) -> float:
    temperature = body.get("temperature", 1.0)
    if temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, (int, float))
                                    or not 0 <= temperature <= 2):
        raise invalid("Invalid 'temperature': expected a number between 0 and 2", "temperature")
    return 1.0 if temperature is None else float(temperature)


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


def emulated_provider(state: ServeState, api: str, body: dict[str, Any]) -> str:
    """The provider whose identity parameters and cache rules render a request of this API: the emulated
    one, else the one its model names (qwen3-coder-plus: Qwen), else OpenAI."""
    named = infer_provider(body, API_PATHS[api]) or "openai"
    return state.emulator.spec_for(api, named).provider if state.emulator else named


def parse_job(state: ServeState, body: Any, request: Request) -> Job:
    _validate(body)
    temperature = temperature_of(body)
    check_openai(body)
    emulated = state.emulator.spec_for("openai_chat").model if state.emulator else None
    check_model(body["model"], "openai", state.config.model, emulated)
    try:
        rendered = render_request(body, emulated_provider(state, "openai_chat", body), "/v1/chat/completions")
    except InputError as exc:
        raise invalid(str(exc)) from None
    max_tokens = int_param(body, "max_completion_tokens", "max_tokens") or state.config.default_max_tokens
    return state.job("openai_chat", "/v1/chat/completions", "chatcmpl", body, rendered, max_tokens, temperature,
                     _stops(body), request.headers)


def usage_json(state: ServeState, job: Job, u: UsageFacts) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "prompt_tokens": u.prompt_tokens, "completion_tokens": u.output_tokens,
        "total_tokens": u.prompt_tokens + u.output_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cache_read_tokens, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": u.reasoning_tokens, "audio_tokens": 0,
                                      "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}
    if job.provider == "deepseek":
        usage["prompt_cache_hit_tokens"] = u.cache_read_tokens
        usage["prompt_cache_miss_tokens"] = u.prompt_tokens - u.cache_read_tokens
    return usage


def _base(job: Job, obj: str) -> dict[str, Any]:
    return {"id": job.request_id, "object": obj, "created": int(time.time()), "model": job.model,
            "system_fingerprint": FINGERPRINT}


def _choice(done: Done) -> tuple[dict[str, Any], str | None]:
    """(message, finish_reason): the recorded answer's, or the model's text."""
    if done.recorded is not None:
        choices = done.recorded.response.get("choices") or [{}]
        first = choices[0] if isinstance(choices[0], dict) else {}
        message = first.get("message") if isinstance(first.get("message"), dict) else {}
        return {"role": "assistant", "refusal": None, **message}, first.get("finish_reason") or "stop"
    return {"role": "assistant", "content": done.text, "refusal": None}, _FINISH[done.finish]


class ChatCompletions:
    """The Chat Completions response body and chunk stream (`kvprobe.serve.streaming.Shape`)."""


    def __init__(self, include_usage: bool = False) -> None:
        self.include_usage = include_usage

    def final(self, state: ServeState, job: Job, done: Done) -> dict[str, Any]:
        message, finish = _choice(done)
        return {**_base(job, "chat.completion"),
                "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
                "usage": usage_json(state, job, done.usage), "kvprobe": kvprobe_extension(state, job, done.usage)}

    def _chunk(self, job: Job, delta: dict[str, Any], finish: str | None = None) -> bytes:
        extra = {"usage": None} if self.include_usage else {}
        return _data({**_base(job, "chat.completion.chunk"),
                      "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}], **extra})

    def start(self, state: ServeState, job: Job, usage: UsageFacts) -> Iterable[bytes]:
        yield self._chunk(job, {"role": "assistant", "content": "", "refusal": None})

    def delta(self, job: Job, text: str) -> Iterable[bytes]:
        yield self._chunk(job, {"content": text})

    def end(self, state: ServeState, job: Job, done: Done, final: dict[str, Any]) -> Iterable[bytes]:
        choice = final["choices"][0]
        if done.recorded is not None:
            message = choice["message"]
            if isinstance(message.get("content"), str) and message["content"]:
                yield self._chunk(job, {"content": message["content"]})
            for i, call in enumerate(message.get("tool_calls") or []):
                yield self._chunk(job, {"tool_calls": [{"index": i, **call}]})
        yield self._chunk(job, {}, choice["finish_reason"])
        if self.include_usage:
            yield _data({**_base(job, "chat.completion.chunk"), "choices": [], "usage": final["usage"],
                         "kvprobe": final["kvprobe"]})
        yield b"data: [DONE]\n\n"

    def error(self, exc: ApiError) -> bytes:
        return _data(exc.openai_body()) + b"data: [DONE]\n\n"


async def chat_completions(state: ServeState, body: Any, request: Request) -> Response:
    job = await asyncio.to_thread(parse_job, state, body, request)  # tokenizing a long prompt takes a while
    options = body.get("stream_options") or {}
    include_usage = bool(options.get("include_usage")) if isinstance(options, dict) else False
    return await answer(state, job, ChatCompletions(include_usage), bool(body.get("stream")),
                        {"x-request-id": job.request_id})


def _data(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"
