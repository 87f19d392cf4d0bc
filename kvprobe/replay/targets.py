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
from typing import Any

import httpx
import orjson

from kvprobe.replay.convert import to_chat_body
from kvprobe.replay.drive import Measured
from kvprobe.replay.plan import Item
from kvprobe.serve import engine_loop as el
from kvprobe.serve.prompt import PromptError, build_prompt


class LocalTarget:
    def __init__(self, engine: Any, max_tokens: int, too_long: str = "truncate") -> None:
        self.engine = engine
        self.max_tokens = max_tokens
        self.too_long = too_long
        self.loop = el.EngineLoop(engine)
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
        m = Measured(item.id, "replayed", prompt_tokens=len(ids), truncated_from=truncated_from)
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


class RemoteTarget:
    """An OpenAI-compatible server. vLLM: `--enable-prompt-tokens-details` (cached tokens in usage) and
    `--enable-prefix-caching` (on by default in V1); for traces with tools, `--enable-auto-tool-choice
    --tool-call-parser <parser>`. SGLang: `--enable-cache-report`."""

    def __init__(self, base_url: str, model: str | None, max_tokens: int, timeout: float = 600.0,
                 api_key: str | None = None) -> None:
        base = base_url.rstrip("/")
        self.base_url = base if base.endswith("/v1") else base + "/v1"
        self.model = model
        self.max_tokens = max_tokens
        self.timeout = timeout
        self.headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self.client: httpx.AsyncClient | None = None
        self.reports_cached_tokens: bool | None = None
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
        root = self.base_url.removesuffix("/v1")
        for path in ("/reset_prefix_cache", "/flush_cache"):
            try:
                if httpx.post(root + path, headers=self.headers, timeout=30).status_code < 400:
                    return True
            except httpx.HTTPError:
                continue
        return False

    def stop(self) -> None:
        pass

    async def open(self) -> None:
        self.client = httpx.AsyncClient(timeout=self.timeout, headers=self.headers)
        if self.model is None:
            response = await self.client.get(self.base_url + "/models")
            response.raise_for_status()
            models = response.json().get("data") or []
            if not models:
                raise RuntimeError(f"{self.base_url}/models lists no model; pass --remote-model")
            self.model = str(models[0]["id"])

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
        first = usage = None
        async with self.client.stream("POST", self.base_url + "/chat/completions", json=body) as response:
            if response.status_code >= 400:
                text = (await response.aread()).decode(errors="replace")[:300]
                raise RuntimeError(f"HTTP {response.status_code}: {text}")
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = orjson.loads(line[6:])
                if first is None and chunk.get("choices"):
                    first = time.perf_counter()
                usage = chunk.get("usage") or usage
        done = time.perf_counter()
        return self._measured(item, sent, first or done, done, usage or {})

    def _measured(self, item: Item, sent: float, first: float, done: float, usage: dict[str, Any]) -> Measured:
        details = usage.get("prompt_tokens_details") or {}
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        if cached is None:
            cached = usage.get("prompt_cache_hit_tokens")
        self.reports_cached_tokens = (self.reports_cached_tokens or False) or cached is not None
        return Measured(item.id, "replayed", prompt_tokens=int(usage.get("prompt_tokens") or 0),
                        cached_tokens=None if cached is None else int(cached), first_token_seconds=first - sent,
                        prefill_seconds=first - sent, decode_seconds=done - first,
                        output_tokens=int(usage.get("completion_tokens") or 0))
