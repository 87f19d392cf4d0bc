"""A local stand-in for llama.cpp's OpenAI-compatible servers, at the HTTP level, for replay tests.

It reproduces the wire behaviour that matters to `kvprobe replay` (looked up in llama-cpp-python's
`llama_cpp/server/app.py` and llama.cpp's `tools/server`):
- `python -m llama_cpp.server --chat_format chatml` (flavor "python"): an assistant message with
  `"content": null` is rejected with HTTP 500 (the chatml formatter concatenates strings); one that omits
  `content` fails after the stream has started (the connection closes without `[DONE]`); tools and tool
  messages are not rendered; streams carry no `usage`; non-streamed replies do; `POST /tokenize {"input"}`
  answers `{"tokens": [...]}`.
- `llama-server` (flavor "server"): streams end with a chunk carrying `timings` (`prompt_n` computed
  tokens, `cache_n` tokens reused from the slot's cache, `predicted_n`); `POST /tokenize {"content"}`.
Both keep one slot: a prompt reuses the longest common token prefix with the previous prompt.

Tokens here are whitespace-separated words (ids from a growing vocabulary), a tokenizer of its own, so
expected counts are worked out by hand in the tests, independently of kvprobe's estimator.
"""
from __future__ import annotations

import asyncio
import json
import socket
import threading
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route


class LlamaCppFake:
    def __init__(self, flavor: str = "python", crash_marker: str | None = None) -> None:
        self.flavor = flavor
        self.crash_marker = crash_marker  # a user message containing it fails mid-stream (a server fault)
        self.vocab: dict[str, int] = {}
        self.slot: list[int] = []  # the previous prompt's tokens
        self.prompts: list[list[dict[str, Any]]] = []  # messages of every chat request received
        self.cache_hits: list[int] = []  # per streamed request: tokens reused from the slot

    # -- the model's side ---------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        return [self.vocab.setdefault(word, len(self.vocab)) for word in text.split()]

    def render(self, messages: list[dict[str, Any]]) -> str:
        """chatml without tools: tool messages and tool calls vanish, as with --chat_format chatml."""
        parts = [f"<|im_start|>{m['role']} {m.get('content') or ''} <|im_end|>" for m in messages
                 if m.get("role") in ("system", "user", "assistant")]
        return " ".join(parts) + " <|im_start|>assistant"

    def _prefill(self, prompt: list[int]) -> int:
        reused = 0
        for a, b in zip(self.slot, prompt):
            if a != b:
                break
            reused += 1
        self.slot = prompt
        return min(reused, len(prompt) - 1)  # the last token is always evaluated

    # -- HTTP ---------------------------------------------------------------------------------------
    async def chat(self, request: Request):
        body = await request.json()
        messages = body.get("messages") or []
        self.prompts.append(messages)
        if any(m.get("role") == "assistant" and "content" in m and m["content"] is None for m in messages):
            return JSONResponse({"error": {"message": "can only concatenate str (not \"NoneType\") to str",
                                           "type": "internal_server_error"}}, status_code=500)
        omitted = any(m.get("role") == "assistant" and "content" not in m for m in messages)
        crash = omitted or any(self.crash_marker and self.crash_marker in str(m.get("content")) for m in messages)
        prompt = self.tokenize(self.render(messages))
        reply = ["ok"] * max(1, min(int(body.get("max_tokens") or 4), 4))
        if not body.get("stream"):
            self._prefill(prompt)
            return JSONResponse({"id": "chatcmpl-1", "object": "chat.completion", "model": body.get("model"),
                                 "choices": [{"index": 0, "finish_reason": "length",
                                              "message": {"role": "assistant", "content": " ".join(reply)}}],
                                 "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(reply),
                                           "total_tokens": len(prompt) + len(reply)}})
        cached = self._prefill(prompt)
        self.cache_hits.append(cached)
        return StreamingResponse(self._stream(body, prompt, cached, reply, crash), media_type="text/event-stream")

    async def _stream(self, body: dict[str, Any], prompt: list[int], cached: int, reply: list[str], crash: bool):
        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
            data = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": body.get("model"),
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
            return f"data: {json.dumps(data)}\n\n".encode()
        yield chunk({"role": "assistant", "content": ""})
        await asyncio.sleep(0)
        if crash:
            raise RuntimeError("llama_decode failed")  # uvicorn closes the connection mid-body
        for word in reply:
            yield chunk({"content": word + " "})
        extra: dict[str, Any] = {}
        if self.flavor == "server":
            extra["timings"] = {"prompt_n": len(prompt) - cached, "cache_n": cached, "predicted_n": len(reply),
                                "prompt_ms": 1.0, "predicted_ms": 1.0}
        yield chunk({}, "length", **extra)
        yield b"data: [DONE]\n\n"

    async def tokenize_endpoint(self, request: Request):
        body = await request.json()
        text = body.get("input") if self.flavor == "python" else body.get("content")
        if not isinstance(text, str):
            return JSONResponse({"detail": "field required"}, status_code=422)
        return JSONResponse({"tokens": self.tokenize(text)})

    async def models(self, request: Request):
        return JSONResponse({"object": "list", "data": [{"id": "smollm2.gguf", "object": "model"}]})

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"]),
                                 Route("/tokenize", self.tokenize_endpoint, methods=["POST"]),
                                 Route("/v1/models", self.models)])


class running:
    """`with running(LlamaCppFake()) as url:` serves it on 127.0.0.1 on a free port; stops it on exit."""

    def __init__(self, fake: LlamaCppFake) -> None:
        self.fake = fake
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.server = uvicorn.Server(uvicorn.Config(fake.app(), log_level="critical", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        for _ in range(500):  # bounded: 5 s
            if self.server.started:
                break
            self.thread.join(0.01)
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()
