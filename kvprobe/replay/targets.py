"""Where a replay runs: the bundled engine in this process, or an OpenAI-compatible server (vLLM, SGLang).

Local: each request is rendered to the engine's prompt exactly as `kvprobe serve` renders it (same blocks,
same chat template, same per-block tokenization), so a trace captured from `serve --cache engine` replays to
the cached-token counts `serve` reported. Replies are greedy and at most `max_tokens` long (the recorded
limit, capped), which keeps replay CPU-friendly; prompts longer than the context are cut to it (keeping the
prefix, which is what caching is about) or skipped, and either is counted.

Remote: the recorded body is sent as a streamed Chat Completions request (Anthropic bodies converted), and
cached tokens are read from `usage.prompt_tokens_details.cached_tokens`.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import orjson

from kvprobe.replay.convert import to_chat_body
from kvprobe.replay.drive import Measured
from kvprobe.replay.plan import Item
from kvprobe.serve import engine_loop as el
from kvprobe.serve.prompt import PromptError, build_prompt


class LocalTarget:
    def __init__(self, engine: Any, max_tokens: int, too_long: str = "truncate",
                 load: Callable[[], Any] | None = None) -> None:
        """`engine`, or None and `load` to build it on the engine's own thread (faster: see `EngineLoop`)."""
        self.max_tokens = max_tokens
        self.too_long = too_long
        self.loop = el.EngineLoop(engine, load=load)
        self.engine = engine = self.loop.engine
        stats = self.loop.call(lambda e: e.stats).result()
        self.kv_tokens = stats.blocks_total * stats.block_size
        self.block_size = stats.block_size
        self.context = int(engine.model_config.max_position_embeddings)

    def describe(self) -> dict[str, Any]:
        return {"kind": "local", "model": self.engine.config.model, "context_tokens": self.context,
                "block_size": self.block_size, "kv_cache_tokens": self.kv_tokens}

    def reset(self) -> bool:
        """Forget every cached prefix (each replay of a what-if starts cold)."""
        self.loop.call(lambda e: e.clear_cache()).result()
        return True

    def stop(self) -> None:
        self.loop.stop()

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def _limit(self, item: Item) -> int:
        return self.max_tokens if item.max_tokens is None else max(0, min(item.max_tokens, self.max_tokens))

    async def run(self, item: Item) -> Measured:
        try:
            ids = build_prompt(item.rendered, self.engine.tokenizer).token_ids  # type: ignore[arg-type]
        except PromptError as exc:
            return Measured(item.id, "skipped", str(exc))
        max_tokens = self._limit(item)
        room = min(self.context, self.kv_tokens) - max(max_tokens, 1)
        truncated_from = None
        if len(ids) > room:
            if self.too_long == "skip":
                return Measured(item.id, "skipped", f"prompt of {len(ids)} tokens exceeds the engine's "
                                f"{room} (context or KV cache, less the reply)", prompt_tokens=len(ids))
            truncated_from, ids = len(ids), ids[:room]
        m = Measured(item.id, "replayed", prompt_tokens=len(ids), truncated_from=truncated_from,
                     prompt_tokens_source="engine")
        events = el.stream(self.loop, ids, max_tokens=max_tokens, temperature=0.0)
        async for event in events:
            if isinstance(event, el.Prefilled):
                m.cached_tokens = event.cached_tokens
            elif isinstance(event, el.Finished):
                r = event.result
                m.first_token_seconds, m.prefill_seconds = r.first_token_seconds, r.prefill_seconds
                m.decode_seconds, m.output_tokens = r.decode_seconds, len(r.token_ids)
                m.cached_tokens = r.num_cached_tokens
            elif isinstance(event, el.Failed):
                raise RuntimeError(f"the engine failed: {event.error}")
        return m


class StreamCutShort(RuntimeError):
    """The server closed a streamed reply before it finished (no finish_reason, no [DONE])."""


def _flat_text(body: dict[str, Any]) -> str:
    """The recorded conversation as plain text (message contents, tool calls, tool schemas): what a server's
    /tokenize counts when the prompt size is not reported. Template tokens are not included."""
    parts: list[str] = []
    for msg in body.get("messages") or []:
        content = msg.get("content")
        parts.append(content if isinstance(content, str) else orjson.dumps(content).decode() if content else "")
        for call in msg.get("tool_calls") or []:
            parts.append(orjson.dumps(call.get("function") or {}).decode())
    if body.get("tools"):
        parts.append(orjson.dumps(body["tools"]).decode())
    return "\n".join(p for p in parts if p)


class RemoteTarget:
    """An OpenAI-compatible server. vLLM: `--enable-prompt-tokens-details` (cached tokens in usage) and
    `--enable-prefix-caching` (on by default in V1); for traces with tools, `--enable-auto-tool-choice
    --tool-call-parser <parser>`. SGLang: `--enable-cache-report`. llama.cpp's `llama-server`: cached tokens
    come from the `timings` it appends to a stream (`cache_n`); llama-cpp-python's server reports neither
    usage in streams nor cached tokens, so its prompt size comes from its `/tokenize` and cached tokens stay
    unknown.

    Where a prompt's size comes from is labelled per request (`prompt_tokens_source`): "usage" (the server's
    usage block), "server timings" (llama.cpp's prompt_n + cache_n), "server /tokenize" (the server's
    tokenizer over the recorded conversation's text, without template tokens) or "kvprobe estimate" (kvprobe's
    own count of the recorded request, in the provider's tokens)."""

    def __init__(self, base_url: str, model: str | None, max_tokens: int, timeout: float = 600.0,
                 api_key: str | None = None) -> None:
        base = base_url.rstrip("/")
        self.base_url = base if base.endswith("/v1") else base + "/v1"
        self.root = self.base_url.removesuffix("/v1")
        self.model = model
        self.max_tokens = max_tokens
        self.timeout = timeout
        self.headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self.client: httpx.AsyncClient | None = None
        self.reports_cached_tokens: bool | None = None
        self.tokenize_path: str | None | bool = None  # None: not probed yet; False: the server has none
        self.dropped: list[tuple[str, int, int]] = []  # (id, server prompt tokens, recorded text tokens)
        self.cannot_render: list[str] | None = None  # what the chat template drops: "tools", "tool messages"
        self._runs = 0

    def describe(self) -> dict[str, Any]:
        return {"kind": "openai-compatible", "base_url": self.base_url, "model": self.model}

    def reset(self) -> bool:
        """Before every run but the first, ask the server to forget its prefix cache: vLLM's
        `POST /reset_prefix_cache` (with VLLM_SERVER_DEV_MODE=1), SGLang's `POST /flush_cache`. False when
        neither answers: later runs then start warm."""
        self._runs += 1
        if self._runs == 1:
            return True  # the first run sees the server as it is
        for path in ("/reset_prefix_cache", "/flush_cache"):
            try:
                if httpx.post(self.root + path, headers=self.headers, timeout=30).status_code < 400:
                    return True
            except httpx.HTTPError:
                continue
        return False

    def stop(self) -> None:
        pass

    def notes(self) -> list[str]:
        """What the replay's reader must know about this server's answers."""
        out: list[str] = []
        if self.reports_cached_tokens is False:
            out.append("the server reported no cached-token count (no usage.prompt_tokens_details, no "
                       "timings.cache_n): cached tokens are unknown, not zero")
        if self.cannot_render:
            out.append(f"the server's chat template does not render {' or '.join(self.cannot_render)} (it left "
                       "them out of a probe prompt): recorded requests that carry them are replayed without them, "
                       "so its prompts are shorter than the recorded conversation and their cache behaviour differs")
        if self.dropped:
            worst = min(self.dropped, key=lambda d: d[1] / max(d[2], 1))
            out.append(f"the server's chat template left out part of the recorded conversation on "
                       f"{len(self.dropped)} requests (tools or tool messages it cannot render): e.g. {worst[0]}'s "
                       f"prompt was {worst[1]:,} tokens where the recorded messages' text alone is {worst[2]:,}; "
                       "its cache behaviour is not the recorded conversation's")
        return out

    async def open(self) -> None:
        self.client = httpx.AsyncClient(timeout=self.timeout, headers=self.headers)
        if self.model is None:
            response = await self.client.get(self.base_url + "/models")
            response.raise_for_status()
            models = response.json().get("data") or []
            if not models:
                raise RuntimeError(f"{self.base_url}/models lists no model; pass --remote-model")
            self.model = str(models[0]["id"])
        if self.cannot_render is None:
            self.cannot_render = await self._probe_template()

    async def _probe_template(self) -> list[str]:
        """Does the server's chat template render tools and tool messages? Four one-token requests (not
        streamed, so llama-cpp-python reports their prompt size): a turn without and with a tool; turns
        without and with a tool call and its result. A prompt that does not grow drops that part."""
        user = {"role": "user", "content": "Say ok."}
        tool = {"type": "function", "function": {"name": "read_file", "description": "Read a file from disk",
                                                  "parameters": {"type": "object", "properties":
                                                                 {"path": {"type": "string"}}}}}
        call = {"id": "call_1", "type": "function", "function": {"name": "read_file",
                                                                  "arguments": '{"path": "notes.txt"}'}}
        plain = [user, {"role": "assistant", "content": ""}, user]
        turns = [user, {"role": "assistant", "content": "", "tool_calls": [call]},
                 {"role": "tool", "tool_call_id": "call_1", "content": "the file says hello to the reader"}, user]
        sizes = [await self._prompt_size(body) for body in (
            {"messages": [user]}, {"messages": [user], "tools": [tool]}, {"messages": plain}, {"messages": turns})]
        if None in sizes:
            return []
        base, with_tool, base_turns, with_call = sizes
        return [name for name, size, ref in (("tools", with_tool, base), ("tool messages", with_call, base_turns))
                if size <= ref + 2]  # type: ignore[operator]

    async def _prompt_size(self, body: dict[str, Any]) -> int | None:
        assert self.client is not None
        try:
            response = await self.client.post(self.base_url + "/chat/completions", json=body | {
                "model": self.model, "max_tokens": 1, "temperature": 0, "stream": False})
            size = (response.json().get("usage") or {}).get("prompt_tokens") if response.status_code < 400 else None
        except (httpx.HTTPError, ValueError):
            return None
        return int(size) if isinstance(size, int) else None

    async def close(self) -> None:
        if self.client is not None:
            await self.client.aclose()
            self.client = None

    async def run(self, item: Item) -> Measured:
        body = to_chat_body(item.record.request or {}, item.api)
        if body is None:
            return Measured(item.id, "skipped", f"{item.api} bodies are not converted to Chat Completions")
        limit = self.max_tokens if item.max_tokens is None else max(1, min(item.max_tokens, self.max_tokens))
        body |= {"model": self.model, "max_tokens": limit, "temperature": 0, "stream": True,
                 "stream_options": {"include_usage": True}}
        assert self.client is not None
        sent = time.perf_counter()
        first = None
        usage: dict[str, Any] = {}
        timings: dict[str, Any] = {}
        finished = False
        async with self.client.stream("POST", self.base_url + "/chat/completions", json=body) as response:
            if response.status_code >= 400:
                text = (await response.aread()).decode(errors="replace")[:300]
                raise RuntimeError(f"HTTP {response.status_code}: {text}")
            try:
                async for line in response.aiter_lines():
                    if line.strip() == "data: [DONE]":
                        finished = True
                        continue
                    if not line.startswith("data: "):
                        continue
                    chunk = orjson.loads(line[6:])
                    if first is None and chunk.get("choices"):
                        first = time.perf_counter()
                    finished = finished or any(c.get("finish_reason") for c in chunk.get("choices") or [])
                    usage = chunk.get("usage") or usage
                    timings = chunk.get("timings") or timings
            except httpx.HTTPError as exc:  # the connection broke mid-stream: not a replayed request
                raise StreamCutShort(f"the stream broke before the reply finished ({type(exc).__name__})") from exc
        if not finished:
            raise StreamCutShort("the server closed the stream before the reply finished (no finish_reason, "
                                 "no [DONE]): it most likely failed mid-request")
        done = time.perf_counter()
        m = self._measured(item, sent, first or done, done, usage, timings)
        await self._fill_prompt_size(m, item, body)
        return m

    def _measured(self, item: Item, sent: float, first: float, done: float, usage: dict[str, Any],
                  timings: dict[str, Any]) -> Measured:
        details = usage.get("prompt_tokens_details") or {}
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        if cached is None:
            cached = usage.get("prompt_cache_hit_tokens")
        if cached is None and "cache_n" in timings:  # llama.cpp: tokens reused from the slot's cache
            cached = timings["cache_n"]
        self.reports_cached_tokens = (self.reports_cached_tokens or False) or cached is not None
        m = Measured(item.id, "replayed", cached_tokens=None if cached is None else int(cached),
                     first_token_seconds=first - sent, prefill_seconds=first - sent, decode_seconds=done - first,
                     output_tokens=int(usage.get("completion_tokens") or timings.get("predicted_n") or 0))
        if usage.get("prompt_tokens"):
            m.prompt_tokens, m.prompt_tokens_source = int(usage["prompt_tokens"]), "usage"
        elif "prompt_n" in timings:  # prompt_n counts the computed tokens only; cache_n the reused ones
            m.prompt_tokens = int(timings["prompt_n"]) + int(timings.get("cache_n") or 0)
            m.prompt_tokens_source = "server timings"
        return m

    async def _fill_prompt_size(self, m: Measured, item: Item, body: dict[str, Any]) -> None:
        """Without a reported prompt size: the server's tokenizer over the recorded text, else kvprobe's count.
        With one: compare it with the recorded text to catch a template that dropped tools or tool turns."""
        counted = await self._tokenize(_flat_text(body))
        if m.prompt_tokens_source is None:
            if counted is not None:
                m.prompt_tokens, m.prompt_tokens_source = counted, "server /tokenize"
            elif item.rendered is not None:
                m.prompt_tokens, m.prompt_tokens_source = item.rendered.total_tokens, "kvprobe estimate"
        elif counted is not None and m.prompt_tokens < 0.9 * counted:
            self.dropped.append((item.id, m.prompt_tokens, counted))

    async def _tokenize(self, text: str) -> int | None:
        """Token count from the server: llama.cpp's `POST /tokenize {"content"}`, llama-cpp-python's
        `POST /tokenize {"input"}` (older: `/extras/tokenize`). None when it has neither."""
        if self.tokenize_path is False or not text:
            return None
        assert self.client is not None
        paths = [self.tokenize_path] if isinstance(self.tokenize_path, str) else ["/tokenize", "/extras/tokenize"]
        for path in paths:
            try:
                response = await self.client.post(self.root + path, json={"content": text, "input": text,
                                                                           "model": self.model})
            except httpx.HTTPError:
                continue
            tokens = response.json().get("tokens") if response.status_code < 400 else None
            if isinstance(tokens, list):
                self.tokenize_path = path
                return len(tokens)
        self.tokenize_path = False
        return None
