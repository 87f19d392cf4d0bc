"""A local stand-in for the provider APIs, speaking their real wire formats (JSON, SSE, AWS event streams).

For tests and benchmarks of capture: the official SDKs talk to it through the proxy or the hook. It serves
`POST /v1/messages`, `/v1/chat/completions` and `/v1/responses` (streamed with the providers' real event
sequences, chunked transfer encoding), Gemini's `models/M:generateContent`, `:streamGenerateContent` (SSE with
`?alt=sse`, else a JSON array) and `:countTokens` (also under Vertex's `publishers/google`), Vertex's Claude
`:rawPredict` / `:streamRawPredict`, Bedrock's `/model/M/invoke` and `/invoke-with-response-stream` (AWS event
stream frames), and `GET /v1/models`. Per request, an `x-fake` header picks a fault:

    status=429        answer with that HTTP status and the provider's error body
    reset-after=N     send N stream events, then reset the connection
    stall-after=N     send N stream events, then stop sending (until the client or proxy gives up)
    hold-first        send the first event, then wait until `release()` is called
    hold-after=N      the same after N events (combine with reset-after=N: reset once released)
    gzip              gzip-encode a JSON response
    close-after-read  read the request, then close the connection without answering
    big-head=N        add a response header of N bytes
    early-hints       send a `103 Early Hints` interim response before the real one
    http10            answer as HTTP/1.0: no Content-Length, the body ends when the connection closes
    double-length     send two Content-Length headers that disagree

and an `x-fake-usage` header (JSON) sets the usage the response reports.
"""
from __future__ import annotations

import asyncio
import base64
import gzip
import socket
import struct
import threading
import zlib
from typing import Any

import orjson

from kvprobe.capture.wire import Head, parse_head

DEFAULT_USAGE = {"input_tokens": 12, "cache_read_input_tokens": 2048, "cache_creation_input_tokens": 256,
                 "output_tokens": 9}
WORDS = ["Hello", " from", " the", " local", " provider", "."]


def _anthropic_usage(usage: dict[str, Any]) -> dict[str, Any]:
    created = usage.get("cache_creation_input_tokens", 0)
    return {"input_tokens": usage.get("input_tokens", 0), "cache_creation_input_tokens": created,
            "cache_read_input_tokens": usage.get("cache_read_input_tokens", 0),
            "cache_creation": {"ephemeral_5m_input_tokens": created, "ephemeral_1h_input_tokens": 0},
            "output_tokens": usage.get("output_tokens", 0), "service_tier": "standard"}


def _openai_usage(usage: dict[str, Any], responses: bool) -> dict[str, Any]:
    read = usage.get("cache_read_input_tokens", 0)
    total = usage.get("input_tokens", 0) + read + usage.get("cache_creation_input_tokens", 0)
    out = usage.get("output_tokens", 0)
    if responses:
        return {"input_tokens": total, "input_tokens_details": {"cached_tokens": read}, "output_tokens": out,
                "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": total + out}
    return {"prompt_tokens": total, "completion_tokens": out, "total_tokens": total + out,
            "prompt_tokens_details": {"cached_tokens": read, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0}}


def gemini_usage(usage: dict[str, Any]) -> dict[str, Any]:
    """usageMetadata: promptTokenCount includes the cached tokens (cachedContentTokenCount)."""
    read = usage.get("cache_read_input_tokens", 0)
    prompt = usage.get("input_tokens", 0) + read + usage.get("cache_creation_input_tokens", 0)
    out = usage.get("output_tokens", 0)
    return {"promptTokenCount": prompt, "cachedContentTokenCount": read, "candidatesTokenCount": out,
            "totalTokenCount": prompt + out, "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}]}


def gemini_chunks(model: str, usage: dict[str, Any]) -> list[dict[str, Any]]:
    """A streamGenerateContent answer: one chunk per word, usageMetadata on each (the last one is final)."""
    chunks = []
    for i, word in enumerate(WORDS):
        last = i == len(WORDS) - 1
        cand: dict[str, Any] = {"content": {"role": "model", "parts": [{"text": word}]}, "index": 0}
        if last:
            cand["finishReason"] = "STOP"
        chunks.append({"candidates": [cand], "usageMetadata": gemini_usage(usage if last else {
            **usage, "output_tokens": i + 1}), "modelVersion": model, "responseId": "fake-gemini-01"})
    return chunks


def gemini_response(model: str, usage: dict[str, Any]) -> dict[str, Any]:
    return {"candidates": [{"content": {"role": "model", "parts": [{"text": "".join(WORDS)}]},
                            "finishReason": "STOP", "index": 0}],
            "usageMetadata": gemini_usage(usage), "modelVersion": model, "responseId": "fake-gemini-01"}


def event_stream_frame(payload: bytes, event_type: str = "chunk") -> bytes:
    """One AWS event-stream message (prelude, string headers, payload, CRC32s), as Bedrock streams them."""
    headers = b""
    for name, value in ((":event-type", event_type), (":content-type", "application/json"),
                        (":message-type", "event")):
        headers += bytes([len(name)]) + name.encode() + b"\x07" + len(value).to_bytes(2, "big") + value.encode()
    total = 16 + len(headers) + len(payload)
    prelude = total.to_bytes(4, "big") + len(headers).to_bytes(4, "big")
    message = prelude + zlib.crc32(prelude).to_bytes(4, "big") + headers + payload
    return message + zlib.crc32(message).to_bytes(4, "big")


def bedrock_stream(model: str, usage: dict[str, Any]) -> bytes:
    events = anthropic_events(model, usage)
    return b"".join(event_stream_frame(orjson.dumps({"bytes": base64.b64encode(orjson.dumps(ev)).decode()}))
                    for _, ev in events if ev["type"] != "ping")


def anthropic_events(model: str, usage: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    u = _anthropic_usage(usage)
    start_usage = {**u, "output_tokens": 1}
    events = [("message_start", {"type": "message_start", "message": {
        "id": "msg_fake01", "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": start_usage}}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("ping", {"type": "ping"})]
    events += [("content_block_delta", {"type": "content_block_delta", "index": 0,
                                        "delta": {"type": "text_delta", "text": w}}) for w in WORDS]
    events += [("content_block_stop", {"type": "content_block_stop", "index": 0}),
               ("content_block_start", {"type": "content_block_start", "index": 1, "content_block": {
                   "type": "tool_use", "id": "toolu_fake1", "name": "read_file", "input": {}}}),
               ("content_block_delta", {"type": "content_block_delta", "index": 1,
                                        "delta": {"type": "input_json_delta", "partial_json": "{\"path\": "}}),
               ("content_block_delta", {"type": "content_block_delta", "index": 1,
                                        "delta": {"type": "input_json_delta", "partial_json": "\"a.py\"}"}}),
               ("content_block_stop", {"type": "content_block_stop", "index": 1}),
               ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                                  "usage": {"output_tokens": u["output_tokens"]}}),
               ("message_stop", {"type": "message_stop"})]
    return events


def anthropic_message(model: str, usage: dict[str, Any]) -> dict[str, Any]:
    return {"id": "msg_fake01", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": "".join(WORDS)}], "stop_reason": "end_turn",
            "stop_sequence": None, "usage": _anthropic_usage(usage)}


def chat_chunks(model: str, usage: dict[str, Any], include_usage: bool) -> list[tuple[str | None, Any]]:
    base = {"id": "chatcmpl-fake01", "object": "chat.completion.chunk", "created": 1760000000, "model": model,
            "system_fingerprint": "fp_fake"}
    chunks: list[tuple[str | None, Any]] = [(None, {**base, "choices": [{"index": 0, "delta": {
        "role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}]})]
    chunks += [(None, {**base, "choices": [{"index": 0, "delta": {"content": w}, "logprobs": None,
                                            "finish_reason": None}]}) for w in WORDS]
    chunks.append((None, {**base, "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}]}))
    if include_usage:
        chunks.append((None, {**base, "choices": [], "usage": _openai_usage(usage, False)}))
    chunks.append((None, "[DONE]"))
    return chunks


def chat_completion(model: str, usage: dict[str, Any]) -> dict[str, Any]:
    return {"id": "chatcmpl-fake01", "object": "chat.completion", "created": 1760000000, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "".join(WORDS), "refusal": None},
                         "logprobs": None, "finish_reason": "stop"}], "usage": _openai_usage(usage, False)}


def _response_obj(model: str, status: str, usage: dict[str, Any] | None) -> dict[str, Any]:
    output = [] if usage is None else [{"type": "message", "id": "msg_fake01", "status": "completed",
                                        "role": "assistant", "content": [{"type": "output_text",
                                                                          "text": "".join(WORDS), "annotations": []}]}]
    return {"id": "resp_fake01", "object": "response", "created_at": 1760000000, "status": status,
            "model": model, "output": output, "usage": None if usage is None else _openai_usage(usage, True),
            "error": None, "incomplete_details": None, "instructions": None, "metadata": {},
            "parallel_tool_calls": True, "temperature": 1.0, "tool_choice": "auto", "tools": [], "top_p": 1.0}


def responses_events(model: str, usage: dict[str, Any]) -> list[tuple[str | None, Any]]:
    item = {"type": "message", "id": "msg_fake01", "status": "in_progress", "role": "assistant", "content": []}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": _response_obj(model, "in_progress", None)},
        {"type": "response.in_progress", "response": _response_obj(model, "in_progress", None)},
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.content_part.added", "item_id": "msg_fake01", "output_index": 0, "content_index": 0,
         "part": {"type": "output_text", "text": "", "annotations": []}}]
    events += [{"type": "response.output_text.delta", "item_id": "msg_fake01", "output_index": 0,
                "content_index": 0, "delta": w, "logprobs": []} for w in WORDS]
    events += [{"type": "response.output_text.done", "item_id": "msg_fake01", "output_index": 0,
                "content_index": 0, "text": "".join(WORDS), "logprobs": []},
               {"type": "response.completed", "response": _response_obj(model, "completed", usage)}]
    return [(e["type"], {**e, "sequence_number": i}) for i, e in enumerate(events)]


def _error_body(path: str, status: int) -> dict[str, Any]:
    kinds = {400: "invalid_request_error", 401: "authentication_error", 429: "rate_limit_error",
             500: "api_error", 529: "overloaded_error"}
    kind = kinds.get(status, "api_error")
    if "/messages" in path:
        return {"type": "error", "error": {"type": kind, "message": f"fake {kind}"}}
    return {"error": {"message": f"fake {kind}", "type": kind, "param": None, "code": None}}


def _model_in(path: str) -> str | None:
    from urllib.parse import unquote

    if "/models/" in path:
        return path.split("/models/", 1)[1].split(":", 1)[0]
    if path.startswith("/model/"):
        return unquote(path.split("/")[2])
    return None


def _sse(event: str | None, data: Any) -> bytes:
    payload = data if isinstance(data, str) else orjson.dumps(data).decode()
    return ((f"event: {event}\n" if event else "") + f"data: {payload}\n\n").encode()


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class FakeProvider:
    """The fake API on its own thread and event loop: `start()` returns its base URL."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host, self.port = host, port
        self.requests: list[dict[str, Any]] = []  # what arrived: path, headers (lower-case), body
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fake-provider", daemon=True)
        self._release = threading.Event()
        self._server: asyncio.base_events.Server | None = None
        self.record_requests = True

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> str:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result()
        return self.url

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]

    def release(self) -> None:
        self._release.set()

    def stop(self) -> None:
        async def close() -> None:
            if self._server:
                self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()
        self._release.set()
        asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    async def serve_forever(self) -> None:
        """Serve on the current loop (for running in a separate process)."""
        await self._start()
        await asyncio.Event().wait()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                raw = await reader.readuntil(b"\r\n\r\n")
                head = parse_head(raw, request=True)
                length = int(head.get("content-length") or 0)
                body = await reader.readexactly(length) if length else b""
                if not await self._respond(head, body, writer):
                    return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _respond(self, head: Head, body: bytes, writer: asyncio.StreamWriter) -> bool:
        method, target = head.start[0], head.start[1]
        path = target.split("?")[0]
        headers = head.lower_dict()
        if self.record_requests:
            self.requests.append({"method": method, "path": path, "target": target, "headers": headers,
                                  "body": body})
        faults = dict(f.partition("=")[::2] for f in headers.get("x-fake", "").split(",") if f)
        usage = {**DEFAULT_USAGE, **orjson.loads(headers.get("x-fake-usage", "{}"))}
        if method == "GET" and path.endswith("/models"):
            return await self._json(writer, 200, {"object": "list", "data": [{"id": "fake-model"}]}, False)
        try:
            req = orjson.loads(body) if body else {}
        except orjson.JSONDecodeError:
            return await self._json(writer, 400, _error_body(path, 400), False)
        if "close-after-read" in faults:
            return False
        if "status" in faults:
            status = int(faults["status"])
            return await self._json(writer, status, _error_body(path, status), False)
        model = str(req.get("model", _model_in(path) or "fake-model"))
        if ":" in path.rsplit("/", 1)[-1] or "/model/" in path:  # Gemini, Vertex and Bedrock name a method
            return await self._google_or_aws(writer, path, target, model, usage)
        if not req.get("stream"):
            if path.endswith("/messages"):
                data = anthropic_message(model, usage)
            elif path.endswith("/responses"):
                data = _response_obj(model, "completed", usage)
            else:
                data = chat_completion(model, usage)
            if "early-hints" in faults:
                writer.write(b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n")
            if "http10" in faults or "double-length" in faults:
                return await self._odd_framing(writer, data, faults)
            return await self._json(writer, 200, data, "gzip" in faults, int(faults.get("big-head", 0)))
        if path.endswith("/messages"):
            events = anthropic_events(model, usage)
        elif path.endswith("/responses"):
            events = responses_events(model, usage)
        else:
            include = bool((req.get("stream_options") or {}).get("include_usage"))
            events = chat_chunks(model, usage, include)
        return await self._stream(writer, events, faults)

    async def _google_or_aws(self, writer: asyncio.StreamWriter, path: str, target: str, model: str,
                             usage: dict[str, Any]) -> bool:
        method = path.rsplit(":", 1)[-1] if ":" in path.rsplit("/", 1)[-1] else path.rsplit("/", 1)[-1]
        if method == "countTokens":
            return await self._json(writer, 200, {"totalTokens": 42}, False)
        if method == "generateContent":
            return await self._json(writer, 200, gemini_response(model, usage), False)
        if method == "streamGenerateContent":
            chunks = gemini_chunks(model, usage)
            if "alt=sse" in target:
                return await self._stream(writer, [(None, c) for c in chunks], {})
            return await self._json(writer, 200, chunks, False)
        if method in ("rawPredict", "invoke"):
            return await self._json(writer, 200, anthropic_message(model, usage), False)
        if method == "streamRawPredict":
            return await self._stream(writer, anthropic_events(model, usage), {})
        if method == "invoke-with-response-stream":
            frames = bedrock_stream(model, usage)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.amazon.eventstream\r\n"
                         b"x-amzn-requestid: fake-aws-01\r\nTransfer-Encoding: chunked\r\n\r\n"
                         + _chunk(frames) + b"0\r\n\r\n")
            await writer.drain()
            return True
        return await self._json(writer, 404, {"error": {"code": 404, "message": f"fake: no {method}",
                                                        "status": "NOT_FOUND"}}, False)

    async def _json(self, writer: asyncio.StreamWriter, status: int, data: Any, gz: bool, head: int = 0) -> bool:
        body = orjson.dumps(data)
        extra = f"x-fake-padding: {'p' * head}\r\n" if head else ""
        if gz:
            body = gzip.compress(body)
            extra += "Content-Encoding: gzip\r\n"
        writer.write((f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nrequest-id: req_fake\r\n"
                      f"{extra}Content-Length: {len(body)}\r\n\r\n").encode() + body)
        await writer.drain()
        return True

    async def _odd_framing(self, writer: asyncio.StreamWriter, data: Any, faults: dict[str, str]) -> bool:
        body = orjson.dumps(data)
        if "http10" in faults:  # close-delimited: the connection's end is the body's end
            writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + body)
            await writer.drain()
            return False
        writer.write((f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                      f"Content-Length: {len(body) + 10}\r\n\r\n").encode() + body)
        await writer.drain()
        return True

    async def _stream(self, writer: asyncio.StreamWriter, events: list, faults: dict[str, str]) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
                     b"Cache-Control: no-cache\r\nrequest-id: req_fake\r\nTransfer-Encoding: chunked\r\n\r\n")
        cut = int(faults.get("reset-after", faults.get("stall-after", -1)))
        hold = int(faults.get("hold-after", 1 if "hold-first" in faults else -1))
        for i, (event, data) in enumerate(events):
            if i == hold:
                await writer.drain()
                await asyncio.get_running_loop().run_in_executor(None, self._release.wait, 10)
            if i == cut:
                await writer.drain()
                if "reset-after" in faults:
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    writer.transport.abort()
                    return False
                await asyncio.Event().wait()  # stall until cancelled
            writer.write(_chunk(_sse(event, data)))
            if i % 4 == 0:
                await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True


def main() -> None:
    """`python -m kvprobe.capture.testing PORT`: serve the fake API in this process (for benchmarks)."""
    import sys
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    fake = FakeProvider(port=port)
    fake.record_requests = False

    async def run() -> None:
        await fake._start()
        print(fake.port, flush=True)
        await asyncio.Event().wait()
    asyncio.run(run())


if __name__ == "__main__":
    main()
