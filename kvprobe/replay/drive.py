"""Send planned requests to a target in recorded order, concurrency preserved, and collect measurements."""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from kvprobe.replay.plan import Item, Timing


@dataclass(slots=True)
class Measured:
    """What one replayed request measured on the engine."""

    id: str
    status: str  # replayed | skipped | failed
    reason: str | None = None
    prompt_tokens: int = 0
    cached_tokens: int | None = None  # ground truth; None when a remote engine does not report it
    first_token_seconds: float | None = None  # submission to first token, queueing included
    prefill_seconds: float | None = None
    decode_seconds: float | None = None
    output_tokens: int = 0
    truncated_from: int | None = None  # the prompt's length before it was cut to the context
    # Where prompt_tokens comes from: "engine" (local), "usage", "server timings", "server /tokenize",
    # "kvprobe estimate"; None: unknown (prompt_tokens is then 0).
    prompt_tokens_source: str | None = None

    @property
    def warm(self) -> bool | None:
        """Warm when at least half the prompt came from the cache: a request that reused a short system
        prompt and computed the rest waits like a cold one, and would skew the warm mean. None: unknown."""
        if self.cached_tokens is None or not self.prompt_tokens:
            return None
        return 2 * self.cached_tokens >= self.prompt_tokens

    @property
    def fresh_tokens(self) -> int:
        return self.prompt_tokens - (self.cached_tokens or 0)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status, "reason": self.reason, "prompt_tokens": self.prompt_tokens,
                "prompt_tokens_source": self.prompt_tokens_source, "cached_tokens": self.cached_tokens,
                "cache": None if self.warm is None else ("warm" if self.warm else "cold"),
                "first_token_seconds": _r(self.first_token_seconds), "prefill_seconds": _r(self.prefill_seconds),
                "decode_seconds": _r(self.decode_seconds), "output_tokens": self.output_tokens,
                "truncated_from": self.truncated_from}


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


class Target(Protocol):
    async def open(self) -> None: ...  # per replay (each runs on its own event loop)

    async def run(self, item: Item) -> Measured: ...

    async def close(self) -> None: ...


async def _drive(items: list[Item], target: Target, timing: Timing,
                 on_done: Callable[[Item, Measured], None] | None) -> list[Measured]:
    loop = asyncio.get_running_loop()
    finished = {item.index: asyncio.Event() for item in items}
    start = loop.time()

    async def one(item: Item) -> Measured:
        try:
            if item.skip_reason:
                return Measured(item.id, "skipped", item.skip_reason)
            for dep in item.depends_on:
                await finished[dep].wait()
            delay = item.offset * timing.scale - (loop.time() - start)
            if delay > 0:
                await asyncio.sleep(delay)
            try:
                return await target.run(item)
            except Exception as exc:  # noqa: BLE001 - one failed request is reported, the replay goes on
                return Measured(item.id, "failed", f"{type(exc).__name__}: {exc}")
        finally:
            finished[item.index].set()

    async def tracked(item: Item) -> Measured:
        measured = await one(item)
        if on_done:
            on_done(item, measured)
        return measured
    await target.open()
    try:
        return list(await asyncio.gather(*(tracked(item) for item in items)))
    finally:
        await target.close()


def drive(items: list[Item], target: Target, timing: Timing,
          on_done: Callable[[Item, Measured], None] | None = None) -> list[Measured]:
    """Replay `items` on `target`; results in item order."""
    return asyncio.run(_drive(items, target, timing, on_done))
