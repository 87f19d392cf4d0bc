"""`POST /v1/messages` and `/v1/messages/count_tokens`: the Anthropic Messages API on the local engine."""
from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from kvprobe.errors import InputError
from kvprobe.request import render_request
from kvprobe.request.model import RenderedRequest
from kvprobe.serve.errors import ApiError, invalid
from kvprobe.serve.messages_schema import check_placement, sampling_number
from kvprobe.serve.service import Done, Job, ServeState, UsageFacts, kvprobe_extension
from kvprobe.serve.streaming import DISCONNECTED, answer
from kvprobe.serve.validate import check_anthropic, check_model

_STOP_REASON = {"stop": "end_turn", "length": "max_tokens", "stop_sequence": "stop_sequence", DISCONNECTED: None}
_ROLES = ("user", "assistant", "system")
_TEXT_CHUNK = 64  # characters per text_delta when a recorded answer is streamed


def _common(body: Any, headers: Any = None) -> RenderedRequest:
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
            raise invalid(f"messages.{i}.role: Input should be 'user', 'assistant' or 'system'")
    check_placement(messages)
    try:
        return render_request(body, "anthropic", "/v1/messages",
                              headers={"anthropic-beta": headers.get("anthropic-beta", "")} if headers else None)
    except InputError as exc:
        raise invalid(str(exc)) from None


def _checked(state: ServeState, body: Any, headers: Any = None) -> RenderedRequest:
    """The request rendered, after every check the Messages API makes (kvprobe.serve.validate)."""
    rendered = _common(body, headers)
    check_anthropic(body)
    check_model(body["model"], "anthropic", state.config.model, _emulated_model(state))
    return rendered


def _emulated_model(state: ServeState) -> str | None:
    return state.emulator.spec_for("anthropic").model if state.emulator else None


def parse_job(state: ServeState, body: Any, request: Request) -> Job:
    rendered = _checked(state, body, request.headers)
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
    if rendered.warnings and any("at most" in w for w in rendered.warnings):
        raise invalid(next(w for w in rendered.warnings if "at most" in w))
    asked, previous = _diagnostics_request(body)
    job = state.job("anthropic", "/v1/messages", "msg", body, rendered, max_tokens,
                    1.0 if temperature is None else temperature, stops, request.headers)
    job.diagnostics, job.previous_message_id = asked, previous
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


def _message(job: Job, content: list[Any], stop_reason: str | None, stop_sequence: str | None,
             usage: UsageFacts) -> dict[str, Any]:
    msg = {"id": job.request_id, "type": "message", "role": "assistant", "model": job.model, "content": content,
           "stop_reason": stop_reason, "stop_sequence": stop_sequence, "usage": usage_json(usage)}
    if job.diagnostics:
        reason = usage.cache_miss_reason
        msg["diagnostics"] = {"cache_miss_reason": reason} if reason else None
    return msg


def _content(job: Job, done: Done) -> tuple[list[Any], str | None, str | None]:
    """(content, stop_reason, stop_sequence): the recorded answer's, or the model's text."""
    if done.recorded is not None:
        r = done.recorded.response
        content = r.get("content") if isinstance(r.get("content"), list) else []
        return content, r.get("stop_reason") or "end_turn", r.get("stop_sequence")
    content = [{"type": "text", "text": done.text}] if job.max_tokens > 0 else []
    if content and thinks(job):
        content.insert(0, thinking_block(job))
    return content, _STOP_REASON[done.finish], done.stop_sequence


# What stands in for the reasoning of a request that turns thinking on: the local model does not think, but the
# API answers such a request with a thinking block first, and clients pass it back on their next request
# (LiteLLM drops `thinking` from a conversation whose last tool-using answer has none: a change the real API
# would never cause)
THINKING_TEXT = "(kvprobe serve: the local model answers without reasoning; this block stands in for it)"


def thinks(job: Job) -> bool:
    thinking = job.body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive") and job.max_tokens > 0


def thinking_block(job: Job) -> dict[str, Any]:
    """A thinking block as the API returns one: its text and an opaque signature (the request id's, so the same
    request is answered the same way)."""
    return {"type": "thinking", "thinking": THINKING_TEXT, "signature": f"kvprobe-{job.request_id}"}


class Messages:
    """The Messages API's response body and stream (`kvprobe.serve.streaming.Shape`)."""


    def final(self, state: ServeState, job: Job, done: Done) -> dict[str, Any]:
        content, stop_reason, stop_sequence = _content(job, done)
        msg = _message(job, content, stop_reason, stop_sequence, done.usage)
        msg["kvprobe"] = kvprobe_extension(state, job, done.usage)
        return msg

    def start(self, state: ServeState, job: Job, usage: UsageFacts) -> Iterable[bytes]:
        start = _message(job, [], None, None, usage)
        start["usage"]["output_tokens"] = 1 if job.max_tokens else 0
        yield _sse("message_start", {"type": "message_start", "message": start})
        if job.max_tokens and job.recorded is None:
            if thinks(job):  # the reasoning's block comes first, whole, as the API streams it before the text
                yield from _block_events(0, thinking_block(job))
            yield _sse("content_block_start", {"type": "content_block_start", "index": _text_index(job),
                                               "content_block": {"type": "text", "text": ""}})
        yield _sse("ping", {"type": "ping"})

    def delta(self, job: Job, text: str) -> Iterable[bytes]:
        yield _sse("content_block_delta", {"type": "content_block_delta", "index": _text_index(job),
                                           "delta": {"type": "text_delta", "text": text}})

    def end(self, state: ServeState, job: Job, done: Done, final: dict[str, Any]) -> Iterable[bytes]:
        if done.recorded is not None:
            for index, block in enumerate(final["content"]):
                yield from _block_events(index, block)
        elif job.max_tokens:
            yield _sse("content_block_stop", {"type": "content_block_stop", "index": _text_index(job)})
        yield _sse("message_delta", {
            "type": "message_delta",
            "delta": {"stop_reason": final["stop_reason"], "stop_sequence": final["stop_sequence"]},
            "usage": final["usage"], "kvprobe": final["kvprobe"]})
        yield _sse("message_stop", {"type": "message_stop"})

    def error(self, exc: ApiError) -> bytes:
        return _sse("error", exc.anthropic_body())


def _text_index(job: Job) -> int:
    """The text block's index in a model-written answer: after the thinking block where there is one."""
    return 1 if thinks(job) else 0


def _block_events(index: int, block: Any) -> Iterator[bytes]:
    """A recorded content block as the API streams it: start, deltas, stop."""
    if not isinstance(block, dict):
        return
    kind = block.get("type")
    start, deltas = dict(block), []
    if kind == "text":
        start["text"] = ""
        text = str(block.get("text", ""))
        deltas = [{"type": "text_delta", "text": text[i:i + _TEXT_CHUNK]} for i in range(0, len(text), _TEXT_CHUNK)]
    elif kind in ("tool_use", "server_tool_use", "mcp_tool_use"):
        start["input"] = {}
        deltas = [{"type": "input_json_delta", "partial_json": orjson.dumps(block.get("input", {})).decode()}]
    elif kind == "thinking":
        start["thinking"], start["signature"] = "", ""
        deltas = [{"type": "thinking_delta", "thinking": str(block.get("thinking", ""))}]
        if block.get("signature"):
            deltas.append({"type": "signature_delta", "signature": str(block["signature"])})
    yield _sse("content_block_start", {"type": "content_block_start", "index": index, "content_block": start})
    for delta in deltas:
        yield _sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
    yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})


async def messages(state: ServeState, body: Any, request: Request) -> Response:
    job = await asyncio.to_thread(parse_job, state, body, request)  # tokenizing a long prompt takes a while
    return await answer(state, job, Messages(), bool(body.get("stream")), {"request-id": job.request_id})


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


async def count_tokens(state: ServeState, body: Any, request: Request) -> Response:
    def count() -> int:
        return state.prompt(_checked(state, body, request.headers), check_length=False).num_tokens
    return JSONResponse({"input_tokens": await asyncio.to_thread(count)})
