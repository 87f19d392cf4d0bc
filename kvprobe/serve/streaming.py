"""What every API's answer goes through, once: the non-streamed body, or an SSE stream.

Each API supplies a `Shape`: how its final body reads, and its stream's events (the start, a text delta,
the end, an error). Here, for all of them: the record is written before the last event leaves (a request the
trace cannot hold is answered with an error, never a success nobody recorded), an engine failure mid-stream
becomes the API's error event, and a client that goes away mid-stream still has its request recorded,
marked (it was prefilled: the cache changed).
"""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import Any, Protocol

from starlette.responses import JSONResponse, Response, StreamingResponse

from kvprobe.serve.errors import ApiError
from kvprobe.serve.recording import RecordLost
from kvprobe.serve.service import Began, Delta, Done, Job, ServeState, UsageFacts, generate, generate_all, \
    record_trace

DISCONNECTED = "disconnected"  # Done.finish of a stream its client left


class Shape(Protocol):
    def final(self, state: ServeState, job: Job, done: Done) -> dict[str, Any]:
        """The whole response body (also what the trace records)."""

    def start(self, state: ServeState, job: Job, usage: UsageFacts) -> Iterable[bytes]:
        """The stream's first events, once the prompt is computed."""

    def delta(self, job: Job, text: str) -> Iterable[bytes]:
        """Events for a piece of the model's text."""

    def end(self, state: ServeState, job: Job, done: Done, final: dict[str, Any]) -> Iterable[bytes]:
        """The stream's last events (a recorded answer's content first, when it is one)."""

    def error(self, exc: ApiError) -> bytes:
        """The error event of a stream that cannot go on."""


def lost(exc: RecordLost) -> ApiError:
    return ApiError(507, str(exc), code="trace_write_failed")


async def answer(state: ServeState, job: Job, shape: Shape, stream: bool, headers: dict[str, str]) -> Response:
    """The response to a parsed request: JSON, or an SSE stream."""
    if stream:
        return StreamingResponse(_events(state, job, shape), media_type="text/event-stream",
                                 headers={**headers, "cache-control": "no-cache"})
    final = shape.final(state, job, await generate_all(state, job))
    try:
        record_trace(state, job, final, job.provider)
    except RecordLost as exc:
        raise lost(exc) from None
    return JSONResponse(final, headers=headers)


async def _events(state: ServeState, job: Job, shape: Shape) -> AsyncIterator[bytes]:
    usage: UsageFacts | None = None
    text: list[str] = []
    finished = False
    try:
        async for event in generate(state, job):
            if isinstance(event, Began):
                usage = event.usage
                for chunk in shape.start(state, job, usage):
                    yield chunk
            elif isinstance(event, Delta):
                text.append(event.text)
                for chunk in shape.delta(job, event.text):
                    yield chunk
            elif isinstance(event, Done):
                finished = True
                final = shape.final(state, job, event)
                record_trace(state, job, final, job.provider)  # before the last events: see the docstring
                for chunk in shape.end(state, job, event, final):
                    yield chunk
    except RecordLost as exc:
        state.requests_failed += 1
        yield shape.error(lost(exc))
    except ApiError as exc:
        state.requests_failed += 1
        yield shape.error(exc)
    except (asyncio.CancelledError, GeneratorExit):
        if not finished:
            _record_disconnect(state, job, shape, usage, "".join(text))
        raise


def _record_disconnect(state: ServeState, job: Job, shape: Shape, usage: UsageFacts | None, text: str) -> None:
    """The client left before the end: recorded, marked; with no usage when the prompt was never computed
    (then nothing was cached: it is a failed request)."""
    state.requests_disconnected += 1
    final, error = None, "the client disconnected before the prompt was computed"
    if usage is not None:
        final, error = shape.final(state, job, Done(DISCONNECTED, None, text, usage)), None
        final.setdefault("kvprobe", {})["client_disconnected"] = True
    try:
        record_trace(state, job, final, job.provider, disconnected=True, error=error)
    except RecordLost:
        pass  # counted by the recorder; nobody is left to tell
