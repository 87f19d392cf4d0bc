"""Rebuild the provider's final response body from what came over the wire (JSON or an SSE stream).

Anthropic streams a `message_start` (usage with input and cache counts), content block events and a
`message_delta` (cumulative output tokens; newer API versions repeat the input counts there). OpenAI Chat
streams `chat.completion.chunk`s and, with `stream_options.include_usage`, a last chunk holding `usage`.
OpenAI Responses streams typed events ending in `response.completed` (or `.failed` / `.incomplete`) that
carry the whole response. Gemini streams GenerateContentResponse chunks (SSE with `?alt=sse`, else one JSON
array), the last `usageMetadata` being the request's. Bedrock wraps Anthropic's events in AWS event-stream
frames. A stream cut short still yields whatever usage arrived.
"""
from __future__ import annotations

import base64
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson


@dataclass(slots=True)
class Assembled:
    response: dict[str, Any] | None  # the reassembled provider response (None: nothing usable arrived)
    error: str | None = None  # a provider error event or an unreadable body
    stream: bool = False


def decode_body(data: bytes, content_encoding: str | None) -> bytes:
    """Undo gzip/deflate content-encoding (the proxy only lets clients ask for what it can undo)."""
    encoding = (content_encoding or "").strip().lower()
    if not data or encoding in ("", "identity"):
        return data
    if encoding in ("gzip", "x-gzip", "deflate"):
        wbits = 47 if encoding != "deflate" else 15
        try:
            return zlib.decompressobj(wbits).decompress(data)
        except zlib.error:
            if encoding == "deflate":  # some servers send raw deflate without the zlib header
                return zlib.decompressobj(-15).decompress(data)
            raise
    if encoding in ("br", "zstd"):  # only advertised by httpx when these optional modules are installed
        try:
            if encoding == "br":
                import brotli
                return brotli.decompress(data)
            import zstandard
            return zstandard.ZstdDecompressor().decompressobj().decompress(data)
        except ImportError:
            pass
    raise ValueError(f"cannot decode content-encoding {encoding!r}")


def iter_sse(data: bytes) -> Iterator[tuple[str | None, str]]:
    """(event name, data) of each server-sent event; a trailing partial event is included."""
    text = data.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
    for chunk in text.split("\n\n"):
        event, lines = None, []
        for line in chunk.split("\n"):
            if line.startswith("data:"):
                lines.append(line[6:] if line.startswith("data: ") else line[5:])
            elif line.startswith("event:"):
                event = line[6:].strip()
        if lines:
            yield event, "\n".join(lines)


def _json_events(data: bytes) -> Iterator[tuple[str | None, dict[str, Any]]]:
    for event, payload in iter_sse(data):
        if payload.strip() == "[DONE]":
            continue
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            continue  # a partial last event of a cut stream
        if isinstance(obj, dict):
            yield event, obj


def _merge_usage(into: dict[str, Any], new: Any) -> None:
    if isinstance(new, dict):
        into.update({k: v for k, v in new.items() if v is not None})


def _anthropic_block_delta(block: dict[str, Any], delta: dict[str, Any], partial: dict[int, list[str]],
                           index: int) -> None:
    kind = delta.get("type")
    if kind == "text_delta":
        block["text"] = block.get("text", "") + str(delta.get("text", ""))
    elif kind == "input_json_delta":
        partial.setdefault(index, []).append(str(delta.get("partial_json", "")))
    elif kind == "thinking_delta":
        block["thinking"] = block.get("thinking", "") + str(delta.get("thinking", ""))
    elif kind == "signature_delta":
        block["signature"] = block.get("signature", "") + str(delta.get("signature", ""))
    elif kind == "citations_delta":
        block.setdefault("citations", []).append(delta.get("citation"))


def assemble_anthropic(data: bytes) -> Assembled:
    message: dict[str, Any] | None = None
    usage: dict[str, Any] = {}
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, list[str]] = {}
    error = None
    for _, ev in _json_events(data):
        kind = ev.get("type")
        if kind == "message_start" and isinstance(ev.get("message"), dict):
            message = dict(ev["message"])
            _merge_usage(usage, message.get("usage"))
        elif kind == "content_block_start" and isinstance(ev.get("content_block"), dict):
            blocks[_index(ev)] = dict(ev["content_block"])
        elif kind == "content_block_delta" and isinstance(ev.get("delta"), dict):
            _anthropic_block_delta(blocks.setdefault(_index(ev), {}), ev["delta"], partial, _index(ev))
        elif kind == "message_delta":
            message = message if message is not None else {"type": "message", "role": "assistant"}
            if isinstance(ev.get("delta"), dict):
                message.update(ev["delta"])
            _merge_usage(usage, ev.get("usage"))
        elif kind == "error":
            error = _error_text(ev.get("error"))
    if message is None:
        return Assembled(None, error or "the stream held no message_start event", True)
    for index, pieces in partial.items():
        try:
            blocks.setdefault(index, {})["input"] = orjson.loads("".join(pieces) or "{}")
        except orjson.JSONDecodeError:
            blocks[index]["input"] = "".join(pieces)  # cut off mid-tool-call: keep the text that arrived
    message["content"] = [blocks[i] for i in sorted(blocks)]
    message["usage"] = usage
    return Assembled(message, error, True)


def _index(ev: dict[str, Any]) -> int:
    index = ev.get("index")
    return index if isinstance(index, int) else 0


def _chat_delta(choice: dict[str, Any], delta: dict[str, Any]) -> None:
    msg = choice["message"]
    for key, value in delta.items():
        if key == "tool_calls" and isinstance(value, list):
            calls = msg.setdefault("tool_calls", [])
            for call in value:
                if not isinstance(call, dict):
                    continue
                i = call.get("index", len(calls)) if isinstance(call.get("index"), int) else len(calls)
                while len(calls) <= i:
                    calls.append({"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
                target = calls[i]
                for k in ("id", "type"):
                    if call.get(k):
                        target[k] = call[k]
                fn = call.get("function") if isinstance(call.get("function"), dict) else {}
                for k in ("name", "arguments"):
                    if isinstance(fn.get(k), str):
                        target["function"][k] += fn[k]
        elif isinstance(value, str) and key in ("content", "refusal", "reasoning_content"):
            msg[key] = (msg.get(key) or "") + value
        elif value is not None:
            msg[key] = value


def assemble_openai_chat(data: bytes) -> Assembled:
    result: dict[str, Any] | None = None
    choices: dict[int, dict[str, Any]] = {}
    error = None
    for _, chunk in _json_events(data):
        if "error" in chunk and "choices" not in chunk:
            error = _error_text(chunk.get("error"))
            continue
        if result is None:
            result = {k: chunk.get(k) for k in ("id", "created", "model", "system_fingerprint") if k in chunk}
            result["object"] = "chat.completion"
        for key in ("model", "system_fingerprint", "service_tier"):
            if chunk.get(key) is not None:
                result[key] = chunk[key]
        if isinstance(chunk.get("usage"), dict):
            result["usage"] = chunk["usage"]
        for ch in chunk.get("choices") or []:
            if not isinstance(ch, dict):
                continue
            index = ch.get("index") if isinstance(ch.get("index"), int) else 0
            choice = choices.setdefault(index, {"index": index, "message": {"role": "assistant"},
                                                "finish_reason": None})
            if isinstance(ch.get("delta"), dict):
                _chat_delta(choice, ch["delta"])
            if ch.get("finish_reason") is not None:
                choice["finish_reason"] = ch["finish_reason"]
    if result is None:
        return Assembled(None, error or "the stream held no chunk", True)
    result["choices"] = [choices[i] for i in sorted(choices)]
    return Assembled(result, error, True)


def assemble_openai_responses(data: bytes) -> Assembled:
    response: dict[str, Any] | None = None
    error = None
    for _, ev in _json_events(data):
        if isinstance(ev.get("response"), dict):
            response = ev["response"]  # each lifecycle event carries the whole response so far
        if ev.get("type") == "error":
            error = _error_text(ev.get("error") or ev)
        elif ev.get("type") == "response.failed" and isinstance(response, dict):
            error = _error_text(response.get("error")) or "response.failed"
    if response is None:
        return Assembled(None, error or "the stream held no response event", True)
    return Assembled(response, error, True)


def _gemini_merge(into: dict[str, Any], chunk: dict[str, Any], candidates: dict[int, dict[str, Any]]) -> None:
    """One GenerateContentResponse of a stream: its parts appended per candidate, the rest kept as last seen
    (each chunk's usageMetadata is cumulative: the last one is the request's)."""
    for key, value in chunk.items():
        if key != "candidates" and value is not None:
            into[key] = value
    for cand in chunk.get("candidates") or []:
        if not isinstance(cand, dict):
            continue
        index = cand.get("index") if isinstance(cand.get("index"), int) else 0
        merged = candidates.setdefault(index, {"content": {"role": "model", "parts": []}})
        content = cand.get("content")
        if isinstance(content, dict):
            merged["content"]["parts"] += [p for p in content.get("parts") or [] if isinstance(p, dict)]
            if content.get("role"):
                merged["content"]["role"] = content["role"]
        merged.update({k: v for k, v in cand.items() if k != "content" and v is not None})


def assemble_gemini(chunks: list[dict[str, Any]], stream: bool) -> Assembled:
    """Gemini's streamGenerateContent: SSE (`?alt=sse`) or one JSON array, a GenerateContentResponse each."""
    result: dict[str, Any] = {}
    candidates: dict[int, dict[str, Any]] = {}
    error = None
    for chunk in chunks:
        if isinstance(chunk.get("error"), dict):
            error = _error_text(chunk["error"])
            continue
        _gemini_merge(result, chunk, candidates)
    if not result and not candidates:
        return Assembled(None, error or "the stream held no response chunk", stream)
    if candidates:
        result["candidates"] = [candidates[i] for i in sorted(candidates)]
    return Assembled(result, error, stream)


def bedrock_events(data: bytes) -> Iterator[tuple[str | None, dict[str, Any]]]:
    """The events of an AWS event stream (Bedrock's InvokeModelWithResponseStream), as (event type, JSON).

    Each message: total length and headers length (big-endian uint32), a prelude CRC, headers (name length,
    name, type 7 = string: uint16 length and value; other types are skipped by their fixed sizes), the payload
    and a message CRC (AWS's event stream encoding). The payload of a `chunk` event is `{"bytes": BASE64}`
    holding the provider's own stream event (Anthropic's JSON). A cut last message is dropped. Read here
    rather than with botocore's parser, which would make botocore a dependency of every capture."""
    pos = 0
    while pos + 16 <= len(data):
        total, head_len = int.from_bytes(data[pos:pos + 4], "big"), int.from_bytes(data[pos + 4:pos + 8], "big")
        if total < 16 or pos + total > len(data):
            return
        headers = _event_headers(data[pos + 12:pos + 12 + head_len])
        payload = data[pos + 12 + head_len:pos + total - 4]
        pos += total
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(obj, dict):
            continue
        if isinstance(obj.get("bytes"), str):
            try:
                inner = orjson.loads(base64.b64decode(obj["bytes"]))
            except (ValueError, orjson.JSONDecodeError):
                continue
            if isinstance(inner, dict):
                yield headers.get(":event-type"), inner
        elif headers.get(":message-type") == "exception":
            yield "error", {"type": "error", "error": {"type": headers.get(":exception-type"),
                                                       "message": obj.get("message") or obj.get("Message")}}


_FIXED_SIZES = {0: 0, 1: 0, 2: 1, 3: 2, 4: 4, 5: 8, 8: 8, 9: 16}  # bool true/false, byte, short, int, long, ts, uuid


def _event_headers(raw: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    pos = 0
    while pos < len(raw):
        n = raw[pos]
        name = raw[pos + 1:pos + 1 + n].decode("utf-8", "replace")
        kind = raw[pos + 1 + n] if pos + 1 + n < len(raw) else -1
        pos += 2 + n
        if kind in (6, 7):  # byte array, string: a uint16 length first
            size = int.from_bytes(raw[pos:pos + 2], "big")
            if kind == 7:
                out[name] = raw[pos + 2:pos + 2 + size].decode("utf-8", "replace")
            pos += 2 + size
        elif kind in _FIXED_SIZES:
            pos += _FIXED_SIZES[kind]
        else:
            break
    return out


def _error_text(err: Any) -> str:
    if isinstance(err, dict):
        kind, message = err.get("type") or err.get("code"), err.get("message")
        return f"{kind}: {message}" if kind and message else str(message or kind or err)
    return str(err)


def sniff_stream_kind(data: bytes) -> str:
    head = data[:4096]
    if b"message_start" in head or b"content_block_" in head:
        return "anthropic"
    if b'"response.' in head:
        return "responses"
    if b'"candidates"' in head or b'"usageMetadata"' in head:
        return "gemini"
    return "chat"


def _anthropic_events_stream(events: Iterator[tuple[str | None, dict[str, Any]]]) -> bytes:
    """Provider events re-framed as SSE, so one reassembly serves every transport of Anthropic's stream."""
    return b"".join(b"data: " + orjson.dumps(ev) + b"\n\n" for _, ev in events)


def assemble(body: bytes, content_type: str | None, status: int | None = 200) -> Assembled:
    """The provider response held in a (decoded) HTTP body, streamed or not."""
    kind_of_body = (content_type or "").lower()
    if "application/vnd.amazon.eventstream" in kind_of_body:  # Bedrock: Anthropic events inside AWS frames
        return assemble_anthropic(_anthropic_events_stream(bedrock_events(body)))
    if "text/event-stream" in kind_of_body:
        kind = sniff_stream_kind(body)
        if kind == "anthropic":
            return assemble_anthropic(body)
        if kind == "responses":
            return assemble_openai_responses(body)
        if kind == "gemini":
            return assemble_gemini([ev for _, ev in _json_events(body)], True)
        return assemble_openai_chat(body)
    if not body.strip():
        return Assembled(None, "empty response body" if status and status < 400 else None)
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return Assembled(None, "response body is not JSON" if status and status < 400 else None)
    if isinstance(parsed, list) and parsed and all(isinstance(c, dict) for c in parsed):
        if len(parsed) == 1 and isinstance(parsed[0].get("error"), dict):  # Gemini's errors on a stream path
            parsed = parsed[0]
        else:  # streamGenerateContent without alt=sse: the chunks as one JSON array
            return assemble_gemini(parsed, True)
    if not isinstance(parsed, dict):
        return Assembled(None, "response body is not a JSON object")
    err = _error_text(parsed["error"]) if status and status >= 400 and parsed.get("error") else None
    return Assembled(parsed, err)
