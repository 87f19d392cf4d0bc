"""`POST /v1/responses` (and `GET /v1/responses/{id}`): the OpenAI Responses API on the local engine.

What Codex and the openai SDK's `client.responses.create` send: `input` (a string or items: messages,
reasoning, function calls and their outputs, any other typed item), `instructions`, `tools`, `store`,
`previous_response_id` (a stored response's input and output go before this input), `prompt_cache_key`,
`include`, `reasoning`, `max_output_tokens`. Usage: `input_tokens`, `input_tokens_details.cached_tokens`,
`output_tokens`, `output_tokens_details.reasoning_tokens`, `total_tokens`.

Streamed, the events are the API's: `response.created`, `response.in_progress`, per output item
`response.output_item.added`, its parts and deltas (`response.content_part.added`,
`response.output_text.delta` / `.done`, `response.content_part.done`, or
`response.function_call_arguments.delta` / `.done`), `response.output_item.done`, then
`response.completed` carrying the whole response; each with its `sequence_number`.
"""
from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from kvprobe.errors import InputError
from kvprobe.request import render_request
from kvprobe.request.responses_chain import input_items
from kvprobe.serve.errors import ApiError, invalid
from kvprobe.serve.openai_api import emulated_provider, temperature_of
from kvprobe.serve.service import Done, Job, ServeState, UsageFacts, kvprobe_extension
from kvprobe.serve.streaming import DISCONNECTED, answer
from kvprobe.serve.validate import check_model

STORED = 4096  # responses kept for previous_response_id and GET (oldest forgotten first)
_ECHOED = ("instructions", "max_output_tokens", "metadata", "parallel_tool_calls", "previous_response_id",
           "prompt_cache_key", "reasoning", "text", "tool_choice", "tools", "top_p", "truncation", "user",
           "service_tier", "safety_identifier", "prompt_cache_retention")
_DEFAULTS = {"parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "truncation": "disabled",
             "text": {"format": {"type": "text"}}, "metadata": {}, "reasoning": {"effort": None, "summary": None}}
_TEXT_CHUNK = 64


def _items(value: Any, field: str) -> list[Any]:
    items = input_items(value)
    if items is None:
        raise ApiError(400, f"Invalid type for '{field}': expected a string or an array of input items.", field,
                       "invalid_type")
    return items


def _validate(body: Any) -> None:
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise ApiError(400, "Missing required parameter: 'model'.", "model", "missing_required_parameter")
    if "input" not in body and not body.get("previous_response_id"):
        raise ApiError(400, "Missing required parameter: 'input'.", "input", "missing_required_parameter")
    if body.get("stream") is not None and not isinstance(body["stream"], bool):
        raise ApiError(400, "Invalid type for 'stream': expected a boolean.", "stream", "invalid_type")
    limit = body.get("max_output_tokens")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 16):
        raise ApiError(400, f"Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, "
                       f"but got {limit!r} instead.", "max_output_tokens", "integer_below_min_value")


def _effective(state: ServeState, body: dict[str, Any]) -> dict[str, Any]:
    """The body the model sees: a stored previous response's input and output before this input."""
    items = _items(body.get("input", []), "input")
    previous = body.get("previous_response_id")
    if previous is None:
        return {**body, "input": items}
    if not isinstance(previous, str) or previous not in state.stored:
        raise ApiError(400, f"Previous response with id '{str(previous)[:80]}' not found.",
                       "previous_response_id", "previous_response_not_found")
    stored = state.stored[previous]
    return {**body, "input": [*stored["_input"], *stored["output"], *items]}


def parse_job(state: ServeState, body: Any, request: Request) -> Job:
    _validate(body)
    temperature = temperature_of(body)
    emulated = state.emulator.spec_for("openai_responses").model if state.emulator else None
    check_model(body["model"], "openai", state.config.model, emulated)
    effective = _effective(state, body)
    try:
        rendered = render_request(effective, emulated_provider(state, "openai_responses", body), "/v1/responses")
    except InputError as exc:
        raise invalid(str(exc)) from None
    limit = body.get("max_output_tokens") or state.config.default_max_tokens
    job = state.job("openai_responses", "/v1/responses", "resp", body, rendered, limit, temperature, [],
                    request.headers)
    job.context["input"] = effective["input"]  # (the body is recorded as the client sent it)
    return job


def usage_json(u: UsageFacts) -> dict[str, Any]:
    return {"input_tokens": u.prompt_tokens, "input_tokens_details": {"cached_tokens": u.cache_read_tokens},
            "output_tokens": u.output_tokens,
            "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
            "total_tokens": u.prompt_tokens + u.output_tokens}


def _message_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    return {"id": item_id, "type": "message", "status": status, "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}


def _output(job: Job, done: Done) -> tuple[list[Any], str, dict[str, Any] | None]:
    """(output items, status, incomplete_details)."""
    if done.recorded is not None:
        r = done.recorded.response
        output = r.get("output") if isinstance(r.get("output"), list) else []
        status = r.get("status") if r.get("status") in ("completed", "incomplete") else "completed"
        return output, status, r.get("incomplete_details")
    item_id = "msg_" + job.request_id.removeprefix("resp_")
    if done.finish == DISCONNECTED:
        return [_message_item(item_id, done.text, "incomplete")], "incomplete", {"reason": "interrupted"}
    if done.finish == "length" and job.asked_max_tokens is None:  # the client's own limit cut it
        return [_message_item(item_id, done.text, "incomplete")], "incomplete", {"reason": "max_output_tokens"}
    return [_message_item(item_id, done.text)], "completed", None


class Responses:
    """The Responses API's body and event stream (`kvprobe.serve.streaming.Shape`)."""


    def __init__(self) -> None:
        self.sequence = 0

    def response(self, job: Job, status: str, output: list[Any], usage: dict[str, Any] | None) -> dict[str, Any]:
        body = job.body
        out = {"id": job.request_id, "object": "response", "created_at": int(job.timings.clock_start),
               "status": status, "error": None, "incomplete_details": None, "model": job.model, "output": output,
               "store": body.get("store", True) is not False, "temperature": body.get("temperature", 1.0),
               "usage": usage}
        for name in _ECHOED:
            if name in body or name in _DEFAULTS:
                out[name] = body.get(name, _DEFAULTS.get(name))
        return out

    def final(self, state: ServeState, job: Job, done: Done) -> dict[str, Any]:
        output, status, incomplete = _output(job, done)
        out = self.response(job, status, output, usage_json(done.usage))
        out["incomplete_details"] = incomplete
        out["kvprobe"] = kvprobe_extension(state, job, done.usage)
        if out["store"] and done.finish != DISCONNECTED:
            _store(state, job, out)
        return out

    def _event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"

    def start(self, state: ServeState, job: Job, usage: UsageFacts) -> Iterable[bytes]:
        created = self.response(job, "in_progress", [], None)
        yield self._event("response.created", response=created)
        yield self._event("response.in_progress", response=created)
        if job.recorded is None:
            item = _message_item("msg_" + job.request_id.removeprefix("resp_"), "", "in_progress")
            item["content"] = []
            yield self._event("response.output_item.added", output_index=0, item=item)
            yield self._event("response.content_part.added", item_id=item["id"], output_index=0, content_index=0,
                              part={"type": "output_text", "text": "", "annotations": [], "logprobs": []})

    def delta(self, job: Job, text: str) -> Iterable[bytes]:
        yield self._event("response.output_text.delta", item_id="msg_" + job.request_id.removeprefix("resp_"),
                          output_index=0, content_index=0, delta=text, logprobs=[])

    def end(self, state: ServeState, job: Job, done: Done, final: dict[str, Any]) -> Iterable[bytes]:
        if done.recorded is not None:
            for index, item in enumerate(final["output"]):
                yield from self._item_events(index, item)
        else:
            item = final["output"][0]
            part = item["content"][0]
            yield self._event("response.output_text.done", item_id=item["id"], output_index=0, content_index=0,
                              text=part["text"], logprobs=[])
            yield self._event("response.content_part.done", item_id=item["id"], output_index=0, content_index=0,
                              part=part)
            yield self._event("response.output_item.done", output_index=0, item=item)
        kind = "response.completed" if final["status"] == "completed" else "response.incomplete"
        yield self._event(kind, response=final)

    def _item_events(self, index: int, item: Any) -> Iterator[bytes]:
        """A recorded output item as the API streams it."""
        if not isinstance(item, dict):
            return
        kind, item_id = item.get("type"), item.get("id")
        if kind == "message":
            yield self._event("response.output_item.added", output_index=index,
                              item={**item, "status": "in_progress", "content": []})
            for c, part in enumerate(item.get("content") or []):
                yield from self._part_events(index, c, item_id, part)
        elif kind == "function_call":
            yield self._event("response.output_item.added", output_index=index,
                              item={**item, "status": "in_progress", "arguments": ""})
            args = str(item.get("arguments", ""))
            yield self._event("response.function_call_arguments.delta", item_id=item_id, output_index=index,
                              delta=args)
            yield self._event("response.function_call_arguments.done", item_id=item_id, output_index=index,
                              arguments=args)
        else:  # reasoning, custom tool calls, shell calls, ...: whole
            yield self._event("response.output_item.added", output_index=index, item=item)
        yield self._event("response.output_item.done", output_index=index, item=item)

    def _part_events(self, index: int, c: int, item_id: Any, part: Any) -> Iterator[bytes]:
        if not isinstance(part, dict):
            return
        text = str(part.get("text", ""))
        where = {"item_id": item_id, "output_index": index, "content_index": c}
        yield self._event("response.content_part.added", **where, part={**part, "text": ""})
        for i in range(0, len(text), _TEXT_CHUNK):
            yield self._event("response.output_text.delta", **where, delta=text[i:i + _TEXT_CHUNK], logprobs=[])
        yield self._event("response.output_text.done", **where, text=text, logprobs=[])
        yield self._event("response.content_part.done", **where, part=part)

    def error(self, exc: ApiError) -> bytes:
        err = exc.openai_body()["error"]
        return self._event("error", code=err["code"], message=err["message"], param=err["param"])


def _store(state: ServeState, job: Job, response: dict[str, Any]) -> None:
    stored: OrderedDict = state.stored  # type: ignore[assignment]
    stored[job.request_id] = {**response, "_input": job.context.get("input", [])}
    while len(stored) > STORED:
        stored.popitem(last=False)


async def responses(state: ServeState, body: Any, request: Request) -> Response:
    job = await asyncio.to_thread(parse_job, state, body, request)  # tokenizing a long prompt takes a while
    return await answer(state, job, Responses(), bool(body.get("stream")), {"x-request-id": job.request_id})


async def retrieve(state: ServeState, request: Request) -> Response:
    stored = state.stored.get(request.path_params["response_id"])
    if stored is None:
        raise ApiError(404, f"Response with id '{request.path_params['response_id'][:80]}' not found.", None,
                       "not_found")
    return JSONResponse({k: v for k, v in stored.items() if k != "_input"})

