"""`POST /v1/messages` and `/v1/messages/count_tokens`: the Anthropic Messages API on the local engine."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from kvprobe.errors import InputError
from kvprobe.request import render_request
from kvprobe.request.model import RenderedRequest
from kvprobe.serve.errors import ApiError, invalid
from kvprobe.serve.messages_schema import sampling_number
from kvprobe.serve.service import (Began, Delta, Done, Job, ServeState, UsageFacts, generate, generate_all,
                                   kvprobe_extension, record_trace)
from kvprobe.serve.validate import check_anthropic, check_model

_STOP_REASON = {"stop": "end_turn", "length": "max_tokens", "stop_sequence": "stop_sequence"}
_ROLES = ("user", "assistant")


def _common(body: Any) -> RenderedRequest:
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("model: Field required")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise invalid("messages: Field required")
    if not messages:
        raise invalid("messages: at least one message is required")
    for i, msg in enumerate(messages):
        role = msg.get("role") if isinstance(msg, dict) else None
        if role not in _ROLES:
            raise invalid(f"messages.{i}.role: Input should be 'user' or 'assistant'")
    try:
        return render_request(body, "anthropic", "/v1/messages")
    except InputError as exc:
        raise invalid(str(exc)) from None


def _checked(state: ServeState, body: Any) -> RenderedRequest:
    """The request rendered, after every check the Messages API makes (kvprobe.serve.validate)."""
    rendered = _common(body)
    check_anthropic(body, state.context_tokens)
    check_model(body["model"], "anthropic", state.config.model, state.emulated_model)
    return rendered


def parse_job(state: ServeState, body: Any, request: Request) -> Job:
    rendered = _checked(state, body)
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
        raise invalid("max_tokens: Field required" if max_tokens is None
                      else "max_tokens: Input should be a valid integer")
    if max_tokens < 0:
        raise invalid("max_tokens: Input should be greater than or equal to 0")
    stops = body.get("stop_sequences") or []
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise invalid("stop_sequences: Input should be a list of strings")
    temperature = sampling_number(body, "temperature", 0.0, 1.0)  # (check_fields has refused a bad one)
    temperature = 1.0 if temperature is None else temperature
    if rendered.warnings and any("at most" in w for w in rendered.warnings):
        raise invalid(next(w for w in rendered.warnings if "at most" in w))
    asked, previous = _diagnostics_request(body)
    timings = state.timings(request.headers)
    state.check_recordable(body)
    prompt = state.prompt(rendered)
    job = Job("anthropic", "/v1/messages", state.new_id("msg"), body["model"], body, prompt,
              state.clamp_max_tokens(prompt, max_tokens), temperature, stops, timings, asked, previous)
    if asked:  # the API keeps a fingerprint only of requests that carry the diagnostics object
        state.diagnostics.remember(job.request_id, rendered, body)
    return job


def _diagnostics_request(body: dict[str, Any]) -> tuple[bool, str | None]:
    """Cache diagnostics: (asked for, previous message id). `{"previous_message_id": null}` (or `{}`) opts
    in on a first turn; shapes in providers/anthropic.toml (rule cache_diagnostics)."""
    if "diagnostics" not in body or body["diagnostics"] is None:
        return False, None
    diagnostics = body["diagnostics"]
    if not isinstance(diagnostics, dict):
        raise invalid("diagnostics: Input should be an object like {\"previous_message_id\": \"msg_...\"}")
    previous = diagnostics.get("previous_message_id")
    if previous is not None and not isinstance(previous, str):
        raise invalid("diagnostics.previous_message_id: Input should be a string or null")
    return True, previous


def usage_json(u: UsageFacts) -> dict[str, Any]:
    return {"input_tokens": u.fresh_input_tokens, "cache_creation_input_tokens": u.cache_write_tokens,
            "cache_read_input_tokens": u.cache_read_tokens,
            "cache_creation": {"ephemeral_5m_input_tokens": u.cache_write_5m_tokens,
                               "ephemeral_1h_input_tokens": u.cache_write_1h_tokens},
            "output_tokens": u.output_tokens, "service_tier": "standard"}


def _message(job: Job, content: list[dict[str, Any]], stop_reason: str | None, stop_sequence: str | None,
             usage: UsageFacts) -> dict[str, Any]:
    msg = {"id": job.request_id, "type": "message", "role": "assistant", "model": job.model, "content": content,
           "stop_reason": stop_reason, "stop_sequence": stop_sequence, "usage": usage_json(usage)}
    if job.diagnostics:
        reason = usage.cache_miss_reason
        msg["diagnostics"] = {"cache_miss_reason": reason} if reason else None
    return msg


def _final(state: ServeState, job: Job, done: Done) -> dict[str, Any]:
    content = [{"type": "text", "text": done.text}] if job.max_tokens > 0 else []
    msg = _message(job, content, _STOP_REASON[done.finish], done.stop_sequence, done.usage)
    msg["kvprobe"] = kvprobe_extension(state, job, done.usage)
    return msg


async def messages(state: ServeState, body: Any, request: Request) -> Response:
    job = await asyncio.to_thread(parse_job, state, body, request)  # tokenizing a long prompt takes a while
    headers = {"request-id": job.request_id}
    if body.get("stream"):
        return StreamingResponse(_events(state, job), media_type="text/event-stream",
                                 headers={**headers, "cache-control": "no-cache"})
    final = _final(state, job, await generate_all(state, job))
    record_trace(state, job, final, "anthropic")
    return JSONResponse(final, headers=headers)


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


async def _events(state: ServeState, job: Job) -> AsyncIterator[bytes]:
    """message_start, content_block_start, ping, content_block_delta..., content_block_stop, message_delta,
    message_stop; an `error` event if the engine fails mid-stream."""
    try:
        async for event in generate(state, job):
            if isinstance(event, Began):
                start = _message(job, [], None, None, event.usage)
                start["usage"]["output_tokens"] = 1 if job.max_tokens else 0
                yield _sse("message_start", {"type": "message_start", "message": start})
                if job.max_tokens:
                    yield _sse("content_block_start", {"type": "content_block_start", "index": 0,
                                                       "content_block": {"type": "text", "text": ""}})
                yield _sse("ping", {"type": "ping"})
            elif isinstance(event, Delta):
                yield _sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                   "delta": {"type": "text_delta", "text": event.text}})
            elif isinstance(event, Done):
                if job.max_tokens:
                    yield _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
                yield _sse("message_delta", {
                    "type": "message_delta",
                    "delta": {"stop_reason": _STOP_REASON[event.finish], "stop_sequence": event.stop_sequence},
                    "usage": usage_json(event.usage), "kvprobe": kvprobe_extension(state, job, event.usage)})
                yield _sse("message_stop", {"type": "message_stop"})
                record_trace(state, job, _final(state, job, event), "anthropic")
    except ApiError as exc:
        state.requests_failed += 1
        yield _sse("error", exc.anthropic_body())


async def count_tokens(state: ServeState, body: Any, request: Request) -> Response:
    def count() -> int:
        return state.prompt(_checked(state, body), check_length=False).num_tokens
    return JSONResponse({"input_tokens": await asyncio.to_thread(count)})
